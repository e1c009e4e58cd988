"""fx_graphs: every drawn graph is valid (lint, eager run with finite outputs, fake tensors that
match the real results and re-propagate), every op of the table can make a graph on its own, node
bounds hold, nothing is rejected, the minimal graph is one op; bad arguments."""

import copy
import operator
import re

import pytest
import torch
import torch.utils._pytree as pytree
from _minimal import minimal, rejections
from hypothesis import given, settings
from hypothesis.errors import InvalidArgument

from pmverify._apply import propagate_fake
from pmverify._case import GraphCase
from pmverify.strategies._graph_ops import OPS
from pmverify.strategies._graphs import GRAPH_OPS, fx_graphs

aten, prims = torch.ops.aten, torch.ops.prims

#: The node target each op of the table must put in the graph.
TARGETS = {
    "add_scalar": aten.add.Tensor,
    "mul_scalar": aten.mul.Tensor,
    "pow": aten.pow.Tensor_Scalar,
    "convert_element_type": prims.convert_element_type.default,
    "add": aten.add.Tensor,
    "sub": aten.sub.Tensor,
    "mul": aten.mul.Tensor,
    "div": aten.div.Tensor,
    "where": aten.where.self,
    "sum": aten.sum.dim_IntList,
    "mean": aten.mean.dim,
    "reshape": aten._unsafe_view.default,
    "transpose": aten.transpose.int,
    "slice": aten.slice.Tensor,
    "split": aten.split_with_sizes.default,
    "matmul": aten.mm.default,
}


def _target(name: str):
    return TARGETS.get(name) or getattr(aten, name).default


def _op_nodes(case: GraphCase) -> list[torch.fx.Node]:
    return [n for n in case.gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def check_valid(case: GraphCase) -> None:
    """The properties every fx_graphs case has."""
    graph = case.gm.graph
    graph.lint()
    assert case.tp_world == 1 and case.form == "functional" and case.planted == () and case.label == "fx_graphs"
    nodes = list(graph.nodes)
    placeholders = graph.find_nodes(op="placeholder")
    assert nodes[: len(placeholders)] == placeholders  # inputs first
    (output,) = graph.find_nodes(op="output")
    for node in nodes:
        assert node.op in ("placeholder", "call_function", "output"), node
        if node.op == "call_function":
            assert isinstance(node.target, torch._ops.OpOverload) or node.target is operator.getitem, node
            assert node.users, f"dead node {node}"  # sinks are returned
        if node.op != "output":
            assert "val" in node.meta, node
    outputs = case.gm(*case.inputs[0])
    assert isinstance(outputs, tuple) and len(outputs) == len(output.args[0]) >= 1
    for real, node in zip(outputs, output.args[0], strict=True):
        assert torch.isfinite(real).all(), (node, case.gm.code)
        fake = node.meta["val"]
        assert (fake.shape, fake.dtype) == (real.shape, real.dtype), node
        significant = [(f, r) for f, r, size in zip(fake.stride(), real.stride(), real.shape, strict=True) if size > 1]
        assert all(f == r for f, r in significant), (node, fake.stride(), real.stride())  # size-1 dims: any stride
    again = copy.deepcopy(case.gm)
    propagate_fake(again, case.inputs[0])  # a fresh FakeTensorMode
    for before, after in zip(graph.nodes, again.graph.nodes, strict=True):
        if before.op != "output":
            shapes = [[tuple(t.shape) for t in pytree.tree_leaves(n.meta["val"])] for n in (before, after)]
            assert shapes[0] == shapes[1], before


@settings(max_examples=40)
@given(fx_graphs(max_nodes=12))
def test_drawn_graphs_are_valid(case):
    assert 1 <= len(_op_nodes(case)) <= 12
    check_valid(case)


# Regression-style examples, found deterministically: bounds in float16 through sums and
# contractions, views of non-contiguous values, split pieces nobody uses.
_EXAMPLES = {
    "fp16_sum_then_mm": (
        fx_graphs(dtypes=[torch.float16], ops=["sum", "mm", "mul"], min_nodes=6, max_nodes=6),
        lambda c: {aten.sum.dim_IntList, aten.mm.default} <= {n.target for n in _op_nodes(c)},
    ),
    "reshape_of_expanded": (
        fx_graphs(ops=["expand", "reshape", "permute"], min_nodes=4),
        lambda c: any(n.target is aten.clone.default and n.args[0].target is aten.expand.default for n in _op_nodes(c)),
    ),
    "unused_split_pieces": (
        fx_graphs(ops=["split", "neg"], min_nodes=2),
        lambda c: len(c.gm.graph.find_nodes(op="output")[0].args[0]) >= 3,
    ),
    "bf16_exp_log_chain": (
        fx_graphs(dtypes=[torch.bfloat16], ops=["exp", "log", "pow", "add_scalar"], min_nodes=8, max_nodes=10),
        lambda c: True,
    ),
    "two_inputs_broadcast": (
        fx_graphs(ops=["where", "add"], max_nodes=3),
        lambda c: len({x.dim() for x in c.inputs[0]}) >= 2,
    ),
}


@pytest.mark.parametrize("name", sorted(_EXAMPLES))
def test_drawn_graphs_are_valid_examples(name):
    strategy, condition = _EXAMPLES[name]
    check_valid(minimal(strategy, condition))


def test_op_table():
    assert len(GRAPH_OPS) >= 25 and len(set(GRAPH_OPS)) == len(GRAPH_OPS)
    assert GRAPH_OPS[0] == "neg"


@pytest.mark.parametrize("name", GRAPH_OPS)
def test_each_op_makes_valid_graphs_alone(name):
    target = _target(name)

    @settings(max_examples=8)
    @given(fx_graphs(ops=[name], max_nodes=6))
    def check(case):
        check_valid(case)
        assert target in {n.target for n in _op_nodes(case)}

    check()


def test_minimal_graph_is_one_op_on_one_input():
    case = minimal(fx_graphs())
    assert [(n.op, n.target) for n in case.gm.graph.nodes] == [
        ("placeholder", "x0"),
        ("call_function", aten.neg.default),
        ("output", "output"),
    ]
    (x,) = case.inputs[0]
    assert x.dtype == torch.float32 and tuple(x.shape) == (1,) and not x.any()


def test_minimal_graph_of_restricted_ops_and_dtypes():
    case = minimal(fx_graphs(ops=["mm", "tanh"], dtypes=[torch.bfloat16]))
    assert [n.target for n in _op_nodes(case)] == [aten.mm.default]
    assert [tuple(x.shape) for x in case.inputs[0]] == [(1, 1)]  # mm(x0, x0): the most recent value first
    assert all(x.dtype == torch.bfloat16 for x in case.inputs[0])


@settings(max_examples=20)
@given(fx_graphs(min_nodes=4, max_nodes=6, dtypes=[torch.float16, torch.bfloat16]))
def test_bounds_and_dtypes_hold(case):
    assert 4 <= len(_op_nodes(case)) <= 6
    assert case.inputs[0][0].dtype in (torch.float16, torch.bfloat16)
    casts = [n for n in _op_nodes(case) if n.target is torch.ops.prims.convert_element_type.default]
    for x in case.inputs[0]:  # only a cast leads to an input of another dtype
        assert x.dtype in (torch.float16, torch.bfloat16) or casts


@pytest.mark.parametrize(
    ("ops", "min_nodes", "max_nodes", "counts"),
    [(["log"], 3, 4, {3}), (["log", "neg"], 5, 5, {5}), (["where", "div"], 4, 5, {4, 5}), (["matmul"], 1, 7, {3, 6})],
)
def test_composite_ops_meet_the_node_bounds(ops, min_nodes, max_nodes, counts):
    @settings(max_examples=10)
    @given(fx_graphs(ops=ops, min_nodes=min_nodes, max_nodes=max_nodes))
    def check(case):
        assert len(_op_nodes(case)) in counts

    check()


def test_no_draw_is_rejected():
    """Valid by construction: under 1% (in fact none) of generated cases are rejected by a filter or
    ``assume``. ("overrun" cases are not rejections: the engine cuts early cases at 5 times the
    length of the minimal one, and does so for every strategy of varying size.)"""
    rejected, valid = rejections(fx_graphs(max_nodes=12), 100)
    assert valid == 100 and rejected / valid < 0.01, (rejected, valid)


def test_every_op_has_a_positive_cost():
    assert all(op.cost >= 1 for op in OPS)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_nodes": 0}, "min_nodes=0 must be at least 1"),
        ({"min_nodes": 1.0}, "min_nodes=1.0 must be an int"),
        ({"min_nodes": True}, "min_nodes=True must be an int"),
        ({"max_nodes": 0}, "max_nodes=0 must be at least 1"),
        ({"max_nodes": "8"}, "max_nodes='8' must be an int"),
        ({"min_nodes": 5, "max_nodes": 2}, "min_nodes=5 is larger than max_nodes=2"),
        ({"ops": []}, "ops=[] is empty"),
        ({"ops": "neg"}, "ops='neg' must be a sequence"),
        ({"ops": ["neg", "softmax"]}, "ops=['neg', 'softmax'] holds 'softmax'"),
        ({"ops": ["log"], "max_nodes": 2}, "no graph of ops=['log']"),
        ({"ops": ["log"], "min_nodes": 4, "max_nodes": 5}, "between min_nodes=4 and max_nodes=5"),
        ({"dtypes": []}, "dtypes=[] is empty"),
        ({"dtypes": torch.float16}, "dtypes=torch.float16 must be a sequence"),
        ({"dtypes": [torch.float64]}, "holds torch.float64"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        fx_graphs(**kwargs)
