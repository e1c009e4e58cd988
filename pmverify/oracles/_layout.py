"""The memory a node's tensor covers, by its fake value (``meta["val"]``): its storage offset, sizes
and strides, for the oracles that ask whether a read and a write touch the same elements
(aliasing, mutation_barriers). Every answer is conservative: unknown (no fake value, symbolic
sizes, two fake storages) never says "disjoint" nor "covered"."""

from __future__ import annotations

import torch

#: ``(fake storage id, offset, sizes, strides, item size)``, in elements of that item size.
Layout = tuple[int, int, tuple[int, ...], tuple[int, ...], int]

#: Above this many elements, two views whose address ranges meet are taken to overlap.
ENUMERATED = 1 << 20


def layout(node: torch.fx.Node) -> Layout | None:
    """``node``'s layout by its fake value, or None where it is unknown or symbolic."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return None
    try:
        offset, sizes, strides = value.storage_offset(), tuple(value.shape), tuple(value.stride())
        storage = value.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    if not all(isinstance(n, int) for n in (offset, *sizes, *strides)):
        return None
    return storage, offset, sizes, strides, value.element_size()


def scattered(node: torch.fx.Node) -> Layout | None:
    """The elements of its first argument a ``slice_scatter`` / ``select_scatter`` node replaces by
    its source (None for any other node, or where unknown)."""
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
