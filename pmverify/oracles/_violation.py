"""``Violation``: one finding of one oracle."""

from __future__ import annotations

import dataclasses

__all__ = ["DTYPE_SHAPE", "META", "ORDER", "SPECIALISATION", "STRIDES", "Violation"]

#: The kinds of the structure oracle's findings (``Violation.kind``): an output's dtype or shape (or
#: the number of outputs) changed; the rewrite specialises symbolic sizes (or loses them); the graph
#: is not well formed (lint, order, an erased input used, fake tensors do not propagate); stale
#: ``meta["val"]``; an output's strides changed.
DTYPE_SHAPE, SPECIALISATION, ORDER, META, STRIDES = "dtype/shape", "specialisation", "order", "meta", "strides"


@dataclasses.dataclass(frozen=True)
class Violation:
    """A property that does not hold for a case.

    - ``oracle``: the oracle's name (``"semantics"``, ``"structure"``, ``"expectations"``...).
    - ``message``: what is wrong, with the values that show it.
    - ``nodes``: names of the graph nodes involved (may be empty).
    - ``kind``: what sort of finding of its oracle it is, where the oracle tells several apart (the
      structure oracle: ``"dtype/shape"``, ``"specialisation"``, ``"order"``, ``"meta"``,
      ``"strides"``); ``""`` otherwise. :func:`pmverify.verify` shrinks each ``(oracle, kind)`` to
      a case of its own and orders them by severity (see ``pmverify._severity``).
    """

    oracle: str
    message: str
    nodes: tuple[str, ...] = ()
    kind: str = ""

    def __str__(self) -> str:
        where = f" [nodes: {', '.join(self.nodes)}]" if self.nodes else ""
        return f"{self.oracle}: {self.message}{where}"
