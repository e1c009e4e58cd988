"""``check_entry`` on a lowering entry (``register_lowering_pattern``): compiled mode, Inductor's
pattern matcher off, without and with the entry alone; a handler that lowers the match wrong is
found (with a reproducer that exits 1 while it is wrong, 0 once fixed), its correct twin is quiet, and
an entry whose instance never reaches torch.compile's post-grad graph is unsatisfiable here."""

import os
import subprocess
import sys

import _lowering_passes
import hypothesis
import pytest

import pmverify
from pmverify._findings.summary import RewriteUnsatisfiable
from pmverify._rewrites.entry_check import LOWERING_CONDITION, LOWERING_UNMATCHED_CONDITION, check_entry

#: one generated case, not shrunk: two cold compiles (the default test's budget)
ONE_CASE = hypothesis.settings(
    max_examples=1, phases=[hypothesis.Phase.generate], database=None, deadline=None, derandomize=True
)


def _entry(faulty):
    with pmverify.record_entries(kinds=("lowering",)) as entries:
        _lowering_passes.lowering_pass(faulty)
    (entry,) = entries
    assert entry.kind == "lowering" and entry.config == ()
    return entry


def test_a_lowering_handler_that_lowers_the_match_wrong_is_found_under_torch_compile(tmp_path):
    with pytest.raises(pmverify.PassVerificationError) as info:
        check_entry(_entry(faulty=True), settings=ONE_CASE, repro_dir=tmp_path)
    error = info.value
    assert {v.oracle for v in error.result.violations} == {"semantics"}
    assert "compiled: torch.compile with Inductor's pattern matcher off" in error.note


@pytest.mark.slow
def test_its_correct_twin_is_quiet_and_fires_in_every_case():
    # two cases with add's alpha set (the optional_arg near miss, judged), then two random ones
    result = check_entry(_entry(faulty=False), seed=0)
    assert result.examples == 4 and result.rewritten_cases == 4
    assert result.coverage.judged == ("optional_arg",)


@pytest.mark.slow
def test_a_lowering_handler_that_drops_an_argument_its_pattern_does_not_bind_is_found():
    with pytest.raises(pmverify.PassVerificationError) as info:
        check_entry(_entry(faulty="alpha"), seed=0)
    assert "alpha" in info.value.result.case.label


@pytest.mark.slow
@pytest.mark.parametrize("faulty", [True, False])
def test_the_reproducer_exits_1_while_the_handler_is_wrong_and_0_once_fixed(tmp_path, faulty):
    with pytest.raises(pmverify.PassVerificationError) as info:
        check_entry(
            _entry(faulty=True),
            seed=0,
            repro_dir=tmp_path,
            pass_source=f"import _lowering_passes\nPASS = _lowering_passes.lowering_pass(faulty={faulty})",
        )
    script = info.value.reproducer
    assert "torch._inductor.config.pattern_matcher = False" in open(script).read()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), *sys.path])}
    run = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == (1 if faulty else 0), run.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "label, condition",
    [
        # its instance matched in the drawn graph; torch.compile turns cat([x]) into a clone
        ("post_grad/cat_splitwithsizes_replace", LOWERING_CONDITION),
        # its extra_check wants a quantized graph: 3 cases are too few to call it dead
        ("quantization/_register_quantized_cat_lowering.qcat", LOWERING_UNMATCHED_CONDITION),
    ],
)
def test_an_inductor_lowering_that_never_fires_under_torch_compile_is_unsatisfiable_here(label, condition):
    entry = next(e for e in pmverify.record_inductor(kinds=("lowering",)) if e.label == label)
    with pytest.raises(RewriteUnsatisfiable) as info:
        check_entry(entry, seed=0)
    assert info.value.condition == condition


def test_a_lowering_entry_whose_instances_torch_compile_cannot_compile_is_unsatisfiable_here(monkeypatch):
    from pmverify._engine import verify as _verify
    from pmverify._engine.apply import UncompilableCase

    def uncompilable(pass_, case, **options):
        raise UncompilableCase(
            "torch.compile of the case without the pass failed (LoweringException: ...); the compiled mode has "
            "nothing to compare with on GraphCase(...)"
        )

    monkeypatch.setattr(_verify, "check_case", uncompilable)
    with pytest.raises(RewriteUnsatisfiable) as info:
        check_entry(_entry(faulty=False), seed=0)
    assert info.value.condition == (
        "an instance of its pattern that torch.compile compiles without the entry (3 of the cases drawn did not "
        "compile even without the pass, and too few others were drawn; the first: torch.compile of the case "
        "without the pass failed (LoweringException: ...))"
    )
