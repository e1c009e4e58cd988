"""The memory a node's tensor covers: its storage, offset, sizes and strides, for the oracles that
ask whether a read and a write touch the same elements (aliasing, mutation_barriers).

A layout is *replayed*, not read from each node's fake value (which a pass that rewires a view's
arguments leaves stale): from the graph input or allocation the tensor lives in (its fake value,
``meta["val"]``, gives the sizes, strides and offset), each view on the way (an op whose schema
returns an alias of its input, ``aten._unsafe_view``, an element of a list of views, an in-place
op's result) is run again on a meta tensor of that layout. Every answer is conservative: unknown
(no fake value at the root, symbolic sizes, a view of unknown arguments) never says "disjoint" nor
"covered"."""

from __future__ import annotations

import contextlib
import operator
import threading
from collections.abc import Iterator

import torch

__all__ = ["ENUMERATED", "Layout", "addresses", "covers", "disjoint", "layout", "scattered"]

#: ``(root node name, offset, sizes, strides, item size)``, in elements of that item size.
Layout = tuple[str, int, tuple[int, ...], tuple[int, ...], int]

#: Above this many elements, two views whose address ranges meet are taken to overlap.
ENUMERATED = 1 << 20


def layout(node: torch.fx.Node) -> Layout | None:
    """``node``'s layout (see the module docstring), or None where it is unknown or symbolic;
    computed once per node within :func:`remembered`."""
    memo = getattr(_MEMO, "layouts", None)
    if memo is None:
        return _layout(node)
    found = memo.get(node, _UNSEEN)
    if found is _UNSEEN:
        found = memo[node] = _layout(node)
    return found


_MEMO = threading.local()
_UNSEEN = object()


@contextlib.contextmanager
def remembered() -> Iterator[None]:
    """Within the block, :func:`layout` replays each node once (in this thread): for an oracle
    that asks of the same nodes many times, over graphs that do not change within the block.
    Why: the mutation-barrier oracle builds its version model of a graph two to four times a case,
    and replaying layouts was half of that."""
    outer = getattr(_MEMO, "layouts", None)
    if outer is None:
        _MEMO.layouts = {}
    try:
        yield
    finally:
        if outer is None:
            _MEMO.layouts = None


def _layout(node: torch.fx.Node) -> Layout | None:
    replayed = _replay(node, 0)
    if replayed is None or not isinstance(replayed[0], torch.Tensor):
        return None
    value, root = replayed
    return root, value.storage_offset(), tuple(value.shape), tuple(value.stride()), value.element_size()


def _ints(value: object) -> bool:
    if isinstance(value, (list, tuple)):
        # (a loop, not all() over a generator: asked of every size and stride, it was hot)
        for v in value:
            if type(v) is not int and not _ints(v):
                return False
        return True
    return not isinstance(value, (torch.fx.Node, torch.SymInt, torch.Tensor))


def _replay(node: torch.fx.Node, depth: int) -> tuple[object, str] | None:
    """``(a meta tensor, or list of them, laid out as node's value; its root's name)`` or None."""
    if depth > 64 or node.op not in ("placeholder", "get_attr", "call_function"):
        return None
    target = node.target
    if target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and isinstance(node.args[1], int):
        source = node.args[0]
        schema = getattr(source.target, "_schema", None)
        if schema is None or not schema.returns or schema.returns[0].alias_info is None:
            return _root(node)
        base = _replay(source, depth + 1)
        if base is None or not isinstance(base[0], (list, tuple)) or not 0 <= node.args[1] < len(base[0]):
            return None
        return base[0][node.args[1]], base[1]
    schema = getattr(target, "_schema", None)
    if node.op != "call_function" or schema is None or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return _root(node)
    returns = schema.returns
    is_view = target is torch.ops.aten._unsafe_view.default or (
        bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write
    )
    in_place = bool(returns) and returns[0].alias_info is not None and returns[0].alias_info.is_write
    if in_place:
        written = schema.arguments[0]
        if written.alias_info is None or not written.alias_info.is_write:
            return None
        return _replay(node.args[0], depth + 1)
    if not is_view:
        return _root(node)
    base = _replay(node.args[0], depth + 1)
    if base is None or not isinstance(base[0], torch.Tensor) or not _ints((node.args[1:], node.kwargs)):
        return None
    op = torch.ops.aten.view.default if target is torch.ops.aten._unsafe_view.default else target
    try:
        value = op(base[0], *node.args[1:], **node.kwargs)
    except Exception:  # noqa: BLE001 - a view that cannot be replayed is unknown
        return None
    storage = base[0].untyped_storage()._cdata
    values = value if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, torch.Tensor) and v.untyped_storage()._cdata == storage for v in values):
        return None  # a copy after all (``to`` another dtype)
    return value, base[1]


def _root(node: torch.fx.Node) -> tuple[torch.Tensor, str] | None:
    """A meta tensor laid out as ``node``'s fake value, in a storage of its own."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return None
    try:
        offset, sizes, strides = value.storage_offset(), tuple(value.shape), tuple(value.stride())
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    if not _ints((offset, sizes, strides)):
        return None
    extent = offset + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True) if n > 0) + 1
    storage = torch.empty(max(extent, 0), dtype=value.dtype, device="meta")
    return storage.as_strided(sizes, strides, offset), node.name


def scattered(node: torch.fx.Node, base: Layout | None = None) -> Layout | None:
    """The elements of its first argument a ``slice_scatter`` / ``select_scatter`` node replaces by
    its source (None for any other node, or where unknown); ``base``: the layout to take for that
    argument (default its own)."""
    if base is None:
        base = layout(node.args[0]) if node.args and isinstance(node.args[0], torch.fx.Node) else None
    target = getattr(node, "target", None)
    if base is None or target not in (torch.ops.aten.slice_scatter.default, torch.ops.aten.select_scatter.default):
        return None
    storage, offset, sizes, strides, item = base
    names = [a.name for a in target._schema.arguments]
    values = {a.name: a.default_value for a in target._schema.arguments if a.has_default_value()}
    values.update(zip(names, node.args, strict=False))
    values.update(node.kwargs)
    dim = values["dim"]
    if not isinstance(dim, int) or not -len(sizes) <= dim < len(sizes):
        return None
    dim %= len(sizes)
    if target is torch.ops.aten.select_scatter.default:
        index = values["index"]
        if not isinstance(index, int) or not -sizes[dim] <= index < sizes[dim]:
            return None
        index %= sizes[dim]
        rest = list(range(len(sizes)))
        del rest[dim]
        return (
            storage,
            offset + index * strides[dim],
            tuple(sizes[d] for d in rest),
            tuple(strides[d] for d in rest),
            item,
        )
    start, end, step = values["start"], values["end"], values["step"]
    if not all(v is None or isinstance(v, int) for v in (start, end, step)) or (step or 1) < 1:
        return None
    picked = range(sizes[dim])[slice(start, end, step or 1)]
    new_sizes, new_strides = list(sizes), list(strides)
    new_sizes[dim], new_strides[dim] = len(picked), strides[dim] * picked.step
    start_offset = picked.start * strides[dim] if len(picked) else 0
    return storage, offset + start_offset, tuple(new_sizes), tuple(new_strides), item


def addresses(view: Layout) -> torch.Tensor:
    """The element addresses a layout covers."""
    _, offset, sizes, strides, _ = view
    found = torch.tensor([offset], dtype=torch.int64)
    for size, stride in zip(sizes, strides, strict=True):
        found = (found[:, None] + torch.arange(size, dtype=torch.int64) * stride).flatten()
    return found


def _span(view: Layout) -> tuple[int, int]:
    _, offset, sizes, strides, _ = view
    low = offset + sum(min(0, (n - 1) * s) for n, s in zip(sizes, strides, strict=True))
    high = offset + sum(max(0, (n - 1) * s) for n, s in zip(sizes, strides, strict=True))
    return low, high


def _comparable(a: Layout | None, b: Layout | None) -> bool:
    return a is not None and b is not None and a[0] == b[0] and a[4] == b[4]


def disjoint(a: Layout | None, b: Layout | None) -> bool:
    """Whether two layouts of one fake storage (one item size) cover no common element: their
    address ranges do not meet, or (small views) no element address is in both. False unknown."""
    if not _comparable(a, b):
        return False
    if 0 in a[2] or 0 in b[2]:
        return True
    (low_a, high_a), (low_b, high_b) = _span(a), _span(b)
    if high_a < low_b or high_b < low_a:
        return True
    if max(torch.Size(a[2]).numel(), torch.Size(b[2]).numel()) > ENUMERATED:
        return False
    return not torch.isin(addresses(a), addresses(b)).any().item()


def covers(outer: Layout | None, inner: Layout | None) -> bool:
    """Whether every element ``inner`` covers is one ``outer`` covers (one fake storage, one item
    size; small views enumerated, else equal layouts only). False unknown."""
    if not _comparable(outer, inner):
        return False
    if 0 in inner[2] or outer == inner:
        return True
    (low_o, high_o), (low_i, high_i) = _span(outer), _span(inner)
    if low_i < low_o or high_i > high_o:
        return False
    if max(torch.Size(outer[2]).numel(), torch.Size(inner[2]).numel()) > ENUMERATED:
        return False
    return bool(torch.isin(addresses(inner), addresses(outer)).all().item())
