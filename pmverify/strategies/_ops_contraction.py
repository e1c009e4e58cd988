"""Contractions of the op table: ``mm``, ``bmm``, ``matmul`` (decomposed), ``addmm`` and
``baddbmm`` with their ``beta`` / ``alpha`` keywords omitted or given (0.5, 2, -1; ``beta=0``
too, which makes the bias unread).

Floating operands of one dtype; the right operand's bound is limited so that the product stays
under the result dtype's cap (``K * |x| * |y|``, plus the scaled bias).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from ._ops_core import FLOAT, MAX_NUMEL, MAX_SIDE, Builder, GraphOp, Val, bound_cap, broadcast, broadcastable
from ._tensors import DEFAULT_BOUND, shapes

__all__ = ["CONTRACTION_OPS", "BETAS", "ALPHAS"]

aten = torch.ops.aten

#: ``beta`` and ``alpha`` values drawn after the omitted default (at most 2 in magnitude).
BETAS = (0.5, 2.0, -1.0, 0)
ALPHAS = (2.0, 0.5, -1.0)
_TOP = 2.0  # the largest |beta| and |alpha|


def _rhs(b: Builder, x: Val, batch: tuple[int, ...], rows: int, limit: float) -> Val:
    """The right operand ``[*batch, K, N]`` of a product with ``x[..., M, K]`` (K = ``x.shape[-1]``),
    with ``M * N`` elements at most :data:`MAX_NUMEL` and bound at most ``limit``."""
    k = x.shape[-1]
    widest = max(1, min(MAX_SIDE, MAX_NUMEL // max(1, rows * math.prod(batch))))

    def accepts(v: Val) -> bool:
        return v.dtype == x.dtype and v.shape[:-1] == (*batch, k) and v.shape[-1] <= widest and v.bound <= limit

    return b.operand(accepts, st.integers(1, widest).map(lambda n: (*batch, k, n)), [x.dtype])


def _product_bound(x: Val, y_bound: float) -> float:
    return max(1, x.shape[-1]) * x.bound * y_bound


def _limit(x: Val, scale: float = 1.0, bias: float = 0.0) -> float:
    """Largest bound of a right operand that keeps ``scale * x @ y`` (+ bias) under the cap."""
    room = bound_cap(x.dtype) - bias
    return room / (scale * max(1, x.shape[-1]) * x.bound) if x.bound else math.inf


def _product_accepts(rank: int, scaled: bool = False, contiguous: bool = False) -> Callable[[Any, Val], bool]:
    def accepts(b: Builder, x: Val) -> bool:
        if x.rank != rank or (contiguous and not x.fake.is_contiguous()):
            return False
        top = _TOP if scaled else 1.0
        return top * DEFAULT_BOUND + top * _product_bound(x, DEFAULT_BOUND) <= bound_cap(x.dtype)

    return accepts


def _mm(b: Builder, x: Val) -> None:
    y = _rhs(b, x, (), x.shape[0], _limit(x))
    b.call(aten.mm.default, (x.node, y.node), bound=_product_bound(x, y.bound))


def _bmm(b: Builder, x: Val) -> None:
    y = _rhs(b, x, x.shape[:1], x.shape[1], _limit(x))
    b.call(aten.bmm.default, (x.node, y.node), bound=_product_bound(x, y.bound))


def _matmul(b: Builder, x: Val) -> None:
    """The decomposed form of ``torch.matmul`` of ``x[B, M, K]`` and ``y[K, N]``: view to 2-D, mm,
    view back."""
    batch, rows, k = x.shape
    y = _rhs(b, x, (), batch * rows, _limit(x))
    flat = b.call(aten.view.default, (x.node, [batch * rows, k]))
    product = b.call(aten.mm.default, (flat, y.node))
    b.call(aten._unsafe_view.default, (product, [batch, rows, y.shape[-1]]), bound=_product_bound(x, y.bound))


def _scaled(b: Builder) -> dict[str, Any]:
    """``beta`` / ``alpha`` keywords: none (simplest), ``beta``, ``alpha`` or both."""
    form = b.draw(st.sampled_from(("none", "beta", "alpha", "both")))
    kwargs = {}
    if form in ("beta", "both"):
        kwargs["beta"] = b.draw(st.sampled_from(BETAS))
    if form in ("alpha", "both"):
        kwargs["alpha"] = b.draw(st.sampled_from(ALPHAS))
    return kwargs


def _biased(b: Builder, x: Val, target: Any, batch: tuple[int, ...]) -> None:
    """``target(bias, x, y[, beta=][, alpha=])``: a bias that broadcasts to the product's shape."""
    y = _rhs(b, x, batch, x.shape[-2], _limit(x, _TOP, _TOP * DEFAULT_BOUND))
    out = (*batch, x.shape[-2], y.shape[-1])
    product = _TOP * _product_bound(x, y.bound)
    room = (bound_cap(x.dtype) - product) / _TOP

    def accepts(v: Val) -> bool:
        return v.dtype == x.dtype and v.rank <= len(out) and broadcast(v.shape, out) == out and v.bound <= room

    bias = b.operand(accepts, broadcastable(out), [x.dtype])
    kwargs = _scaled(b)
    bound = abs(kwargs.get("beta", 1)) * bias.bound + abs(kwargs.get("alpha", 1)) * _product_bound(x, y.bound)
    b.call(target, (bias.node, x.node, y.node), kwargs, bound=bound)


_RANK2 = shapes(min_dims=2, max_dims=2, max_side=MAX_SIDE)
_RANK3 = shapes(min_dims=3, max_dims=3, max_side=MAX_SIDE)

#: The contractions, simplest first.
CONTRACTION_OPS: tuple[GraphOp, ...] = (
    GraphOp("mm", 1, _mm, _product_accepts(2), _RANK2, kinds=FLOAT),
    GraphOp("bmm", 1, _bmm, _product_accepts(3), _RANK3, kinds=FLOAT),
    GraphOp("matmul", 3, _matmul, _product_accepts(3, contiguous=True), _RANK3, kinds=FLOAT),
    GraphOp(
        "addmm",
        1,
        lambda b, x: _biased(b, x, aten.addmm.default, ()),
        _product_accepts(2, scaled=True),
        _RANK2,
        kinds=FLOAT,
    ),
    GraphOp(
        "baddbmm",
        1,
        lambda b, x: _biased(b, x, aten.baddbmm.default, x.shape[:1]),
        _product_accepts(3, scaled=True),
        _RANK3,
        kinds=FLOAT,
    ),
)
