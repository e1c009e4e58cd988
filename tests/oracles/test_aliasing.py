"""The aliasing oracle: a call that reads what it writes, introduced by the pass, is found whatever the
op computes; an alias the original graph had, an elementwise op's full overlap and Inductor's own
reinplacing are not findings; Inductor's clone removal before its reinplacing is one."""

from __future__ import annotations

import operator

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pmverify import GraphCase, check_case
from pmverify.faults import ReinplaceReadsWhatItWrites
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.oracles import ORACLES, _layout, aliasing
from pmverify.strategies import with_mutating_custom_ops
from pmverify.strategies._custom_ops import op

aten = torch.ops.aten
V1, V2 = torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2


def _call(g: torch.fx.Graph, name: str, target, *args, **kwargs) -> torch.fx.Node:
    return g.create_node("call_function", target, args, kwargs, name=name)


def _clone_case(name: str = "reverse_into", version: int = 1, *, source: str = "x") -> GraphCase:
    """``x = a * 2; y = x.clone(); op(x, out=y)`` in post-grad form, returning the new ``y``. With
    ``source="t"`` the clone is of another buffer ``t = a * 3`` (the op still reads ``x``)."""
    g = torch.fx.Graph()
    a = g.placeholder("a")
    x = _call(g, "x", aten.mul.Tensor, a, 2.0)
    t = _call(g, "t", aten.mul.Tensor, a, 3.0) if source == "t" else x
    clone = _call(g, "clone", aten.clone.default, t)
    if version == 2:
        af = _call(g, "auto_functionalized_v2", V2, op(name), x=x, _out_base_index=0, _all_bases=[clone])
    else:
        af = _call(g, "auto_functionalized", V1, op(name), x=x, out=clone)
    g.output((_call(g, "getitem", operator.getitem, af, 1),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    return GraphCase(gm, [(torch.rand(5, 5, generator=torch.Generator().manual_seed(0)) * 4 - 2,)])


def _nothing(graph: torch.fx.Graph) -> None:
    pass


def _messages(result, oracle: str = "aliasing") -> list[str]:
    return [v.message for v in result.violations if v.oracle == oracle]


def test_registered():
    assert ORACLES["aliasing"] is aliasing.check


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name", ["reverse_into", "transpose_into", "tanh_out"])
def test_a_dropped_clone_is_found_whatever_the_op_computes(name, version):
    result = check_case(ReinplaceReadsWhatItWrites, _clone_case(name, version), oracles=["aliasing", "semantics"])
    assert result.pair.pass_.reinplaced == 1
    (message,) = _messages(result)
    assert f"pmverify_testing.{name}.default) writes argument `out` (`x`) and reads argument `x` (`x`)" in message
    assert "aliasing" in result.judged
    # semantics only for the ops whose writes do not follow their reads (tanh_out is elementwise)
    assert bool(_messages(result, "semantics")) == (name != "tanh_out")


def test_the_same_reinplacing_of_a_clone_the_call_does_not_read_is_right():
    result = check_case(ReinplaceReadsWhatItWrites, _clone_case(source="t"), oracles=["aliasing", "semantics"])
    assert result.pair.pass_.reinplaced == 1 and result.ok, result.violations


def test_an_alias_the_original_graph_had_is_not_the_pass_doing():
    """``reverse_into(x, out=x)`` already in the graph (an in-place form): a pass that leaves it (and
    rewrites something else) is not flagged, although the call reads what it writes."""
    g = torch.fx.Graph()
    a = g.placeholder("a")
    x = _call(g, "x", aten.mul.Tensor, a, 2.0)
    _call(g, "reverse_into", op("reverse_into"), x, x)
    g.output((_call(g, "neg", aten.neg.default, x),))
    case = GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.rand(4, 3),)], form="inplace")
    assert [c[2:] for c in aliasing.aliased_calls(case.gm.graph)] == [("out", "x", "x", "x", "x")]

    def neg_to_mul(graph):
        for node in graph.find_nodes(op="call_function", target=aten.neg.default):
            node.target, node.args = aten.mul.Tensor, (node.args[0], -1.0)

    assert check_case(neg_to_mul, case, oracles=["aliasing"]).ok

    def rebuild_x(graph):  # the storage's allocation rebuilt under another name
        (x,) = [node for node in graph.nodes if node.name == "x"]
        with graph.inserting_after(x):
            twice = graph.call_function(aten.add.Tensor, (x.args[0], x.args[0]))
        x.replace_all_uses_with(twice)
        graph.erase_node(x)

    assert check_case(rebuild_x, case, oracles=["aliasing"]).ok

    def second_alias(graph):  # a second such call, on another storage, is the pass's
        (call,) = graph.find_nodes(op="call_function", target=op("reverse_into"))
        with graph.inserting_after(call):
            y = graph.call_function(aten.mul.Tensor, (call.args[0], 3.0))
            graph.call_function(op("reverse_into"), (y, y))

    assert [v.oracle for v in check_case(second_alias, case, oracles=["aliasing"]).violations] == ["aliasing"]


def _inplace_case(read_view: bool) -> GraphCase:
    g = torch.fx.Graph()
    a = g.placeholder("a")
    x = _call(g, "x", aten.mul.Tensor, a, 2.0)
    other = _call(g, "y", aten.mul.Tensor, a, 3.0)
    _call(g, "add_", aten.add_.Tensor, x, other)
    g.output((x,))
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.rand(4, 3),)], form="inplace")


@pytest.mark.parametrize("overlap", ["full", "partial"])
def test_elementwise_aten_ops_may_read_exactly_what_they_write(overlap):
    """``add_(x, x)`` reads each element before writing it (TensorIterator allows full overlap);
    ``add_(x[1:], x[:-1])`` reads rows it has written."""

    def read_x(graph):
        (add,) = graph.find_nodes(op="call_function", target=aten.add_.Tensor)
        x = add.args[0]
        if overlap == "full":
            add.args = (x, x)
            return
        with graph.inserting_before(add):
            head = graph.call_function(aten.slice.Tensor, (x, 0, 1, 4))
            tail = graph.call_function(aten.slice.Tensor, (x, 0, 0, 3))
        add.args = (head, tail)

    result = check_case(read_x, _inplace_case(False), oracles=["aliasing"])
    assert result.ok == (overlap == "full"), result.violations
    if overlap == "partial":
        assert (
            "aten.add_.Tensor) writes argument `self` (`slice_tensor`) and reads argument `other`"
            in (_messages(result)[0])
        )


@pytest.mark.parametrize("cloned", [True, False])
def test_auto_functionalized_is_judged_as_inductor_lowers_it(cloned):
    """An ``auto_functionalized`` node marked by Inductor's reinplacing (``only_clone_these_tensors``)
    writes the args it does not clone in place: ``reverse_into(x=x, out=x)`` is fine when ``out`` is
    cloned and reads what it writes when it is not."""

    def mark(graph):
        (af,) = graph.find_nodes(op="call_function", target=V1)
        clone = af.kwargs["out"]
        af.kwargs = {**af.kwargs, "out": af.kwargs["x"]}
        graph.erase_node(clone)
        af.meta["only_clone_these_tensors"] = ["out"] if cloned else []

    result = check_case(mark, _clone_case(), oracles=["aliasing"])
    assert result.ok == cloned, result.violations
    if not cloned:
        assert "only_clone_these_tensors=[]) writes argument `out` (`x`) and reads argument `x`" in _messages(result)[0]


def _inductor(*, remove_noop_clones: bool):
    """Inductor's reinplacing as ``post_grad_passes`` runs it: (``remove_noop_ops``,)
    ``reinplace_inplaceable_ops``, ``decompose_auto_functionalized``."""
    from torch._guards import detect_fake_mode
    from torch._inductor.fx_passes.post_grad import decompose_auto_functionalized, remove_noop_ops
    from torch._inductor.fx_passes.reinplace import reinplace_inplaceable_ops
    from torch._inductor.fx_utils import FakeTensorUpdater
    from torch._inductor.virtualized import V

    def inductor_reinplace(graph: torch.fx.Graph) -> None:
        mode = detect_fake_mode([node.meta.get("val") for node in graph.nodes])
        with V.set_fake_mode(mode):
            if remove_noop_clones:
                remove_noop_ops(graph)
            reinplace_inplaceable_ops(FakeTensorUpdater(graph.owning_module), graph)
            decompose_auto_functionalized(graph)

    return inductor_reinplace


@settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(with_mutating_custom_ops(qk_norm_cases()))
def test_quiet_on_inductors_reinplacing(case):
    result = check_case(_inductor(remove_noop_clones=False), case, oracles=["aliasing", "semantics"])
    assert result.ok, result.violations


@pytest.mark.parametrize("version", [1, 2])
def test_quiet_on_inductors_reinplacing_examples(version):
    result = check_case(
        _inductor(remove_noop_clones=False), _clone_case(version=version), oracles=["aliasing", "semantics"]
    )
    assert result.ok, result.violations


@pytest.mark.parametrize("version", [1, 2])
def test_finds_inductors_noop_clone_removal_before_reinplacing(version):
    """A finding on Inductor itself (torch 2.13): ``remove_noop_ops`` drops ``y = x.clone()`` (same
    layout), then ``reinplace_inplaceable_ops`` lets the op write ``x`` (nothing reads it later)
    without looking at the op's own read of ``x``: ``cummean_into(x, out=x)``. Under torch.compile:
    ``def f(a): x = a * 2; y = x.clone(); cummean_into(x, y); return y`` on ``a = randn(6, 3)``
    differs from eager by 1.24 (an input ``x`` is not affected: it is read by the caller)."""
    result = check_case(
        _inductor(remove_noop_clones=True), _clone_case("cummean_into", version), oracles=["aliasing", "semantics"]
    )
    (message,) = _messages(result)
    assert "pmverify_testing.cummean_into.default) writes argument `out` (`x`) and reads argument `x` (`x`)" in message
    assert _messages(result, "semantics")


_LIB = None


def _add_flipped(x: torch.Tensor, y: torch.Tensor) -> None:
    x.add_(y.flip(0))


def _alias_ops():
    """``shared(Tensor(a!) x, Tensor(a) y)`` (the schema allows y to alias x) and ``apart(Tensor(a!)
    x, Tensor y)``, both ``x += y.flip(0)``; defined once per process."""
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library("pmverify_alias_test", "FRAGMENT")
        _LIB.define("shared(Tensor(a!) x, Tensor(a) y) -> ()")
        _LIB.define("apart(Tensor(a!) x, Tensor y) -> ()")
        for name in ("shared", "apart"):
            _LIB.impl(name, _add_flipped, "CompositeExplicitAutograd")
    return torch.ops.pmverify_alias_test.shared.default, torch.ops.pmverify_alias_test.apart.default


@pytest.mark.parametrize("allowed", [True, False])
def test_a_schema_that_shares_the_alias_set_allows_the_read(allowed):
    shared, apart = _alias_ops()
    g = torch.fx.Graph()
    a = g.placeholder("a")
    x = _call(g, "x", aten.mul.Tensor, a, 2.0)
    y = _call(g, "y", aten.mul.Tensor, a, 3.0)
    _call(g, "call", shared if allowed else apart, x, y)
    g.output((x,))
    case = GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.rand(4, 3),)], form="inplace")

    def read_x(graph):
        (call,) = [node for node in graph.nodes if node.name == "call"]
        call.args = (call.args[0], call.args[0])

    result = check_case(read_x, case, oracles=["aliasing"])
    assert result.ok == allowed, result.violations


def _two_views_case(views: str) -> GraphCase:
    """``qkv = a @ w`` ([3, 8]) and ``fused_add_rms_norm`` on two views of it, functionalized as
    vLLM's graphs hold rotary embedding's ``query`` / ``key``: ``auto_functionalized`` on the views,
    its new values scattered back into ``qkv``. ``views``: ``split`` (``split_with_sizes``, disjoint
    halves), ``split overlapping`` (its first half and ``[:, 2:6]``), ``halves`` (disjoint slices), ``interleaved`` (``[:, 0::2]``, ``[:, 1::2]``: disjoint,
    their address ranges meet) or ``overlapping`` (``[:, 0:4]``, ``[:, 2:6]``)."""
    from _fused_norm_ops import AF, ops

    g = torch.fx.Graph()
    a, w, weight = g.placeholder("a"), g.placeholder("w"), g.placeholder("weight")
    qkv = _call(g, "qkv", aten.mm.default, a, w)
    if views == "split":
        split = _call(g, "split", aten.split_with_sizes.default, qkv, [4, 4], -1)
        q, k = (_call(g, f"part{i}", operator.getitem, split, i) for i in range(2))
        ranges = [(0, 4, 1), (4, 8, 1)]
    elif views == "split overlapping":  # a list of views is followed to its storage too
        q = _call(g, "part0", operator.getitem, _call(g, "split", aten.split_with_sizes.default, qkv, [4, 4], -1), 0)
        k = _call(g, "part1", aten.slice.Tensor, qkv, 1, 2, 6)
        ranges = [(0, 4, 1), (2, 6, 1)]
    else:
        ranges = {"halves": [(0, 4, 1), (4, 8, 1)], "interleaved": [(0, 8, 2), (1, 8, 2)]}.get(
            views, [(0, 4, 1), (2, 6, 1)]
        )
        q, k = (_call(g, f"part{i}", aten.slice.Tensor, qkv, 1, *r) for i, r in enumerate(ranges))
    af = _call(g, "af", AF, ops().fused_add_rms_norm.default, input=q, residual=k, weight=weight, epsilon=1e-6)
    scattered = qkv
    for i, r in enumerate(ranges):
        value = _call(g, f"new{i}", operator.getitem, af, i + 1)
        scattered = _call(g, f"scatter{i}", aten.slice_scatter.default, scattered, value, 1, *r)
    g.output((scattered,))
    gen = torch.Generator().manual_seed(0)
    inputs = [(torch.randn(3, 5, generator=gen), torch.randn(5, 8, generator=gen), torch.randn(4, generator=gen))]
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), inputs)


def _defunctionalize_views(graph: torch.fx.Graph) -> None:
    """vLLM's ``FixFunctionalizationPass`` on rotary embedding of two views of ``qkv``: the op called
    in place on the views, the scatters of its new values replaced by ``qkv``."""
    from _fused_norm_ops import AF

    (af,) = graph.find_nodes(op="call_function", target=AF)
    qkv = next(n for n in graph.nodes if n.name == "qkv")
    with graph.inserting_before(af):
        graph.call_function(af.args[0], (), dict(af.kwargs))
    scatters = [n for n in graph.nodes if n.target is aten.slice_scatter.default]
    scatters[-1].replace_all_uses_with(qkv)
    for node in [*reversed(scatters), *af.users, af]:
        graph.erase_node(node)


@pytest.mark.parametrize("views", ["split", "halves", "interleaved", "overlapping", "split overlapping"])
def test_a_call_writing_disjoint_views_of_one_storage_is_quiet_and_overlapping_ones_caught(views):
    """The oracle compares the memory a read and a write cover, not their storage: vLLM's
    defunctionalized rotary embedding writes ``query`` and ``key``, two disjoint views of ``qkv``."""
    result = check_case(_defunctionalize_views, _two_views_case(views), oracles=["aliasing", "semantics"])
    if "overlapping" in views:
        (message,) = _messages(result)
        assert "writes argument `input` (`part0`) and reads argument `residual` (`part1`)" in message
    else:
        assert result.ok, result.violations


@st.composite
def _view_pairs(draw):
    """A base shape and two chains of slices (start, stop, step) and transposes of it."""
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))

    def chain():
        steps = []
        for _ in range(draw(st.integers(0, 3))):
            if draw(st.booleans()) and len(shape) > 1:
                steps.append(("t", draw(st.integers(0, len(shape) - 1))))
            else:
                steps.append(("s", draw(st.integers(0, len(shape) - 1)), draw(st.integers(0, 5)),
                              draw(st.integers(0, 6)), draw(st.integers(1, 3))))  # fmt: skip
        return steps

    return shape, chain(), chain()


def _apply(base: torch.Tensor, steps) -> torch.Tensor:
    for step in steps:
        if step[0] == "t":
            base = base.transpose(0, step[1])
        else:
            _, dim, start, stop, stride = step
            base = base[(slice(None),) * dim + (slice(start, stop, stride),)]
    return base


def _disjoint_agrees(shape, first, second) -> None:
    """``aliasing._disjoint`` of two chains of view nodes on one graph input is True exactly when
    no element of the input is in both views, by the elements' values in ``arange``; ``covers``
    exactly when every element of the second is in the first."""
    base = torch.arange(torch.Size(shape).numel()).reshape(shape)
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = base
    nodes = []
    for steps in (first, second):
        node = x
        for step in steps:
            if step[0] == "t":
                node = g.call_function(aten.transpose.int, (node, 0, step[1]))
            else:
                node = g.call_function(aten.slice.Tensor, (node, *step[1:]))
        nodes.append(node)
    a, b = (_apply(base, steps) for steps in (first, second))
    shared = set(a.flatten().tolist()) & set(b.flatten().tolist())
    assert aliasing._disjoint(*nodes) == (not shared), (a, b)
    # and mutation_barriers' cover test: every element of b is one of a
    covered = set(b.flatten().tolist()) <= set(a.flatten().tolist())
    assert _layout.covers(*(_layout.layout(n) for n in nodes)) == covered, (a, b)


@given(_view_pairs())
@example(([3, 8], [("s", 1, 0, 8, 2)], [("s", 1, 1, 8, 2)]))  # interleaved: ranges meet, disjoint
@example(([4, 3], [("s", 0, 1, 4, 1)], [("s", 0, 0, 3, 1)]))  # x[1:], x[:-1]: partial overlap
@example(([3, 4], [("t", 1), ("s", 0, 0, 2, 1)], [("s", 1, 2, 4, 1)]))  # transposed, disjoint
@example(([3, 8], [("s", 1, 0, 8, 2)], [("s", 1, 2, 7, 4)]))  # every 4th column among the even ones
def test_disjoint_is_exact_on_views(pair):
    _disjoint_agrees(*pair)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, database=None)
@given(_view_pairs())
def test_disjoint_is_exact_on_views_over_300_cases(pair):
    _disjoint_agrees(*pair)
