"""``qk_norm_tp_cases(..., all_reduce=)``: MiniMax QK norms whose all-reduce is a project's own op.

vLLM's ``MiniMaxText01RMSNormTP`` all-reduces with ``tensor_model_parallel_all_reduce``, which is
``torch.ops.vllm.all_reduce(x, group_name=...)`` in its graphs; here ``pmtest::all_reduce``
(:mod:`tests._user_all_reduce`) plays it, and a MiniMax-style pass written here fuses each layer
into ``pmtest::tp_qk_norm`` (a fused collective taking ``tp_rank``).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _user_all_reduce import ALL_REDUCE, NO_BUG, NO_TP_DIVISOR, RANK_DIVISOR
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

import pmverify
from pmverify.fusions.qk_norm.testing import qk_norm_tp_cases
from pmverify.fusions.qk_norm.tp import example_inputs, qk_norm_tp_forward


class MiniMaxStylePass:
    """Built from the case's ``QKNormConfig`` (per rank: ``tp_rank``); ``bug`` as the fused op's."""

    bug = NO_BUG

    def __init__(self, config) -> None:
        self.matched_count = 0
        self.patterns = PatternMatcherPass(pass_name="minimax_style")
        q_size, kv_size, eps, dtype = config.q_size, config.kv_size, config.eps, config.dtype
        world, rank, group, bug = config.tp_world, config.tp_rank, config.group_name, self.bug
        sizes = [q_size, kv_size, kv_size]

        def pattern(qkv, q_weight, k_weight):
            return qk_norm_tp_forward(
                qkv, q_weight, k_weight, sizes, eps, world, group, dtype, all_reduce_op=ALL_REDUCE
            )

        def pattern_split3(qkv, q_weight, k_weight):
            return qk_norm_tp_forward(
                qkv, q_weight, k_weight, sizes, eps, world, group, dtype, split3=True, all_reduce_op=ALL_REDUCE
            )

        def replacement(qkv, q_weight, k_weight):
            q_out, k_out = torch.ops.pmtest.tp_qk_norm(
                qkv, q_weight, k_weight, q_size, kv_size, eps, rank, world, group, bug
            )
            return q_out, k_out, qkv.split(sizes, dim=-1)[2]

        for search in (pattern, pattern_split3):
            register_replacement(search, replacement, list(example_inputs(config)), fwd_only, self.patterns)

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = self.patterns.apply(graph)


class NoTPDivisor(MiniMaxStylePass):
    bug = NO_TP_DIVISOR


class RankDivisor(MiniMaxStylePass):
    bug = RANK_DIVISOR


def user_cases(**kwargs):
    """On worlds of 2 ranks (4 and 8 rank worlds cost more, and qk_norm_tp_cases draws them alike)."""
    return qk_norm_tp_cases(tp_world=st.just(2), all_reduce=ALL_REDUCE, **kwargs)


_FIRST = settings(database=None, phases=[Phase.generate], deadline=None)


def test_layers_call_the_users_all_reduce():
    case = find(user_cases(), lambda c: True, settings=_FIRST)
    calls = [n for n in case.gm.graph.nodes if n.target is ALL_REDUCE]
    assert calls and all(n.args[1] == "0" for n in calls)
    assert not any(getattr(n.target, "namespace", None) == "_c10d_functional" for n in case.gm.graph.nodes)
    assert case.all_reduce is ALL_REDUCE
    assert all(n in case.planted[0].nodes for n in (c.name for c in calls))


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(user_cases())
def test_correct_pass_is_quiet(case):
    assert not any(p.reason == "reduce_op" for p in case.planted)  # a project's all-reduce sums
    result = pmverify.check_case(MiniMaxStylePass, case)
    assert result.ok, result.violations


@pytest.mark.parametrize("buggy", [NoTPDivisor, RankDivisor])
def test_injected_bug_is_caught(buggy):
    find(
        user_cases(near_misses=False),
        lambda c: "semantics" in {v.oracle for v in pmverify.check_case(buggy, c).violations},
        settings=_FIRST,
    )


@pytest.mark.slow
def test_correct_pass_is_quiet_over_300_cases(tmp_path):
    summary = pmverify.verify(MiniMaxStylePass, user_cases(), max_examples=300, seed=1, repro_dir=tmp_path)
    assert summary.rewritten_cases > 30, summary.describe()


def test_default_is_the_functional_collective():
    assert "all_reduce" not in repr(qk_norm_tp_cases())
    assert "all_reduce=torch.ops.pmtest.all_reduce.default" in repr(qk_norm_tp_cases(all_reduce=ALL_REDUCE))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("sum", "all_reduce='sum' must be None"),
        (torch.ops.aten.add.Tensor, "all_reduce=torch.ops.aten.add.Tensor has schema"),
    ],
)
def test_bad_all_reduce(value, message):
    with pytest.raises(InvalidArgument, match=message):
        qk_norm_tp_cases(all_reduce=value)


def test_build_case_records_the_op_only_at_several_ranks():
    from pmverify.fusions.qk_norm import QKNormConfig
    from pmverify.fusions.qk_norm.testing.tp_cases import build_case, make_layer

    for world in (1, 2):
        config = QKNormConfig.for_heads(world, 1, 4, tp_world=world, tp_rank=0, eps=1e-6, dtype=torch.float32)
        case = build_case(config, [make_layer(config)], all_reduce=ALL_REDUCE)
        assert case.all_reduce is (ALL_REDUCE if world > 1 else None)
        assert dataclasses.replace(case).all_reduce is case.all_reduce
