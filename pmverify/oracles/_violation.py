"""``Violation``: one finding of one oracle."""

from __future__ import annotations

import dataclasses

__all__ = ["Violation"]


@dataclasses.dataclass(frozen=True)
class Violation:
    """A property that does not hold for a case.

    - ``oracle``: the oracle's name (``"semantics"``, ``"structure"``, ``"expectations"``...).
    - ``message``: what is wrong, with the values that show it.
    - ``nodes``: names of the graph nodes involved (may be empty).
    """

    oracle: str
    message: str
    nodes: tuple[str, ...] = ()

    def __str__(self) -> str:
        where = f" [nodes: {', '.join(self.nodes)}]" if self.nodes else ""
        return f"{self.oracle}: {self.message}{where}"
