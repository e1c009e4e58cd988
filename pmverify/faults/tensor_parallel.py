"""Faults in tensor-parallel arithmetic, on the all-reduce form of MiniMax's QK norm.

vLLM's ``MiniMaxText01RMSNormTP.forward_qk`` concatenates each rank's per-token means of squares
of q and k, all-reduces them over the tensor-parallel group and divides by ``tp_world``; kv heads
are replicated once ``tp_world`` exceeds their count (MiniMax-M2). Each fault below matches exactly
what the shipped pass matches (the same search functions and ``extra_check``) and differs in its
replacement of the ``qk_norm_tp`` rewrites:

- :class:`QKNormWrongTPDivisor`: k's reduced sum divided by the number of *distinct* k shards;
- :class:`QKNormTPLeavesKUnreduced`: q and k reduced separately, k's reduction forgotten;
- :class:`QKNormTPReadsRankZeroWeights`: the norm weights read from rank 0.

Each is exact at ``tp_world = 1`` (the all-reduce rewrites exist only above it) and on some
geometries above it, which is why they need random geometries and real collectives to be found:
cases from :func:`~pmverify.fusions.qk_norm.testing.qk_norm_tp_cases`, run by the semantics oracle on a real
world (:mod:`pmverify.distributed`).
"""

from __future__ import annotations

import torch

from ..fusions.qk_norm import QKNormConfig, QKNormFusionPass
from ..fusions.qk_norm.patterns import Rewrite
from ..fusions.qk_norm.tp import all_reduce
from .casts import replaced

__all__ = ["QKNormWrongTPDivisor", "QKNormTPLeavesKUnreduced", "QKNormTPReadsRankZeroWeights"]


def _with_tp(config: QKNormConfig, replacement) -> list[Rewrite]:
    """The shipped rewrites of ``config`` with ``replacement(qkv, q_weight, k_weight) -> (q, k, v)``
    for both all-reduce forms."""
    return replaced(config, {"qk_norm_tp": replacement, "qk_norm_tp_split3": replacement})


def _split(config: QKNormConfig, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v = qkv.split([config.q_size, config.kv_size, config.kv_size], dim=-1)
    return q.to(torch.float32), k.to(torch.float32), v


def _normed(config: QKNormConfig, xf: torch.Tensor, mean_sq: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return (xf * torch.rsqrt(mean_sq + config.eps) * weight).to(config.dtype)


class QKNormWrongTPDivisor(QKNormFusionPass):
    """Bug kind: a wrong tensor-parallel divisor.

    The replacement all-reduces the ``[T, 2]`` sums of squares as the fused op does, but divides
    k's by ``kv_size · min(tp_world, num_kv_heads)``, the width of the *distinct* k shards, as if
    each rank held its own kv heads. Once ``tp_world`` exceeds ``num_kv_heads`` the heads are
    replicated and the all-reduce counts each one ``tp_world // num_kv_heads`` times: k's mean is
    that many times too large and every k output off by its square root, on every rank (the
    semantics oracle). Exact while ``tp_world <= num_kv_heads``, and without ``num_kv_heads`` in the
    config.
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        world = config.tp_world
        k_world = min(world, config.num_kv_heads) if config.num_kv_heads else world  # the bug

        def replacement(qkv, q_weight, k_weight):
            qf, kf, v = _split(config, qkv)
            sums = all_reduce(torch.stack([qf.pow(2).sum(-1), kf.pow(2).sum(-1)], dim=-1), config.group_name)
            q_ms = sums[:, :1] / (config.q_size * world)
            k_ms = sums[:, 1:] / (config.kv_size * k_world)
            return _normed(config, qf, q_ms, q_weight), _normed(config, kf, k_ms, k_weight), v

        return _with_tp(config, replacement)


class QKNormTPLeavesKUnreduced(QKNormFusionPass):
    """Bug kind: q and k reduced separately, one of them left unreduced.

    The replacement all-reduces q's mean of squares on its own and takes k's rank-local mean as it
    is (as if k were replicated on every rank). Right only when every rank holds the same k (one kv
    head, replicated on all ranks); otherwise k's outputs differ from the pattern's on the ranks
    whose local mean is not the global one (the semantics oracle).
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        def replacement(qkv, q_weight, k_weight):
            qf, kf, v = _split(config, qkv)
            q_ms = all_reduce(qf.pow(2).mean(dim=-1, keepdim=True), config.group_name) / config.tp_world
            k_ms = kf.pow(2).mean(dim=-1, keepdim=True)  # the bug: no all-reduce for k
            return _normed(config, qf, q_ms, q_weight), _normed(config, kf, k_ms, k_weight), v

        return _with_tp(config, replacement)


class QKNormTPReadsRankZeroWeights(QKNormFusionPass):
    """Bug kind: a replacement that reads another rank's weight shard.

    The replacement treats the norm weights as replicated, as per-head norms' weights are (Qwen3's
    q_norm), and takes rank 0's copy (``_c10d_functional.broadcast`` from rank 0) before the fused
    op. MiniMax's TP norm weight is sharded with the heads: every other rank normalises with rank
    0's shard (the semantics oracle, on ranks whose shard differs from rank 0's).
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        def rank_zero(weight):
            ops = torch.ops._c10d_functional
            return ops.wait_tensor(ops.broadcast(weight, 0, config.group_name))

        def replacement(qkv, q_weight, k_weight):
            q_out, k_out = torch.ops.pmverify.qk_norm_tp(
                qkv,
                rank_zero(q_weight),
                rank_zero(k_weight),
                config.q_size,
                config.kv_size,
                config.eps,
                config.tp_world,
                config.group_name,
                False,
            )
            return q_out, k_out, qkv.split([config.q_size, config.kv_size, config.kv_size], dim=-1)[2]

        return _with_tp(config, replacement)
