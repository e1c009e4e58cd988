"""``planted(..., dynamic=...)``: instances with SymInt sizes, ground truth on the symbolic graph."""

from __future__ import annotations

import functools

import pytest
import torch
from _minimal import rejections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

import pmverify
from pmverify.strategies import like, planted, tp_cases

aten = torch.ops.aten
EXAMPLE = (torch.empty(4, 8), torch.empty(8))
FEW = settings(max_examples=5, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def rms_pattern(x, w):
    v = x.view(x.shape[0], 2, 4)
    return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)).view(x.shape[0], 8) * w


def rms_replacement(x, w):
    v = x.reshape(-1, 2, 4)
    return (v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)).reshape(x.shape[0], 8) * w


def cases(dynamic, **kwargs):
    kwargs = {"context": st.nothing(), "min_instances": 1, "max_instances": 1, **kwargs}
    return planted(rms_pattern, like(EXAMPLE, vary={"tokens": [(0, 0)]}), dynamic=dynamic, **kwargs)


@functools.cache
def inductor_pass() -> PatternMatcherPass:
    patterns = PatternMatcherPass()
    register_replacement(rms_pattern, rms_replacement, [torch.empty(4, 8), torch.empty(8)], fwd_only, patterns)
    return patterns


class HandRMS:
    """A hand matcher that reads the views' sizes as ints: it never matches a symbolic graph."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for out in list(graph.find_nodes(op="call_function", target=aten.mul.Tensor)):
            view1, w = out.args
            if not isinstance(view1, torch.fx.Node) or view1.target != aten.view.default:
                continue
            if not all(isinstance(side, int) for side in view1.args[1]):  # the bug: a SymInt size is a Node
                continue
            mul = view1.args[0]
            if mul.target != aten.mul.Tensor or mul.args[0].target != aten.view.default:
                continue
            v = mul.args[0]
            with graph.inserting_before(out):
                square = graph.call_function(aten.mul.Tensor, (v, v))
                mean = graph.call_function(aten.mean.dim, (square, [-1], True))
                norm = graph.call_function(aten.rsqrt.default, (graph.call_function(aten.add.Tensor, (mean, 1e-6)),))
                flat = graph.call_function(
                    aten.view.default, (graph.call_function(aten.mul.Tensor, (v, norm)), view1.args[1])
                )
                new = graph.call_function(aten.mul.Tensor, (flat, w))
            out.replace_all_uses_with(new)
            graph.erase_node(out)


class BakingViews:
    """Replaces every symbolic view size by its hint: right at the hint only."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in graph.find_nodes(op="call_function", target=aten.view.default):
            sizes = [int(s.meta["val"]) if isinstance(s, torch.fx.Node) else s for s in node.args[1]]
            node.args = (node.args[0], sizes)


def _instance_holds_sym_args(case) -> bool:
    nodes = {n.name: n for n in case.gm.graph.nodes}
    for instance in case.planted:
        for name in instance.nodes:
            node = nodes[name]
            if node.target == aten.view.default and any(isinstance(s, torch.fx.Node) for s in node.args[1]):
                return True
    return False


@FEW
@given(cases("tokens", near_misses=False))
def test_tokens_cases_hold_sym_placeholders_and_symint_view_sizes(case):
    assert [s.name for s in case.symbols] == ["s0"] and case.symbols[0].hint == 11
    first = case.gm.graph.find_nodes(op="placeholder")[0]
    assert first.name == "s0" and case.inputs[0][0] == 11
    assert len(case.symbols[0].sizes) >= 3
    assert _instance_holds_sym_args(case)
    assert all(p.must_match is True for p in case.planted), case.planted
    for dims in case.input_dims[1:]:
        assert dims is None or dims[1:] == (None,) * (len(dims) - 1)  # only the leading (token) dim


@FEW
@given(cases(True))
def test_inductor_pass_matches_symbolic_cases_and_is_correct(case):
    result = pmverify.check_case(inductor_pass(), case)
    assert result.ok, result.violations


@FEW
@given(cases("tokens", near_misses=False))
def test_hand_matcher_reading_int_sizes_misses_must_match_instances(case):
    result = pmverify.check_case(HandRMS(), case)
    assert [v.oracle for v in result.violations] == ["expectations"] * len(case.planted)


@FEW
@given(cases("tokens", near_misses=False))
def test_a_pass_baking_the_hint_into_views_is_caught(case):
    result = pmverify.check_case(BakingViews(), case)
    assert not result.ok
    assert any("s0=" in str(v) or v.oracle == "structure" for v in result.violations), result.violations


def test_static_instances_need_no_symbols():
    """Where the pattern does not run at the hint (a size relation), the instance keeps its sizes."""

    def pair_pattern(x, y):
        return x.view(-1) + y  # y holds x.numel() entries

    strategy = planted(
        pair_pattern,
        like((torch.empty(2, 3), torch.empty(6))),
        context=st.nothing(),
        min_instances=1,
        near_misses=False,
        dynamic="tokens",
    )

    @FEW
    @given(strategy)
    def check(case):
        assert not case.symbols and case.planted[0].must_match is True

    check()


@pytest.mark.parametrize("dynamic", ["batch", 1, None, [], ["tokens", 3], b"tokens"])
def test_bad_dynamic_values_are_refused(dynamic):
    with pytest.raises(InvalidArgument, match="dynamic="):
        cases(dynamic).validate()


def test_static_default_is_unchanged():
    assert "dynamic" not in repr(cases(False))
    assert "dynamic='tokens'" in repr(cases("tokens"))


@pytest.mark.parametrize(
    "strategy",
    [
        lambda: planted(rms_pattern, like(EXAMPLE, vary={"tokens": [(0, 0)]}), dynamic=True, max_instances=2),
        lambda: tp_cases(cases("tokens"), tp_world=st.just(2)),
    ],
    ids=["planted(dynamic=True) with context", "tp_cases of planted(dynamic=tokens)"],
)
def test_no_dynamic_planted_draw_is_rejected(strategy):
    rejected, valid = rejections(strategy(), 10)
    assert valid == 10 and rejected == 0
