"""Oracles: each takes a ``RunPair`` and returns a list of :class:`Violation`; none raises on a
finding. ``ORACLES`` maps each name to its check, in the order ``check_case`` asks them."""

from . import cache_key, expectations, functionalization, mutation_barriers, semantics, structure, tensor_parallel
from ._violation import Violation

ORACLES = {
    "structure": structure.check,
    "semantics": semantics.check,
    "mutation_barriers": mutation_barriers.check,
    "functionalization": functionalization.check,
    "tensor_parallel": tensor_parallel.check,
    "expectations": expectations.check,
    "cache_key": cache_key.check,
}

__all__ = [
    "ORACLES",
    "Violation",
    "cache_key",
    "expectations",
    "functionalization",
    "mutation_barriers",
    "semantics",
    "structure",
    "tensor_parallel",
]
