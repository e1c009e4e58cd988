"""Casts of the op table: ``prims.convert_element_type`` and the copying casts (``_to_copy``,
``to.dtype``), to a dtype of the case that holds the value without overflow."""

from __future__ import annotations

import math
from typing import Any

import torch
from hypothesis import strategies as st

from ._ops_core import CPU, Builder, Val, bound_cap, identity_drawn

__all__ = ["TO_COPY_FORMS", "cast_targets", "convert", "to_copy"]

aten = torch.ops.aten
prims = torch.ops.prims


def cast_targets(b: Builder, x: Val) -> list[torch.dtype]:
    """The case's dtypes ``x`` can be cast to without overflow (``x``'s own first when listed
    first: a no-op cast, which real graphs hold too)."""
    return [d for d in b.dtypes if (1.0 if d == torch.bool else x.bound) <= bound_cap(d)]


def _cast_bound(x: Val, dtype: torch.dtype) -> float:
    if dtype == torch.bool:
        return 1.0
    return x.bound if dtype.is_floating_point or x.kind != "float" else math.floor(x.bound)


def _cast_dtype(b: Builder, x: Val) -> torch.dtype:
    """A dtype to cast ``x`` to: for a share of casts (:func:`identity_drawn`) its own, a no-op."""
    return x.dtype if identity_drawn(b.draw) else b.draw(st.sampled_from(cast_targets(b, x)))


def convert(b: Builder, x: Val) -> None:
    dtype = _cast_dtype(b, x)
    b.call(prims.convert_element_type.default, (x.node, dtype), bound=_cast_bound(x, dtype), nonneg=x.nonneg)


#: Forms of a copying cast, simplest first.
TO_COPY_FORMS = ("dtype", "non_blocking", "memory_format", "layout_device", "to", "to_copy")


def to_copy(b: Builder, x: Val) -> None:
    """``_to_copy(x, dtype=d)`` (with ``non_blocking``, ``memory_format``, or ``layout`` and
    ``device`` too), or ``to.dtype(x, d)`` / ``to.dtype(x, d, False, True)`` (``copy=True``)."""
    dtype = _cast_dtype(b, x)
    form = b.draw(st.sampled_from(TO_COPY_FORMS))
    bound, nonneg = _cast_bound(x, dtype), x.nonneg
    if form == "to":
        b.call(aten.to.dtype, (x.node, dtype), bound=bound, nonneg=nonneg)
    elif form == "to_copy":
        b.call(aten.to.dtype, (x.node, dtype, False, True), bound=bound, nonneg=nonneg)
    else:
        kwargs: dict[str, Any] = {"dtype": dtype}
        if form == "non_blocking":
            kwargs["non_blocking"] = b.draw(st.booleans())
        elif form == "memory_format":
            kwargs["memory_format"] = b.draw(st.sampled_from((torch.preserve_format, torch.contiguous_format)))
        elif form == "layout_device":
            kwargs.update(layout=torch.strided, device=CPU)
        b.call(aten._to_copy.default, (x.node,), kwargs, bound=bound, nonneg=nonneg)
