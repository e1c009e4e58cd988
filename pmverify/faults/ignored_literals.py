"""A ``register_graph_pattern`` handler that assumes a literal its pattern holds as ``Ignored()``.

The pass (:class:`TransposePairElimination`, correct) removes a transpose undone by the next one:
its pattern, ``transpose(transpose(x, Ignored(), Ignored()), Ignored(), Ignored())``, matches any
dims, so the handler must compare them itself (the pair is the identity only when both swap the
same two dims, counted from the end or not). The fault's handler
(:class:`TransposePairIgnoresDims`) takes every matched pair for the identity.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.pattern_matcher import Arg, CallFunction, Ignored, Match

from ._entry_pass import GraphEntryPass

__all__ = ["TransposePairElimination", "TransposePairIgnoresDims", "transpose_pair_pattern"]

aten = torch.ops.aten

#: ``transpose(transpose(x, d0, d1), e0, e1)``, the dims not bound.
transpose_pair_pattern = CallFunction(
    aten.transpose.int, CallFunction(aten.transpose.int, Arg(), Ignored(), Ignored()), Ignored(), Ignored()
)


def _swapped(node: torch.fx.Node) -> set[int]:
    """The dims ``node`` (a ``transpose``) swaps, counted from 0; a transpose of a dim with itself
    swaps none."""
    rank = node.args[0].meta["val"].dim()
    dims = {d % max(rank, 1) for d in node.args[1:3]}
    return dims if len(dims) == 2 else set()


def remove_transpose_pair(match: Match, x: Any) -> None:
    """``transpose(transpose(x, d0, d1), e0, e1)`` -> ``x`` when both swap the same dims."""
    outer = match.output_node()
    if _swapped(outer) != _swapped(outer.args[0]):
        return
    outer.replace_all_uses_with(x)
    match.erase_nodes()


def remove_transpose_pair_ignoring_dims(match: Match, x: Any) -> None:
    """``transpose(transpose(x, d0, d1), e0, e1)`` -> ``x`` whatever the dims (the fault)."""
    match.output_node().replace_all_uses_with(x)
    match.erase_nodes()


class TransposePairElimination(GraphEntryPass):
    """A correct pass: one graph entry, a transpose pair that undoes itself -> its input (see the
    module docstring); not a fault itself."""

    pattern = transpose_pair_pattern
    handler = staticmethod(remove_transpose_pair)
    pass_name = "transpose_pair_elimination"


class TransposePairIgnoresDims(TransposePairElimination):
    """Bug kind: a hand-written handler assumes the literals its pattern holds as ``Ignored()``: every
    ``transpose(transpose(x, d0, d1), e0, e1)`` is taken for ``x``, whatever its dims."""

    handler = staticmethod(remove_transpose_pair_ignoring_dims)
