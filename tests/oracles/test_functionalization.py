"""The functionalization oracle: (a) getitem indices and meta, (b) Inductor's decomposition,
(c) stand-ins for mutated arguments carry the new value; firing and quiet for each."""

from __future__ import annotations

import operator

import pytest
import torch
from hypothesis import given, settings

from pmverify import GraphCase, check_case
from pmverify.faults import SwappedAutoFunctionalizedGetitems
from pmverify.fusions.qk_norm import QKNormFusionPass
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.oracles.functionalization import element_descriptions
from pmverify.strategies import with_mutating_custom_ops
from pmverify.strategies._custom_ops import op

aten = torch.ops.aten
V1, V2 = torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2


def _call(g: torch.fx.Graph, name: str, target, *args, **kwargs) -> torch.fx.Node:
    return g.create_node("call_function", target, args, kwargs, name=name)


def _add_into_case(version: int = 2) -> GraphCase:
    """``x += y`` through ``add_into`` in post-grad form: ``getitem`` = output (tanh of the new x),
    ``getitem_1`` = new x; ``mul`` reads the new x, ``mul_1`` the old x (after the op), ``copy_``
    writes the new x back."""
    g = torch.fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    if version == 2:
        af = _call(g, "auto_functionalized_v2", V2, op("add_into"), y=y, _x_base_index=0, _all_bases=[x])
    else:
        af = _call(g, "auto_functionalized", V1, op("add_into"), x=x, y=y)
    out, new_x = _call(g, "getitem", operator.getitem, af, 0), _call(g, "getitem_1", operator.getitem, af, 1)
    twice = _call(g, "mul", aten.mul.Tensor, new_x, 2.0)
    old = _call(g, "mul_1", aten.mul.Tensor, x, 3.0)
    _call(g, "copy_", aten.copy_.default, x, new_x)
    g.output((out, twice, old))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    gen = torch.Generator().manual_seed(0)
    return GraphCase(gm, [(torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen))])


def _scale_shift_case() -> GraphCase:
    """``scale_shift(a!, b!, 2.0)`` (returns nothing): the tuple is ``(None, new a, new b)``."""
    g = torch.fx.Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    kwargs = {"scale": 2.0, "_a_base_index": 0, "_b_base_index": 1, "_all_bases": [a, b]}
    af = _call(g, "auto_functionalized_v2", V2, op("scale_shift"), **kwargs)
    new_a, new_b = _call(g, "getitem", operator.getitem, af, 1), _call(g, "getitem_1", operator.getitem, af, 2)
    _call(g, "copy_", aten.copy_.default, a, new_a)
    _call(g, "copy__1", aten.copy_.default, b, new_b)
    g.output((_call(g, "add", aten.add.Tensor, new_a, new_b),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    return GraphCase(gm, [(torch.randn(4, 3), torch.randn(4, 3))])


def _af(graph: torch.fx.Graph) -> torch.fx.Node:
    return next(n for n in graph.nodes if n.target in (V1, V2))


def _getitem(graph: torch.fx.Graph, index: int) -> torch.fx.Node:
    return next(n for n in _af(graph).users if n.args[1] == index)


def _identity(graph: torch.fx.Graph) -> None:
    pass


def _rebuild(graph: torch.fx.Graph) -> None:
    """A correct rebuild (as vLLM's fusions do): a new auto_functionalized node with the same
    arguments, new getitems with the same indices and meta, every user moved over."""
    old = _af(graph)
    with graph.inserting_after(old):
        new = graph.call_function(old.target, old.args, dict(old.kwargs))
    new.meta.update(old.meta)
    for user in list(old.users):
        with graph.inserting_after(new):
            item = graph.call_function(operator.getitem, (new, user.args[1]))
        item.meta.update(user.meta)
        user.replace_all_uses_with(item)
        graph.erase_node(user)
    graph.erase_node(old)


def _messages(result) -> list[str]:
    assert {v.oracle for v in result.violations} <= {"functionalization"}
    return [v.message for v in result.violations]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("pass_", [_identity, _rebuild])
def test_identity_and_correct_rebuild_are_quiet(version, pass_):
    result = check_case(pass_, _add_into_case(version), oracles=["functionalization"])
    assert result.ok, result.violations


def test_graph_without_auto_functionalized_is_skipped():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output((g.call_function(aten.sin.default, (x,)),))
    case = GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(3),)])
    assert check_case(_identity, case, oracles=["functionalization"]).ok


def test_element_descriptions_follow_the_tuple_layout():
    case = _add_into_case(2)
    assert element_descriptions(_af(case.gm.graph)) == ["output 0", "new value of base 0, `x` (arg `x`)"]
    assert element_descriptions(_af(_add_into_case(1).gm.graph)) == ["output 0", "new value of `x` (`x`)"]
    names = element_descriptions(_af(_scale_shift_case().gm.graph))
    assert names[0].startswith("output 0, None") and names[2] == "new value of base 1, `b` (arg `b`)"


# --- (a) indices and meta ---------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_index_out_of_range_is_reported(version):
    def off_by_one(graph):
        item = _getitem(graph, 1)
        item.args = (item.args[0], 2)

    messages = _messages(check_case(off_by_one, _add_into_case(version), oracles=["functionalization"]))
    assert len(messages) == 1  # (b) and (c) need a graph that runs
    assert messages[0].startswith("`getitem_1` reads element 2 of `auto_functionalized")
    assert "does not exist; its tuple has 2 elements: 0: output 0; 1: new value of" in messages[0]


def test_none_slot_of_an_op_without_outputs_is_reported():
    def reads_the_none_slot(graph):
        item = _getitem(graph, 1)
        item.args = (item.args[0], 0)

    messages = _messages(check_case(reads_the_none_slot, _scale_shift_case(), oracles=["functionalization"]))
    assert len(messages) == 1 and "`getitem` reads element 0 of `auto_functionalized_v2` (output 0, None" in messages[0]


def test_a_getitem_the_graph_held_before_the_pass_is_not_a_finding():
    # make_fx leaves a dead getitem of the None slot of an op that returns nothing: a property of
    # the graph before the pass, never a finding against it (a pass that reads that slot is one)
    case = _scale_shift_case()
    graph = case.gm.graph
    af = _af(graph)
    with graph.inserting_after(af):
        _call(graph, "getitem_2", operator.getitem, af, 0)
    case.gm.recompile()
    assert check_case(_identity, case, oracles=["functionalization"]).ok

    def reads_it(graph):
        dead = next(n for n in graph.nodes if n.name == "getitem_2")
        with graph.inserting_after(dead):
            item = graph.call_function(operator.getitem, (_af(graph), 0))
        graph.output_node().args = ((*graph.output_node().args[0], item),)

    messages = _messages(check_case(reads_it, case, oracles=["functionalization"]))
    assert any("reads element 0 of `auto_functionalized_v2` (output 0, None" in m for m in messages), messages


def test_stale_meta_on_a_rebuilt_getitem_is_reported():
    """A rebuild over half-precision copies that keeps the old getitems' float32 meta."""

    def rebuild_in_half(graph):
        old = _af(graph)
        with graph.inserting_before(old):
            x, y = old.kwargs["_all_bases"][0], old.kwargs["y"]
            half = [graph.call_function(aten._to_copy.default, (t,), {"dtype": torch.float16}) for t in (x, y)]
            new = graph.call_function(V2, old.args, {"y": half[1], "_x_base_index": 0, "_all_bases": [half[0]]})
        for user in list(old.users):
            user.args = (new, user.args[1])
        graph.erase_node(old)

    messages = _messages(check_case(rebuild_in_half, _add_into_case(2), oracles=["functionalization"]))
    stale = [m for m in messages if "stale meta" in m]
    assert len(stale) == 2
    assert stale[0].startswith("`getitem` reads element 0 of `auto_functionalized_v2_1` (output 0), which is (4, 3)")
    assert "torch.float16, but the pass left meta['val'] (4, 3) torch.float32 on it" in stale[0]


# --- (b) Inductor's decomposition ---------------------------------------------------------------


def test_wrong_only_clone_these_tensors_is_caught_by_the_decomposition():
    """Marking the base as safe to reinplace while ``mul_1`` still reads the old x after the op: the
    graph as it stands is right (semantics holds), the graph Inductor lowers is not."""

    def reinplace_wrongly(graph):
        _af(graph).meta["only_clone_these_tensors"] = []

    result = check_case(reinplace_wrongly, _add_into_case(2), oracles=["functionalization", "semantics"])
    messages = _messages(result)
    assert len(messages) == 1
    assert messages[0].startswith(
        "after Inductor's decompose_auto_functionalized (post_grad_passes) the rewritten graph computes otherwise "
        '("before": as the pass left it, "after": decomposed): output 2: 12 of 12 elements far off'
    )


def test_decomposition_that_raises_is_reported(monkeypatch):
    from torch._inductor.fx_passes import post_grad

    def broken(graph):
        raise RuntimeError("cannot lower")

    monkeypatch.setattr(post_grad, "decompose_auto_functionalized", broken)
    messages = _messages(check_case(_identity, _add_into_case(2), oracles=["functionalization"]))
    assert messages == [
        "Inductor's decompose_auto_functionalized (post_grad_passes) fails on the rewritten graph: "
        "RuntimeError('cannot lower')"
    ]


# --- (c) stand-ins carry the new value ----------------------------------------------------------


def test_swapped_getitems_are_named_precisely():
    result = check_case(SwappedAutoFunctionalizedGetitems(), _add_into_case(2), oracles=["functionalization"])
    assert result.pair.pass_.swapped == 1
    messages = _messages(result)
    assert len(messages) == 3
    assert messages[2].startswith(
        "graph output 0 now reads element 1 of `auto_functionalized_v2` (new value of base 0, `x` (arg `x`)) "
        "through `getitem`, where it read element 0 of `auto_functionalized_v2` (output 0) through `getitem`; "
        "the value: 12 of 12 elements far off"
    )
    assert any(m.startswith("`mul` argument 0 now reads element 0") for m in messages)
    assert any(m.startswith("`copy_` argument 1 now reads element 0") for m in messages)
    assert all("max |after - before|" in m for m in messages)


@pytest.mark.parametrize("version", [1, 2])
def test_reading_the_old_value_instead_of_the_new_is_reported(version):
    def reads_old_x(graph):
        mul = next(n for n in graph.nodes if n.name == "mul")
        base = mul.args[0].args[0].kwargs["_all_bases"][0] if version == 2 else mul.args[0].args[0].kwargs["x"]
        mul.args = (base, *mul.args[1:])

    result = check_case(reads_old_x, _add_into_case(version), oracles=["functionalization"])
    messages = _messages(result)
    assert len(messages) == 1
    assert messages[0].startswith(
        "`mul` argument 0 now reads `x` (not an element of an auto_functionalized node), where it read element 1 of "
        f"`{_af(_add_into_case(version).gm.graph).name}` (new value of "
    )
    assert result.violations[0].nodes == ("mul", "x", "getitem_1")


def test_a_value_read_after_a_later_copy_is_the_value_at_the_read():
    """A pass that reads the input itself after copying the new value into it is right: what a node
    reads is captured when it runs, not after the graph's final ``copy_``."""

    def read_input_after_copy(graph):
        copy_ = next(n for n in graph.nodes if n.target is aten.copy_.default)
        mul = next(n for n in graph.nodes if n.name == "mul")
        copy_.append(mul)  # mul now runs after copy_
        mul.args = (copy_.args[0], *mul.args[1:])

    assert check_case(read_input_after_copy, _add_into_case(2), oracles=["functionalization"]).ok


# --- the fault and the shipped pass on generated post-grad graphs --------------------------------


@settings(max_examples=6, deadline=None)
@given(with_mutating_custom_ops(qk_norm_cases(), versions=(2,)))
def test_swapped_getitems_fault_is_caught(case):
    result = check_case(SwappedAutoFunctionalizedGetitems, case, oracles=["functionalization"])
    if result.pair.pass_.swapped:
        assert result.violations, case.label
        assert all(
            " now reads element " in v.message and ", where it read element " in v.message for v in result.violations
        )


@settings(max_examples=6, deadline=None)
@given(with_mutating_custom_ops(qk_norm_cases(), versions=(1, 2)))
def test_shipped_pass_and_identity_are_quiet(case):
    for pass_ in (QKNormFusionPass, _identity):
        result = check_case(pass_, case, oracles=["functionalization"])
        assert result.ok, result.violations


def _relu_scale(x, s):
    return torch.relu(x) * s


def _relu_scale_fused(x, s):
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    op = torch.ops.pmverify_test_functionalization.relu_scale_out.default
    return auto_functionalized(op, x=x, s=s, out=torch.empty_like(x), pre=torch.empty_like(x))[1]


def test_a_replacement_through_auto_functionalized_on_a_symbolic_case_decomposes():
    """The pattern entry records ``eager_input_vals`` with symbolic sizes; decomposing the graph
    re-propagated at concrete sizes, Inductor traced the replacement with both and asserted (a false
    alarm in the fresh-user trial): the stale values are dropped, and the correct rewrite is quiet."""
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    import pmverify

    if not hasattr(torch.ops.pmverify_test_functionalization, "relu_scale_out"):

        @torch.library.custom_op("pmverify_test_functionalization::relu_scale_out", mutates_args=("out", "pre"))
        def relu_scale_out(x: torch.Tensor, s: float, out: torch.Tensor, pre: torch.Tensor) -> None:
            out.copy_(torch.relu(x) * s)
            pre.copy_(x * s)

    patterns = PatternMatcherPass(pass_name="relu_scale_out")
    register_replacement(
        _relu_scale, _relu_scale_fused, [torch.empty(4, 8), 0.5], fwd_only, patterns, scalar_workaround={"s": 0.5}
    )
    g = torch.fx.Graph()  # the shrunk case: the instance's value unread
    x = g.placeholder("x")
    g.call_function(aten.mul.Tensor, (g.call_function(aten.relu.default, (x,)), 0.5))
    g.output(())
    case = pmverify.symbolize(GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(11, 8),)]))
    result = check_case(patterns, case, oracles=["functionalization"])
    assert case.symbols and result.rewrite_count == 1
    assert result.ok, result.violations
