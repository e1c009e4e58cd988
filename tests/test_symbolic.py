"""symbolize(): a drawn case traced again with symbolic sizes; running it at other sizes; the
oracles' view of a pass that bakes a symbolic size's hint into the graph."""

import dataclasses

import pytest
import torch

import pmverify
from pmverify import GraphCase, PlantedInstance
from pmverify._shapes.sizes import CompileRange, applies_at, case_at, inputs_at, size_points, symbolic_inputs
from pmverify._shapes.symbolic import SymbolizeError, lift, static_source, symbolize, symbolize_like

aten = torch.ops.aten


def _case(rows: int = 11, slice_end: int = 9) -> GraphCase:
    """x0 [rows, 8] -> view [rows, 2, 4] -> sum(2) -> (slice rows 0..slice_end, (sum + full([rows, 2])) * x1)"""
    g = torch.fx.Graph()
    x, w = g.placeholder("x0"), g.placeholder("x1")
    view = g.call_function(aten.view.default, (x, [rows, 2, 4]))
    total = g.call_function(aten.sum.dim_IntList, (view, [2]))
    part = g.call_function(aten.slice.Tensor, (total, 0, 0, slice_end))
    ones = g.call_function(aten.full.default, ([rows, 2], 1.0), {"dtype": torch.float32, "pin_memory": False})
    out = g.call_function(aten.mul.Tensor, (g.call_function(aten.add.Tensor, (total, ones)), w))
    g.output((part, out))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    planted = (PlantedInstance("view_sum", (view.name, total.name), True),)
    return GraphCase(gm, [(torch.randn(rows, 8), torch.randn(2))], planted=planted, label="hand")


def test_lift_writes_multiples_of_a_hint_as_expressions_of_its_symbol():
    s0, s1 = torch.tensor(0), torch.tensor(1)  # stand-ins that multiply: the arithmetic is what counts
    assert lift(22, {11: 5}) == 10 and lift([11, 4, 143], {11: 5, 13: 3}) == [5, 4, 15]
    assert lift(8, {11: s0}) == 8 and lift(True, {11: s1}) is True and lift(0, {11: 5}) == 0
    assert lift(9223372036854775807, {11: 5}) == 9223372036854775807


def test_symbolize_gives_sym_placeholders_symint_arguments_and_a_range_from_the_guards():
    case = symbolize(_case())
    placeholders = case.gm.graph.find_nodes(op="placeholder")
    assert [n.name for n in placeholders] == ["s0", "x0", "x1"]
    assert case.inputs[0][0] == 11 and case.input_dims == ("s0", ("s0", None), None)
    view = next(n for n in case.gm.graph.nodes if n.target is aten.view.default)
    full = next(n for n in case.gm.graph.nodes if n.target is aten.full.default)
    assert view.args[1][0] is placeholders[0] and full.args[0][0] is placeholders[0]
    assert isinstance(view.meta["val"].shape[0], torch.SymInt)
    (symbol,) = case.symbols
    # slice(.., 0, 9) of s0 rows guards s0 >= 9: the range starts there
    assert (symbol.name, symbol.hint, symbol.min, symbol.max) == ("s0", 11, 9, 64)
    assert symbol.sizes == (11, 9, 64) and case.dynamic
    assert case.planted[0].nodes == (view.name, next(n.name for n in view.users))
    assert static_source(case).gm is _case_gm(case)


def _case_gm(case):
    return case.source.gm


@pytest.mark.parametrize("slice_end", [3, 9])
def test_the_symbolic_graph_runs_at_every_size_point_like_the_static_one_at_its_size(slice_end):
    case = symbolize(_case(slice_end=slice_end))
    assert [p["s0"] for p in size_points(case)] == list(case.symbols[0].sizes)
    for sizes in size_points(case):
        sized = case_at(case, sizes)
        static = _case(rows=sizes["s0"], slice_end=slice_end)
        got, want = sized.gm(*sized.inputs[0]), static.gm(*sized.inputs[0][1:])
        assert [t.shape for t in got] == [t.shape for t in want]
        torch.testing.assert_close(list(got), list(want))


def test_inputs_at_repeats_the_drawn_rows_and_refuses_a_size_outside_the_range():
    case = symbolize(_case())
    s0, x, w = inputs_at(case, {"s0": 13})
    assert s0 == 13 and x.shape == (13, 8) and torch.equal(x[11:], x[:2]) and torch.equal(w, case.inputs[0][2])
    with pytest.raises(ValueError, match="s0=3 is outside"):
        inputs_at(case, {"s0": 3})


def test_inputs_at_refuses_sizes_where_an_index_tensor_indexes_an_empty_dim():
    # index_put_(x[10:], [i], v): i indexes a dim of s0 - 10 rows, empty at the range's low end
    g = torch.fx.Graph()
    x, i, v = g.placeholder("x0"), g.placeholder("x1"), g.placeholder("x2")
    part = g.call_function(aten.slice.Tensor, (x, 0, 10, 9223372036854775807))
    g.call_function(aten.index_put_.default, (part, [i], v))
    g.output((g.call_function(aten.mul.Tensor, (x, 2.0)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    case = symbolize(GraphCase(gm, [(torch.randn(11), torch.tensor([0]), torch.randn(1))]))
    assert case.symbols[0].min == 10
    assert inputs_at(case, {"s0": 11})[2].item() == 0
    with pytest.raises(ValueError, match="input 2 indexes a dim of size s0 - 10 = 0"):
        inputs_at(case, {"s0": 10})


def test_symbolic_inputs_are_fake_tensors_of_symbolic_sizes_in_a_fresh_shape_env():
    mode, (s0, x, w) = symbolic_inputs(symbolize(_case()))
    assert isinstance(s0, torch.SymInt) and x.shape[0] is not None and isinstance(x.shape[0], torch.SymInt)
    assert x.shape[1] == 8 and w.shape == (2,) and not isinstance(w.shape[0], torch.SymInt)
    assert mode.shape_env is not None


def test_a_symbol_the_trace_specialises_is_dropped():
    # view(x, [11 * 8]) of an [11, 8] input is fine; a static size 11 from cat([8], [3]) is not a symbol
    g = torch.fx.Graph()
    a, b = g.placeholder("x0"), g.placeholder("x1")
    cat = g.call_function(aten.cat.default, ([a, b],))
    g.output((g.call_function(aten.view.default, (cat, [11, 1])),))
    case = GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(8), torch.randn(3))])
    assert symbolize(case) is case  # no input dim is 11, and the trace guards the view size: nothing symbolic


def test_bad_arguments_are_refused_naming_them():
    case = _case()
    with pytest.raises(SymbolizeError, match="prime"):
        symbolize(case, {"s0": 12})
    with pytest.raises(SymbolizeError, match="dims"):
        symbolize(case, dims=[None])
    with pytest.raises(SymbolizeError, match="already symbolic"):
        symbolize(symbolize(case))


def test_symbolize_like_keeps_the_names_hints_and_drawn_sizes():
    case = symbolize(_case())
    drawn = dataclasses.replace(case, symbols=(dataclasses.replace(case.symbols[0], sizes=(11, 9, 64, 30)),))
    again = symbolize_like(static_source(drawn), drawn)
    assert again.symbols == drawn.symbols


class _Baking:
    """Writes each view's symbolic size back as the int it is at the hint (a guard Eq(s0, 11))."""

    def __call__(self, graph):
        for node in graph.find_nodes(op="call_function", target=aten.view.default):
            size = [int(v.meta["val"]) if isinstance(v, torch.fx.Node) else v for v in node.args[1]]
            node.args = (node.args[0], size)


class _Reshaping:
    """view -> reshape: correct at every size."""

    def __call__(self, graph):
        for node in graph.find_nodes(op="call_function", target=aten.view.default):
            with graph.inserting_before(node):
                new = graph.call_function(aten.reshape.default, node.args)
            node.replace_all_uses_with(new)
            graph.erase_node(node)


def test_a_correct_rewrite_of_a_symbolic_graph_is_quiet_and_a_baked_hint_is_found_at_other_sizes():
    case = symbolize(_case())
    assert pmverify.check_case(_Reshaping(), case).ok
    violations = pmverify.check_case(_Baking(), case).violations
    messages = [v.message for v in violations]
    assert any(v.oracle == "semantics" and v.message.startswith("at s0=9:") for v in violations), messages
    assert any("added guards Eq(s0, 11)" in m for m in messages), messages
    assert any("output 1 has sizes [s0, 2] before the pass, [11, 2] after" in m for m in messages), messages


class _Ranged(_Baking):
    def __init__(self, end):
        self.end = end

    def is_applicable_for_range(self, compile_range):
        return compile_range.end <= self.end


def test_semantics_judges_only_the_sizes_the_pass_says_it_applies_to():
    assert applies_at(object(), 5) and not applies_at(_Ranged(4), 5) and 3 in CompileRange(2, 3)
    case = symbolize(_case())
    hint_only = [v for v in pmverify.check_case(_Ranged(11), case).violations if v.oracle == "semantics"]
    assert hint_only and all(v.message.startswith("at s0=9:") for v in hint_only)
