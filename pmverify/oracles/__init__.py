"""Oracles: each takes a ``RunPair`` and returns a list of :class:`Violation`; none raises on a
finding. ``ORACLES`` maps each name to its check."""

from . import expectations, semantics, structure
from ._violation import Violation

ORACLES = {
    "structure": structure.check,
    "semantics": semantics.check,
    "expectations": expectations.check,
}

__all__ = ["ORACLES", "Violation", "expectations", "semantics", "structure"]
