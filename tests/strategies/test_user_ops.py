"""with_mutating_custom_ops(ops=...): calls of a project's own mutable ops (tests/_user_ops.py), drawn
from their schemas and examples: each form (empty buffers, clones, several mutated args, a fused
tensor's chunks written back, optional args, readers of the old value) in v1 and v2; drawn cases
run and are quiet under a pass that changes nothing; a call the op's kernels reject is never
drawn; bad arguments."""

from __future__ import annotations

import operator

import _user_ops as user
import pytest
import torch
from _minimal import minimal, rejections
from _mutation_checks import check_ground_truth, check_runs, first
from hypothesis import given
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify.strategies import fx_graphs
from pmverify.strategies._auto_functionalized import with_mutating_custom_ops

aten = torch.ops.aten
V1 = torch.ops.higher_order.auto_functionalized
V2 = torch.ops.higher_order.auto_functionalized_v2
OPS = [user.NORM_OUT, user.ADD_NORM, user.ROPE, user.SCALE_OUT]


def _cases(ops=OPS, **kwargs):
    examples = {op: calls for op, calls in user.examples().items() if op in ops}
    return with_mutating_custom_ops(fx_graphs(max_nodes=6), ops=ops, examples=examples, **kwargs)


def _hops(case, op=None):
    return [n for n in case.gm.graph.nodes if n.target in (V1, V2) and (op is None or n.args[0] is op)]


def _written(hop, name):
    if hop.target is V1:
        return hop.kwargs[name]
    return hop.kwargs["_all_bases"][hop.kwargs[f"_{name}_base_index"]]


def _identity(graph):
    return None


def _quiet(case):
    """The case runs, its ground truth holds, and a pass that changes nothing is quiet on it."""
    check_runs(case)
    check_ground_truth(case)
    result = pmverify.check_case(_identity, case)
    assert result.ok and not result.void_reason, (result.violations, case.gm.code)


@pytest.mark.parametrize("version", [1, 2])
def test_empty_result_buffer(version):
    case = first(_cases([user.NORM_OUT], versions=[version]), lambda c: "result=empty" in c.label)
    (hop,) = _hops(case)
    assert hop.target is (V1 if version == 1 else V2)
    buffer = _written(hop, "result")
    assert buffer.target in (aten.empty.memory_format, aten.empty_like.default)
    _quiet(case)


@pytest.mark.parametrize("version", [1, 2])
def test_two_mutated_args_and_a_clone(version):
    case = first(
        _cases([user.ADD_NORM], versions=[version]),
        lambda c: "x=clone" in c.label or "residual=clone" in c.label,
    )
    hop = _hops(case)[0]
    written = [_written(hop, "x"), _written(hop, "residual")]
    assert aten.clone.default in {n.target for n in written}
    sites = [s for s in case.mutations if s.node == hop.name]
    assert len(sites) == 2
    _quiet(case)


@pytest.mark.parametrize("version", [1, 2])
def test_fused_chunks_written_back(version):
    """q and k as chunks of one fused tensor (vLLM's qkv): v1 takes the split chunks and writes them
    back with slice_scatter; v2 names the fused base with each chunk's slice."""
    case = first(_cases([user.ROPE], versions=[version]), lambda c: "query=split,key=split" in c.label)
    hop = _hops(case)[0]
    if version == 1:
        query, key = hop.kwargs["query"], hop.kwargs["key"]
        assert query.target is operator.getitem and query.args[0] is key.args[0]
        assert query.args[0].target is aten.split_with_sizes.default
        scatters = [n for n in case.gm.graph.nodes if n.target is aten.slice_scatter.default]
        assert len(scatters) == 2
    else:
        assert hop.kwargs["_query_base_index"] == hop.kwargs["_key_base_index"] == 0
        assert "_query_slice_dim" in hop.kwargs and "_key_slice_start" in hop.kwargs
    _quiet(case)


def _bias(hop):
    return hop.kwargs.get("bias")


def test_optional_args_none_and_given():
    with_bias = first(_cases([user.SCALE_OUT]), lambda c: any(_bias(h) is not None for h in _hops(c)))
    without = first(_cases([user.SCALE_OUT]), lambda c: any(_bias(h) is None for h in _hops(c)))
    for case in (with_bias, without):
        _quiet(case)
    hop = _hops(with_bias)[0]
    assert isinstance(hop.kwargs["bias"], torch.fx.Node) and hop.kwargs["alpha"] == 0.5


def test_optional_args_without_examples():
    """Without examples, an op's optional tensors are drawn None or as tensors of the target's layout."""
    cases = with_mutating_custom_ops(fx_graphs(max_nodes=6), ops=[user.SCALE_OUT])
    for case in (
        first(cases, lambda c: any(_bias(h) is not None for h in _hops(c))),
        first(cases, lambda c: any(_bias(h) is None for h in _hops(c))),
    ):
        _quiet(case)


def test_reader_of_the_old_value():
    """A clone of a written tensor after the call, read by the output: what an in-place rewrite
    must not overwrite."""
    case = first(_cases([user.NORM_OUT], versions=[1]), lambda c: "old read" in c.label)
    order = {n: i for i, n in enumerate(case.gm.graph.nodes)}
    readers = [
        u
        for hop in _hops(case)
        for u in _written(hop, "result").users
        if u.target is aten.clone.default and order[u] > order[hop]
    ]
    assert readers and all(r in case.gm.graph.output_node().all_input_nodes for r in readers)
    _quiet(case)


def test_renamed_shapes_from_the_case():
    """A call renamed to a value of the case: its sizes follow that value's, the rest of the
    example with it (weight [H] for x [T, H])."""
    case = first(
        _cases([user.NORM_OUT]),
        lambda c: any(tuple(h.kwargs["x"].meta["val"].shape) != (6, 16) for h in _hops(c) if h.target is V1),
    )
    hop = next(h for h in _hops(case) if h.target is V1)
    x, weight = hop.kwargs["x"].meta["val"], hop.kwargs["weight"].meta["val"]
    assert tuple(weight.shape) == tuple(x.shape[-1:])
    _quiet(case)


@given(_cases())
def test_drawn_cases_run_and_a_no_op_pass_is_quiet(case):
    _quiet(case)


def test_no_rejections():
    rejected, valid = rejections(_cases(), examples=30)
    assert rejected == 0 and valid == 30


def test_calls_the_kernel_rejects_are_never_drawn():
    """rope_ takes a query of whole heads and an angle table as wide as a head: renamed calls that
    break that (a query [T, 6] with heads of 8) are not drawn, whatever the case holds."""

    @given(_cases([user.ROPE]))
    def check(case):
        for hop in _hops(case):
            cache = hop.kwargs["cache"].meta["val"]
            assert cache.shape[-1] == hop.kwargs["head_size"]
        check_runs(case)

    check()


def test_op_without_examples_none_accepted_raises():
    """rope_ indexes its angle table with integer positions: drawn without examples every tensor arg
    takes the target's (floating) layout, which its kernel rejects: the draw asks for examples."""
    cases = with_mutating_custom_ops(fx_graphs(max_nodes=4), ops=[user.ROPE])
    with pytest.raises(InvalidArgument, match="examples="):
        first(cases, lambda c: True)


def test_repr_shows_layouts_not_values():
    text = repr(_cases([user.NORM_OUT]))
    assert "ops=" in text and "examples={pmverify_user_test.norm_out.default: [(6x16 float32" in text


_X = torch.empty(6, 16)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ops": []}, "non-empty list"),
        ({"ops": user.NORM_OUT}, "non-empty list"),
        ({"ops": [torch.ops.pmverify_user_test.norm_out]}, "packet"),
        ({"ops": ["pmverify_user_test::norm_out"]}, "not a torch OpOverload"),
        ({"ops": [user.PURE]}, "mutates no argument"),
        ({"ops": [user.NO_FAKE]}, "no fake kernel"),
        ({"ops": [user.NORM_OUT], "examples": [(_X, _X, _X[0], 1e-6)]}, "must be a dict"),
        ({"ops": [user.NORM_OUT], "examples": {user.ADD_NORM: [(_X, _X, _X[0], 1e-6)]}}, "not in ops"),
        ({"ops": [user.NORM_OUT], "examples": {user.NORM_OUT: []}}, "non-empty list"),
        ({"ops": [user.NORM_OUT], "examples": {user.NORM_OUT: [(_X, _X)]}}, "misses argument 'weight'"),
        ({"ops": [user.NORM_OUT], "examples": {user.NORM_OUT: [(_X, _X, _X[0], 1e-6, 1)]}}, "holds 5 arguments"),
        ({"ops": [user.NORM_OUT], "examples": {user.NORM_OUT: [{"result": _X, "y": _X}]}}, "names"),
        ({"ops": [user.NORM_OUT], "examples": {user.NORM_OUT: [(_X, _X, _X, 1e-6)]}}, "fake kernel raises"),
        ({"ops": [user.NORM_OUT], "examples": {user.NORM_OUT: [(_X, 1.0, _X[0], 1e-6)]}}, "must be a tensor"),
        ({"examples": {user.NORM_OUT: [(_X, _X, _X[0], 1e-6)]}}, "without ops"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(InvalidArgument, match=match):
        with_mutating_custom_ops(fx_graphs(), **kwargs)


def test_minimal_case_is_one_example_call():
    """Shrinks toward one v1 call of the first op's first example as it is, its mutated arg a new
    input, with no reader of the old value."""
    case = minimal(_cases([user.NORM_OUT, user.ADD_NORM]))
    (hop,) = _hops(case)
    assert hop.target is V1 and hop.args[0] is user.NORM_OUT
    assert tuple(hop.kwargs["x"].meta["val"].shape) == (6, 16)
    assert "old read" not in case.label
