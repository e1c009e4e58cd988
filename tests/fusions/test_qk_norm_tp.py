"""The tensor-parallel QK norm: geometry, the fused op with its all-reduce, and the pass's rewrite.

Collectives run for real in a threaded world (``pmverify.distributed.run_spmd``): each test compares
with the float64 norm of the *full* (all-heads) tensors, so a rank that reduced nothing, or
divided by the wrong world, is off.
"""

import copy
import dataclasses

import pytest
import torch

import pmverify
from pmverify.distributed import run_spmd
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.config import kv_head_range, kv_heads_per_rank
from pmverify.fusions.qk_norm.tp import example_inputs, qk_norm_tp_forward, shard_columns
from pmverify.oracles.tensor_parallel import all_reduce_count


@pytest.mark.parametrize(
    ("tp_world", "q_size", "kv_size"),
    [(1, 6144, 1024), (2, 3072, 512), (8, 768, 128), (16, 384, 128)],
)
def test_minimax_m2_geometry(tp_world, q_size, kv_size):
    config = QKNormConfig.for_heads(48, 8, 128, tp_world=tp_world)
    assert (config.q_size, config.kv_size) == (q_size, kv_size)


def test_kv_heads_are_replicated_beyond_their_count():
    assert kv_heads_per_rank(8, 2) == 4 and kv_heads_per_rank(2, 8) == 1
    assert [kv_head_range(2, 8, r) for r in range(8)] == [range(0, 1)] * 4 + [range(1, 2)] * 4
    assert [kv_head_range(4, 2, r) for r in range(2)] == [range(0, 2), range(2, 4)]
    config = QKNormConfig.for_heads(8, 2, 4, tp_world=8, tp_rank=5)
    assert shard_columns(config) == (slice(20, 24), slice(4, 8))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"q_size": 8, "kv_size": 4, "tp_world": 3, "num_heads": 8, "num_kv_heads": 2}, "num_heads=8 is not divisible"),
        ({"q_size": 12, "kv_size": 4, "tp_world": 2, "num_heads": 12, "num_kv_heads": 3}, "one must divide the other"),
        (
            {"q_size": 8, "kv_size": 8, "tp_world": 4, "num_heads": 8, "num_kv_heads": 2},
            "kv_size=8; expected 1 kv heads",
        ),
        ({"q_size": 7, "kv_size": 4, "tp_world": 2, "num_heads": 8, "num_kv_heads": 2}, "q_size=7 is not a multiple"),
        ({"q_size": 8, "kv_size": 4, "num_heads": 8}, "give both or neither"),
        ({"q_size": 8, "kv_size": 4, "group_name": ""}, "group_name=''"),
    ],
)
def test_config_rejects_impossible_geometry(kwargs, message):
    with pytest.raises(ValueError, match=message):
        QKNormConfig(**kwargs)


def _full_and_shards(num_heads, num_kv_heads, head_dim, world, tokens, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    full = {
        name: torch.rand(shape, generator=generator).mul(4).sub(2).to(dtype)
        for name, shape in (
            ("q", (tokens, num_heads * head_dim)),
            ("k", (tokens, num_kv_heads * head_dim)),
            ("v", (tokens, num_kv_heads * head_dim)),
        )
    }
    full["q_weight"] = 1 + (torch.rand(num_heads * head_dim, generator=generator) - 0.5) / 4
    full["k_weight"] = 1 + (torch.rand(num_kv_heads * head_dim, generator=generator) - 0.5) / 4
    configs, shards = [], []
    for rank in range(world):
        config = QKNormConfig.for_heads(num_heads, num_kv_heads, head_dim, tp_world=world, tp_rank=rank, dtype=dtype)
        q_cols, kv_cols = shard_columns(config)
        qkv = torch.cat([full["q"][:, q_cols], full["k"][:, kv_cols], full["v"][:, kv_cols]], dim=-1).contiguous()
        configs.append(config)
        shards.append((qkv, full["q_weight"][q_cols].to(dtype), full["k_weight"][kv_cols].to(dtype)))
    return full, configs, shards


def _full_norm(x, weight, eps=1e-6):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def _op(qkv, q_weight, k_weight, q_size, kv_size, world):
    return torch.ops.pmverify.qk_norm_tp(qkv, q_weight, k_weight, q_size, kv_size, 1e-6, world, "0")


@pytest.mark.parametrize(("world", "num_kv_heads"), [(1, 2), (2, 2), (4, 2), (4, 4), (8, 1)])
def test_fused_op_normalises_over_the_whole_hidden_size(world, num_kv_heads):
    full, configs, shards = _full_and_shards(8, num_kv_heads, 4, world, tokens=3, dtype=torch.float32)
    config = configs[0]
    outs = run_spmd(_op, world, [(*shard, config.q_size, config.kv_size, world) for shard in shards])
    q_ref, k_ref = _full_norm(full["q"], full["q_weight"]), _full_norm(full["k"], full["k_weight"])
    for rank, (q_out, k_out) in enumerate(outs):
        q_cols, kv_cols = shard_columns(configs[rank])
        torch.testing.assert_close(q_out.double(), q_ref[:, q_cols], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(k_out.double(), k_ref[:, kv_cols], rtol=1e-5, atol=1e-6)


def test_fused_op_opcheck_at_tp_world_1():
    qkv, q_weight, k_weight = torch.randn(5, 16), torch.randn(8), torch.randn(4)
    args = (qkv, q_weight, k_weight, 8, 4, 1e-6, 1, "0", False)
    torch.library.opcheck(torch.ops.pmverify.qk_norm_tp.default, args)
    expected = torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, 8, 4, 1e-6, False)
    for out, ref in zip(torch.ops.pmverify.qk_norm_tp(*args), expected, strict=True):
        torch.testing.assert_close(out, ref)


def _tp_case(world, tokens=3, dtype=torch.bfloat16, max_tokens=2048, split3=False):
    _, configs, shards = _full_and_shards(8, 2, 4, world, tokens, dtype)
    config = dataclasses.replace(configs[0], max_tokens=max_tokens)
    sizes = [config.q_size, config.kv_size, config.kv_size]

    def forward(qkv, q_weight, k_weight):
        q, k, v = qk_norm_tp_forward(qkv, q_weight, k_weight, sizes, config.eps, world, "0", dtype, split3=split3)
        return q.tanh(), k * 2, v

    from torch._inductor.pattern_matcher import fwd_only

    gm = fwd_only(forward, list(example_inputs(config, tokens)))
    return pmverify.GraphCase(gm, shards, tp_world=world, pass_config=config, label=f"tp{world}")


@pytest.mark.parametrize("split3", [False, True])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_pass_fuses_the_all_reduce_form_on_every_rank(world, split3):
    case = _tp_case(world, split3=split3)
    assert all_reduce_count(case.gm.graph.nodes) == 1
    result = pmverify.check_case(QKNormFusionPass, case, oracles=["semantics", "tensor_parallel", "structure"])
    assert result.ok, result.violations
    assert result.rewrite_count == 1 and len(result.pair.ranks) == world - 1
    for run in (result.pair, *result.pair.ranks):
        targets = [node.target for node in run.after.graph.nodes]
        assert torch.ops.pmverify.qk_norm_tp.default in targets and all_reduce_count(run.after.graph.nodes) == 0
        assert run.pass_.config.tp_rank == (result.pair.ranks.index(run) + 1 if run is not result.pair else 0)


def test_pass_leaves_token_counts_beyond_max_tokens_unfused():
    case = _tp_case(2, tokens=5, max_tokens=4)
    pass_ = QKNormFusionPass(case.pass_config)
    assert not pass_.is_applicable_for_range((1, 5)) and pass_.is_applicable_for_range((1, 4))
    result = pmverify.check_case(QKNormFusionPass, case, oracles=["semantics", "tensor_parallel"])
    assert result.ok and result.rewrite_count == 0
    assert all_reduce_count(result.pair.after.graph.nodes) == 1  # the all-reduce form stays as it was


def test_uuid_tells_tp_configs_apart():
    config = QKNormConfig.for_heads(8, 2, 4, tp_world=2)
    uuids = {
        QKNormFusionPass(c).uuid()
        for c in (
            config,
            dataclasses.replace(config, group_name="tp:1"),
            QKNormConfig.for_heads(8, 2, 4, tp_world=4),
        )
    }
    assert len(uuids) == 3


def test_ranks_share_one_registration():
    configs = [QKNormConfig.for_heads(8, 2, 4, tp_world=4, tp_rank=r) for r in range(4)]
    assert len({id(QKNormFusionPass(c).patterns) for c in configs}) == 1
    copy.deepcopy(configs[0])  # configs stay plain, copyable values


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((8, 16, 128), "QKNormConfig.for_heads: num_heads=8 is not divisible by num_kv_heads=16"),
        ((6, 4, 8), "num_heads=6 is not divisible by num_kv_heads=4"),
        ((8, 0, 8), r"QKNormConfig.for_heads: num_kv_heads=0 must be a positive int"),
        ((6, 3, 8), r"QKNormConfig.for_heads: num_kv_heads=3 and tp_world=2: one must divide the other"),
    ],
)
def test_for_heads_refuses_impossible_gqa(args, message):
    with pytest.raises(ValueError, match=message):
        QKNormConfig.for_heads(*args, tp_world=2)


def test_uuid_hashes_the_tensor_parallel_patterns(monkeypatch):
    import inspect

    from pmverify.fusions.qk_norm import tp

    pass_ = QKNormFusionPass(QKNormConfig.for_heads(8, 2, 4, tp_world=2))
    before = pass_.uuid()
    source = inspect.getsource

    monkeypatch.setattr(inspect, "getsource", lambda obj: source(obj) + ("# edited" if obj is tp else ""))
    assert pass_.uuid() != before


def test_a_single_rank_config_spread_by_tp_cases_is_built_as_it_is():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pmverify.fusions.qk_norm.testing import qk_norm_cases
    from pmverify.strategies import tp_cases

    @settings(max_examples=4, deadline=None, database=None)
    @given(tp_cases(qk_norm_cases(), tp_world=st.just(2)))
    def check(case):
        result = pmverify.check_case(QKNormFusionPass, case)
        assert result.ok, result.violations
        assert result.pair.ranks[0].pass_.config == case.pass_config  # tp_world 1: the same on every rank

    check()
