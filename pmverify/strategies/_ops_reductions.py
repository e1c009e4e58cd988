"""Reductions and scans of the op table: sum, mean, amax, amin, var, std, argmax, softmax,
log_softmax, cumsum, cumprod.

The reduced dims are drawn simplest first: one dim (the last first), written as is or counted from
the end (``[-1]``), two dims, or every dim (``sum.default(x)``, ``amax.default(x)``, ``argmax(x)``,
``var.correction(x)``: a 0-d result). Optional arguments are omitted first, then given:
``keepdim`` (positional, True or an explicit False), ``dtype=`` (``sum``, ``mean``, ``cumsum``,
``cumprod``, ``softmax``, ``log_softmax``), ``correction=`` (0 or 1) and keyword ``keepdim=`` of
``var`` / ``std``. A reduction over a dim of size 0 applies only where torch defines it (``sum``,
``cumsum``): ``mean`` would be NaN and ``amax`` raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from ._ops_core import (
    ANY,
    FLOAT,
    MAX_SIDE,
    NUMERIC,
    Builder,
    GraphOp,
    Val,
    bound_cap,
    kind_of,
    kwargs_of,
    of_kinds,
    optional,
    signed_dim,
)
from ._tensors import shapes

__all__ = ["REDUCTION_OPS"]

aten = torch.ops.aten
_SIDE2 = shapes(min_side=2, max_side=MAX_SIDE)


def _reduced_dims(
    b: Builder, x: Val, size_ok: Callable[[int], bool], bound_ok: Callable[[int], bool], *, full: bool = True
) -> list[int] | None:
    """Dims to reduce, as written in the graph: one (last first, maybe negative), two, or None for
    every dim (with ``full``). ``size_ok(size)``: a dim of that size may be reduced; ``bound_ok(n)``:
    the result's bound holds when ``n`` elements are reduced into one."""
    ones = [d for d in reversed(range(x.rank)) if size_ok(x.shape[d]) and bound_ok(x.shape[d])]
    one = [signed_dim(b.draw, b.draw(st.sampled_from(ones)), x.rank)] if ones else None
    forms = ["one"] if ones else []
    pairs = [(d1, d2) for d1 in ones for d2 in ones if d1 > d2 and bound_ok(x.shape[d1] * x.shape[d2])]
    if pairs:
        forms.append("two")
    if full and all(size_ok(side) for side in x.shape) and bound_ok(x.numel):
        forms.append("all")
    form = b.draw(st.sampled_from(forms))
    if form == "one":
        return one
    if form == "all":
        return None
    return [signed_dim(b.draw, d, x.rank) for d in b.draw(st.sampled_from(pairs))]


def _reducible(x: Val, size_ok: Callable[[int], bool], bound_ok: Callable[[int], bool]) -> bool:
    return any(size_ok(side) and bound_ok(side) for side in x.shape)


def _accumulator(x: Val) -> torch.dtype:
    """The dtype ``sum`` / ``cumsum`` give without ``dtype=``: int64 for integer and bool values."""
    return x.dtype if x.kind == "float" else torch.int64


def _dtype_options(
    b: Builder, x: Val, default: torch.dtype | None, *, floating: bool = False
) -> list[torch.dtype | None]:
    """``dtype=`` choices, omitted (None) first when ``default`` (the result without it) is allowed;
    floating dtypes only for a floating ``x`` or with ``floating``."""
    kinds = ("float",) if x.kind == "float" or floating else ("float", "int")
    explicit = [d for d in b.dtypes if kind_of(d) in kinds]
    return ([None] if default is not None and b.allows(default) else []) + explicit


def _summing(name: str, target_dim: Any, target_all: Any, *, mean: bool) -> GraphOp:
    """``sum`` / ``mean``: ``target_dim(x, dims[, keepdim][, dtype=])`` or ``target_all(x[, dtype=])``."""

    def size_ok(side: int) -> bool:
        return side > 0 or not mean

    def options(b: Builder, x: Val) -> list[tuple[torch.dtype | None, torch.dtype]]:
        default = None if mean and x.kind != "float" else _accumulator(x)
        result = []
        for dtype in _dtype_options(b, x, default, floating=mean):
            out = dtype or default
            if _reducible(x, size_ok, lambda n, out=out: x.bound * (1 if mean else n) <= bound_cap(out)):
                result.append((dtype, out))
        return result

    def emit(b: Builder, x: Val) -> None:
        dtype, out = b.draw(st.sampled_from(options(b, x)))
        dims = _reduced_dims(b, x, size_ok, lambda n: x.bound * (1 if mean else n) <= bound_cap(out))
        reduced = x.numel if dims is None else math.prod(x.shape[d] for d in dims)
        bound = x.bound * (1 if mean else reduced)
        kwargs = kwargs_of(dtype=dtype)
        keepdim = optional(b.draw, (True, False))
        if dims is None:
            b.call(target_all, (x.node,), kwargs, bound=bound, nonneg=x.nonneg)
            return
        args = (x.node, dims) if keepdim is None else (x.node, dims, keepdim)
        b.call(target_dim, args, kwargs, bound=bound, nonneg=x.nonneg)

    return GraphOp(
        name,
        1,
        emit,
        lambda b, x: bool(options(b, x)),
        kinds=ANY,
        empty_ok=True,
        operand_dtypes=_floats_for_mean if mean else _summable,
    )


def _summable(op: GraphOp, dtypes: Sequence[torch.dtype]) -> tuple[torch.dtype, ...]:
    """Bools accumulate in another dtype (int64, or a given ``dtype=``)."""
    other = any(d != torch.bool for d in dtypes)
    return tuple(d for d in of_kinds(op, dtypes) if d != torch.bool or other)


def _floats_for_mean(op: GraphOp, dtypes: Sequence[torch.dtype]) -> tuple[torch.dtype, ...]:
    """``mean`` of integers and bools needs a floating ``dtype=``."""
    floating = any(d.is_floating_point for d in dtypes)
    return tuple(d for d in dtypes if d.is_floating_point or floating)


def _extremum(name: str, target: Any) -> GraphOp:
    """``amax`` / ``amin``: ``target(x, dims[, keepdim])`` or ``target(x)`` (every dim)."""

    def emit(b: Builder, x: Val) -> None:
        dims = _reduced_dims(b, x, lambda side: side > 0, lambda n: True)
        keepdim = optional(b.draw, (True, False))
        if dims is None:
            b.call(target, (x.node,), bound=x.bound, nonneg=x.nonneg)
            return
        args = (x.node, dims) if keepdim is None else (x.node, dims, keepdim)
        b.call(target, args, bound=x.bound, nonneg=x.nonneg)

    return GraphOp(name, 1, emit, lambda b, x: any(side > 0 for side in x.shape), kinds=ANY, empty_ok=True)


def _spread(name: str, target: Any, bound: Callable[[float], float]) -> GraphOp:
    """``var`` / ``std``: ``target(x, dims, correction=c, keepdim=k)`` (each omitted first) or
    ``target(x)``; every reduced dim larger than the correction (1 when omitted)."""

    def emit(b: Builder, x: Val) -> None:
        correction = optional(b.draw, (0, 1))
        least = 1 if correction is None else correction
        dims = _reduced_dims(b, x, lambda side: side > least, lambda n: n > least)
        kwargs = kwargs_of(correction=correction)
        keepdim = optional(b.draw, (True, False))
        if dims is None:
            b.call(target, (x.node,), kwargs, bound=bound(x.bound), nonneg=True)
            return
        kwargs.update(kwargs_of(keepdim=keepdim))
        b.call(target, (x.node, dims), kwargs, bound=bound(x.bound), nonneg=True)

    def accepts(b: Builder, x: Val) -> bool:
        return any(side > 1 for side in x.shape) and bound(x.bound) <= bound_cap(x.dtype)

    return GraphOp(name, 1, emit, accepts, _SIDE2, kinds=FLOAT)


def _argmax(b: Builder, x: Val) -> None:
    """``argmax(x)`` (a 0-d index into the flattened value), ``argmax(x, d)`` or
    ``argmax(x, d, True)``: int64 indices."""
    d = b.draw(st.sampled_from([d for d in reversed(range(x.rank)) if x.shape[d] > 0]))
    dim = signed_dim(b.draw, d, x.rank)
    form = b.draw(st.sampled_from(("dim", "keepdim", "all")))
    if form == "all":
        b.call(aten.argmax.default, (x.node,), bound=x.numel - 1, nonneg=True)
        return
    args = (x.node, dim) + ((True,) if form == "keepdim" else ())
    b.call(aten.argmax.default, args, bound=x.shape[d] - 1, nonneg=True)


def _power(base: float, exponent: int) -> float:
    """``base ** exponent``, inf where a Python float overflows."""
    return math.inf if base > 1 and exponent * math.log(base) > 700 else base**exponent


def _needs_int64(op: GraphOp, dtypes: Sequence[torch.dtype]) -> tuple[torch.dtype, ...]:
    return tuple(d for d in dtypes if kind_of(d) in op.kinds) if torch.int64 in dtypes else ()


#: Forms of softmax-like ops, simplest first: the post-grad ``_softmax(x, d, False)``, then the
#: pre-grad ``softmax.int(x, d)`` and ``softmax.int(x, d, dtype)``.
SOFTMAX_FORMS = ("_softmax", "int", "int_dtype")


def _softmax_like(name: str, internal: Any, public: Any, bound: Callable[[float, int], float]) -> GraphOp:
    def emit(b: Builder, x: Val) -> None:
        dims = [
            d for d in reversed(range(x.rank)) if x.shape[d] > 0 and bound(x.bound, x.shape[d]) <= bound_cap(x.dtype)
        ]
        d = b.draw(st.sampled_from(dims))
        dim = signed_dim(b.draw, d, x.rank)
        targets = [t for t in b.dtypes if t.is_floating_point and bound(x.bound, x.shape[d]) <= bound_cap(t)]
        form = b.draw(st.sampled_from(SOFTMAX_FORMS if targets else SOFTMAX_FORMS[:2]))
        result = bound(x.bound, x.shape[d])
        if form == "_softmax":
            b.call(internal, (x.node, dim, False), bound=result, nonneg=name == "softmax")
        elif form == "int":
            b.call(public, (x.node, dim), bound=result, nonneg=name == "softmax")
        else:
            dtype = b.draw(st.sampled_from(targets))
            b.call(public, (x.node, dim, dtype), bound=result, nonneg=name == "softmax")

    def accepts(b: Builder, x: Val) -> bool:
        return any(side > 0 and bound(x.bound, side) <= bound_cap(x.dtype) for side in x.shape)

    return GraphOp(name, 1, emit, accepts, kinds=FLOAT, empty_ok=True)


def _scan(name: str, target: Any, bound: Callable[[float, int], float], kinds: tuple[str, ...]) -> GraphOp:
    """``cumsum`` / ``cumprod``: ``target(x, d[, dtype=])``; integer and bool values accumulate in
    int64 without ``dtype=``."""

    def options(b: Builder, x: Val) -> list[tuple[torch.dtype | None, torch.dtype]]:
        result = []
        for dtype in _dtype_options(b, x, _accumulator(x)):
            out = dtype or _accumulator(x)
            if any(bound(x.bound, side) <= bound_cap(out) for side in x.shape):
                result.append((dtype, out))
        return result

    def emit(b: Builder, x: Val) -> None:
        dtype, out = b.draw(st.sampled_from(options(b, x)))
        d = b.draw(
            st.sampled_from([d for d in reversed(range(x.rank)) if bound(x.bound, x.shape[d]) <= bound_cap(out)])
        )
        kwargs = kwargs_of(dtype=dtype)
        b.call(
            target, (x.node, signed_dim(b.draw, d, x.rank)), kwargs, bound=bound(x.bound, x.shape[d]), nonneg=x.nonneg
        )

    return GraphOp(
        name, 1, emit, lambda b, x: bool(options(b, x)), kinds=kinds, empty_ok=True, operand_dtypes=_summable
    )


#: The reductions and scans, simplest first.
REDUCTION_OPS: tuple[GraphOp, ...] = (
    _summing("sum", aten.sum.dim_IntList, aten.sum.default, mean=False),
    _summing("mean", aten.mean.dim, aten.mean.default, mean=True),
    _extremum("amax", aten.amax.default),
    _extremum("amin", aten.amin.default),
    _spread("var", aten.var.correction, lambda b: 4 * b * b),
    _spread("std", aten.std.correction, lambda b: 2 * b),
    GraphOp("argmax", 1, _argmax, lambda b, x: x.numel > 0, kinds=NUMERIC, operand_dtypes=_needs_int64),
    _softmax_like("softmax", aten._softmax.default, aten.softmax.int, lambda b, n: 1.0),
    _softmax_like("log_softmax", aten._log_softmax.default, aten.log_softmax.int, lambda b, n: 2 * b + math.log(n) + 1),
    _scan("cumsum", aten.cumsum.default, lambda b, n: b * max(n, 1), ANY),
    _scan("cumprod", aten.cumprod.default, lambda b, n: max(b, _power(b, max(n, 1))), NUMERIC),
)
