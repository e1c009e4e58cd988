"""The curated subset of Inductor's own pattern entries the audit checks in CI, one per kind of
pass, each with its expected status at the audit's default depth (the whole table is `slow`):
a joint_graph handler, a post_grad handler with a true finding, a freezing entry (binary folding,
checked with frozen parameters), a pre-grad split_cat normalisation (lowering entries, compiled,
are checked by tests/test_entry_lowering.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pmverify
from pmverify._audit import check
from pmverify._engine.verify import fresh_settings
from pmverify._settings import AUDIT_MAX_EXAMPLES

CURATED = [
    ("joint_graph", "pointless_view", "ok"),
    ("post_grad", "pointless_cumsum_replacement", "finding"),
    # add(mm(a, b), inp, alpha=k) rewritten as addmm(inp, a, b): found by the first cases, which set
    # every optional argument the pattern does not bind (one call in four in the random ones)
    ("post_grad", "addmm[add]#2", "finding"),
    ("binary_folding", "binary_folding_init.folded_op[mul.Tensor]#1", "ok"),
    ("split_cat", "normalize_split_default[split]", "ok"),
]


def _outcome(module, name, tmp_path):
    from pmverify._settings import profile_settings

    entry = pmverify.inductor_entry(module, name)
    source = f"import pmverify\nPASS = pmverify.inductor_entry({module!r}, {name!r}).pattern_pass()"
    settings = fresh_settings(profile_settings("ci"))
    return entry, check.check_one(
        entry, source, max_examples=AUDIT_MAX_EXAMPLES, seed=0, repro_dir=tmp_path, settings=settings
    )


@pytest.mark.parametrize(("module", "name", "status"), CURATED, ids=[f"{m}/{n}" for m, n, _ in CURATED])
def test_a_curated_inductor_entry_has_its_expected_status(module, name, status, tmp_path):
    _, outcome = _outcome(module, name, tmp_path)
    assert outcome["status"] == status, outcome["reason"]
    if status == "ok":
        assert outcome["cases"]["rewritten"] > 0


@pytest.mark.slow
def test_the_curated_finding_is_the_dropped_dtype_and_its_reproducer_reproduces(tmp_path):
    _, outcome = _outcome("post_grad", "pointless_cumsum_replacement", tmp_path)
    assert "dtype=" in outcome["reason"] and "does not bind" in outcome["reason"]
    run = subprocess.run([sys.executable, outcome["reproducer"]], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr


@pytest.mark.slow
def test_every_graph_entry_gets_a_status_other_than_error(tmp_path):
    """Each of Inductor's graph entries, at 10 cases: a status, never pmverify's own error."""
    from pmverify._settings import profile_settings

    settings = fresh_settings(profile_settings("ci"))
    errors = []
    for entry in pmverify.record_inductor(kinds=("graph",)):
        source = f"import pmverify\nPASS = pmverify.inductor_entry({entry.module!r}, {entry.name!r}).pattern_pass()"
        outcome = check.check_one(entry, source, max_examples=10, seed=0, repro_dir=tmp_path, settings=settings)
        if outcome["status"] == "error":
            errors.append(f"{entry.label}: {outcome['reason']}")
    assert not errors, "\n".join(errors)
