"""qk_norm_cases: planted QK norms are rewritten exactly when they must be, bitwise exactly;
near misses of every kind are left alone; bad arguments; the minimal example."""

import dataclasses
import re

import pytest
import torch
from _minimal import rejections
from hypothesis import Phase, find, given, settings
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify._case import GraphCase
from pmverify._engine.apply import apply_direct
from pmverify._shapes.symbolic import symbolize
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.fusions.qk_norm.testing.cases import QK_NORM_FORMS, QK_NORM_NEAR_MISS_KINDS, build_case, make_layer
from pmverify.fusions.qk_norm.testing.layers import Source

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _check_rewritten_as_planted(case: GraphCase) -> None:
    """The shipped pass rewrites every must-match instance, no near miss, and bitwise exactly."""
    run = apply_direct(QKNormFusionPass, case)
    assert run.error is None, run.error
    assert run.matched_count == case.expected_matches, case
    after = {node.name for node in run.after.graph.nodes}
    for instance in case.planted:
        assert instance.nodes, (instance, case)
        if instance.must_match:
            assert not after & set(instance.nodes), (instance, case)
        else:
            assert set(instance.nodes) <= after, (instance, case)
    before_out = case.gm(*case.inputs[0])
    after_out = run.after(*case.inputs[0])
    assert len(before_out) == len(after_out)
    for expected, actual in zip(before_out, after_out, strict=True):
        assert torch.isfinite(expected).all(), case
        assert expected.dtype == actual.dtype and torch.equal(expected, actual), case


@settings(deadline=None)  # the profile's count: ci draws 15, nightly more
@given(qk_norm_cases(max_instances=3))
def test_drawn_cases_are_rewritten_as_planted(case):
    assert case.tp_world == 1 and case.form == "functional" and len(case.inputs) == 1
    assert isinstance(case.pass_config, QKNormConfig)
    assert case.expected_matches >= 1
    _check_rewritten_as_planted(case)


def _with(layer, sources=(), post=()):
    return dataclasses.replace(layer, sources=tuple(sources), post=tuple(post))


_BF16 = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16, max_tokens=4)
_F32 = QKNormConfig(q_size=6, kv_size=6, eps=1e-5, dtype=torch.float32, max_tokens=2)

_EXAMPLES = {
    # A "tokens" near miss on q alone leaves q_out and k_out with different rows; the next layer
    # chains from both (regression: the cat along the width failed).
    "chain_after_tokens_on_q": (
        _BF16,
        [
            _with(make_layer(_BF16, "rms_norm", "tokens", tokens=2, target="q"), [Source(), Source()], [(), ()]),
            _with(make_layer(_BF16, "qk_norm", tokens=2), [Source(chain=True, pre=("tanh",))], [("neg",), (), ()]),
        ],
    ),
    # q_size == kv_size, fp32 (no casts in the graph): the split forms and the per-tensor form
    # differ only in the operand order of the weight multiply.
    "f32_equal_widths_all_forms": (
        _F32,
        [
            make_layer(_F32, "qk_norm", "eps", tokens=1, target="k"),
            _with(make_layer(_F32, "rms_norm", tokens=1), [Source(chain=True), Source()], [("abs",), ()]),
            _with(
                make_layer(_F32, "qk_norm_split3", tokens=1),
                [Source(chain=True, pre=("mul_input",))],
                [(), (), ()],
            ),
        ],
    ),
    "bf16_weights_extra_user_xf": (
        _BF16,
        [
            make_layer(_BF16, "qk_norm_split3", "extra_user", tokens=3, weight_in_act_dtype=True),
            make_layer(_BF16, "rms_norm", tokens=3, weight_in_act_dtype=True),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(_EXAMPLES))
def test_drawn_cases_are_rewritten_as_planted_examples(name):
    config, layers = _EXAMPLES[name]
    case = build_case(config, layers, seed=1)
    assert case.expected_matches >= 1
    _check_rewritten_as_planted(case)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("form", QK_NORM_FORMS)
@pytest.mark.parametrize("kind", QK_NORM_NEAR_MISS_KINDS)
def test_near_miss_is_not_rewritten(kind, form, dtype):
    config = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=dtype, max_tokens=2)
    near_miss = make_layer(config, form, kind, tokens=2)
    case = build_case(config, [near_miss, make_layer(config, form, tokens=2)])
    missed = [instance for instance in case.planted if not instance.must_match]
    assert len(missed) == 1 and missed[0].reason == kind  # default target: q (the whole qkv for split forms)
    assert case.expected_matches == len(case.planted) - 1
    _check_rewritten_as_planted(case)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_each_dtype_gets_matches(dtype):
    @settings(max_examples=6, deadline=None)
    @given(qk_norm_cases(dtypes=[dtype], near_misses=False))
    def check(case):
        assert case.pass_config.dtype == dtype
        assert all(instance.must_match for instance in case.planted)
        run = apply_direct(QKNormFusionPass, case)
        assert run.matched_count == case.expected_matches == len(case.planted) >= 1

    check()


_GIVEN = QKNormConfig(q_size=12, kv_size=4, eps=1e-5, dtype=torch.float16, max_tokens=3)


@settings(max_examples=10, deadline=None)
@given(qk_norm_cases(_GIVEN, max_tokens=6))
def test_given_config_is_the_pass_config(case):
    assert case.pass_config == _GIVEN
    assert all(x.shape[0] <= 6 for x in case.inputs[0] if x.dim() == 2)  # rows: tokens
    _check_rewritten_as_planted(case)


# The explain phase would draw ~100 more cases; generate + shrink is enough to find the minimum.
_FIND = settings(database=None, deadline=None, phases=[Phase.generate, Phase.shrink])


def test_minimal_case_is_one_float32_qk_norm_without_near_miss():
    case = find(qk_norm_cases(), lambda case: True, settings=_FIND)
    assert case.pass_config.dtype == torch.float32
    assert [(p.pattern, p.must_match, p.reason) for p in case.planted] == [("qk_norm", True, None)]
    qkv = case.inputs[0][0]
    assert tuple(qkv.shape) == (1, case.pass_config.qkv_size)
    assert sum(node.op == "placeholder" for node in case.gm.graph.nodes) == 3  # qkv, q_weight, k_weight


def test_minimal_near_miss_is_an_eps_near_miss_next_to_a_match():
    case = find(qk_norm_cases(), lambda case: case.expected_matches < len(case.planted), settings=_FIND)
    assert case.pass_config.dtype == torch.float32
    assert sorted((p.must_match, p.reason) for p in case.planted) == [(False, "eps"), (True, None)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"config": "bf16"}, "config='bf16'"),
        ({"config": dataclasses.replace(_GIVEN, tp_world=2, tp_rank=1)}, "tp_world=2"),
        ({"min_tokens": 0}, "min_tokens=0"),
        ({"min_tokens": 1.5}, "min_tokens=1.5"),
        ({"min_tokens": True}, "min_tokens=True"),
        ({"max_tokens": 0}, "max_tokens=0"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens=5 is larger than max_tokens=2"),
        ({"config": _GIVEN, "min_tokens": 4}, "min_tokens=4 is larger than config.max_tokens=3"),
        ({"min_instances": 0}, "min_instances=0"),
        ({"max_instances": 0}, "max_instances=0"),
        ({"min_instances": 3, "max_instances": 2}, "min_instances=3 is larger than max_instances=2"),
        ({"near_misses": "yes"}, "near_misses='yes'"),
        ({"dtypes": []}, "dtypes=[] is empty"),
        ({"dtypes": torch.float32}, "dtypes=torch.float32"),
        ({"dtypes": [torch.float64]}, "torch.float64"),
        ({"config": _GIVEN, "dtypes": [torch.float16]}, "cannot be combined with config"),
        ({"forms": []}, "forms=[]"),
        ({"forms": "rms_norm"}, "forms='rms_norm'"),
        ({"forms": ["rms"]}, "forms=['rms']"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        qk_norm_cases(**kwargs)


@settings(max_examples=10, deadline=None)
@given(qk_norm_cases(forms=["rms_norm"]))
def test_forms_restricts_the_planted_forms(case):
    assert {instance.pattern for instance in case.planted} == {"rms_norm"}


# ------------------------------------------------------------------------------------ dynamic=True


def _check_symbolic(case: GraphCase, min_tokens: int = 2) -> None:
    """A dynamic case: one symbol s0 at the hint 11, its Sym placeholder first, every planted
    activation [s0, width], its range what the graph allows from min_tokens up (past
    config.max_tokens too: the pass declines those sizes through is_applicable_for_range), the
    shipped pass rewriting as planted at every size point, without a guard."""
    (symbol,) = case.symbols
    assert (symbol.name, symbol.hint) == ("s0", 11)
    assert max(2, min_tokens) <= symbol.min <= 11 <= symbol.max <= 64
    assert symbol.sizes[0] == 11 and {symbol.min, symbol.max} <= set(symbol.sizes)
    first = case.gm.graph.find_nodes(op="placeholder")[0]
    assert first.name == "s0" and isinstance(first.meta["val"], torch.SymInt)
    assert case.input_dims[0] == "s0" and all(inputs[0] == 11 for inputs in case.inputs)
    result = pmverify.check_case(QKNormFusionPass, case)
    assert result.ok, result.violations
    assert result.rewrite_count == case.expected_matches >= 1, case
    run = apply_direct(QKNormFusionPass, case)
    assert run.pass_guards == (), run.pass_guards


@settings(max_examples=5, deadline=None)
@given(qk_norm_cases(dynamic=True))
def test_dynamic_cases_are_rewritten_as_planted_at_every_size(case):
    _check_symbolic(case)


_DYN = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16, max_tokens=13)


@pytest.mark.parametrize("form", QK_NORM_FORMS)
def test_dynamic_cases_are_rewritten_as_planted_at_every_size_examples(form):
    """Each form on a symbolic token count (regression: symbolize kept make_fx's dead getitems of
    a split's other outputs, so the split3 form's split had three users and never matched), and
    a static "tokens" near miss (14 rows > max_tokens) chained into it: left alone, while the
    chain's row slicing narrows s0's range to what the guards allow."""
    near_miss = make_layer(_DYN, form, "tokens", tokens=11, max_tokens=14)
    chained = _with(make_layer(_DYN, form, tokens=11), [Source(chain=True)] * (2 if form == "rms_norm" else 1))
    for layers in ([make_layer(_DYN, form, tokens=11)], [near_miss, chained]):
        case = build_case(_DYN, layers, seed=3)
        symbolic = symbolize(case)
        (symbol,) = symbolic.symbols
        high = min(symbol.max, _DYN.max_tokens)
        symbolic = dataclasses.replace(
            symbolic, symbols=(dataclasses.replace(symbol, max=high, sizes=(11, symbol.min, high)),)
        )
        _check_symbolic(symbolic)


def test_minimal_dynamic_case_is_one_float32_qk_norm_on_s0():
    case = find(qk_norm_cases(dynamic=True), lambda case: True, settings=_FIND)
    assert case.pass_config.dtype == torch.float32
    assert [(p.pattern, p.must_match) for p in case.planted] == [("qk_norm", True)]
    assert case.input_dims == ("s0", ("s0", None), None, None)
    assert case.symbols[0].min == 2 and case.symbols[0].max == 64 > case.pass_config.max_tokens


@settings(max_examples=12, deadline=None)
@given(qk_norm_cases(dynamic="tokens", max_instances=3))
def test_dynamic_near_misses_keep_static_sizes_off_the_hint(case):
    """Every static size of a dynamic case is free of the factor 11 and a "tokens" near miss has
    static rows over max_tokens; the drawn sizes lie in the range (drawing only: no pass run)."""
    (symbol,) = case.symbols
    assert all(symbol.min <= n <= symbol.max for n in symbol.sizes)
    for value, dims in zip(case.inputs[0][1:], case.input_dims[1:], strict=True):
        static = [n for n, d in zip(value.shape, dims or (None,) * value.dim(), strict=True) if d is None]
        assert all(n % 11 for n in static), (value.shape, dims, case.label)
    nodes = {node.name: node for node in case.gm.graph.nodes}
    for instance in case.planted:
        vals = [nodes[name].meta.get("val") for name in instance.nodes]
        rows = [val.shape[0] for val in vals if isinstance(val, torch.Tensor) and val.dim() == 2]
        if instance.reason == "tokens":  # static rows over max_tokens, never a multiple of 11
            assert all(isinstance(n, int) and n > case.pass_config.max_tokens and n % 11 for n in rows), rows
        else:
            assert rows and all(isinstance(n, torch.SymInt) for n in rows), (rows, instance)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dynamic": "batch"}, "dynamic='batch'"),
        ({"dynamic": 1}, "dynamic=1"),
        ({"dynamic": ()}, "dynamic=()"),
        ({"dynamic": True, "min_tokens": 12}, "min_tokens=12 and max_tokens=16 with dynamic=True"),
        ({"dynamic": True, "max_tokens": 10}, "min_tokens=1 and max_tokens=10 with dynamic=True"),
        ({"dynamic": True, "config": _GIVEN}, "config.max_tokens=3 with dynamic=True"),
        ({"dynamic": True, "config": QKNormConfig(22, 4, max_tokens=16)}, "config.q_size=22 with dynamic=True"),
        ({"dynamic": True, "config": QKNormConfig(7, 2, max_tokens=16)}, "config.qkv_size=11 with dynamic=True"),
    ],
)
def test_bad_dynamic_arguments(kwargs, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        qk_norm_cases(**kwargs)


def test_dynamic_draws_are_never_rejected():
    rejected, valid = rejections(qk_norm_cases(dynamic=True), 10)
    assert valid == 10 and rejected == 0
