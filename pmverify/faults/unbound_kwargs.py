"""A ``register_graph_pattern`` handler that drops an argument its pattern does not bind.

The pass (:class:`MmAddToAddmm`, correct) fuses ``add(mm(a, b), inp)`` into ``addmm``: its
pattern, ``CallFunction(aten.add.Tensor, CallFunction(aten.mm, a, b), KeywordArg("inp"))``,
names no ``alpha``, and Inductor's matcher ignores the keyword arguments a pattern does not hold,
so it matches ``add(mm(a, b), inp, alpha=2)`` too. The correct handler reads the node's ``alpha``
(``mm + alpha * inp`` is ``addmm(inp, a, b, beta=alpha)``); the fault's
(:class:`MmAddDropsAlpha`) rebuilds the sum as if ``alpha`` were 1.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.pattern_matcher import Arg, CallFunction, KeywordArg, Match

from ._entry_pass import GraphEntryPass

__all__ = ["MmAddToAddmm", "MmAddDropsAlpha", "mm_add_pattern"]

aten = torch.ops.aten

#: ``add(mm(a, b), inp)``, ``alpha`` not bound.
mm_add_pattern = CallFunction(aten.add.Tensor, CallFunction(aten.mm.default, Arg(), Arg()), KeywordArg("inp"))


def should_fuse_mm_add(match: Match) -> bool:
    """``a``, ``b`` and ``inp`` are tensors of one dtype, ``inp`` broadcasts to the product's shape
    without growing it, and ``alpha`` is a number (what ``addmm``'s ``self`` and ``beta`` take)."""
    mm = match.output_node().args[0]
    product = mm.meta["val"]
    operands = [*mm.args, match.kwargs["inp"]]
    if not all(isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), torch.Tensor) for n in operands):
        return False
    value = operands[-1].meta["val"]
    if {n.meta["val"].dtype for n in operands} != {product.dtype} or value.dim() > 2:
        return False
    try:
        shape = torch.broadcast_shapes(value.shape, product.shape)
    except RuntimeError:
        return False
    return tuple(shape) == tuple(product.shape) and isinstance(match.output_node().kwargs.get("alpha", 1), (int, float))


def fuse_mm_add(match: Match, a: Any, b: Any, *, inp: Any) -> None:
    """``add(mm(a, b), inp, alpha=k)`` -> ``addmm(inp, a, b, beta=k)``."""
    alpha = match.output_node().kwargs.get("alpha", 1)

    def replacement(inp: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return aten.addmm.default(inp, a, b, beta=alpha)

    match.replace_by_example(replacement, [inp, a, b])


def fuse_mm_add_dropping_alpha(match: Match, a: Any, b: Any, *, inp: Any) -> None:
    """``add(mm(a, b), inp, alpha=k)`` -> ``addmm(inp, a, b)``: ``alpha`` lost (the fault)."""

    def replacement(inp: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return aten.addmm.default(inp, a, b)

    match.replace_by_example(replacement, [inp, a, b])


class MmAddToAddmm(GraphEntryPass):
    """A correct pass: one graph entry, ``add(mm(a, b), inp, alpha=k)`` -> ``addmm(inp, a, b,
    beta=k)`` (see the module docstring); not a fault itself."""

    pattern = mm_add_pattern
    handler = staticmethod(fuse_mm_add)
    should_rewrite = staticmethod(should_fuse_mm_add)
    pass_name = "mm_add_to_addmm"


class MmAddDropsAlpha(MmAddToAddmm):
    """Bug kind: a hand-written handler drops an optional argument its pattern does not bind (Inductor's
    matcher ignores keyword arguments a pattern does not hold): ``add(mm(a, b), inp, alpha=k)`` becomes
    ``addmm(inp, a, b)``, as if ``alpha`` were 1."""

    handler = staticmethod(fuse_mm_add_dropping_alpha)
