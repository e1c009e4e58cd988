"""The fuzzing job behind ``pmverify fuzz``: targets searched in crash-isolated worker processes
within a time budget, findings saved to the example database first and checkpointed to a report.

Its names are imported on first use (PEP 562), so that a worker process can import
:mod:`.protocol` and :mod:`.workers` (torch-free) without the job's engine."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["JobOptions", "TargetError", "builtin_names", "format_duration", "parse_duration", "run_job"]

_HOMES = {
    "JobOptions": ".state",
    "TargetError": ".targets",
    "builtin_names": ".targets",
    "format_duration": ".durations",
    "parse_duration": ".durations",
    "run_job": ".supervisor",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
