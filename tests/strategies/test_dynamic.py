"""``dynamic=`` of fx_graphs, like, with_mutations and with_mutating_custom_ops: symbolic cases as
torch.compile(dynamic=True) gives a pass its graph, checked clean with correct passes, a pass that
bakes a hint caught; static draws unchanged."""

from __future__ import annotations

import pytest
import torch
from _minimal import minimal, rejections
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify.strategies import Dim, fx_graphs, like, with_mutating_custom_ops, with_mutations

aten = torch.ops.aten
_FEW = settings(max_examples=6, deadline=None, database=None, suppress_health_check=list(HealthCheck))


class Identity:
    def __call__(self, graph: torch.fx.Graph) -> None:
        pass


class ViewToReshape:
    """Correct on symbolic graphs: ``view`` -> ``reshape`` with the same (SymInt) sizes."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.find_nodes(op="call_function", target=aten.view.default)):
            with graph.inserting_before(node):
                new = graph.call_function(aten.reshape.default, node.args)
            new.meta = dict(node.meta)
            node.replace_all_uses_with(new)
            graph.erase_node(node)


class BakesHint:
    """Wrong on symbolic graphs: writes a view's SymInt sizes as the ints of their hints."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in graph.find_nodes(op="call_function", target=aten.view.default):
            size = [int(s.meta["val"]) if isinstance(s, torch.fx.Node) else s for s in node.args[1]]
            node.args = (node.args[0], size)


def _symint_view(case) -> bool:
    return case.dynamic and any(
        any(isinstance(s, torch.fx.Node) for s in node.args[1])
        for node in case.gm.graph.find_nodes(op="call_function", target=aten.view.default)
    )


def _assert_symbolic(case) -> None:
    """Sym placeholders first, named and valued as the symbols; symbolic meta vals; mutation sites
    and input_dims consistent with the graph."""
    placeholders = case.gm.graph.find_nodes(op="placeholder")
    names = [s.name for s in case.symbols]
    assert [p.name for p in placeholders[: len(names)]] == names
    assert list(case.input_dims[: len(names)]) == names
    for placeholder, symbol in zip(placeholders, case.symbols, strict=False):
        assert isinstance(placeholder.meta["val"], torch.SymInt)
        assert case.inputs[0][names.index(symbol.name)] == symbol.hint
        assert symbol.min <= min(symbol.sizes) and max(symbol.sizes) <= symbol.max and symbol.hint in symbol.sizes
    assert any(
        isinstance(val, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in val.shape)
        for val in (n.meta.get("val") for n in case.gm.graph.nodes)
    )
    nodes = {n.name for n in case.gm.graph.nodes}
    assert all(site.node in nodes and site.mutated in nodes for site in case.mutations)


@pytest.mark.parametrize(
    ("make", "value"),
    [
        (fx_graphs, 1),
        (fx_graphs, None),
        (fx_graphs, "hidden"),
        (fx_graphs, []),
        (fx_graphs, ["tokens", 3]),
        (lambda dynamic: with_mutations(fx_graphs(), dynamic=dynamic), "rows"),
        (lambda dynamic: with_mutations(fx_graphs(), dynamic=dynamic), 2.0),
        (lambda dynamic: with_mutating_custom_ops(fx_graphs(), dynamic=dynamic), ("tokens", None)),
        (lambda dynamic: like((torch.empty(4, 8),), vary={"tokens": [(0, 0)]}, dynamic=dynamic), "hidden"),
        (lambda dynamic: like((torch.empty(4, 8),), vary={"t": [(0, 0)], "h": [(0, 1)]}, dynamic=dynamic), 1),
        (lambda dynamic: like((torch.empty(4, 8),), vary={Dim("tokens", max=8): [(0, 0)]}, dynamic=dynamic), "tokens"),
        (lambda dynamic: like((torch.empty(4, 22),), vary={"tokens": [(0, 0)]}, dynamic=dynamic), "tokens"),
        (lambda dynamic: like((torch.empty(4, 8),), dynamic=dynamic), "tokens"),
    ],
)
def test_bad_dynamic_is_refused(make, value):
    with pytest.raises(InvalidArgument, match="dynamic="):
        make(dynamic=value)


def _drawn(strategy, n=8):
    seen = []

    @settings(max_examples=n, database=None, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def record(case):
        seen.append((case.gm.code, [tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in case.inputs[0]]))

    record()
    return seen


def test_dynamic_false_draws_as_before():
    assert _drawn(fx_graphs(dynamic=False)) == _drawn(fx_graphs())
    assert repr(fx_graphs(dynamic=False)) == repr(fx_graphs())
    assert _drawn(with_mutations(fx_graphs(), dynamic=None)) == _drawn(with_mutations(fx_graphs()))


def test_minimal_dynamic_graph_is_one_op_on_a_token_row():
    case = minimal(fx_graphs(dynamic=True), lambda c: c.dynamic)
    assert sum(n.op == "call_function" for n in case.gm.graph.nodes) == 1
    assert [s.name for s in case.symbols] == ["s0"] and case.input_dims == ("s0", ("s0",))
    assert case.inputs[0][1].shape == (11,)


def test_symint_size_argument_checks_clean_and_a_baked_hint_is_caught():
    case = minimal(fx_graphs(dynamic="tokens", ops=["view", "neg"], level="pre_grad"), _symint_view)
    _assert_symbolic(case)
    assert sum(n.op == "call_function" for n in case.gm.graph.nodes) <= 2
    assert pmverify.check_case(Identity(), case).ok
    assert pmverify.check_case(ViewToReshape(), case).ok
    assert not pmverify.check_case(BakesHint(), case).ok


@_FEW
@given(fx_graphs(dynamic="tokens", max_nodes=5))
def test_fx_graphs_tokens_are_symbolic_and_check_clean(case):
    if case.dynamic:
        _assert_symbolic(case)
        assert case.symbols[0].name == "s0" and case.symbols[0].hint == 11
    result = pmverify.check_case(ViewToReshape(), case)
    assert result.ok, result.violations


@_FEW
@given(with_mutations(fx_graphs(dynamic="tokens", max_nodes=4), min_mutations=1))
def test_with_mutations_keeps_a_symbolic_case_symbolic(case):
    assert case.form == "inplace" and case.mutations
    if case.dynamic:
        _assert_symbolic(case)
        assert case.source is not None and not case.source.dynamic
        assert all(not node.users for node in case.gm.graph.nodes if node.name in {m.node for m in case.mutations})
    result = pmverify.check_case(Identity(), case)
    assert result.ok, result.violations


@_FEW
@given(with_mutating_custom_ops(fx_graphs(dynamic="tokens", max_nodes=4)))
def test_with_mutating_custom_ops_keeps_a_symbolic_case_symbolic(case):
    assert any(isinstance(n.target, torch._ops.HigherOrderOperator) for n in case.gm.graph.nodes)
    if case.dynamic:
        _assert_symbolic(case)
    result = pmverify.check_case(Identity(), case)
    assert result.ok, result.violations


def test_wrapper_dynamic_false_makes_a_symbolic_case_static():
    case = minimal(with_mutations(fx_graphs(dynamic="tokens"), dynamic=False))
    assert not case.dynamic and not any(n.name == "s0" for n in case.gm.graph.nodes)


def test_like_draws_named_symbols_at_the_hints():
    example = (torch.empty(4, 8), torch.empty(8), 1e-6)
    vary = {"tokens": [(0, 0)], "hidden": [(0, 1), (1, 0)]}
    for x, w, _ in (minimal(like(example, vary=vary, dynamic=["hidden", "tokens"]), lambda v: v[0].numel() > 0),):
        assert x.shape == (11, 13) and w.shape == (13,)
    shapes = set()

    @settings(max_examples=20, database=None, deadline=None)
    @given(like(example, vary=vary, dynamic=True))
    def record(inputs):
        shapes.add(tuple(inputs[0].shape))
        assert all(side in (11, 13) or side % 11 and side % 13 for side in inputs[0].shape)

    record()
    assert any(11 in s for s in shapes)


@pytest.mark.parametrize(
    "strategy",
    [
        lambda: fx_graphs(dynamic=True),
        lambda: with_mutations(fx_graphs(dynamic="tokens", max_nodes=4)),
        lambda: like((torch.empty(4, 8), torch.empty(8)), vary={"tokens": [(0, 0)]}, dynamic="tokens"),
    ],
)
def test_no_dynamic_draw_is_rejected(strategy):
    rejected, valid = rejections(strategy(), 15)
    assert valid == 15 and rejected == 0


def _symbolic_val(node: torch.fx.Node) -> bool:
    vals = node.meta.get("val")
    return any(
        isinstance(v, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in v.shape)
        for v in (vals if isinstance(vals, (list, tuple)) else [vals])
    )


@pytest.mark.parametrize("wrap", [with_mutations, with_mutating_custom_ops])
def test_minimal_symbolic_mutation_writes_a_symbolic_tensor(wrap):
    kwargs = {"min_mutations": 1} if wrap is with_mutations else {}  # one mutation at least, to look at
    case = minimal(wrap(fx_graphs(dynamic="tokens"), **kwargs), lambda c: c.dynamic)
    _assert_symbolic(case)
    assert case.mutations
    by_name = {n.name: n for n in case.gm.graph.nodes}
    assert all(_symbolic_val(by_name[site.node]) for site in case.mutations)
    if case.form == "inplace":  # readers still read the written tensor, not the in-place op
        assert all(not by_name[site.node].users for site in case.mutations)
    assert pmverify.check_case(Identity(), case).ok
