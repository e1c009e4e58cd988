"""One rewrite audited in this process (what a worker runs): the statuses of ``_audit_passes``'
rewrites, the reproducer's pass rebuilt from scratch, and how each outcome of check_rewrite maps
to a status."""

import pathlib
import types

import pytest

import pmverify._engine.verify
import pmverify._rewrites.rewrite
from pmverify._audit import check, worker
from pmverify._audit.sources import listing, locate, record_source
from pmverify._job.protocol import CheckRequest

SOURCE = "_audit_passes"


@pytest.fixture(scope="module")
def recorded():
    return {SOURCE: record_source(SOURCE), f"{SOURCE}:build": record_source(f"{SOURCE}:build")}


def _check(recorded, spec, name, tmp_path, max_examples=3, prelude=None):
    options = {"max_examples": max_examples, "repro_dir": str(tmp_path), "reproducer_prelude": prelude}
    return worker._check(recorded, CheckRequest(spec, SOURCE, name, 0), options)


def test_the_rewrites_of_a_module_are_named_numbered_and_their_duplicates_flagged(recorded):
    rewrites = listing(SOURCE, recorded[SOURCE])
    assert [(r.name, r.duplicate) for r in rewrites] == [
        ("relu_relu[float32, fwd_only]#1", False),
        ("silu", False),
        ("exits", False),
        ("hangs", False),
        ("complex_abs", False),
        ("never", False),
        ("relu_relu[float32, fwd_only]#2", True),
    ]
    assert {r.module for r in rewrites} == {SOURCE} and {r.trace_fn for r in rewrites} == {"fwd_only"}
    _, source = locate(SOURCE, recorded[SOURCE], SOURCE, "relu_relu[float32, fwd_only]#2")
    assert source.endswith(
        f"PASS = [r for r in rewrites if (r.module, r.name) == ('{SOURCE}', 'relu_relu')][1].pattern_pass()"
    )


def test_a_correct_rewrite_is_ok_after_both_checks(recorded, tmp_path):
    outcome = _check(recorded, SOURCE, "relu_relu[float32, fwd_only]#1", tmp_path)
    assert outcome["status"] == "ok", outcome
    # each check: two cases per near-miss kind that applies first, then random ones (at least half)
    examples, planted = outcome["examples"], outcome["planted"]["cases"]
    assert examples >= 3 and outcome["matched"] > 0 and planted >= 2
    assert outcome["reason"] == (
        f"{examples} cases, {outcome['matched']} rewritten; planted: {planted} cases, "
        f"{outcome['planted']['rewritten']} rewritten; judged: values, extra_user, unused"
    )
    # relu(relu(x)) has no optional argument, overload, dim or literal; traced on another dtype, the same graph
    assert outcome["near_misses"] == {"judged": ["values", "extra_user", "unused"], "missed": [], "no_valid": ["dtype"]}
    # the cases of both checks, summed
    rewritten = outcome["matched"] + outcome["planted"]["rewritten"]
    counts = {"checked": examples + planted, "rewritten": rewritten, "void": 0, "rejected": 0, "discarded": 0}
    assert outcome["cases"] == counts


def test_a_wrong_rewrite_is_a_finding_whose_reproducer_rebuilds_the_pass(recorded, tmp_path):
    outcome = _check(recorded, f"{SOURCE}:build", "silu", tmp_path, prelude="MY_PRELUDE = 1  # --reproducer-prelude")
    assert outcome["status"] == "finding" and outcome["kind"] == "violation" and outcome["check"] == "check_rewrite"
    assert outcome["violations"][0]["oracle"] == "semantics" and "semantics: output 0: " in outcome["reason"]
    script = pathlib.Path(outcome["reproducer"]).read_text()
    assert f"from {SOURCE} import build" in script and "    build()" in script
    assert script.index("MY_PRELUDE = 1  # --reproducer-prelude") < script.index(f"from {SOURCE} import build")


def test_pmverifys_own_exception_is_an_error_with_its_text_and_a_rewrite_that_never_fires_a_finding(recorded, tmp_path):
    outcome = _check(recorded, SOURCE, "complex_abs", tmp_path)
    assert outcome["status"] == "error"
    assert outcome["reason"] == (
        "check_rewrite raised InvalidArgument: example_inputs[0] has dtype torch.complex64, which tensors() cannot draw"
    )
    assert "Traceback" in outcome["traceback"]
    outcome = _check(recorded, SOURCE, "never", tmp_path)
    assert outcome["status"] == "finding" and outcome["kind"] == "never_matched", outcome
    checked = outcome["cases"]["checked"]
    assert checked >= 3 and 0 < outcome["cases"]["rejected"] <= checked  # its extra_check refused the plain ones
    assert outcome["reason"].startswith(f"never matched: none of {checked} cases drawn like its example inputs was")
    assert outcome["violations"][0]["oracle"] == "never_matched"


def _raising(error):
    def check_rewrite(*args, **kwargs):
        raise error

    return check_rewrite


_SUMMARY = pmverify.VerifySummary(cases=3, void_cases=3, first_void="output 0 is inf")


@pytest.mark.parametrize(
    ("error", "status", "reason"),
    [
        (
            pmverify.RewriteUnsatisfiable("m", "tensors on a CUDA device"),
            "unsatisfiable here",
            "tensors on a CUDA device",
        ),
        (pmverify.RewriteNotComparable("m", "rng: randperm"), "not comparable", "rng: randperm"),
        (
            pmverify.AllCasesVoid("m", _SUMMARY),
            "not comparable",
            "void: every case's float64 reference was NaN or Inf (first: output 0 is inf)",
        ),
        (ValueError(), "error", "check_rewrite raised ValueError with no message, raised at "),
        (
            pmverify.RewriteNeverMatched("the pass rewrote nothing"),
            "finding",
            "never matched: the pass rewrote nothing",
        ),
    ],
)
def test_each_outcome_of_check_rewrite_maps_to_its_status(monkeypatch, error, status, reason):
    monkeypatch.setattr(pmverify._rewrites.rewrite, "check_rewrite", _raising(error))
    outcome = check.check_one(object(), "PASS = None", max_examples=1, seed=0)
    assert outcome["status"] == status and outcome["reason"].startswith(reason)
    assert outcome["violations"] == (
        [] if status != "finding" else [{"oracle": "never_matched", "message": str(error)}]
    )


class _PlantedFinding(Exception):
    violations = [types.SimpleNamespace(oracle="semantics", message="output 0 differs")]
    reproducer = None
    other_reproducers = {}
    _instances = (  # a must-match instance, a near miss left alone, a near miss rewritten
        pmverify.PlantedInstance("p", ("a",), True),
        pmverify.PlantedInstance("p", ("b",), False, "eps", "eps 1e-06 -> 2e-06"),
        pmverify.PlantedInstance("p", ("c",), None, "reduction_dim", "dim -1 moved to -2"),
    )
    result = types.SimpleNamespace(case=types.SimpleNamespace(planted=_instances), planted_matched=[True, False, True])


def test_a_finding_of_the_planted_check_makes_the_rewrite_a_finding(monkeypatch):
    passed = types.SimpleNamespace(examples=2, rewritten_cases=2)
    monkeypatch.setattr(pmverify._rewrites.rewrite, "check_rewrite", lambda *args, **kwargs: passed)
    monkeypatch.setattr(pmverify._engine.verify, "PassVerificationError", _PlantedFinding)
    monkeypatch.setattr(pmverify._engine.verify, "verify", _raising(_PlantedFinding()))
    monkeypatch.setattr("pmverify.strategies.planted", lambda rewrite, **kwargs: None)
    outcome = check.check_one(types.SimpleNamespace(pattern_pass=lambda: None), "PASS = None", max_examples=4, seed=0)
    assert outcome["status"] == "finding" and outcome["check"] == "planted"
    assert outcome["reason"] == (
        "shrunk to the reduction_dim variant (dim -1 moved to -2); "
        "semantics (planted among random graphs with near misses): output 0 differs"
    )
    assert outcome["variants"] == [{"pattern": "p", "reason": "reduction_dim", "detail": "dim -1 moved to -2"}]
    assert outcome["checked"] == "2 cases, 2 rewritten"


@pytest.mark.slow  # 20 s; a regression guard (one process's clock never bites: it passes on the old code too)
def test_two_runs_at_the_same_seed_give_the_same_finding(recorded, tmp_path):
    """The shrunk reason is a function of seed and rewrite (tests/test_compat.py shows the clock that
    makes it so on a stalling machine)."""
    rewrite, source = locate(f"{SOURCE}:build", recorded[f"{SOURCE}:build"], SOURCE, "silu")
    first, second = (check.check_one(rewrite, source, max_examples=4, seed=3, repro_dir=tmp_path) for _ in range(2))
    assert first["status"] == "finding" and "shrink_cut" not in first
    assert first["reason"] == second["reason"] and first["violations"] == second["violations"]


def test_a_rewrite_with_a_near_miss_kind_never_judged_is_not_covered(monkeypatch):
    """ok in both checks, but check_rewrite made its values near miss only in void cases: not ok."""
    coverage = pmverify._rewrites.rewrite.NearMissCoverage(judged=("optional_arg",), missed=("values",))
    passed = types.SimpleNamespace(examples=6, rewritten_cases=2, coverage=coverage)
    monkeypatch.setattr(pmverify._rewrites.rewrite, "check_rewrite", lambda *args, **kwargs: passed)
    monkeypatch.setattr(pmverify._engine.verify, "verify", lambda *args, **kwargs: pmverify.VerifySummary())
    monkeypatch.setattr("pmverify.strategies.planted", lambda rewrite, **kwargs: None)
    outcome = check.check_one(types.SimpleNamespace(pattern_pass=lambda: None), "PASS = None", max_examples=4, seed=0)
    assert outcome["status"] == "not covered"
    assert outcome["reason"].endswith("; judged: optional_arg; missed: values")
    assert outcome["near_misses"] == {"judged": ["optional_arg"], "missed": ["values"], "no_valid": []}
    assert "not covered" in check.STATUSES and check.label(outcome) == "not covered"
