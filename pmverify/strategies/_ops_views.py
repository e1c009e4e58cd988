"""View and layout ops of the op table, in the forms each graph level has them.

``view`` (of contiguous values; a size may be written -1), ``reshape`` as post-grad graphs hold it
(``clone`` + ``_unsafe_view``), ``aten_reshape`` (``aten.reshape``, as pre-grad and make_fx
pre-dispatch graphs hold it), ``unsafe_view`` (``_unsafe_view`` of a contiguous value),
``permute`` / ``transpose`` / ``unsqueeze`` / ``squeeze`` / ``flatten`` / ``unflatten`` with dims
maybe counted from the end, ``t``, ``expand`` with -1 for kept sizes, ``as_strided`` on contiguous
graph inputs (crops and permutations of the input's own layout, so every view stays inside its
storage) and ``clone`` with or without ``memory_format=``.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from ._ops_core import (
    ANY,
    MAX_NUMEL,
    MAX_RANK,
    MAX_SIDE,
    Builder,
    GraphOp,
    Val,
    identity_drawn,
    refactored,
    signed_dim,
    with_inferred,
)
from ._tensors import shapes

__all__ = ["VIEW_OPS"]

aten = torch.ops.aten


def _same_or_refactored(b: Builder, x: Val) -> list[int]:
    """A size list with ``x``'s element count: for a share of views (:func:`identity_drawn`) ``x``'s
    own shape (a no-op view, which a peephole folds)."""
    return list(x.shape) if identity_drawn(b.draw) else list(b.draw(refactored(x.numel)))


def _sizes(b: Builder, x: Val) -> list[int]:
    """A size list with ``x``'s element count, maybe with one -1 (not when it has no elements)."""
    sizes = _same_or_refactored(b, x)
    return with_inferred(b.draw, sizes) if x.numel else sizes


def _contiguous(b: Builder, x: Val) -> bool:
    return x.fake.is_contiguous()


def _view(b: Builder, x: Val) -> None:
    b.call(aten.view.default, (x.node, _sizes(b, x)), bound=x.bound, nonneg=x.nonneg)


def _reshape(b: Builder, x: Val) -> None:
    """The decomposed form of ``reshape`` on a tensor that cannot be viewed."""
    copy = b.call(aten.clone.default, (x.node,), {"memory_format": torch.contiguous_format})
    b.call(aten._unsafe_view.default, (copy, _same_or_refactored(b, x)), bound=x.bound, nonneg=x.nonneg)


def _aten_reshape(b: Builder, x: Val) -> None:
    b.call(aten.reshape.default, (x.node, _sizes(b, x)), bound=x.bound, nonneg=x.nonneg)


def _unsafe_view(b: Builder, x: Val) -> None:
    b.call(aten._unsafe_view.default, (x.node, _same_or_refactored(b, x)), bound=x.bound, nonneg=x.nonneg)


def _permute(b: Builder, x: Val) -> None:
    order = list(b.draw(st.permutations(range(x.rank))))
    if b.draw(st.booleans()):  # dims counted from the end, as ``x.permute(-1, -2)`` is traced
        order = [d - x.rank for d in order]
    b.call(aten.permute.default, (x.node, order), bound=x.bound, nonneg=x.nonneg)


def _transpose(b: Builder, x: Val) -> None:
    d0 = b.draw(st.integers(0, x.rank - 2))
    d1 = b.draw(st.integers(d0 + 1, x.rank - 1))
    dims = (signed_dim(b.draw, d0, x.rank), signed_dim(b.draw, d1, x.rank))
    b.call(aten.transpose.int, (x.node, *dims), bound=x.bound, nonneg=x.nonneg)


def _t(b: Builder, x: Val) -> None:
    b.call(aten.t.default, (x.node,), bound=x.bound, nonneg=x.nonneg)


def _unsqueeze(b: Builder, x: Val) -> None:
    dim = signed_dim(b.draw, b.draw(st.integers(0, x.rank)), x.rank + 1)
    b.call(aten.unsqueeze.default, (x.node, dim), bound=x.bound, nonneg=x.nonneg)


#: Forms of ``squeeze``, simplest first.
SQUEEZE_FORMS = ("dim", "dims", "all")


def _squeeze(b: Builder, x: Val) -> None:
    """``squeeze.dim(x, d)`` (a size-1 dim first; any other is a no-op), ``squeeze.dims(x, [..])``
    or ``squeeze.default(x)``."""
    ones = [d for d in range(x.rank) if x.shape[d] == 1]
    order = ones + [d for d in range(x.rank) if d not in ones]
    dim = signed_dim(b.draw, b.draw(st.sampled_from(order)), x.rank)
    form = b.draw(st.sampled_from(SQUEEZE_FORMS))
    if form == "all":
        b.call(aten.squeeze.default, (x.node,), bound=x.bound, nonneg=x.nonneg)
    elif form == "dim":
        b.call(aten.squeeze.dim, (x.node, dim), bound=x.bound, nonneg=x.nonneg)
    else:
        dims = sorted(b.draw(st.sets(st.sampled_from(order), min_size=1)))
        b.call(
            aten.squeeze.dims, (x.node, [signed_dim(b.draw, d, x.rank) for d in dims]), bound=x.bound, nonneg=x.nonneg
        )


def _flatten(b: Builder, x: Val) -> None:
    """``flatten.using_ints(x)``, ``(x, start)`` or ``(x, start, end)``."""
    start = b.draw(st.integers(0, x.rank - 1))
    end = b.draw(st.integers(start, x.rank - 1))
    args = (x.node,)
    if start != 0 or end != x.rank - 1:
        args += (signed_dim(b.draw, start, x.rank),)
    if end != x.rank - 1:
        args += (signed_dim(b.draw, end, x.rank),)
    b.call(aten.flatten.using_ints, args, bound=x.bound, nonneg=x.nonneg)


def _unflatten(b: Builder, x: Val) -> None:
    d = b.draw(st.integers(0, x.rank - 1))
    side = x.shape[d]
    sizes = list(b.draw(refactored(side, MAX_RANK - x.rank + 1)))
    sizes = with_inferred(b.draw, sizes) if side else sizes
    b.call(aten.unflatten.int, (x.node, signed_dim(b.draw, d, x.rank), sizes), bound=x.bound, nonneg=x.nonneg)


def _expand(b: Builder, x: Val) -> None:
    """Size-1 dims grow, and maybe a leading dim is added; kept sizes may be written -1; at most
    :data:`MAX_NUMEL` elements. For a share of nodes (:func:`identity_drawn`) to ``x``'s own shape."""
    same = identity_drawn(b.draw)
    room = 1 if same else MAX_NUMEL // max(1, x.numel)
    sizes = []
    if not same and x.rank < MAX_RANK and b.draw(st.booleans()):
        sizes.append(b.draw(st.integers(1, max(1, min(4, room)))))
        room //= sizes[0]
    for side in x.shape:
        if side == 1:
            side = b.draw(st.integers(1, max(1, min(MAX_SIDE, room))))
            room //= side
        sizes.append(side)
    leading = len(sizes) - x.rank
    for i in range(leading, len(sizes)):
        if b.draw(st.integers(0, 3)) == 3 and sizes[i] == x.shape[i - leading]:
            sizes[i] = -1
    b.call(aten.expand.default, (x.node, sizes), bound=x.bound, nonneg=x.nonneg)


def _as_strided(b: Builder, x: Val) -> None:
    """``as_strided(x, size, stride[, storage_offset])`` of a contiguous input: the input's own
    strides, permuted, over a crop of its sizes (every element read lies in the input)."""
    strides = x.fake.stride()
    order = list(b.draw(st.permutations(range(x.rank))))
    sizes, offset = [], 0
    for d in range(x.rank):
        crop = b.draw(st.integers(0, x.shape[d] - 1))
        start = b.draw(st.integers(0, crop))
        sizes.append(x.shape[d] - crop)
        offset += start * strides[d]
    size = [sizes[d] for d in order]
    stride = [strides[d] for d in order]
    args = (x.node, size, stride) + ((offset,) if b.draw(st.booleans()) or offset else ())
    b.call(aten.as_strided.default, args, bound=x.bound, nonneg=x.nonneg)


def _as_strided_accepts(b: Builder, x: Val) -> bool:
    return x.node is None or (x.node.op == "placeholder" and x.fake.is_contiguous())


#: ``memory_format=`` of ``clone``, simplest (omitted) first.
CLONE_FORMATS = (None, torch.contiguous_format, torch.preserve_format, torch.channels_last)


def _clone(b: Builder, x: Val) -> None:
    formats = CLONE_FORMATS if x.rank == 4 else CLONE_FORMATS[:3]
    memory_format = b.draw(st.sampled_from(formats))
    kwargs = {} if memory_format is None else {"memory_format": memory_format}
    b.call(aten.clone.default, (x.node,), kwargs, bound=x.bound, nonneg=x.nonneg)


def _numel(x: Val) -> int:
    return math.prod(x.shape)


_RANK2UP = shapes(min_dims=2, max_dims=3, max_side=MAX_SIDE)
_RANK1_2 = shapes(min_dims=1, max_dims=2, max_side=MAX_SIDE)


def _view_op(name: str, emit, accepts=lambda b, x: True, fresh=None, *, min_rank: int = 0, cost: int = 1) -> GraphOp:
    extra = {} if fresh is None else {"fresh": fresh}
    return GraphOp(name, cost, emit, accepts, kinds=ANY, min_rank=min_rank, empty_ok=True, **extra)


#: The view and layout ops, simplest first.
VIEW_OPS: tuple[GraphOp, ...] = (
    _view_op("view", _view, _contiguous),
    _view_op("reshape", _reshape, cost=2),
    _view_op("aten_reshape", _aten_reshape),
    _view_op("unsafe_view", _unsafe_view, _contiguous),
    _view_op("permute", _permute, lambda b, x: x.rank >= 2, _RANK2UP),
    _view_op("transpose", _transpose, lambda b, x: x.rank >= 2, _RANK2UP),
    _view_op("t", _t, lambda b, x: x.rank <= 2, _RANK1_2, min_rank=1),
    _view_op("unsqueeze", _unsqueeze, lambda b, x: x.rank < MAX_RANK),
    _view_op("squeeze", _squeeze, min_rank=1),
    _view_op("flatten", _flatten, min_rank=1),
    _view_op("unflatten", _unflatten, min_rank=1),
    _view_op("expand", _expand, lambda b, x: x.rank < MAX_RANK or 1 in x.shape),
    GraphOp("as_strided", 1, _as_strided, _as_strided_accepts, kinds=ANY),
    _view_op("clone", _clone),
)
