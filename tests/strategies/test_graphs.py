"""fx_graphs: every drawn graph is valid (lint, eager run with finite outputs, fake tensors that
match the real results and re-propagate), every op of the table can make a graph on its own, every
argument form and dtype shows up, node bounds hold, nothing is rejected, the minimal graph is one
default op; bad arguments."""

import contextlib
import copy
import operator
import re

import pytest
import torch
import torch.utils._pytree as pytree
from _minimal import minimal, rejections
from _mutation_checks import first
from hypothesis import Phase, given, settings
from hypothesis.errors import InvalidArgument

from pmverify._case import GraphCase
from pmverify._engine.apply import propagate_fake
from pmverify.strategies._graph_ops import GRAPH_DTYPES, OPS
from pmverify.strategies._graphs import GRAPH_DTYPES_WITHOUT_FLOAT64, GRAPH_OPS, fx_graphs
from pmverify.strategies._ops_core import INT64_MAX

aten, prims = torch.ops.aten, torch.ops.prims

#: The node targets of which each op of the table must put one in the graph.
TARGETS = {
    "add_scalar": {aten.add.Tensor, aten.add.Scalar},
    "mul_scalar": {aten.mul.Tensor, aten.mul.Scalar},
    "sub_scalar": {aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Scalar},
    "div_scalar": {aten.div.Tensor, aten.div.Scalar},
    "pow": {aten.pow.Tensor_Scalar},
    "clamp": {aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default},
    "convert_element_type": {prims.convert_element_type.default},
    "to_copy": {aten._to_copy.default, aten.to.dtype},
    "add": {aten.add.Tensor},
    "sub": {aten.sub.Tensor},
    "mul": {aten.mul.Tensor},
    "div": {aten.div.Tensor, aten.div.Tensor_mode},
    "where": {aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf},
    "where_scalar": {aten.scalar_tensor.default},
    "where_mask": {aten.where.self},
    "masked_fill": {aten.masked_fill.Scalar, aten.masked_fill.Tensor},
    "compare": {getattr(aten, c).Scalar for c in ("gt", "lt", "ge", "le", "eq", "ne")}
    | {getattr(aten, c).Tensor for c in ("gt", "lt", "ge", "le", "eq", "ne")},
    "sum": {aten.sum.dim_IntList, aten.sum.default},
    "mean": {aten.mean.dim, aten.mean.default},
    "var": {aten.var.correction},
    "std": {aten.std.correction},
    "softmax": {aten._softmax.default, aten.softmax.int},
    "log_softmax": {aten._log_softmax.default, aten.log_softmax.int},
    "reshape": {aten._unsafe_view.default},
    "aten_reshape": {aten.reshape.default},
    "unsafe_view": {aten._unsafe_view.default},
    "transpose": {aten.transpose.int},
    "squeeze": {aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims},
    "flatten": {aten.flatten.using_ints},
    "unflatten": {aten.unflatten.int},
    "slice": {aten.slice.Tensor},
    "select": {aten.select.int},
    "unbind": {aten.unbind.int},
    "split": {aten.split_with_sizes.default, aten.split.Tensor},
    "index_select": {aten.index_select.default, aten.index.Tensor},
    "matmul": {aten.mm.default},
    "empty_fill": {aten.fill.Scalar},
    "arange": {aten.arange.default, aten.arange.start, aten.arange.start_step},
}


def _targets(name: str) -> set:
    return TARGETS.get(name) or {getattr(aten, name).default}


def _op_nodes(case: GraphCase) -> list[torch.fx.Node]:
    return [n for n in case.gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def check_valid(case: GraphCase, dtypes=GRAPH_DTYPES_WITHOUT_FLOAT64) -> None:
    """The properties every fx_graphs case has."""
    graph = case.gm.graph
    graph.lint()
    assert case.tp_world == 1 and case.form == "functional" and case.planted == () and case.label == "fx_graphs"
    nodes = list(graph.nodes)
    placeholders = graph.find_nodes(op="placeholder")
    assert nodes[: len(placeholders)] == placeholders  # inputs first
    assert all(x.dtype in dtypes for x in case.inputs[0])
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
        assert torch.isfinite(real).all() if real.is_floating_point() else True, (node, case.gm.code)
        fake = node.meta["val"]
        assert (fake.shape, fake.dtype) == (real.shape, real.dtype), node
        assert fake.dtype in dtypes, node
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
# contractions, views of non-contiguous values, split pieces nobody uses; logical_and of non-bool
# values (its fake strides differ from eager's), bool-only sums, int true division without float32,
# cumprod bounds past a Python float, var over small dims, values at large scales.
_EXAMPLES = {
    "fp16_sum_then_mm": (
        fx_graphs(dtypes=[torch.float16], ops=["sum", "mm", "mul"], min_nodes=6, max_nodes=6),
        lambda c: {aten.sum.dim_IntList, aten.mm.default} <= {n.target for n in _op_nodes(c)},
    ),
    "reshape_of_expanded": (
        fx_graphs(ops=["expand", "reshape", "permute"], min_nodes=4, level="any"),
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
    "logical_and_of_permuted_masks": (
        fx_graphs(
            ops=["logical_and", "permute", "compare"], dtypes=[torch.float32, torch.bool], min_nodes=3, level="any"
        ),
        lambda c: {aten.logical_and.default, aten.permute.default} <= {n.target for n in _op_nodes(c)},
    ),
    "bool_only_sums": (fx_graphs(ops=["sum", "cumsum"], dtypes=[torch.bool, torch.int32], min_nodes=2), lambda c: True),
    "int_true_division": (
        fx_graphs(ops=["div_scalar", "div"], dtypes=[torch.int32, torch.float16], min_nodes=3),
        lambda c: any(x.dtype == torch.int32 for x in c.inputs[0]),
    ),
    "cumprod_of_large_values": (
        fx_graphs(ops=["cumprod", "view"], dtypes=[torch.float32], min_nodes=2, level="any"),
        lambda c: c.inputs[0][0].abs().max() > 1e3,
    ),
}


@pytest.mark.parametrize("name", sorted(_EXAMPLES))
def test_drawn_graphs_are_valid_examples(name):
    strategy, condition = _EXAMPLES[name]
    case = first(strategy, condition)  # the first drawn (deterministic), not shrunk: cheaper
    check_valid(case, dtypes=GRAPH_DTYPES)


def test_op_table():
    assert len(GRAPH_OPS) >= 75 and len(set(GRAPH_OPS)) == len(GRAPH_OPS)
    assert GRAPH_OPS[0] == "neg"
    assert set(GRAPH_OPS) >= {"slice", "reshape", "addmm", "cat", "matmul", "convert_element_type"}  # names kept


@pytest.mark.parametrize("name", GRAPH_OPS)
def test_each_op_makes_valid_graphs_alone(name):
    targets = _targets(name)

    @settings(max_examples=4)
    @given(fx_graphs(ops=[name], max_nodes=5, dtypes=GRAPH_DTYPES, level="any"))
    def check(case):
        check_valid(case, dtypes=GRAPH_DTYPES)
        assert targets & {n.target for n in _op_nodes(case)}

    check()


# ------------------------------------------------------------------------------ argument forms


def _val(node):
    return node.meta.get("val")


def _features(case: GraphCase) -> set[str]:  # noqa: C901 - one feature per line
    """The argument forms, dtypes and shapes a case shows, by name."""
    seen = set()
    for x in case.inputs[0]:
        seen.add(f"input {x.dtype}")
    for node in _op_nodes(case):
        t, args, kwargs, val = node.target, node.args, node.kwargs, _val(node)
        if isinstance(val, torch.Tensor):
            seen.add(f"value {val.dtype}")
            if val.dim() == 0:
                seen.add("0-d value")
            if val.numel() == 0 and any(u.op == "call_function" for u in node.users):
                seen.add("empty value used")
        for name in ("alpha", "beta", "value", "dtype", "rounding_mode", "approximate", "correction", "keepdim"):
            if name in kwargs:
                seen.add(f"{t._opname} {name}=")
        if t is aten.slice.Tensor:
            side = _val(args[0]).shape[args[1]]
            start = args[2] if len(args) > 2 else None
            end = args[3] if len(args) > 3 else None
            seen |= {"slice negative dim"} if args[1] < 0 else set()
            seen |= {"slice negative start"} if isinstance(start, int) and start < 0 else set()
            seen |= {"slice None start"} if len(args) > 2 and start is None else set()
            seen |= {"slice None end"} if len(args) > 3 and end is None else set()
            seen |= {"slice INT64_MAX end"} if end == INT64_MAX else set()
            seen |= {"slice end past the size"} if isinstance(end, int) and side < end < INT64_MAX else set()
            seen |= {"slice negative end"} if isinstance(end, int) and end < 0 else set()
            seen |= {"slice x[0:-1]"} if start in (0, None) and end == -1 and side > 1 else set()
            seen |= {"slice start -size"} if isinstance(start, int) and start == -side != 0 else set()
            seen |= {f"slice step {args[4]}"} if len(args) > 4 else {"slice step omitted"}
            seen |= {"slice empty result"} if val.numel() == 0 and _val(args[0]).numel() else set()
        elif t in (aten.view.default, aten.reshape.default, aten.expand.default) and -1 in args[1]:
            seen.add(f"{t._opname} -1")
        elif t is aten._unsafe_view.default:
            seen.add("_unsafe_view after clone" if args[0].target is aten.clone.default else "_unsafe_view")
        elif t in (aten.squeeze.dim, aten.unsqueeze.default, aten.transpose.int) and min(args[1:]) < 0:
            seen.add(f"{t._opname} negative dim")
        elif t is aten.sum.dim_IntList:
            seen.add(f"sum keepdim={args[2]}" if len(args) > 2 else "sum keepdim omitted")
            seen.add("sum dtype=" if "dtype" in kwargs else "sum dtype omitted")
            if len(args[1]) == 2:
                seen.add("sum over two dims")
        elif t in (aten.sum.default, aten.amax.default) and len(args) == 1:
            seen.add(f"{t._opname} of every dim")
        elif t is aten.add.Tensor and not isinstance(args[1], torch.fx.Node):
            seen.add(f"add.Tensor with a {type(args[1]).__name__}")
        elif t is aten.add.Tensor and _val(args[1]).dim() == 0:
            seen.add("add.Tensor with a 0-d tensor")
        elif t in (aten.add.Tensor, aten.mul.Tensor) and all(isinstance(a, torch.fx.Node) for a in args[:2]):
            kinds = sorted({"float" if a.is_floating_point() else str(a.dtype)[6:] for a in map(_val, args[:2])})
            if len(kinds) == 2:
                seen.add(f"{' and '.join(kinds)} promoted")
        elif t is aten.clamp.default:
            seen.add("clamp max None" if len(args) == 3 and args[1] is None else f"clamp with {len(args) - 1} bounds")
        elif t is aten.clone.default:
            seen.add("clone memory_format=" if "memory_format" in kwargs else "clone")
        elif t is aten._to_copy.default:
            seen |= {f"_to_copy {k}=" for k in kwargs}
        elif t is aten.to.dtype:
            seen.add("to.dtype copy=True" if len(args) == 4 and args[3] else "to.dtype")
        elif t is aten.softmax.int:
            seen.add("softmax.int dtype" if len(args) == 3 else "softmax.int")
        elif t in (aten.full.default, aten.ones.default, aten.arange.default, aten.scalar_tensor.default):
            seen.add(f"{t._opname} dtype=" if "dtype" in kwargs else f"{t._opname} dtype omitted")
            seen |= {f"{t._opname} device="} if "device" in kwargs else set()
        elif t is aten.fill.Scalar and args[0].target is aten.empty.memory_format:
            seen.add("empty + fill")
        elif t is aten.where.self and args[2].target is aten.scalar_tensor.default:
            seen.add("where with a scalar_tensor branch")
        elif t is aten.as_strided.default and list(args[2]) != sorted(args[2], reverse=True):
            seen.add("as_strided permuted")
        if isinstance(t, torch._ops.OpOverload):
            seen.add(str(t))
    return seen | _identities(case)


#: Identity and absorbing numbers of the scalar ops: ``op -> {number: name}``.
_IDENTITY_NUMBERS = {
    aten.mul: {1: "x * 1", 0: "x * 0", -1: "x * -1"},
    aten.add: {0: "x + 0"},
    aten.sub: {0: "x - 0"},
    aten.div: {1: "x / 1"},
    aten.pow: {1: "x ** 1"},
}


def _identities(case: GraphCase) -> set[str]:
    """The identity and absorbing forms a case shows (``x * 1``, ``int * 1.0``, a cast to the
    value's own dtype, a view to its own shape, a clamp at the dtype's limits...)."""
    seen = set()
    for node in _op_nodes(case):
        t, args = node.target, node.args
        x = _val(args[0]) if args and isinstance(args[0], torch.fx.Node) else None
        if not isinstance(x, torch.Tensor):
            continue
        c = args[1] if len(args) > 1 else None
        numbers = _IDENTITY_NUMBERS.get(getattr(t, "overloadpacket", None), {})
        if isinstance(c, (int, float)) and not isinstance(c, bool) and c in numbers:
            seen.add(numbers[c])
            if not x.is_floating_point() and (isinstance(c, float) or t.overloadpacket is aten.div):
                seen.add(f"int {numbers[c].replace('x ', '')}" + (".0" if isinstance(c, float) else ""))
        if t in (prims.convert_element_type.default, aten.to.dtype) and c == x.dtype:
            seen.add("cast to its own dtype")
        if t is aten._to_copy.default and node.kwargs.get("dtype") == x.dtype:
            seen.add("_to_copy to its own dtype")
        if t in (aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.expand.default):
            if list(_val(node).shape) == list(x.shape):
                seen.add(f"{t._opname} to its own shape")
        if t in (aten.clamp_min.default, aten.clamp_max.default, aten.clamp.default):
            limits = torch.finfo(x.dtype) if x.is_floating_point() else torch.iinfo(x.dtype)
            if any(isinstance(a, (int, float)) and abs(a) >= limits.max for a in args[1:]):
                seen.add("clamp at the dtype's limit")
    return seen


#: Small op groups (and dtypes, where given) and the forms each must show over a few dozen draws
#: (deterministic).
FORMS = {
    "slice": (
        ["slice", "neg"],
        {"slice negative dim", "slice negative start", "slice None start", "slice None end", "slice INT64_MAX end"}
        | {"slice end past the size", "slice negative end", "slice step 2", "slice step omitted", "slice x[0:-1]"}
        | {"slice start -size"}
        | {"slice empty result", "empty value used"},
    ),
    "select narrow unbind": (
        ["select", "narrow", "unbind"],
        {"aten.select.int", "aten.narrow.default", "aten.unbind.int", "0-d value"},
    ),
    "scatter split cat": (
        ["slice_scatter", "select_scatter", "split", "cat"],
        {"aten.slice_scatter.default", "aten.select_scatter.default", "aten.split.Tensor"}
        | {"aten.split_with_sizes.default", "aten.cat.default"},
    ),
    "indexing": (
        ["index_select", "gather", "argmax"],
        {"aten.index_select.default", "aten.index.Tensor", "aten.gather.default", "aten.argmax.default"},
    ),
    "reshapes": (
        ["view", "reshape", "aten_reshape", "unsafe_view"],
        {"view -1", "reshape -1", "_unsafe_view", "_unsafe_view after clone"},
    ),
    "dims": (
        ["squeeze", "unsqueeze", "flatten", "unflatten"],
        {"squeeze negative dim", "unsqueeze negative dim", "aten.flatten.using_ints", "aten.unflatten.int"}
        | {"aten.squeeze.default", "aten.squeeze.dims"},
    ),
    "layouts": (
        ["expand", "permute", "t", "as_strided", "clone"],
        {"expand -1", "aten.t.default", "as_strided permuted", "clone memory_format=", "clone"},
    ),
    "alpha beta value": (
        ["add", "sub", "addmm", "baddbmm", "addcmul"],
        {"add alpha=", "sub alpha=", "addmm beta=", "addmm alpha=", "baddbmm beta=", "addcmul value="},
    ),
    "sum": (
        ["sum", "amax"],
        {"sum keepdim omitted", "sum keepdim=True", "sum keepdim=False", "sum dtype=", "sum dtype omitted"}
        | {"sum over two dims", "sum of every dim", "amax of every dim"},
    ),
    "dtype=": (
        ["mean", "cumsum", "softmax"],
        {"mean dtype=", "cumsum dtype=", "softmax.int dtype", "aten._softmax.default"},
    ),
    "casts": (
        ["to_copy"],
        {"_to_copy dtype=", "_to_copy non_blocking=", "_to_copy memory_format=", "to.dtype", "to.dtype copy=True"},
    ),
    "modes": (
        ["div", "gelu", "var", "clamp"],
        {"div rounding_mode=", "gelu approximate=", "var correction=", "var keepdim=", "clamp max None"}
        | {"clamp with 1 bounds", "aten.clamp_min.default"},
    ),
    "scalar operands": (
        ["add_scalar", "sub_scalar", "div_scalar"],
        {"add.Tensor with a float", "add.Tensor with a int", "aten.add.Scalar", "add.Tensor with a 0-d tensor"}
        | {"aten.rsub.Scalar", "aten.div.Scalar"},
    ),
    "masks": (
        ["where", "where_scalar", "masked_fill", "compare"],
        {"aten.where.ScalarOther", "where with a scalar_tensor branch", "aten.masked_fill.Scalar"}
        | {"aten.masked_fill.Tensor", "aten.gt.Scalar", "value torch.bool"},
    ),
    "creation": (
        ["full", "ones", "empty_fill", "arange", "scalar_tensor"],
        {"full dtype=", "full dtype omitted", "full device=", "ones dtype omitted", "arange dtype="}
        | {"arange dtype omitted", "scalar_tensor dtype=", "empty + fill", "aten.arange.start_step"},
    ),
    "likes and scans": (
        ["full_like", "ones_like", "zeros_like", "cumprod"],
        {"aten.full_like.default", "aten.ones_like.default", "aten.zeros_like.default", "aten.cumprod.default"},
    ),
    "dtypes": (
        None,
        {f"input {d}" for d in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool)}
        | {f"value {d}" for d in (torch.int64, torch.bool)},
    ),
    "identities": (["mul_scalar", "add_scalar", "clamp"], {"x * 1", "x * 0", "x + 0", "clamp at the dtype's limit"}),
    "identities sub div pow": (["sub_scalar", "div_scalar", "pow"], {"x - 0", "x / 1", "x ** 1"}),
    # int values with float identities: the result is float32 (type promotion), not the int input
    "int identities": (["mul_scalar", "add_scalar"], {"int * 1.0", "int + 0.0"}, (torch.int64, torch.float32)),
    "int identities sub div pow": (
        ["sub_scalar", "div_scalar", "pow"],
        {"int - 0.0", "int / 1"},
        (torch.int32, torch.float32),
    ),
    "identity casts and views": (
        ["convert_element_type", "to_copy", "view", "aten_reshape", "reshape", "expand"],
        {"cast to its own dtype", "_to_copy to its own dtype", "view to its own shape", "reshape to its own shape"}
        | {"expand to its own shape", "_unsafe_view to its own shape"},
    ),
    "type promotion": (
        ["add", "mul", "tanh"],
        {"bool and float promoted", "float and int32 promoted", "value torch.float32"}
        | {"aten.tanh.default", "input torch.bool", "input torch.int32"},
    ),
}


class _AllSeen(Exception):
    pass


@pytest.mark.parametrize("group", sorted(FORMS))
def test_every_argument_form_shows_up(group):
    """Draws (deterministically, no shrinking) until every expected form was seen, at most 300 (the
    draws also depend on the constants Hypothesis collects from pmverify's own source, so a margin)."""
    ops, expected, *dtypes = FORMS[group]
    seen = set()

    @settings(max_examples=300, derandomize=True, database=None, phases=[Phase.generate])
    @given(fx_graphs(ops=ops, max_nodes=8, level="any", dtypes=dtypes[0] if dtypes else None))
    def draw(case):
        seen.update(_features(case))
        if expected <= seen:
            raise _AllSeen

    with contextlib.suppress(_AllSeen):
        draw()
    assert expected <= seen, sorted(expected - seen)


def test_float64_when_asked():
    case = first(fx_graphs(dtypes=GRAPH_DTYPES), lambda c: any(x.dtype == torch.float64 for x in c.inputs[0]))
    check_valid(case, dtypes=GRAPH_DTYPES)
    assert torch.float64 not in GRAPH_DTYPES_WITHOUT_FLOAT64


def test_values_reach_small_and_large_scales():
    """Inputs are drawn at scales from 2**-24 to 2**16 (rows far below a typical eps, large ones),
    and the op table bounds them (no overflow: check_valid)."""
    graphs = fx_graphs(ops=["mean"], dtypes=[torch.float32])
    small = minimal(graphs, lambda c: 0 < c.inputs[0][0].abs().max() < 2**-10)
    large = minimal(graphs, lambda c: c.inputs[0][0].abs().max() > 2**10)
    check_valid(small)
    check_valid(large)


# -------------------------------------------------------------------------------- the rest


def test_minimal_graph_is_one_op_on_one_input():
    case = minimal(fx_graphs())
    assert [(n.op, n.target, n.args[1:] if n.args else (), n.kwargs) for n in case.gm.graph.nodes] == [
        ("placeholder", "x0", (), {}),
        ("call_function", aten.neg.default, (), {}),
        ("output", "output", (), {}),
    ]
    (x,) = case.inputs[0]
    assert x.dtype == torch.float32 and tuple(x.shape) == (1,) and not x.any()


def test_minimal_graph_of_restricted_ops_and_dtypes():
    case = minimal(fx_graphs(ops=["mm", "tanh"], dtypes=[torch.bfloat16]))
    assert [n.target for n in _op_nodes(case)] == [aten.mm.default]
    assert [tuple(x.shape) for x in case.inputs[0]] == [(1, 1)]  # mm(x0, x0): the most recent value first
    assert all(x.dtype == torch.bfloat16 for x in case.inputs[0])


def test_minimal_forms_are_the_simplest():
    """Each op's simplest form: ``slice.Tensor(x, 0, 0, 1)``, ``sum.dim_IntList(x, [0])``,
    ``add.Tensor(x, 1.0)``, ``addmm(b, x, y)``."""
    slice_node, *_ = _op_nodes(minimal(fx_graphs(ops=["slice"])))
    assert slice_node.args[1:] == (0, 0, 1) and not slice_node.kwargs
    sum_node, *_ = _op_nodes(minimal(fx_graphs(ops=["sum"])))
    assert sum_node.args[1:] == ([0],) and not sum_node.kwargs
    add_node, *_ = _op_nodes(minimal(fx_graphs(ops=["add_scalar"])))
    assert add_node.target is aten.add.Tensor and add_node.args[1:] == (1.0,)
    addmm_node, *_ = _op_nodes(minimal(fx_graphs(ops=["addmm"])))
    assert not addmm_node.kwargs


@settings(max_examples=20)
@given(fx_graphs(min_nodes=4, max_nodes=6, dtypes=[torch.float16, torch.bfloat16]))
def test_bounds_and_dtypes_hold(case):
    assert 4 <= len(_op_nodes(case)) <= 6
    check_valid(case, dtypes=[torch.float16, torch.bfloat16])


@pytest.mark.parametrize(
    ("ops", "min_nodes", "max_nodes", "counts"),
    [(["log"], 3, 4, {3}), (["log", "neg"], 5, 5, {5}), (["where", "div"], 4, 5, {4, 5}), (["matmul"], 1, 7, {3, 6})],
)
def test_composite_ops_meet_the_node_bounds(ops, min_nodes, max_nodes, counts):
    @settings(max_examples=10)
    @given(fx_graphs(ops=ops, min_nodes=min_nodes, max_nodes=max_nodes, level="any"))
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
        ({"ops": ["neg", "softmax2"]}, "ops=['neg', 'softmax2'] holds 'softmax2'"),
        ({"ops": ["log"], "max_nodes": 2}, "no graph of ops=['log']"),
        ({"ops": ["log"], "min_nodes": 4, "max_nodes": 5}, "between min_nodes=4 and max_nodes=5"),
        ({"dtypes": []}, "dtypes=[] is empty"),
        ({"dtypes": torch.float16}, "dtypes=torch.float16 must be a sequence"),
        ({"dtypes": [torch.complex64]}, "holds torch.complex64"),
        ({"dtypes": [torch.uint8]}, "holds torch.uint8"),
        (
            {"ops": ["argmax", "mm"], "dtypes": [torch.bool]},
            "none of ops=['argmax', 'mm'] applies to dtypes=[torch.bool]",
        ),
        ({"ops": ["gather"], "dtypes": [torch.float32]}, "none of ops=['gather'] applies"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        fx_graphs(**kwargs)


# ----------------------------------------------------------------------------------- levels


def _post_grad_violations(case: GraphCase) -> list[str]:
    """The nodes of ``case`` that no post-grad graph holds (what torch.compile hands
    ``post_grad_custom_post_pass``, measured on torch 2.13)."""
    pre_grad_only = {
        aten.view.default, aten._unsafe_view.default, aten._to_copy.default, aten.to.dtype, aten.gelu.default,
        aten._softmax.default, aten.softmax.int, aten._log_softmax.default, aten.log_softmax.int,
        aten.std.correction, aten.t.default, aten.transpose.int, aten.flatten.using_ints, aten.unflatten.int,
        aten.narrow.default, aten.index_select.default, aten.ones.default, aten.zeros.default,
        aten.empty.memory_format, aten.fill.Scalar, aten.arange.default, aten.arange.start, aten.arange.start_step,
        aten.full_like.default, aten.ones_like.default, aten.zeros_like.default, aten.scalar_tensor.default,
        aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten.logical_not.default, aten.logical_and.default,
        aten.clamp.default, aten.where.ScalarOther, aten.where.ScalarSelf, aten.rsub.Scalar,
    }  # fmt: skip
    found = []
    for node in _op_nodes(case):
        t, args, kwargs = node.target, node.args, node.kwargs
        if t in pre_grad_only:
            found.append(str(t))
        elif t is aten.slice.Tensor and (len(args) < 4 or None in args[2:4] or args[4:] == (1,)):
            found.append(f"slice{args[1:]}")
        elif t is aten.slice_scatter.default and (len(args) < 4 or None in args[3:5] or args[5:] == (1,)):
            found.append(f"slice_scatter{args[2:]}")  # 4 arguments (start > 0) is a post-grad form
        elif t is aten.slice_scatter.default and len(args) == 4 and args[3] == 0:
            found.append(f"slice_scatter{args[2:]}")
        elif t is aten.full.default and set(kwargs) != {"dtype", "layout", "device", "pin_memory"}:
            found.append(f"full {sorted(kwargs)}")
    return found


_LEVEL_OPS = ["slice", "slice_scatter", "full", "clamp", "where", "sub_scalar", "view", "softmax", "to_copy", "neg"]


@settings(max_examples=40)
@given(fx_graphs(ops=_LEVEL_OPS, min_nodes=3, max_nodes=10))
def test_post_grad_draws_only_post_grad_forms(case):
    assert not _post_grad_violations(case), case.gm.code


@pytest.mark.parametrize(
    ("strategy", "form"),
    [
        (fx_graphs(ops=["slice"], level="any"), lambda n: n.target is aten.slice.Tensor and len(n.args) == 3),
        (fx_graphs(ops=["slice"], level="any"), lambda n: n.target is aten.slice.Tensor and None in n.args[2:4]),
        (fx_graphs(ops=["slice_scatter"], level="any"), lambda n: n.target is aten.slice_scatter.default and (len(n.args) <= 3 or None in n.args[3:5])),
        (fx_graphs(ops=["full"], level="any"), lambda n: n.target is aten.full.default and "dtype" not in n.kwargs),
        (fx_graphs(ops=["full"], level="pre_grad"), lambda n: n.target is aten.full.default and "dtype" not in n.kwargs),
        (fx_graphs(ops=["view"], level="pre_grad"), lambda n: n.target is aten.view.default),
        (fx_graphs(ops=["clamp"], level="pre_grad"), lambda n: n.target is aten.clamp.default),
    ],
)  # fmt: skip
def test_other_levels_draw_the_forms_post_grad_leaves_out(strategy, form):
    """What post_grad never draws, the other levels do (so the check above can fail)."""
    case = first(strategy, lambda c: any(form(n) for n in _op_nodes(c)))
    assert _post_grad_violations(case)


def test_post_grad_draws_its_slice_scatter_forms():
    """Five arguments (``x[1:].copy_(y)``), six with a step (``x[::2].copy_(y)``) and four (an
    explicit ``torch.slice_scatter(x, y, dim, start)``): the forms torch.compile writes."""
    graphs = fx_graphs(ops=["slice_scatter"])
    for count in (4, 5, 6):
        case = first(graphs, lambda c, k=count: any(len(n.args) == k for n in _op_nodes(c)))
        assert not _post_grad_violations(case)


def test_op_levels():
    """Every op is drawn at level "any"; casts are ``convert_element_type`` post-grad only, views
    ``view`` pre-grad only."""
    at = {level: {op.name for op in OPS if level in op.levels} for level in ("post_grad", "pre_grad", "any")}
    assert at["any"] == set(GRAPH_OPS)
    assert "convert_element_type" in at["post_grad"] - at["pre_grad"]
    assert {"view", "to_copy", "softmax", "ones"} <= at["pre_grad"] - at["post_grad"]
    assert {"slice", "slice_scatter", "full", "aten_reshape", "permute"} <= at["post_grad"] & at["pre_grad"]


@pytest.mark.parametrize("level", ["post_grad", "pre_grad", "any"])
def test_minimal_graph_is_one_op_at_each_level(level):
    case = minimal(fx_graphs(level=level))
    assert [n.target for n in _op_nodes(case)] == [aten.neg.default]


@pytest.mark.parametrize("level", ["pre_grad", "any"])  # post_grad: test_no_draw_is_rejected
def test_no_draw_is_rejected_at_each_level(level):
    rejected, valid = rejections(fx_graphs(max_nodes=12, level=level), 50)
    assert valid == 50 and rejected == 0, (rejected, valid)


def test_ops_not_at_the_level_are_left_out():
    case = minimal(fx_graphs(ops=["view", "aten_reshape"]))
    assert [n.target for n in _op_nodes(case)] == [aten.reshape.default]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": "post"}, "level='post' must be one of 'post_grad', 'pre_grad', 'any'"),
        ({"level": None}, "level=None must be one of"),
        ({"ops": ["view", "softmax"]}, "none of ops=['view', 'softmax'] applies to dtypes="),
        ({"ops": ["convert_element_type"], "level": "pre_grad"}, "at level='pre_grad'"),
    ],
)
def test_bad_levels(kwargs, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        fx_graphs(**kwargs)


def test_symbolic_post_grad_cases_keep_reshape():
    """The symbolic re-trace (make_fx) writes ``reshape`` as ``view``; post-grad graphs hold
    ``reshape`` (Inductor's ``view_to_reshape``), and so do the cases."""
    case = first(
        fx_graphs(ops=["aten_reshape", "neg"], dynamic="tokens", min_nodes=2),
        lambda c: c.symbols and any(n.target is aten.reshape.default for n in _op_nodes(c)),
    )
    assert not _post_grad_violations(case), case.gm.code
    case.gm(*case.inputs[0])
