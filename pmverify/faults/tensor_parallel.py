"""A fault in tensor-parallel arithmetic: dividing by the world size where no reduction happened.

MiniMax's QK norm under tensor parallelism (vLLM's ``MiniMaxText01RMSNormTP``) computes each rank's
mean of squares, all-reduces it across the ``tp_world`` ranks and divides by ``tp_world``
(``tensor_model_parallel_all_reduce(variance) / self.tp_world``). The divisor belongs to the
all-reduce: the rank-local form (no all-reduce in the graph, the form the shipped pass matches)
divides by nothing. A fused replacement written for the all-reduce form and reused on the local one
keeps the divisor: every output is scaled by about ``sqrt(tp_world)``.

Cases: :func:`tp_world_cases`, the shipped pass's cases spread over a tensor-parallel world by
:func:`~pmverify.strategies.tp_cases`, with ``pass_config.tp_world`` set to the case's world, so a
pass built per case knows the world it runs in, as vLLM's passes read it from their config.
"""

from __future__ import annotations

import dataclasses

import torch
from hypothesis.strategies import SearchStrategy

from .._case import GraphCase
from ..fusions.qk_norm import QKNormConfig, QKNormFusionPass
from ..fusions.qk_norm.patterns import Rewrite
from .casts import _with_norm

__all__ = ["QKNormWrongTPDivisor", "tp_world_cases"]


class QKNormWrongTPDivisor(QKNormFusionPass):
    """Bug kind: a wrong tensor-parallel divisor.

    Matches exactly what the shipped pass matches (same search functions and ``extra_check``); its
    replacement divides the rank's mean of squares by ``config.tp_world`` as if an all-reduce had
    summed it over the ranks, although the matched graph reduces over the rank's own slice only.
    Exact at ``tp_world = 1``; at 2, 4, 8 every output is off by a factor near ``sqrt(tp_world)``:
    the semantics oracle, on every rank. Built per case from ``case.pass_config``
    (:func:`tp_world_cases` sets its ``tp_world``).
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        eps, world = config.eps, config.tp_world

        def normed(x):
            xf = x.to(torch.float32)
            variance = xf.pow(2).mean(dim=-1, keepdim=True) / world  # the bug: no all-reduce to divide
            return xf * torch.rsqrt(variance + eps)

        return _with_norm(config, normed)


def _with_world(case: GraphCase) -> GraphCase:
    config = dataclasses.replace(case.pass_config, tp_world=case.tp_world, tp_rank=0)
    return dataclasses.replace(case, pass_config=config)


def tp_world_cases(**qk_norm_kwargs) -> SearchStrategy[GraphCase]:
    """Return a strategy for ``tp_cases(qk_norm_cases(**qk_norm_kwargs))`` cases (tp_world 1, 2, 4
    or 8, rank inputs replicated or sharded) whose ``pass_config.tp_world`` is the case's world
    (``tp_rank`` 0: the per-rank graph is the same on every rank)."""
    from ..strategies import qk_norm_cases, tp_cases

    return tp_cases(qk_norm_cases(**qk_norm_kwargs)).map(_with_world)
