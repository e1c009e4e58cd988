"""Faulty passes, each modelled on a public bug kind; pmverify must catch every one.

They are importable (so reproducers can rebuild them) and built like the shipped pass:
``verify(faults.QKNormWrongRoundingOrder, strategies.qk_norm_cases())``.
"""

from __future__ import annotations

import torch

from .fusions.qk_norm import QKNormConfig, QKNormFusionPass
from .fusions.qk_norm.patterns import Rewrite, rewrites

__all__ = ["QKNormWrongRoundingOrder"]


class QKNormWrongRoundingOrder(QKNormFusionPass):
    """Bug kind: a replacement that drops the pattern's cast order.

    Every rewrite matches as the shipped pass does, but its replacement applies the weight on the
    other side of the cast back to the activation dtype (``weight * y.to(dtype)`` for vLLM's
    ``(y * weight).to(dtype)`` and the reverse). Exact for float32; off by up to an ulp on many
    elements for bf16/fp16, and with a float32 weight on bf16 activations the output dtype changes.
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        q_size, kv_size, eps = config.q_size, config.kv_size, config.eps

        def qk_norm_wrong_order(qkv, q_weight, k_weight):
            q_out, k_out = torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, q_size, kv_size, eps, True)
            return q_out, k_out, qkv.split([q_size, kv_size, kv_size], dim=-1)[2]

        def rms_norm_wrong_order(x, weight):
            return torch.ops.pmverify.rms_norm(x, weight, eps, False)

        wrong = {
            "qk_norm": qk_norm_wrong_order,
            "qk_norm_split3": qk_norm_wrong_order,
            "rms_norm": rms_norm_wrong_order,
        }
        return [Rewrite(r.name, r.search_fn, wrong[r.name], r.example_inputs, r.extra_check) for r in rewrites(config)]
