"""qk_norm_cases: planted QK norms are rewritten exactly when they must be, bitwise exactly;
near misses of every kind are left alone; bad arguments; the minimal example."""

import dataclasses
import re

import pytest
import torch
from hypothesis import Phase, find, given, settings
from hypothesis.errors import InvalidArgument

from pmverify._apply import apply_direct
from pmverify._case import GraphCase
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


@settings(max_examples=40, deadline=None)
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
