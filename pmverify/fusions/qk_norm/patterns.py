"""Search and replacement functions of the QK-norm fusion, one set per :class:`QKNormConfig`.

Four search forms are recognised, each with a replacement that keeps its rounding order:

- ``qk_norm_pattern``: vLLM's ``forward_qk`` at tp_world = 1: one ``split`` of qkv into q, k, v;
  ``(x.float() * rsqrt(mean(x²) + eps) * weight).to(dtype)`` for q and k.
- ``qk_norm_split3_pattern``: the same with one split node per consumer, as Inductor leaves it when
  the qkv projection is a functional (auto_functionalized) op.
- ``qk_norm_split_qk_pattern``: the split3 form without v (q and k each from their own split;
  v's split is not part of the match and stays), registered after split3. When qkv is a graph
  input mutated in place before the norms, functionalization writes it back with a ``copy_`` after
  the norms and regenerates v from the new value after that ``copy_`` (torch 2.13): split3 would
  span two mutation regions (``PatternMatcherPass.apply`` discards such a match), this form lies
  in the first region only.
- ``rms_norm_pattern``: transformers' ``MiniMaxM2RMSNorm`` applied to q or k alone:
  ``weight * (x.float() * rsqrt(mean(x²) + eps)).to(dtype)``.

At ``tp_world > 1`` the all-reduce forms of :mod:`.tp` (``qk_norm_tp``, ``qk_norm_tp_split3``) are
registered first; the rank-local forms above stay registered, since a rank-local norm in a
tensor-parallel graph is still rewritten exactly.

Safety (``can_fuse``: dtypes, widths, layout, and no keyword argument the patterns do not hold) is
kept apart from profitability (``should_fuse``: token count); both are read from the matched nodes
and their fake tensors, never raise, and compare symbolic sizes with ``statically_known_true`` so
that a graph with a symbolic token count gets no guard from them.

Why the keyword check: Inductor's matcher compares only the keyword arguments a pattern's node
holds and ignores the others (``_TargetArgsExpr._match``), so ``mean(x², [-1], True,
dtype=torch.float64)`` matches the pattern's ``mean(x², [-1], True)`` and the fused op would drop the
``dtype``. None of these patterns' nodes holds a keyword argument, so a match with one is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from . import ops  # noqa: F401  (registers torch.ops.pmverify.*)
from .config import QKNormConfig

__all__ = ["Rewrite", "rewrites", "can_fuse_qkv", "can_fuse_rms", "should_fuse", "holds_no_keywords"]


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """One ``register_replacement`` call: what it is given, by name."""

    name: str
    search_fn: Callable[..., Any]
    replace_fn: Callable[..., Any]
    example_inputs: tuple[torch.Tensor, ...]
    extra_check: Callable[[Any], bool]


def _val(match: Any, name: str) -> Any:
    node = match.kwargs.get(name)
    return getattr(node, "meta", {}).get("val")


def _known(condition: Any) -> bool:
    """Whether ``condition`` (a bool, or a ``SymBool`` over a graph's symbolic sizes) holds for
    every size its symbols may take, decided without adding a guard to the ``ShapeEnv``: a
    condition that depends on the size is False (unknown)."""
    return statically_known_true(condition)


def holds_no_keywords(match: Any) -> bool:
    """Whether no matched node carries a keyword argument (see the module docstring)."""
    return not any(getattr(node, "kwargs", None) for node in match.nodes)


def should_fuse(config: QKNormConfig, tokens: Any) -> bool:
    """Whether the fused path is used for ``tokens`` rows: an int within ``config.max_tokens``; a
    symbolic count (a ``SymInt``, vLLM's and ``torch.compile(dynamic=True)``'s token dim) unless it
    is known to exceed ``config.max_tokens`` over its whole range. The range a symbolic graph is
    compiled for is ``QKNormFusionPass.is_applicable_for_range``'s decision, as in vLLM: deciding
    it here from the hint would guard the graph to the hint's size. Adds no guard."""
    return not _known(tokens > config.max_tokens)


def _weight_ok(weight: Any, width: Any, act_dtype: torch.dtype) -> bool:
    return (
        isinstance(weight, torch.Tensor)
        and weight.dim() == 1
        and _known(weight.shape[0] == width)
        and weight.dtype in (torch.float32, act_dtype)
    )


def can_fuse_qkv(config: QKNormConfig, qkv: Any, q_weight: Any, k_weight: Any) -> bool:
    """Whether the fused op computes exactly what the matched qkv pattern computes. Symbolic sizes
    are compared without guards: a width not known equal to the config's is refused."""
    return (
        isinstance(qkv, torch.Tensor)
        and qkv.dim() == 2
        and qkv.dtype == config.dtype
        and _known(qkv.shape[1] == config.qkv_size)
        and qkv.is_contiguous()
        and _weight_ok(q_weight, config.q_size, qkv.dtype)
        and _weight_ok(k_weight, config.kv_size, qkv.dtype)
    )


def can_fuse_rms(config: QKNormConfig, x: Any, weight: Any) -> bool:
    """Whether the per-tensor op computes exactly what the matched per-tensor pattern computes
    (symbolic sizes compared as :func:`can_fuse_qkv` does)."""
    return (
        isinstance(x, torch.Tensor)
        and x.dim() >= 1
        and x.dtype == config.dtype
        and any(_known(x.shape[-1] == width) for width in (config.q_size, config.kv_size))
        and x.is_contiguous()
        and _weight_ok(weight, x.shape[-1], x.dtype)
    )


def rewrites(config: QKNormConfig) -> list[Rewrite]:
    """The rewrites of the QK-norm fusion for ``config``, simplest example inputs first."""
    q_size, kv_size, eps, dtype = config.q_size, config.kv_size, config.eps, config.dtype
    sizes = [q_size, kv_size, kv_size]

    def _norm_weight_first(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.to(torch.float32)
        return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight).to(dtype)

    def qk_norm_pattern(qkv, q_weight, k_weight):
        q, k, v = qkv.split(sizes, dim=-1)
        return _norm_weight_first(q, q_weight), _norm_weight_first(k, k_weight), v

    def qk_norm_split3_pattern(qkv, q_weight, k_weight):
        q = qkv.split(sizes, dim=-1)[0]
        k = qkv.split(sizes, dim=-1)[1]
        v = qkv.split(sizes, dim=-1)[2]
        return _norm_weight_first(q, q_weight), _norm_weight_first(k, k_weight), v

    def qk_norm_split_qk_pattern(qkv, q_weight, k_weight):
        q = qkv.split(sizes, dim=-1)[0]
        k = qkv.split(sizes, dim=-1)[1]
        return _norm_weight_first(q, q_weight), _norm_weight_first(k, k_weight)

    def qk_norm_qk_replacement(qkv, q_weight, k_weight):
        return torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, q_size, kv_size, eps, False)

    def qk_norm_replacement(qkv, q_weight, k_weight):
        q_out, k_out = torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, q_size, kv_size, eps, False)
        return q_out, k_out, qkv.split(sizes, dim=-1)[2]

    def rms_norm_pattern(x, weight):
        xf = x.to(torch.float32)
        normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
        return weight * normed.to(dtype)

    def rms_norm_replacement(x, weight):
        return torch.ops.pmverify.rms_norm(x, weight, eps, True)

    def qkv_check(match: Any) -> bool:
        qkv = _val(match, "qkv")
        fusable = can_fuse_qkv(config, qkv, _val(match, "q_weight"), _val(match, "k_weight"))
        return fusable and holds_no_keywords(match) and should_fuse(config, qkv.shape[0])

    def rms_check(match: Any) -> bool:
        x = _val(match, "x")
        fusable = can_fuse_rms(config, x, _val(match, "weight")) and holds_no_keywords(match)
        return fusable and should_fuse(config, x.numel() // x.shape[-1])

    tokens = 4
    if config.tp_world > 1:
        from .tp import example_inputs, tp_rewrites

        fake_inputs = example_inputs(config, tokens)
        tp = [Rewrite(name, search, replace, fake_inputs, qkv_check) for name, search, replace in tp_rewrites(config)]
    else:
        tp = []
    qkv_inputs = (
        torch.empty(tokens, config.qkv_size, dtype=dtype),
        torch.empty(q_size, dtype=dtype),
        torch.empty(kv_size, dtype=dtype),
    )
    rms_inputs = (torch.empty(tokens, q_size, dtype=dtype), torch.empty(q_size, dtype=dtype))
    return tp + [
        Rewrite("qk_norm", qk_norm_pattern, qk_norm_replacement, qkv_inputs, qkv_check),
        Rewrite("qk_norm_split3", qk_norm_split3_pattern, qk_norm_replacement, qkv_inputs, qkv_check),
        Rewrite("qk_norm_split_qk", qk_norm_split_qk_pattern, qk_norm_qk_replacement, qkv_inputs, qkv_check),
        Rewrite("rms_norm", rms_norm_pattern, rms_norm_replacement, rms_inputs, rms_check),
    ]
