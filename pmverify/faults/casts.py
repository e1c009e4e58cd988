"""Faults in a replacement's dtype casts: the cast order, the fp32 upcast, the weight's dtype.

Each is the shipped :class:`~pmverify.fusions.qk_norm.QKNormFusionPass` with the same search
functions and ``extra_check`` but other replacement functions, so it matches exactly what the
shipped pass matches and differs only in what it computes there.
"""

from __future__ import annotations

import torch

from ..fusions.qk_norm import QKNormConfig, QKNormFusionPass
from ..fusions.qk_norm.patterns import Rewrite, rewrites

__all__ = ["QKNormWrongRoundingOrder", "QKNormDropsUpcast", "QKNormCastsWeightToActivationDtype"]


def _q_and_k(replacement):
    """The two-output replacement of the ``qk_norm_split_qk`` rewrite (no v) from a three-output one."""

    def qk_only(qkv, q_weight, k_weight):
        q_out, k_out, _ = replacement(qkv, q_weight, k_weight)
        return q_out, k_out

    return qk_only


def _with_norm(config: QKNormConfig, normed) -> list[Rewrite]:
    """The shipped rewrites of ``config`` with replacements built on ``normed(x)`` (the normalised
    rows, before the weight), keeping each pattern's rounding order."""
    sizes, dtype = [config.q_size, config.kv_size, config.kv_size], config.dtype

    def qk_norm_replacement(qkv, q_weight, k_weight):
        q, k, v = qkv.split(sizes, dim=-1)
        return (normed(q) * q_weight).to(dtype), (normed(k) * k_weight).to(dtype), v

    def rms_norm_replacement(x, weight):
        return weight * normed(x).to(dtype)

    qk = qk_norm_replacement
    return replaced(config, {"qk_norm": qk, "qk_norm_split3": qk, "rms_norm": rms_norm_replacement})


def replaced(config: QKNormConfig, replacements: dict) -> list[Rewrite]:
    """The shipped rewrites of ``config`` with the replacement functions in ``replacements`` (by
    rewrite name) swapped in; the others are kept. The ``qk_norm`` replacement also stands, less
    its v output, for ``qk_norm_split_qk`` unless that one is given."""
    if "qk_norm" in replacements and "qk_norm_split_qk" not in replacements:
        replacements = {**replacements, "qk_norm_split_qk": _q_and_k(replacements["qk_norm"])}
    return [
        Rewrite(r.name, r.search_fn, replacements.get(r.name, r.replace_fn), r.example_inputs, r.extra_check)
        for r in rewrites(config)
    ]


class QKNormWrongRoundingOrder(QKNormFusionPass):
    """Bug kind: a replacement that drops the pattern's cast order.

    Every rewrite matches as the shipped pass does, but its replacement applies the weight on the
    other side of the cast back to the activation dtype (``weight * y.to(dtype)`` for vLLM's
    ``(y * weight).to(dtype)`` and the reverse). Exact for float32. For bf16/fp16 the split (vLLM)
    forms round twice where the pattern rounds once: off by up to an ulp on many elements and less
    accurate in aggregate (the semantics oracle, once a result holds enough elements to tell); the
    per-tensor (transformers) form rounds once where its pattern rounds twice, which is more
    accurate in aggregate and, like a fused kernel, no semantic finding. With a float32 weight on
    bf16 activations the output dtype changes (structure and semantics).
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        q_size, kv_size, eps = config.q_size, config.kv_size, config.eps

        def qk_norm_wrong_order(qkv, q_weight, k_weight):
            q_out, k_out = torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, q_size, kv_size, eps, True)
            return q_out, k_out, qkv.split([q_size, kv_size, kv_size], dim=-1)[2]

        def rms_norm_wrong_order(x, weight):
            return torch.ops.pmverify.rms_norm(x, weight, eps, False)

        return replaced(
            config,
            {"qk_norm": qk_norm_wrong_order, "qk_norm_split3": qk_norm_wrong_order, "rms_norm": rms_norm_wrong_order},
        )


class QKNormDropsUpcast(QKNormFusionPass):
    """Bug kind: a replacement that drops a dtype cast (the fp32 upcast of a norm).

    RMS norms upcast to float32 before the mean of squares (``x.float()`` in vLLM and transformers);
    a hand-written replacement that leaves the upcast out computes ``x²``, the mean, ``rsqrt`` and
    the product in the activation dtype, rounding at each step. Every rewrite matches as the shipped
    pass does; the replacement keeps the weight on the pattern's side of the final cast, so the
    output dtype is unchanged. Exact for float32 (the upcast is a no-op there); for bf16/fp16 many
    elements are off by several ulps: the semantics oracle.
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        eps = config.eps

        def normed(x):  # the bug: no x.to(torch.float32) first
            return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)

        return _with_norm(config, normed)


class QKNormCastsWeightToActivationDtype(QKNormFusionPass):
    """Bug kind: a missing weight-dtype ``extra_check``.

    The shipped ``extra_check`` accepts a norm weight in float32 or in the activation dtype, and the
    fused ops handle both. This pass keeps that check but its replacement assumes the weight is in
    the activation dtype, as a kernel written for one dtype does: it casts the weight to it first
    (``weight.to(dtype)``). Exact when the weight already is in the activation dtype (all float32
    cases, and bf16/fp16 cases with a bf16/fp16 weight). With a float32 weight on bf16/fp16
    activations the per-tensor (transformers) form, whose output is the float32 promotion, returns
    the activation dtype instead: the structure and semantics oracles. In the split (vLLM) forms the
    rounded weight moves some outputs by up to about an ulp (a bf16 weight in [1, 1.125) is off by
    up to 2**-8 of itself, and so is the product, an ulp near the top of its binade): the semantics
    oracle, once enough elements round the other way to make the result less accurate in aggregate.
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        q_size, kv_size, eps, dtype = config.q_size, config.kv_size, config.eps, config.dtype

        def qk_norm_weight_cast(qkv, q_weight, k_weight):
            q_out, k_out = torch.ops.pmverify.qk_norm(
                qkv, q_weight.to(dtype), k_weight.to(dtype), q_size, kv_size, eps, False
            )
            return q_out, k_out, qkv.split([q_size, kv_size, kv_size], dim=-1)[2]

        def rms_norm_weight_cast(x, weight):
            return torch.ops.pmverify.rms_norm(x, weight.to(dtype), eps, True)

        return replaced(
            config,
            {"qk_norm": qk_norm_weight_cast, "qk_norm_split3": qk_norm_weight_cast, "rms_norm": rms_norm_weight_cast},
        )
