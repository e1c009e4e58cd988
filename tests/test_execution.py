"""The execution layer's fake propagation: a graph's own fake values are reused only when they are
what a fresh propagation would give."""

from __future__ import annotations

import copy
import operator

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from pmverify._execution import propagate_recorded, propagated_or_own


def _f(x, w):
    return torch.ops.aten.mul.Tensor(torch.ops.aten.add.Tensor(x, 1), w)


def _inputs():
    return (torch.randn(4, 8), torch.randn(8))


def _modes(gm):
    return {id(node.meta["val"].fake_mode) for node in gm.graph.nodes if isinstance(node.meta.get("val"), torch.Tensor)}


def test_a_graph_with_its_own_static_fake_values_keeps_them():
    inputs = _inputs()
    gm = make_fx(_f, tracing_mode="real")(*inputs)
    first = propagate_recorded(gm, inputs)
    copied = copy.deepcopy(gm)
    reused = propagated_or_own(copied, inputs)
    assert reused.mode is first.mode and reused.vals["mul"] is first.vals["mul"]
    assert reused.mode.allow_non_fake_inputs  # as a fresh propagation's mode: a pass may re-trace with constants


def test_values_that_disagree_with_the_inputs_or_mix_modes_are_propagated_anew():
    inputs = _inputs()
    gm = make_fx(_f, tracing_mode="real")(*inputs)
    first = propagate_recorded(gm, inputs)
    wider = (torch.randn(4, 8).t().contiguous().t(), inputs[1])  # other strides
    anew = propagated_or_own(gm, wider)
    assert anew.mode is not first.mode and anew.vals["add"].stride() == wider[0].stride()

    other = FakeTensorMode(allow_non_fake_inputs=True)
    with other:
        gm.graph.find_nodes(op="placeholder")[0].meta["val"] = other.from_tensor(inputs[0])
    assert len(_modes(gm)) == 2
    mixed = propagated_or_own(gm, inputs)
    assert len(_modes(gm)) == 1 and mixed.mode not in (first.mode, other)

    del gm.graph.find_nodes(op="call_function", target=torch.ops.aten.add.Tensor)[0].meta["val"]
    assert propagated_or_own(gm, inputs).vals["add"] is not None  # a missing value: propagated anew


def test_the_float64_reference_widens_frozen_parameters_too():
    """``mm(x, w)`` with ``w`` a bfloat16 constant (a ``get_attr`` node, a frozen parameter): the
    reference reads ``w`` in float64 (else it cannot run, and the semantics rule falls back to
    comparing before with after alone: a false alarm on a rewrite more accurate than the graph)."""
    from pmverify._execution._runs import float64_reference

    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output((g.call_function(torch.ops.aten.mm.default, (x, g.get_attr("_frozen_param0"))),))
    root = torch.nn.Module()
    root.register_buffer("_frozen_param0", torch.randn(4, 3, dtype=torch.bfloat16))
    gm = torch.fx.GraphModule(root, g)
    x = torch.randn(2, 4, dtype=torch.bfloat16)
    (out,), _ = float64_reference(gm, [x])
    assert out.dtype == torch.float64 and torch.equal(out, x.double() @ root._frozen_param0.double())
    assert gm._frozen_param0.dtype == torch.bfloat16  # the graph's own constant is left as it was


def test_a_torch_level_graph_gets_dynamo_s_example_values_and_an_aten_graph_does_not():
    """Pre-grad handlers (split_cat's) read ``meta["example_value"]``, which dynamo sets: a graph
    calling torch functions, rebuilt without meta by a reproducer, gets it from its fake values;
    an ATen graph (make_fx's kind, which has none) is left as it is."""
    torch_level = torch.fx.Graph()
    x = torch_level.placeholder("x")
    first = torch_level.call_function(operator.getitem, (torch_level.call_function(torch.unbind, (x,)), 0))
    torch_level.output((torch_level.call_function(torch.stack, ([first, first],), {"dim": 0}),))
    aten_level = torch.fx.Graph()
    y = aten_level.placeholder("y")
    aten_level.output((aten_level.call_function(torch.ops.aten.neg.default, (y,)),))
    for graph, expected in ((torch_level, True), (aten_level, False)):
        gm = torch.fx.GraphModule(torch.nn.Module(), graph)
        propagated_or_own(gm, [torch.randn(2, 3)])
        calls = [node for node in gm.graph.nodes if node.op == "call_function"]
        assert all(("example_value" in node.meta) is expected for node in calls)
        if expected:
            assert all(node.meta["example_value"] is node.meta["val"] for node in calls)
