"""MiniMax-style QK-norm fusion: config, pass, fused ops and the rewrites they implement; its
cases, fuzz target and real-model check in :mod:`.testing` and :mod:`.real_model`.

Names load on first use (PEP 562): importing a submodule (:mod:`.environment`, :mod:`.testing`)
imports neither triton nor Inductor, so that a fuzz target can set up Triton's interpreter first.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["QKNormConfig", "QKNormFusionPass", "ops", "rewrites"]

_HOMES = {"QKNormConfig": ".config", "QKNormFusionPass": ".fusion_pass", "rewrites": ".patterns"}


def __getattr__(name: str) -> Any:
    if name == "ops":
        return importlib.import_module(".ops", __name__)
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
