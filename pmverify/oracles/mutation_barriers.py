"""mutation_barriers oracle (being written)."""

from __future__ import annotations

from typing import Any

from ._violation import Violation

__all__ = ["check"]


def check(pair: Any) -> list[Violation]:
    return []
