"""A project's own mutable custom ops, defined here as a project defines its kernels (torch.library),
for the tests of ``with_mutating_custom_ops(ops=...)``. Registered once per process on import."""

from __future__ import annotations

import torch
from torch import Tensor

NS = "pmverify_user_test"


def _norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _rotate(positions: Tensor, x: Tensor, head_size: int, cache: Tensor) -> Tensor:
    """Rotate each ``head_size`` chunk of ``x`` [T, H*D] by the angle table row of its token."""
    heads = x.reshape(x.shape[0], -1, head_size)
    cos, sin = cache[positions].to(x.dtype).chunk(2, dim=-1)
    a, b = heads.chunk(2, dim=-1)
    return torch.cat([a * cos[:, None] - b * sin[:, None], b * cos[:, None] + a * sin[:, None]], -1).reshape(x.shape)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _define() -> None:
    if hasattr(getattr(torch.ops, NS), "norm_out"):
        return
    lib = torch.library.Library(NS, "DEF")  # noqa: TID251 - kept alive below
    _LIBS.append(lib)
    lib.define("norm_out(Tensor(a!) result, Tensor x, Tensor weight, float eps) -> ()")
    lib.define("add_norm_(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()")
    lib.define("rope_(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, Tensor cache) -> ()")
    lib.define("scale_out(Tensor(a!) out, Tensor x, Tensor? bias=None, float? alpha=None) -> Tensor")
    lib.define("no_fake_(Tensor(a!) x) -> ()")
    lib.define("pure(Tensor x) -> Tensor")

    def norm_out(result, x, weight, eps):
        result.copy_(_norm(x, weight, eps))

    def norm_out_fake(result, x, weight, eps):
        _check(result.shape == x.shape and weight.shape == x.shape[-1:], "norm_out: shapes")

    def add_norm_(x, residual, weight, eps):
        residual.add_(x)
        x.copy_(_norm(residual, weight, eps))

    def add_norm_fake(x, residual, weight, eps):
        _check(residual.shape == x.shape and weight.shape == x.shape[-1:], "add_norm_: shapes")

    def rope_(positions, query, key, head_size, cache):
        query.copy_(_rotate(positions, query, head_size, cache))
        if key is not None:
            key.copy_(_rotate(positions, key, head_size, cache))

    def rope_fake(positions, query, key, head_size, cache):
        _check(query.dim() == 2 and query.shape[-1] % head_size == 0, "rope_: query")
        _check(cache.shape[-1] == head_size and positions.shape == query.shape[:1], "rope_: cache, positions")
        _check(key is None or (key.dim() == 2 and key.shape[0] == query.shape[0]), "rope_: key")
        _check(key is None or key.shape[-1] % head_size == 0, "rope_: key heads")

    def scale_out(out, x, bias=None, alpha=None):
        out.copy_(x * (1.0 if alpha is None else alpha) + (0 if bias is None else bias))
        return out.sum(-1)

    def scale_out_fake(out, x, bias=None, alpha=None):
        _check(out.shape == x.shape and (bias is None or bias.shape == x.shape), "scale_out: shapes")
        return x.new_empty(x.shape[:-1])

    for name, impl, fake in [
        ("norm_out", norm_out, norm_out_fake),
        ("add_norm_", add_norm_, add_norm_fake),
        ("rope_", rope_, rope_fake),
        ("scale_out", scale_out, scale_out_fake),
    ]:
        lib.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NS}::{name}", fake, lib=lib)
    lib.impl("no_fake_", lambda x: x.add_(1) and None, "CPU")
    lib.impl("pure", lambda x: x + 1, "CompositeExplicitAutograd")


_LIBS: list = []
_define()
ops = getattr(torch.ops, NS)
NORM_OUT, ADD_NORM, ROPE, SCALE_OUT = (
    ops.norm_out.default,
    ops.add_norm_.default,
    ops.rope_.default,
    ops.scale_out.default,
)
NO_FAKE, PURE = ops.no_fake_.default, ops.pure.default


def examples() -> dict:
    """One example call per op: 6 tokens, 16-wide hidden, 2 heads of 8 for the rotary op (a
    16-wide query, an 8-wide key, a 32-row angle table), vLLM's shapes made small."""
    x, w = torch.empty(6, 16), torch.empty(16)
    positions = torch.arange(6) * 5  # in [0, 32)
    return {
        NORM_OUT: [(x, x, w, 1e-6)],
        ADD_NORM: [(x, x, w, 1e-6)],
        ROPE: [(positions, torch.empty(6, 16), torch.empty(6, 8), 8, torch.empty(32, 8))],
        SCALE_OUT: [(x, x), {"out": x, "x": x, "bias": x, "alpha": 0.5}],
    }
