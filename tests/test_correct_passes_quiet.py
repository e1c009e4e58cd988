"""No false alarm on correct passes of the shapes that drew them (issue 15): a replacement that
keeps matched nodes (left dead for Inductor's dead-code elimination), a pattern that covers only
part of the planted function, a no-op elimination (pmverify's own and Inductor's
``remove_noop_ops``, unmodified), and a multi-output fusion judged in Inductor's order. The
300-example searches run with ``-m slow``; the default run searches a few dozen cases of each."""

from __future__ import annotations

import pytest
import torch

import pmverify
from pmverify.faults import BANK
from pmverify.faults._common import DtypesConfig
from pmverify.faults.matching import FusedAddRMSNormLeftUnsorted
from pmverify.faults.noop import HandNoOpElimination
from pmverify.faults.reductions import HandSoftmaxFusion, softmax_pattern
from pmverify.strategies import like, planted


def _softmax_cases():
    return planted(
        softmax_pattern, like((torch.empty(4, 8), torch.empty(4, 8)), vary="duck"), pass_config=DtypesConfig()
    )


def _softmax_only():
    """A ``register_replacement`` pass whose pattern is the softmax alone (``amax`` ... ``div``):
    planted in ``softmax(x * scale)``, it covers part of the planted function and keeps its ``mul``."""
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    def search(x):
        return torch.softmax(x, -1)

    def replace(x):
        return torch.ops.aten._softmax.default(x, -1, False)

    def refuse_keywords(match):
        return not any(node.kwargs for node in match.nodes)

    patterns = PatternMatcherPass(pass_name="softmax_only")
    register_replacement(search, replace, [torch.empty(4, 8)], fwd_only, patterns, extra_check=refuse_keywords)
    return patterns


def _remove_noop_ops(graph: torch.fx.Graph) -> None:
    from torch._inductor.fx_passes.post_grad import remove_noop_ops

    remove_noop_ops(graph)


def _noop_cases():
    (_, cases), *_ = BANK["NoOpSliceEndMinusOne"].families()
    return cases


def _scatter_cases():
    """Graphs of functional ``slice_scatter``s (some no-ops ``remove_noop_ops`` drops) and views."""
    from pmverify.strategies import fx_graphs

    return fx_graphs(ops=["slice", "view", "reshape", "slice_scatter", "neg", "add", "sum"], min_nodes=4, max_nodes=12)


CORRECT = {
    "hand softmax fusion keeping matched nodes": (HandSoftmaxFusion, _softmax_cases, {}),
    "softmax pattern covering part of the instance": (_softmax_only, _softmax_cases, {}),
    "hand no-op elimination": (HandNoOpElimination, _noop_cases, {}),
    "Inductor's remove_noop_ops": (lambda: _remove_noop_ops, _noop_cases, {}),
    "Inductor's remove_noop_ops on functional scatters": (lambda: _remove_noop_ops, _scatter_cases, {}),
    "multi-output fusion in Inductor's order": (
        FusedAddRMSNormLeftUnsorted,
        lambda: BANK["FusedAddRMSNormLeftUnsorted"].families()[0][1],
        {},
    ),
}


def _pass(make):
    return make if isinstance(make, type) else make()


@pytest.mark.parametrize("name", list(CORRECT))
def test_a_correct_pass_is_quiet(name, tmp_path):
    make, cases, kwargs = CORRECT[name]
    summary = pmverify.verify(_pass(make), cases(), max_examples=30, seed=0, repro_dir=tmp_path, **kwargs)
    assert summary.rewritten_cases > 0, summary.describe()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CORRECT))
def test_a_correct_pass_is_quiet_over_300_cases(name, tmp_path):
    make, cases, kwargs = CORRECT[name]
    summary = pmverify.verify(_pass(make), cases(), max_examples=300, seed=1, repro_dir=tmp_path, **kwargs)
    assert summary.rewritten_cases > 30, summary.describe()


@pytest.mark.slow  # end to end: runs in the slow step
def test_the_multi_output_fusion_is_a_finding_only_in_strict_order(tmp_path):
    """Correct values; Inductor's pattern entry leaves it before a late input, which Inductor's own
    sort repairs: quiet by default (above), a structure finding with ``strict_order=True``."""
    cases = BANK["FusedAddRMSNormLeftUnsorted"].families()[0][1]
    with pytest.raises(pmverify.PassVerificationError) as caught:
        pmverify.verify(
            FusedAddRMSNormLeftUnsorted, cases, max_examples=60, seed=0, strict_order=True, repro_dir=tmp_path
        )
    assert {v.oracle for v in caught.value.violations} >= {"structure"}
    assert any("before its input" in v.message for v in caught.value.violations), caught.value.violations
