"""planted on like's broadcast forms: a plain pattern's instance in a broadcast form may match or
not (reason "broadcast"), so a correct pass that refuses broadcast operands is quiet; a recorded
rewrite's instance follows its own matcher."""

from __future__ import annotations

import functools

from _minimal import minimal
from hypothesis import strategies as st

import pmverify
from pmverify.faults.broadcasts import GELU_MUL_EXAMPLE, _flat_kernel, gelu_mul_pattern
from pmverify.strategies import like, planted


def _broadcast(case: pmverify.GraphCase) -> bool:
    """Whether the case's (one) instance has a broadcast operand: sizes differ (an input may be a
    flat one viewed in the graph), or stride 0."""
    x, y = case.inputs[0][:2]
    return x.numel() != y.numel() or any(0 in t.stride() for t in (x, y))


def _cases(**kwargs):
    inputs = like(GELU_MUL_EXAMPLE, vary="duck")
    return planted(gelu_mul_pattern, inputs, context=st.nothing(), min_instances=1, max_instances=1, **kwargs)


def test_broadcast_instance_of_a_plain_pattern_may_match_example():
    case = minimal(_cases(near_misses=False), _broadcast)
    ((must_match, reason),) = [(p.must_match, p.reason) for p in case.planted]
    assert (must_match, reason) == (None, "broadcast")
    assert not _broadcast(minimal(_cases(near_misses=False)))  # shrinks to no broadcast


@functools.cache
def _refusing_pass():
    """The flat kernel that ignores broadcasts, registered with an extra_check refusing them: a
    correct pass (it never rewrites a broadcast operand)."""
    from torch._inductor import pattern_matcher as pm

    def same_shape(match) -> bool:
        x, y = (match.kwargs[name].meta["val"] for name in ("x", "y"))
        return x.shape == y.shape and x.is_contiguous() and y.is_contiguous()

    patterns = pm.PatternMatcherPass(pass_name="test_gelu_mul_same_shape_only")
    kernel = _flat_kernel(False)
    pm.register_replacement(
        gelu_mul_pattern, kernel, list(GELU_MUL_EXAMPLE), pm.fwd_only, patterns, extra_check=same_shape
    )
    return patterns


def test_a_pass_refusing_broadcast_forms_is_quiet():
    results = []
    pmverify.verify(_refusing_pass(), _cases(), seed=0, max_examples=15, on_result=results.append)
    broadcast = [r for r in results if _broadcast(r.case)]
    assert broadcast and not any(r.planted_matched[0] for r in broadcast)  # refused, no finding
