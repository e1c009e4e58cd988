"""A ``register_graph_pattern`` handler that breaks its pattern's ``_users=MULTIPLE`` assumption.

The pass (:class:`SiluFusion`, correct) fuses ``mul(sigmoid(x), x)`` into ``silu(x)``; its pattern
lets the ``sigmoid`` have other users (``_users=MULTIPLE``), so the handler must leave the
``sigmoid`` to them and put a new ``silu`` node in the ``mul``'s place. The fault's handler
(:class:`SiluFusionReusesSigmoid`) turns the ``sigmoid`` node itself into the ``silu`` (one node
fewer, as if only the pattern read it): its other users now read ``silu(x)``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.pattern_matcher import MULTIPLE, CallFunction, KeywordArg, Match

from ._entry_pass import GraphEntryPass

__all__ = ["SiluFusion", "SiluFusionReusesSigmoid", "silu_pattern"]

aten = torch.ops.aten

#: ``mul(sigmoid(x), x)``, the ``sigmoid`` possibly read elsewhere.
silu_pattern = CallFunction(
    aten.mul.Tensor, CallFunction(aten.sigmoid.default, KeywordArg("x"), _users=MULTIPLE), KeywordArg("x")
)


def fuse_silu(match: Match, *, x: Any) -> None:
    """``mul(sigmoid(x), x)`` -> ``silu(x)``, the ``sigmoid`` kept for its other users."""

    def replacement(x: torch.Tensor) -> torch.Tensor:
        return aten.silu.default(x)

    match.replace_by_example(replacement, [x])


def fuse_silu_reusing_sigmoid(match: Match, *, x: Any) -> None:
    """``mul(sigmoid(x), x)`` -> the ``sigmoid`` node made ``silu(x)`` (the fault: its other users
    read the ``silu``)."""
    mul = match.output_node()
    sigmoid = mul.args[0]
    sigmoid.target = aten.silu.default
    mul.replace_all_uses_with(sigmoid)
    match.graph.erase_node(mul)


class SiluFusion(GraphEntryPass):
    """A correct pass: one graph entry, ``mul(sigmoid(x), x)`` -> ``silu(x)``, the ``sigmoid`` kept
    for its other users (see the module docstring); not a fault itself."""

    pattern = silu_pattern
    handler = staticmethod(fuse_silu)
    pass_name = "silu_fusion"


class SiluFusionReusesSigmoid(SiluFusion):
    """Bug kind: a hand-written handler breaks its pattern's ``_users=MULTIPLE`` assumption: it turns
    the shared ``sigmoid`` node into the fused ``silu``, as if only the pattern read it, and its other
    users read ``silu(x)``."""

    handler = staticmethod(fuse_silu_reusing_sigmoid)
