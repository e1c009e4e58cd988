"""Faults in a replacement's buffers: reading memory it never wrote."""

from __future__ import annotations

import torch

from ..fusions.qk_norm import QKNormConfig, QKNormFusionPass
from ..fusions.qk_norm.patterns import Rewrite, rewrites

__all__ = ["RMSNormUninitializedAccumulator"]


class RMSNormUninitializedAccumulator(QKNormFusionPass):
    """Bug kind: an uninitialized buffer (``empty`` where ``zeros`` is needed).

    The per-tensor (transformers MiniMax-M2) rewrite's replacement sums the squares into an
    accumulator made with ``torch.empty_like`` instead of ``torch.zeros_like``, then divides by the
    width for the mean: ``acc = empty_like(xf[..., :1]) + xf.pow(2).sum(-1, keepdim=True)``. The
    traced replacement holds an ``aten.empty`` node, so the result depends on whatever the allocator
    hands back. The split (vLLM) rewrites are the shipped ones: cases without a per-tensor norm are
    rewritten correctly. The semantics oracle runs graphs with
    ``torch.utils.deterministic.fill_uninitialized_memory`` under deterministic algorithms, so the
    accumulator starts as NaN and every rewritten norm returns NaN where the original was finite;
    without that fill the bug shows only when the allocator reuses dirty memory (flaky).
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        eps, dtype = config.eps, config.dtype

        def rms_norm_empty_accumulator(x, weight):
            xf = x.to(torch.float32)
            acc = torch.empty_like(xf[..., :1])  # the bug: torch.zeros_like
            acc = acc + xf.pow(2).sum(dim=-1, keepdim=True)
            normed = xf * torch.rsqrt(acc / xf.shape[-1] + eps)
            return weight * normed.to(dtype)

        return [
            Rewrite(r.name, r.search_fn, rms_norm_empty_accumulator, r.example_inputs, r.extra_check)
            if r.name == "rms_norm"
            else r
            for r in rewrites(config)
        ]
