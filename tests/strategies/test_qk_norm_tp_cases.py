"""qk_norm_tp_cases: per-rank inputs fit the SPMD graph and are cut from full tensors (replicated kv
heads identical); one all-reduce per planted layer; the shipped pass rewrites exactly the layers
that must match; bad arguments; the minimal examples. No graph with a collective is run here (that
needs a process group); graphs at tp_world 1 are run."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from _minimal import minimal, rejections
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch.distributed.tensor import Shard

import pmverify
from pmverify._case import GraphCase
from pmverify._engine.apply import apply_direct
from pmverify._shapes.symbolic import symbolize
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.config import kv_head_range
from pmverify.fusions.qk_norm.testing import qk_norm_tp_cases
from pmverify.fusions.qk_norm.testing.layers import Source
from pmverify.fusions.qk_norm.testing.tp_cases import (
    LEAKS,
    QK_NORM_TP_NEAR_MISS_KINDS,
    TP_LEAKS,
    build_case,
    make_layer,
    rank_head_dim,
)
from pmverify.strategies import tp_sizes

ALL_REDUCE = torch.ops._c10d_functional.all_reduce.default


def _qkv_parts(config: QKNormConfig, qkv: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return qkv.split([config.q_size, config.kv_size, config.kv_size], dim=-1)


def _check_structure(case: GraphCase) -> None:
    """Rank inputs fit the placeholders; placements; one all-reduce per layer at tp_world > 1."""
    config = case.pass_config
    assert isinstance(config, QKNormConfig) and config.tp_rank == 0 and config.tp_world == case.tp_world
    assert case.form == "functional" and len(case.inputs) == case.tp_world
    assert case.expected_matches >= 1
    placeholders = case.gm.graph.find_nodes(op="placeholder")
    assert len(case.placements) == len(placeholders)
    for rank in case.inputs:
        for node, value, placement in zip(placeholders, rank, case.placements, strict=True):
            fake = node.meta["val"]
            assert tuple(value.shape) == tuple(fake.shape) and value.dtype == fake.dtype, (node, case)
            assert value.is_contiguous() and torch.isfinite(value).all()
            assert placement == (Shard(1) if value.dim() == 2 else Shard(0))
            assert value.shape[-1] in ((config.qkv_size,) if value.dim() == 2 else (config.q_size, config.kv_size))
    reduces = len(case.gm.graph.find_nodes(op="call_function", target=ALL_REDUCE))
    assert reduces == (len(case.planted) if case.tp_world > 1 else 0), case
    pattern = "qk_norm_tp" if case.tp_world > 1 else "qk_norm"
    assert {instance.pattern for instance in case.planted} == {pattern}


def _check_kv_replication(case: GraphCase) -> None:
    """Ranks holding the same kv heads hold the same k, v and k weights; q and q weights differ."""
    config = case.pass_config
    heads = [tuple(kv_head_range(config.num_kv_heads, case.tp_world, r)) for r in range(case.tp_world)]
    rank0 = case.inputs[0]
    for r in range(1, case.tp_world):
        same_kv = heads[r] == heads[0]
        assert same_kv == (case.tp_world > config.num_kv_heads and r < case.tp_world // config.num_kv_heads)
        weights = 0  # each layer takes its q weight, then its k weight
        for x0, x in zip(rank0, case.inputs[r], strict=True):
            if x.dim() == 2:  # qkv
                (q0, k0, v0), (q, k, v) = _qkv_parts(config, x0), _qkv_parts(config, x)
                assert not torch.equal(q0, q)
                assert torch.equal(k0, k) == same_kv and torch.equal(v0, v) == same_kv
            else:
                assert torch.equal(x0, x) == (weights % 2 == 1 and same_kv)
                weights += 1


def _check_rewritten_as_planted(case: GraphCase) -> None:
    """The shipped pass, built from rank 0's config, rewrites every must-match layer and no near
    miss; at tp_world 1 the rewritten graph computes the same values bitwise."""
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
    if case.tp_world == 1:
        before_out, after_out = case.gm(*case.inputs[0]), run.after(*case.inputs[0])
        for expected, actual in zip(before_out, after_out, strict=True):
            assert expected.dtype == actual.dtype and torch.equal(expected, actual), case


@settings(deadline=None)  # the profile's count: ci draws 15, nightly more
@given(qk_norm_tp_cases(max_instances=3))
def test_drawn_cases(case):
    _check_structure(case)
    _check_kv_replication(case)
    _check_rewritten_as_planted(case)


def _config(heads=4, kv_heads=1, head_dim=4, world=4, dtype=torch.bfloat16, eps=1e-6, max_tokens=2):
    return QKNormConfig.for_heads(
        heads, kv_heads, head_dim, tp_world=world, eps=eps, dtype=dtype, max_tokens=max_tokens
    )


_W4_KV1 = _config()
_W8_KV2 = _config(heads=16, kv_heads=2, head_dim=6, world=8, dtype=torch.float16)
_W2_KV4 = _config(heads=4, kv_heads=4, head_dim=5, world=2, dtype=torch.float32)
_W1 = _config(heads=2, kv_heads=2, head_dim=8, world=1, dtype=torch.bfloat16)

_EXAMPLES = {
    # Every kv head replicated on all four ranks; split3 and weights in the activation dtype.
    "w4_kv1_split3": (_W4_KV1, [make_layer(_W4_KV1, tokens=2, split3=True, weight_in_act_dtype=True)]),
    # A "tokens" near miss, then a layer chained from its (longer) outputs.
    "w8_kv2_chain_after_tokens": (
        _W8_KV2,
        [
            make_layer(_W8_KV2, "tokens", tokens=2, max_tokens=3, post=(("neg",), (), ("abs",))),
            make_layer(_W8_KV2, tokens=2, source=Source(chain=True, pre=("tanh", "mul:2.0"))),
        ],
    ),
    # kv heads split, not replicated; float32 (no casts in the graph).
    "w2_kv4_f32_divisor": (_W2_KV4, [make_layer(_W2_KV4, "divisor"), make_layer(_W2_KV4, source=Source(chain=True))]),
    "w1_extra_user_then_match": (
        _W1,
        [make_layer(_W1, "extra_user", variant=1), make_layer(_W1, source=Source(chain=True))],
    ),
}


@pytest.mark.parametrize("name", sorted(_EXAMPLES))
def test_drawn_cases_examples(name):
    config, layers = _EXAMPLES[name]
    case = build_case(config, layers, seed=1)
    _check_structure(case)
    _check_kv_replication(case)
    _check_rewritten_as_planted(case)


@pytest.mark.parametrize("config", [_W4_KV1, _W8_KV2, _W2_KV4, _W1], ids=lambda c: f"tp{c.tp_world}")
def test_rank_inputs_are_cut_from_full_tensors(config):
    case = build_case(config, [make_layer(config, tokens=3)], seed=7)
    qkvs, q_weights, k_weights = zip(*case.inputs, strict=True)
    head_dim = rank_head_dim(config)
    # The q shards of all ranks are the full q, in rank order, without overlap.
    full_q = torch.cat([_qkv_parts(config, qkv)[0] for qkv in qkvs], dim=1)
    assert full_q.shape == (3, config.num_heads * head_dim) and full_q.unique().numel() > full_q.numel() // 2
    full_qw = torch.cat(q_weights)
    assert ((0.875 <= full_qw) & (full_qw < 1.125)).all()
    # k shards: one per kv head, the same on every rank that holds that head.
    by_head = {}
    for r, (qkv, k_weight) in enumerate(zip(qkvs, k_weights, strict=True)):
        _, k, v = _qkv_parts(config, qkv)
        for i, head in enumerate(kv_head_range(config.num_kv_heads, config.tp_world, r)):
            cols = slice(i * head_dim, (i + 1) * head_dim)
            got = (k[:, cols], v[:, cols], k_weight[cols])
            seen = by_head.setdefault(head, got)
            assert all(torch.equal(a, b) for a, b in zip(seen, got, strict=True)), (r, head)
    assert sorted(by_head) == list(range(config.num_kv_heads))


@pytest.mark.parametrize("world", [1, 4])
@pytest.mark.parametrize("kind", QK_NORM_TP_NEAR_MISS_KINDS)
def test_near_miss_is_not_rewritten(kind, world):
    if world == 1 and kind in ("divisor", "reduce_op"):
        with pytest.raises(ValueError, match="has 0 variants"):
            make_layer(_W1, kind)
        return
    config = _W4_KV1 if world == 4 else _W1
    case = build_case(config, [make_layer(config, kind, tokens=2), make_layer(config, tokens=2)])
    assert [(p.must_match, p.reason) for p in case.planted] == [(False, kind), (True, None)]
    _check_rewritten_as_planted(case)


@pytest.mark.parametrize("leak", LEAKS)
def test_each_leak_is_an_extra_user(leak):
    layer = make_layer(_W4_KV1, "extra_user", variant=LEAKS.index(leak))  # bfloat16: every leak applies
    assert layer.leak == leak
    case = build_case(_W4_KV1, [layer, make_layer(_W4_KV1)])
    assert len(case.gm.graph.output_node().args[0]) == 7  # q_out, k_out, v, the leak; then the match's 3
    _check_rewritten_as_planted(case)


def test_tp_only_leaks_are_not_drawn_at_tp_world_1():
    leaks = []
    for variant in range(len(LEAKS)):
        try:
            leaks.append(make_layer(_W1, "extra_user", variant=variant).leak)
        except ValueError:
            break
    assert leaks == [lk for lk in LEAKS if lk not in TP_LEAKS]


_GIVEN = _config(heads=8, kv_heads=2, head_dim=4, world=4, dtype=torch.float16, eps=1e-5, max_tokens=3)


@settings(max_examples=10, deadline=None)
@given(qk_norm_tp_cases(_GIVEN, max_tokens=6))
def test_given_config_is_the_pass_config(case):
    assert case.pass_config == _GIVEN and case.tp_world == 4
    assert all(x.shape[0] <= 6 for x in case.inputs[0] if x.dim() == 2)
    assert "heads=8/2x4" in case.label and "tp=4" in case.label
    _check_structure(case)
    _check_kv_replication(case)


@settings(max_examples=10, deadline=None)
@given(qk_norm_tp_cases(tp_world=st.just(8), near_misses=False, dtypes=[torch.bfloat16]))
def test_tp_world_and_dtypes_are_drawn_from(case):
    assert case.tp_world == 8 and case.pass_config.dtype == torch.bfloat16
    assert all(instance.must_match for instance in case.planted)
    _check_structure(case)


def test_minimal_case_is_one_float32_layer_at_tp_world_1():
    case = minimal(qk_norm_tp_cases())
    assert case.tp_world == 1 and case.pass_config.dtype == torch.float32
    assert [(p.pattern, p.must_match, p.reason) for p in case.planted] == [("qk_norm", True, None)]
    assert case.label.startswith("qk_norm T=1 float32 tp=1 ")
    assert [tuple(x.shape) for x in case.inputs[0]] == [
        (1, case.pass_config.qkv_size),
        (case.pass_config.q_size,),
        (case.pass_config.kv_size,),
    ]
    ops = {node.target for node in case.gm.graph.nodes if node.op == "call_function"}
    assert not ops & {torch.ops.aten.neg.default, torch.ops.aten.tanh.default}  # no context


def test_minimal_tp_case_has_a_replicated_kv_head():
    case = minimal(qk_norm_tp_cases(), lambda case: case.tp_world > 1)
    config = case.pass_config
    assert case.tp_world == 2 and config.num_kv_heads == 1 and config.dtype == torch.float32
    assert [(p.pattern, p.must_match) for p in case.planted] == [("qk_norm_tp", True)]
    assert case.label.startswith("qk_norm_tp T=1 float32 tp=2 ")


def test_minimal_tp_near_miss_is_an_eps_near_miss_next_to_a_match():
    case = minimal(qk_norm_tp_cases(), lambda case: case.tp_world > 1 and case.expected_matches < len(case.planted))
    assert sorted((p.must_match, p.reason) for p in case.planted) == [(False, "eps"), (True, None)]


def test_bad_drawn_tp_world():
    with pytest.raises(InvalidArgument, match=re.escape("tp_world drew 0")):
        minimal(qk_norm_tp_cases(tp_world=st.just(0)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"config": "bf16"}, "config='bf16'"),
        ({"config": QKNormConfig(q_size=8, kv_size=4)}, "has num_heads=None"),
        ({"config": QKNormConfig.for_heads(4, 2, 4, tp_world=2, tp_rank=1)}, "config.tp_rank=1 must be 0"),
        ({"config": _GIVEN, "tp_world": tp_sizes()}, "cannot be combined with config"),
        ({"config": QKNormConfig.for_heads(4, 2, 4, tp_world=2, group_name="tp")}, "config.group_name='tp'"),
        ({"tp_world": 4}, "tp_world=4 must be a Hypothesis strategy"),
        ({"min_tokens": 0}, "min_tokens=0"),
        ({"min_tokens": 1.5}, "min_tokens=1.5"),
        ({"max_tokens": 0}, "max_tokens=0"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens=5 is larger than max_tokens=2"),
        ({"config": _GIVEN, "min_tokens": 4}, "min_tokens=4 is larger than config.max_tokens=3"),
        ({"min_instances": 0}, "min_instances=0"),
        ({"max_instances": True}, "max_instances=True"),
        ({"min_instances": 3, "max_instances": 2}, "min_instances=3 is larger than max_instances=2"),
        ({"near_misses": "yes"}, "near_misses='yes'"),
        ({"dtypes": []}, "dtypes=[] is empty"),
        ({"dtypes": torch.float32}, "dtypes=torch.float32"),
        ({"dtypes": [torch.float64]}, "torch.float64"),
        ({"config": _GIVEN, "dtypes": [torch.float16]}, "cannot be combined with config"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        qk_norm_tp_cases(**kwargs)


# ------------------------------------------------------------------------------------ dynamic=True


@settings(max_examples=4, deadline=None)
@given(qk_norm_tp_cases(tp_world=st.sampled_from([1, 2]), dynamic=True))
def test_dynamic_cases_are_rewritten_as_planted_at_every_size(case):
    """A symbolic token count s0 on every rank (Sym input the hint 11, qkv [s0, width]); the shipped
    pass rewrites as planted, keeps the semantics at every size point (with real collectives at
    tp_world 2) and adds no guard."""
    (symbol,) = case.symbols
    assert symbol.hint == 11 and 2 <= symbol.min <= 11 <= symbol.max <= 64
    assert all(inputs[0] == 11 for inputs in case.inputs) and case.placements[0] is None
    result = pmverify.check_case(QKNormFusionPass, case)
    assert result.ok, result.violations
    assert result.rewrite_count == case.expected_matches >= 1
    assert apply_direct(QKNormFusionPass, case).pass_guards == ()


@pytest.mark.parametrize("split3", [False, True])
def test_dynamic_cases_examples(split3):
    config = _config(heads=4, kv_heads=2, world=2, max_tokens=16)
    near_miss = make_layer(config, "tokens", tokens=11, split3=split3, max_tokens=17)  # 17 rows
    case = symbolize(build_case(config, [make_layer(config, tokens=11, split3=split3), near_miss], seed=2))
    assert [p.must_match for p in case.planted] == [True, False] and case.symbols[0].max >= 16
    (symbol,) = case.symbols
    case = dataclasses.replace(case, symbols=(dataclasses.replace(symbol, max=16, sizes=(11, 2, 16)),))
    result = pmverify.check_case(QKNormFusionPass, case)
    assert result.ok and result.rewrite_count == 1, result.violations


def test_dynamic_draws_are_never_rejected():
    rejected, valid = rejections(qk_norm_tp_cases(dynamic=True), 8)
    assert valid == 8 and rejected == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dynamic": "heads"}, "dynamic='heads'"),
        ({"dynamic": None}, "dynamic=None"),
        ({"dynamic": True, "max_tokens": 8}, "min_tokens=1 and max_tokens=8 with dynamic=True"),
        ({"dynamic": True, "config": _GIVEN}, "config.max_tokens=3 with dynamic=True"),
    ],
)
def test_bad_dynamic_arguments(kwargs, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        qk_norm_tp_cases(**kwargs)
