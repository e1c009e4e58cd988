"""Slicing, splitting, joining, scattering and indexing ops of the op table.

``slice`` is drawn in the forms dynamo and make_fx write: ``aten.slice.Tensor(x, dim, start, end)``
starting at 0 or inside the dim and ending at its end, one short of it (``x[:-1]``), inside or at
the start (an empty result): a start written as an int, negative (``-size`` for 0) or None, an end
written as an int, ``9223372036854775807`` (``x[a:]``), past the size, None or negative, a ``step``
of 1 (omitted or given), 2 or 3, and a dim maybe counted from the end (None bounds and a written
step of 1 at level "any" only: traced graphs write both bounds and omit a step of 1). Also ``select``,
``narrow``, ``unbind``, ``split`` (``split_with_sizes`` or ``split.Tensor``), ``cat``,
``slice_scatter`` / ``select_scatter``, and ``index_select`` / ``index.Tensor`` / ``gather`` with
index tensors valid by construction (int values >= 0 below the indexed size: recent ones, or new
inputs drawn in range).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from ._ops_core import (
    ANY,
    ANY_ONLY,
    EVERY_LEVEL,
    INT64_MAX,
    MAX_NUMEL,
    MAX_SIDE,
    Builder,
    GraphOp,
    Val,
    at_level,
    kind_of,
    signed_dim,
)
from ._tensors import shapes

__all__ = [
    "SLICING_OPS",
    "START_AT",
    "END_AT",
    "START_FORMS",
    "END_FORMS",
    "INNER_END_FORMS",
    "STEP_FORMS",
    "SCATTER_FORMS",
]

aten = torch.ops.aten

#: Where a slice starts, simplest first: at 0, or anywhere in the dim.
START_AT = ("zero", "inside")
#: Where it ends, simplest first: at the dim's end, one short of it (``x[:-1]``), anywhere after
#: the start, or at the start (an empty result).
END_AT = ("end", "one_short", "inside", "empty")
#: How a slice's start is written, simplest first, with the levels whose graphs hold it (``none``:
#: only for 0; traced graphs always write the start, ``x[:2]`` as ``slice(x, 0, 0, 2)``).
START_FORMS = (("int", EVERY_LEVEL), ("negative", EVERY_LEVEL), ("none", ANY_ONLY))
#: How an end at the dim's end is written, simplest first: the size, dynamo's
#: ``9223372036854775807`` for ``x[a:]``, past the size (``x[:100]``), None (and so omitted, the
#: 3-argument ``slice(x, dim, start)`` of a hand-written aten call: at level "any" only).
END_FORMS = (("int", EVERY_LEVEL), ("max", EVERY_LEVEL), ("past", EVERY_LEVEL), ("none", ANY_ONLY))
#: How any other end is written: an int, or counted from the end (``-1``).
INNER_END_FORMS = ("int", "negative")
#: A slice's step, simplest first: omitted (1), 2, 3, or 1 written out (traced graphs omit it).
STEP_FORMS = ((None, EVERY_LEVEL), (2, EVERY_LEVEL), (3, EVERY_LEVEL), (1, ANY_ONLY))


def _bounds(b: Builder, side: int) -> tuple[Any, Any]:
    """A slice's (start, end) over a dim of ``side`` elements, as written in a graph. Where it
    starts and ends is drawn first, as a kind (0 or inside; the end, one short of it, inside or
    empty), so that the boundaries real graphs hold (``x[:-1]``, ``x[1:]``, ``x[-n:]``) are common,
    then how each is written. Every kind takes the same choices, so the plain form (``x[0:side]``)
    is the simplest."""
    start_at = b.draw(st.sampled_from(START_AT))
    anywhere = b.draw(st.integers(0, side))
    first = 0 if start_at == "zero" else anywhere
    start_form = b.draw(st.sampled_from(at_level(b, START_FORMS)))
    if start_form == "negative" and first < side:
        start: Any = first - side  # at 0: -side, which normalises to 0
    elif start_form == "none" and first == 0:
        start = None
    else:
        start = first
    end_at = b.draw(st.sampled_from(END_AT))
    after = b.draw(st.integers(0, side))
    last = {
        "end": side,
        "one_short": max(first, side - 1),
        "inside": first + after % (side - first) + 1 if side > first else side,
        "empty": first,
    }[end_at]
    if last == side:
        end_form = b.draw(st.sampled_from(at_level(b, END_FORMS)))
        return start, {"int": side, "max": INT64_MAX, "past": side + 1 + after, "none": None}[end_form]
    end_form = b.draw(st.sampled_from(INNER_END_FORMS))
    return start, last - side if end_form == "negative" else last


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (type(value) is type(default) and value == default)


def _trimmed(args: Sequence[Any], defaults: Sequence[Any]) -> tuple[Any, ...]:
    """``args`` without the trailing arguments equal to their schema defaults (``defaults`` are
    those of the last ``len(defaults)`` arguments), as make_fx writes a call."""
    args = list(args)
    offset = len(args) - len(defaults)
    while len(args) > offset and _is_default(args[-1], defaults[len(args) - 1 - offset]):
        args.pop()
    return tuple(args)


def _slice(b: Builder, x: Val) -> None:
    d = b.draw(st.integers(0, x.rank - 1))
    start, end = _bounds(b, x.shape[d])
    step = b.draw(st.sampled_from(at_level(b, STEP_FORMS)))
    args = [x.node, signed_dim(b.draw, d, x.rank), start, end] + ([] if step is None else [step])
    if step is None:
        args = list(_trimmed(args, (None, None)))
    b.call(aten.slice.Tensor, tuple(args), bound=x.bound, nonneg=x.nonneg)


def _nonempty_dims(x: Val) -> list[int]:
    return [d for d in reversed(range(x.rank)) if x.shape[d] > 0]


def _select(b: Builder, x: Val) -> None:
    d = b.draw(st.sampled_from(_nonempty_dims(x)))
    index = b.draw(st.integers(0, x.shape[d] - 1))
    if b.draw(st.booleans()):
        index -= x.shape[d]
    b.call(aten.select.int, (x.node, signed_dim(b.draw, d, x.rank), index), bound=x.bound, nonneg=x.nonneg)


def _narrow(b: Builder, x: Val) -> None:
    d = b.draw(st.integers(0, x.rank - 1))
    side = x.shape[d]
    start = b.draw(st.integers(0, side))
    length = b.draw(st.integers(min(1, side - start), side - start))
    if b.draw(st.booleans()) and start < side:
        start -= side
    b.call(aten.narrow.default, (x.node, signed_dim(b.draw, d, x.rank), start, length), bound=x.bound, nonneg=x.nonneg)


def _unbind_dims(x: Val) -> list[int]:
    return [d for d in range(x.rank) if 1 <= x.shape[d] <= MAX_SIDE]


def _unbind(b: Builder, x: Val) -> None:
    """``unbind.int(x)`` (dim 0) or ``unbind.int(x, d)``, and a ``getitem`` per piece."""
    d = b.draw(st.sampled_from(_unbind_dims(x)))
    args = (x.node,) if d == 0 and b.draw(st.booleans()) is False else (x.node, signed_dim(b.draw, d, x.rank))
    pieces = b.call(aten.unbind.int, args)
    for i in range(x.shape[d]):
        b.call(operator.getitem, (pieces, i), bound=x.bound, nonneg=x.nonneg)


def _split_dims(x: Val) -> list[int]:
    return [d for d in reversed(range(x.rank)) if 2 <= x.shape[d]]


def _split(b: Builder, x: Val) -> None:
    """``split_with_sizes`` into 2..4 pieces, or ``split.Tensor(x, size, dim)`` (the last piece
    shorter), and a ``getitem`` per piece."""
    d = b.draw(st.sampled_from(_split_dims(x)))
    side = x.shape[d]
    dim = signed_dim(b.draw, d, x.rank)
    cuts = sorted(b.draw(st.sets(st.integers(1, side - 1), min_size=1, max_size=min(3, side - 1))))
    size = b.draw(st.integers(max(1, math.ceil(side / 4)), side - 1))
    if b.draw(st.booleans()):
        count = math.ceil(side / size)
        pieces = b.call(aten.split.Tensor, (x.node, size, dim))
    else:
        sizes = [high - low for low, high in zip([0, *cuts], [*cuts, side], strict=True)]
        count = len(sizes)
        pieces = b.call(aten.split_with_sizes.default, (x.node, sizes, dim))
    for i in range(count):
        b.call(operator.getitem, (pieces, i), bound=x.bound, nonneg=x.nonneg)


def _cat(b: Builder, x: Val) -> None:
    """``cat([x, y])`` (dim 0 omitted) or ``cat([x, y], dim)``."""
    d = b.draw(st.integers(0, x.rank - 1))
    per_row = math.prod(x.shape[:d] + x.shape[d + 1 :])  # elements per index along d
    room = min(MAX_SIDE, (MAX_NUMEL - x.numel) // max(1, per_row))

    def accepts(v: Val) -> bool:
        same = v.rank == x.rank and all(v.shape[i] == x.shape[i] for i in range(x.rank) if i != d)
        return same and v.dtype == x.dtype and v.shape[d] <= room

    fresh = st.integers(1, room).map(lambda n: x.shape[:d] + (n,) + x.shape[d + 1 :])
    y = b.operand(accepts, fresh, [x.dtype])
    dim = signed_dim(b.draw, d, x.rank)
    args = ([x.node, y.node],) if dim == 0 else ([x.node, y.node], dim)
    b.call(aten.cat.default, args, bound=max(x.bound, y.bound), nonneg=x.nonneg and y.nonneg)


def _exact(b: Builder, x: Val, shape: tuple[int, ...]) -> Val:
    """A value of ``x``'s dtype and exactly ``shape`` (a recent one, or a new input)."""
    return b.operand(lambda v: v.dtype == x.dtype and v.shape == shape, st.just(shape), [x.dtype])


#: How a ``slice_scatter`` is written, simplest first, with the levels whose graphs hold it:
#: ``written``: ``slice_scatter(x, src, dim, start, end)`` with start and end written (the end an
#: int or 9223372036854775807) and the step only when not 1, as functionalization writes
#: ``x[a:b].copy_(y)`` and ``x[a::2].copy_(y)``; ``tail``: ``slice_scatter(x, src, dim, start)``
#: (start > 0), as the dispatcher records an explicit ``torch.slice_scatter(x, y, dim, start)``
#: (trailing defaults omitted); ``free``: any start, end (None too) and step, trailing defaults
#: omitted, down to ``slice_scatter(x, src)`` and ``slice_scatter(x, src, dim)``, which only a
#: whole-dim overwrite written by hand gives.
SCATTER_FORMS = (("written", EVERY_LEVEL), ("tail", EVERY_LEVEL), ("free", ANY_ONLY))


def _slice_scatter(b: Builder, x: Val) -> None:
    """``slice_scatter(x, src, dim, start, end[, step])`` in a form of :data:`SCATTER_FORMS`,
    ``src`` shaped like the slice."""
    d = b.draw(st.integers(0, x.rank - 1))
    side = x.shape[d]
    form = b.draw(st.sampled_from(at_level(b, SCATTER_FORMS)))
    if form == "tail" and side == 0:
        form = "written"  # no start > 0 to write
    if form == "written":
        start = b.draw(st.integers(0, side))
        end = b.draw(st.sampled_from((side, INT64_MAX))) if b.draw(st.booleans()) else None
        if end is None:
            end = b.draw(st.integers(min(start + 1, side), side))
        step = b.draw(st.sampled_from((1, 2)))
        tail = [] if step == 1 else [step]
    elif form == "tail":
        start, end, step, tail = b.draw(st.integers(1, side)), None, 1, []
    else:
        start = b.draw(st.integers(0, side))
        if b.draw(st.booleans()):
            end = b.draw(st.sampled_from((None, INT64_MAX, side)))
        else:
            end = b.draw(st.integers(min(start + 1, side), side))
        step = b.draw(st.sampled_from((1, 2)))
    length = len(range(start, side if end is None else min(end, side), step))
    src = _exact(b, x, x.shape[:d] + (length,) + x.shape[d + 1 :])
    dim = signed_dim(b.draw, d, x.rank)
    if form == "written":
        args = (x.node, src.node, dim, start, end, *tail)
    elif form == "tail":
        args = (x.node, src.node, dim, start)
    else:
        args = _trimmed([x.node, src.node, dim, start, end, step], (0, None, None, 1))
    b.call(aten.slice_scatter.default, args, bound=max(x.bound, src.bound), nonneg=x.nonneg and src.nonneg)


def _select_scatter(b: Builder, x: Val) -> None:
    d = b.draw(st.sampled_from(_nonempty_dims(x)))
    index = b.draw(st.integers(0, x.shape[d] - 1)) - (x.shape[d] if b.draw(st.booleans()) else 0)
    src = _exact(b, x, x.shape[:d] + x.shape[d + 1 :])
    args = (x.node, src.node, signed_dim(b.draw, d, x.rank), index)
    b.call(aten.select_scatter.default, args, bound=max(x.bound, src.bound), nonneg=x.nonneg and src.nonneg)


def _index_dtypes(b: Builder, allowed: Sequence[torch.dtype]) -> list[torch.dtype]:
    return [d for d in allowed if b.allows(d)]


def _index(b: Builder, shape_ok: Any, fresh: st.SearchStrategy, high: int, dtypes: Sequence[torch.dtype]) -> Val:
    """An index value: integers in [0, ``high``) of one of ``dtypes`` (a recent one that
    ``shape_ok``, or a new input drawn in range)."""

    def accepts(v: Val) -> bool:
        return v.dtype in dtypes and v.nonneg and v.bound < high and shape_ok(v.shape)

    return b.operand(accepts, fresh, dtypes, elements=st.integers(0, high - 1))


def _index_select(b: Builder, x: Val) -> None:
    """``index_select(x, dim, index)`` (a 1-D index), or ``index.Tensor(x, [index])`` for dim 0
    (how make_fx decomposes ``x[index]``)."""
    d = b.draw(st.sampled_from(_index_dims(x)))
    dtypes = _index_dtypes(b, (torch.int64, torch.int32))
    index = _index(
        b,
        lambda s: len(s) == 1 and 1 <= s[0] <= MAX_SIDE,
        st.integers(1, MAX_SIDE).map(lambda n: (n,)),
        x.shape[d],
        dtypes,
    )
    if b.draw(st.booleans()) and d == 0:
        b.call(aten.index.Tensor, (x.node, [index.node]), bound=x.bound, nonneg=x.nonneg)
        return
    b.call(
        aten.index_select.default, (x.node, signed_dim(b.draw, d, x.rank), index.node), bound=x.bound, nonneg=x.nonneg
    )


def _index_dims(x: Val) -> list[int]:
    """Dims along which up to :data:`MAX_SIDE` indices keep the result within :data:`MAX_NUMEL`."""
    return [d for d in _nonempty_dims(x) if x.numel // x.shape[d] * MAX_SIDE <= MAX_NUMEL]


def _gather(b: Builder, x: Val) -> None:
    """``gather(x, dim, index)``: an int64 index of ``x``'s rank, no larger than ``x`` off ``dim``."""
    d = b.draw(st.sampled_from(_index_dims(x)))

    def shape_ok(s: tuple[int, ...]) -> bool:
        return (
            len(s) == x.rank and all(1 <= s[i] <= x.shape[i] for i in range(x.rank) if i != d) and 1 <= s[d] <= MAX_SIDE
        )

    fresh = st.tuples(*(st.integers(1, MAX_SIDE if i == d else x.shape[i]) for i in range(x.rank)))
    index = _index(b, shape_ok, fresh, x.shape[d], [torch.int64])
    b.call(aten.gather.default, (x.node, signed_dim(b.draw, d, x.rank), index.node), bound=x.bound, nonneg=x.nonneg)


def _needs_index(allowed: tuple[torch.dtype, ...]):
    def dtypes(op: GraphOp, case: Sequence[torch.dtype]) -> tuple[torch.dtype, ...]:
        if not any(d in case for d in allowed):
            return ()
        return tuple(d for d in case if kind_of(d) in op.kinds)

    return dtypes


_SIDE2 = shapes(min_side=2, max_side=MAX_SIDE)


#: The slicing, joining and indexing ops, simplest first.
SLICING_OPS: tuple[GraphOp, ...] = (
    GraphOp("slice", 1, _slice, kinds=ANY, empty_ok=True),
    GraphOp("select", 1, _select, lambda b, x: bool(_nonempty_dims(x)), kinds=ANY, empty_ok=True),
    GraphOp("narrow", 1, _narrow, kinds=ANY, empty_ok=True),
    GraphOp("unbind", 1, _unbind, lambda b, x: bool(_unbind_dims(x)), kinds=ANY, empty_ok=True),
    GraphOp("split", 1, _split, lambda b, x: bool(_split_dims(x)), _SIDE2, kinds=ANY, empty_ok=True),
    GraphOp("cat", 1, _cat, lambda b, x: 2 * x.numel <= MAX_NUMEL, kinds=ANY, empty_ok=True),
    GraphOp("slice_scatter", 1, _slice_scatter, lambda b, x: 2 * x.numel <= MAX_NUMEL, kinds=ANY, empty_ok=True),
    GraphOp("select_scatter", 1, _select_scatter, lambda b, x: bool(_nonempty_dims(x)), kinds=ANY, empty_ok=True),
    GraphOp(
        "index_select",
        1,
        _index_select,
        lambda b, x: bool(_index_dims(x)),
        kinds=ANY,
        empty_ok=True,
        operand_dtypes=_needs_index((torch.int64, torch.int32)),
    ),
    GraphOp(
        "gather",
        1,
        _gather,
        lambda b, x: x.numel > 0 and bool(_index_dims(x)),
        kinds=ANY,
        operand_dtypes=_needs_index((torch.int64,)),
    ),
)
