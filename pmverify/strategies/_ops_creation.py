"""Creation ops of the op table: ``full``, ``ones``, ``zeros``, ``empty`` + ``fill``, ``arange``,
``full_like`` / ``ones_like`` / ``zeros_like`` and ``scalar_tensor``.

Each is written as make_fx writes it, simplest first: bare (``full.default([4], 1.0)``), with
``device=`` and ``pin_memory=False`` (make_fx of a pre-grad graph), or with ``dtype=``, ``layout=``,
``device=`` and ``pin_memory=`` (Inductor's ``fwd_only`` traces); ``dtype=`` is omitted only where
torch's default (float32 for a float fill, int64 for ``arange`` and an int fill) is the dtype
wanted. A created tensor's shape is that of a recent value (so later ops combine them) or a new one.

Post-grad graphs hold only ``full`` (with every keyword; level "post_grad"): Inductor writes
``ones``, ``zeros``, ``empty`` + ``fill``, ``scalar_tensor`` and the ``*_like`` ops as ``full``, and
``arange`` as ``prims.iota``; those are drawn at levels "pre_grad" and "any".

``empty`` + ``fill``: the functional ``fill.Scalar`` of an ``empty.memory_format`` buffer, as
functionalized aten IR before decomposition holds it. Pre-grad graphs write ``empty(...).fill_(v)`` in place,
but ``fx_graphs`` cases are ``form="functional"`` (``planted`` requires functional contexts; the
in-place form is :func:`~pmverify.strategies.with_mutations`' business). The empty buffer is only
ever read by its ``fill``.
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import strategies as st

from ._ops_core import (
    ANY,
    ANY_ONLY,
    CPU,
    FRESH,
    MAX_SIDE,
    NUMERIC,
    POST_GRAD,
    PRE_GRAD,
    Builder,
    GraphOp,
    Val,
    at_level,
    kind_of,
)

__all__ = ["CREATION_OPS", "CREATION_FORMS"]

aten = torch.ops.aten

#: How a creation op's keyword arguments are written, simplest first, with the levels whose graphs
#: hold it: bare (a hand-written aten call), ``device=`` and ``pin_memory=`` (make_fx; ``dtype=``
#: too where it is not torch's default), or ``dtype=``, ``layout=``, ``device=``, ``pin_memory=``
#: (post-grad graphs: Inductor's decompositions write every one).
CREATION_FORMS = (("bare", ANY_ONLY), ("device", PRE_GRAD), ("full", POST_GRAD))
_DEFAULTS = {"float": torch.float32, "int": torch.int64, "bool": torch.bool}
_VALUES = {"float": (1.0, 0.0, -0.5, 2.0), "int": (1, 0, 3), "bool": (True, False)}


def _shape(b: Builder) -> tuple[int, ...]:
    """A recent value's shape (most recent first) or a new one."""
    recent = list(dict.fromkeys(v.shape for v in reversed(b.values) if v.rank >= 1 and v.numel > 0))[:4]
    i = b.draw(st.integers(0, len(recent)))
    return recent[i] if i < len(recent) else b.draw(FRESH)


def _kwargs(b: Builder, dtype: torch.dtype, default: torch.dtype) -> dict[str, Any]:
    """The keyword arguments of a creation op making ``dtype``; ``dtype=`` omitted (simplest) only
    when ``default`` (torch's choice without it) is ``dtype``."""
    given = b.draw(st.booleans())
    form = b.draw(st.sampled_from(at_level(b, CREATION_FORMS)))
    kwargs: dict[str, Any] = {}
    if form == "full" or dtype != default or given:
        kwargs["dtype"] = dtype
    if form == "full":
        kwargs["layout"] = torch.strided
    if form != "bare":
        kwargs.update(device=CPU, pin_memory=False)
    return kwargs


def _value(b: Builder, dtype: torch.dtype) -> Any:
    return b.draw(st.sampled_from(_VALUES[kind_of(dtype)]))


def _full(b: Builder, x: Val | None) -> None:
    dtype = b.draw(st.sampled_from(b.dtypes))
    value = _value(b, dtype)
    kwargs = _kwargs(b, dtype, _DEFAULTS[kind_of(dtype)])
    b.call(aten.full.default, (list(_shape(b)), value), kwargs, bound=abs(value), nonneg=value >= 0)


def _constant(name: str, target: Any, value: float) -> GraphOp:
    def emit(b: Builder, x: Val | None) -> None:
        dtype = b.draw(st.sampled_from(b.dtypes))
        b.call(target, (list(_shape(b)),), _kwargs(b, dtype, torch.float32), bound=value, nonneg=True)

    return GraphOp(name, 1, emit, kinds=ANY, nullary=True)


def _empty_fill(b: Builder, x: Val | None) -> None:
    dtype = b.draw(st.sampled_from(b.dtypes))
    value = _value(b, dtype)
    buffer = b.call(aten.empty.memory_format, (list(_shape(b)),), _kwargs(b, dtype, torch.float32))
    b.call(aten.fill.Scalar, (buffer, value), bound=abs(value), nonneg=value >= 0)


#: Forms of ``arange``, simplest first.
ARANGE_FORMS = ("end", "start", "start_step")


def _arange(b: Builder, x: Val | None) -> None:
    """``arange.default(end)``, ``arange.start(start, end)`` or ``arange.start_step(start, end,
    step)``: 1..8 values."""
    numeric = [d for d in b.dtypes if kind_of(d) in NUMERIC]
    dtype = b.draw(st.sampled_from(sorted(numeric, key=lambda d: d != torch.int64)))  # int64 (no dtype=) first
    form = b.draw(st.sampled_from(ARANGE_FORMS))
    end = b.draw(st.integers(1, MAX_SIDE))
    start = 0 if form == "end" else b.draw(st.integers(-4, end - 1))
    kwargs = _kwargs(b, dtype, torch.int64)
    if form == "end":
        b.call(aten.arange.default, (end,), kwargs, bound=end, nonneg=True)
    elif form == "start":
        b.call(aten.arange.start, (start, end), kwargs, bound=max(abs(start), end), nonneg=start >= 0)
    else:
        step = b.draw(st.integers(1, 3))
        b.call(aten.arange.start_step, (start, end, step), kwargs, bound=max(abs(start), end), nonneg=start >= 0)


def _numeric(op: GraphOp, dtypes: Any) -> tuple[torch.dtype, ...]:
    return tuple(d for d in dtypes if kind_of(d) in NUMERIC)


def _like(name: str, target: Any, value: Any) -> GraphOp:
    """``target(x[, v])`` with ``x``'s shape, maybe ``dtype=``, ``pin_memory=False`` and
    ``memory_format=torch.preserve_format``; ``value`` None: the fill value is drawn."""

    def emit(b: Builder, x: Val) -> None:
        dtype = b.draw(st.sampled_from([x.dtype, *[d for d in b.dtypes if d != x.dtype]]))
        fill = _value(b, dtype) if value is None else value
        given = b.draw(st.booleans())
        kwargs: dict[str, Any] = {} if dtype == x.dtype and not given else {"dtype": dtype}
        form = b.draw(st.sampled_from(("bare", "pin_memory", "memory_format")))
        if form == "pin_memory":
            kwargs["pin_memory"] = False
        elif form == "memory_format":
            kwargs["memory_format"] = torch.preserve_format
        args = (x.node,) if value is not None else (x.node, fill)
        b.call(target, args, kwargs, bound=abs(fill), nonneg=fill >= 0)

    return GraphOp(name, 1, emit, kinds=ANY, min_rank=0, empty_ok=True)


def _scalar_tensor(b: Builder, x: Val | None) -> None:
    """A 0-d tensor: ``scalar_tensor.default(c)`` and its keyword forms."""
    dtype = b.draw(st.sampled_from(b.dtypes))
    value = _value(b, dtype)
    kwargs = _kwargs(b, dtype, torch.float32)  # scalar_tensor(3) is float32 too
    b.call(aten.scalar_tensor.default, (value,), kwargs, bound=abs(value), nonneg=value >= 0)


#: The creation ops, simplest first.
CREATION_OPS: tuple[GraphOp, ...] = (
    GraphOp("full", 1, _full, kinds=ANY, nullary=True),
    _constant("ones", aten.ones.default, 1.0),
    _constant("zeros", aten.zeros.default, 0.0),
    GraphOp("empty_fill", 2, _empty_fill, kinds=ANY, nullary=True),
    GraphOp("arange", 1, _arange, kinds=NUMERIC, nullary=True, operand_dtypes=_numeric),
    _like("full_like", aten.full_like.default, None),
    _like("ones_like", aten.ones_like.default, 1),
    _like("zeros_like", aten.zeros_like.default, 0),
    GraphOp("scalar_tensor", 1, _scalar_tensor, kinds=ANY, nullary=True),
)
