"""Symbolic sizes for a case, as torch.compile traces with ``dynamic=True``: :func:`symbolize` and
the sizes it works with (public names of :mod:`pmverify._shapes.symbolic`, where the code lives)."""

from ._shapes.symbolic import HINTS, MAX_SIZE, MIN_SIZE, symbolize
from .errors import SymbolizeError

__all__ = ["HINTS", "MAX_SIZE", "MIN_SIZE", "SymbolizeError", "symbolize"]
