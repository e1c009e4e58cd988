"""Names a package loads on first use (PEP 562), so that importing it imports little."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` (its ``__name__``) whose names ``homes`` maps
    to the relative module that defines each (``{"QKNormFusionPass": ".fusion_pass"}``): a name is
    imported from its module on first use; any other raises ``AttributeError``."""
    module = importlib.import_module(package)

    def __getattr__(name: str) -> Any:
        if name in homes:
            return getattr(importlib.import_module(homes[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(module), *homes})

    return __getattr__, __dir__
