"""Names a package loads on first use (PEP 562), so that importing it imports little: pmverify's
own top level, its job package, and packages built on pmverify (the shipped fusion, the fault bank)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, homes: Mapping[str, str], public: Iterable[str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` (its ``__name__``) whose names ``homes`` maps to
    the module that defines each, relative to ``package`` or absolute (``{"QKNormFusionPass": ".fusion_pass"}``): a name is
    imported from its module on first use and then kept in the package's namespace; any other
    raises ``AttributeError``. ``dir()`` lists the package's namespace and ``homes``, or, given
    ``public``, only those names and the dunders (not the package's helpers)."""
    module = importlib.import_module(package)
    shown = None if public is None else frozenset(public)

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        if shown is None:
            return sorted({*vars(module), *homes})
        return sorted({name for name in vars(module) if name.startswith("__")} | shown)

    return __getattr__, __dir__
