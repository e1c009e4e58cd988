"""expr_cases: instances of a PatternExpr drawn from the expression itself."""

from __future__ import annotations

import operator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch._inductor import pattern_matcher as pm
from torch._inductor.pattern_matcher import MULTIPLE, Arg, CallFunction, Ignored, KeywordArg, ListOf

from pmverify.strategies._expr_instances import ExprUnsupported, expr_cases, ground_truth, pattern_targets

aten = torch.ops.aten

MM_ADD = CallFunction(aten.add.Tensor, CallFunction(aten.mm.default, Arg(), Arg()), KeywordArg("inp"))
_SCALED = CallFunction(aten.mul.Tensor, KeywordArg("inp"), KeywordArg("other"), _users=MULTIPLE)
SOFTMAX_HEAD = CallFunction(
    aten.sub.Tensor, _SCALED, CallFunction(aten.amax.default, _SCALED, KeywordArg("dim"), KeywordArg("keepdim"))
)
SPLIT_CAT = CallFunction(
    aten.cat.default,
    ListOf(CallFunction(operator.getitem, CallFunction(aten.split.Tensor, Arg(), Arg(), _users=MULTIPLE), Ignored())),
    Ignored(),
)
VIEW_PAIR = CallFunction(
    aten.view.default, CallFunction(aten.view.default, KeywordArg("arg"), KeywordArg("s1")), KeywordArg("s2")
)
QUANT = (
    CallFunction(
        aten.mm.default,
        KeywordArg("x"),
        CallFunction(
            torch.ops.quantized_decomposed.dequantize_per_tensor.default,
            KeywordArg("w"),
            KeywordArg("scale"),
            KeywordArg("zp"),
            KeywordArg("qmin"),
            KeywordArg("qmax"),
            KeywordArg("dtype"),
        ),
    )
    if hasattr(torch.ops, "quantized_decomposed")
    else None
)

PATTERNS = {"mm_add": MM_ADD, "softmax_head": SOFTMAX_HEAD, "split_cat": SPLIT_CAT, "view_pair": VIEW_PAIR}


def _root(case):
    output = next(n for n in case.gm.graph.nodes if n.op == "output")
    return output.args[0]


def _instance_root(case, pattern):
    names = case.planted[0].nodes
    nodes = {n.name: n for n in case.gm.graph.nodes}
    target = pattern.fns
    return next(nodes[name] for name in reversed(names) if nodes[name].target in target)


@pytest.mark.parametrize("name", sorted(PATTERNS))
@settings(max_examples=15)
@given(data=st.data())
def test_every_instance_runs_and_the_matcher_mostly_matches_it(name, data):
    pattern = PATTERNS[name]
    case = data.draw(expr_cases(pattern, name=name))
    case.gm(*case.inputs[0])  # runs eagerly: shapes valid by construction
    assert case.planted[0].pattern == name
    assert case.planted[0].reason.split(",")[0] in ("matched", "pattern", "extra_check")


@pytest.mark.parametrize("name", ["mm_add", "softmax_head", "view_pair"])
def test_the_matcher_matches_plain_instances(name):
    """Without near misses, an instance of a pattern with no _users=1 intermediate shared is matched."""
    pattern = PATTERNS[name]
    reasons = []

    @settings(max_examples=20, database=None)
    @given(expr_cases(pattern, near_misses=False))
    def collect(case):
        reasons.append(case.planted[0].reason)

    collect()
    assert reasons.count("matched") >= len(reasons) // 2, reasons


@settings(max_examples=10)
@given(expr_cases(SOFTMAX_HEAD))
def test_a_repeated_expression_is_one_node_and_a_keyword_one_value(case):
    nodes = {n.name: n for n in case.gm.graph.nodes}
    muls = [nodes[n] for n in case.planted[0].nodes if nodes[n].target is aten.mul.Tensor]
    assert len(muls) == 1  # _SCALED appears twice in the pattern: one node
    sub = next(nodes[n] for n in case.planted[0].nodes if nodes[n].target is aten.sub.Tensor)
    assert sub.args[0] is muls[0] and sub.args[1].args[0] is muls[0]


@settings(max_examples=10)
@given(expr_cases(SPLIT_CAT, near_misses=False))
def test_a_list_of_getitems_takes_the_pieces_of_one_split(case):
    nodes = {n.name: n for n in case.gm.graph.nodes}
    cat = next(nodes[n] for n in case.planted[0].nodes if nodes[n].target is aten.cat.default)
    parents = {piece.args[0] for piece in cat.args[0]}
    assert len(parents) == 1


def test_an_optional_argument_the_pattern_does_not_bind_is_set_sometimes():
    details = []

    @settings(max_examples=40, database=None)
    @given(expr_cases(MM_ADD))
    def collect(case):
        details.append(case.planted[0].detail or "")

    collect()
    assert any("alpha=" in d and "does not bind" in d for d in details), details


@settings(max_examples=8)
@given(expr_cases(MM_ADD, near_miss="optional_arg"))
def test_near_miss_optional_arg_sets_one_on_each_call_that_has_one(case):
    # add.Tensor's alpha is the one optional argument of add(mm(a, b), c) the pattern does not bind: set,
    # on an instance the matcher matches, whose floating inputs hold no 0 (an alpha on zeros shows nothing)
    instance = case.planted[0]
    assert instance.applicable_near_misses == ("optional_arg",)
    assert instance.reason == "matched, optional_arg" and "alpha=" in instance.detail
    assert all(bool((x != 0).all()) for x in case.inputs[0] if x.is_floating_point())


FULL_CUMSUM = CallFunction(
    aten.cumsum.default,
    CallFunction(aten.full.default, KeywordArg("shape"), KeywordArg("fill_value"), dtype=KeywordArg("dtype")),
    KeywordArg("dim"),
)


@settings(max_examples=15)
@given(expr_cases(FULL_CUMSUM, near_misses=False))
def test_a_factory_s_dtype_is_never_none_as_in_a_traced_graph(case):
    (full,) = [n for n in case.gm.graph.nodes if n.target is aten.full.default]
    assert isinstance(full.kwargs["dtype"], torch.dtype)


@settings(max_examples=15)
@given(expr_cases(MM_ADD, dynamic="tokens"))
def test_dynamic_tokens_makes_the_rows_symbolic_and_keeps_the_instance(case):
    names = {n.name for n in case.gm.graph.nodes}
    assert set(case.planted[0].nodes) <= names
    if case.symbols:  # (a case whose rows were not drawn at the hint stays static)
        assert [s.name for s in case.symbols] == ["s0"] and case.inputs[0][0] == 11


TORCH_SPLIT_CAT = CallFunction(
    torch.cat, ListOf(CallFunction(operator.getitem, CallFunction(torch.split, Arg(), Arg()), Ignored())), Ignored()
)


@settings(max_examples=10)
@given(expr_cases(TORCH_SPLIT_CAT, dynamic=True))
def test_a_pre_grad_instance_stays_static_under_dynamic(case):
    # torch.split / torch.cat (a pre-grad graph): a symbolic trace would turn them into ATen ops
    assert not case.symbols
    assert any(n.target is torch.cat for n in case.gm.graph.nodes)


def test_near_miss_other_than_optional_arg_is_refused():
    with pytest.raises(InvalidArgument, match="near_miss='dtype'"):
        expr_cases(MM_ADD, near_miss="dtype").example()


def test_frozen_leaves_are_get_attr_constants():
    kinds = set()

    @settings(max_examples=15, database=None)
    @given(expr_cases(MM_ADD, frozen=True))
    def collect(case):
        kinds.update(n.op for n in case.gm.graph.nodes)
        case.gm(*case.inputs[0])

    collect()
    assert "get_attr" in kinds


@pytest.mark.skipif(QUANT is None, reason="quantized_decomposed ops are not registered")
@settings(max_examples=10)
@given(expr_cases(QUANT))
def test_dequantize_arguments_agree(case):
    nodes = {n.name: n for n in case.gm.graph.nodes}
    dq = next(nodes[n] for n in case.planted[0].nodes if "dequantize" in str(nodes[n].target))
    q_input, _, _, qmin, qmax, dtype = dq.args
    assert q_input.meta["val"].dtype == dtype
    assert (qmin, qmax) == (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
    case.gm(*case.inputs[0])


def test_ground_truth_runs_the_extra_check():
    seen = []

    @settings(max_examples=5, database=None)
    @given(expr_cases(MM_ADD, extra_check=lambda match: False, near_misses=False))
    def collect(case):
        seen.append(case.planted[0].reason)

    collect()
    assert set(seen) <= {"extra_check", "pattern"} and "extra_check" in seen


def test_pattern_targets_names_the_calls_outermost_first():
    assert pattern_targets(MM_ADD)[:2] == ["aten.add.Tensor", "aten.mm.default"]


def test_a_pattern_class_it_cannot_draw_is_named():
    class Odd(pm.PatternExpr):
        def _match(self, node, ctx):  # pragma: no cover - never matched
            return pm.FailedMatch("odd")

    with pytest.raises(ExprUnsupported, match="Odd"):
        expr_cases(Odd()).example()


def test_ground_truth_reports_a_pattern_mismatch():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(2, 2)
    node = graph.call_function(aten.neg.default, (x,))
    assert ground_truth(MM_ADD, node, None) == ("pattern", None)
