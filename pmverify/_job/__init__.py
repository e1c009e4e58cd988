"""The fuzzing job behind ``pmverify fuzz``: targets searched in crash-isolated worker processes
within a time budget, findings saved to the example database first and checkpointed to a report.

Its names are imported on first use (PEP 562), so that a worker process can import
:mod:`.protocol` and :mod:`.workers` (torch-free) without the job's engine."""

from __future__ import annotations

from ..lazy import lazy_attributes

__all__ = ["JobOptions", "TargetError", "builtin_names", "format_duration", "parse_duration", "run_job"]

_HOMES = {
    "JobOptions": ".state",
    "TargetError": ".targets",
    "builtin_names": ".targets",
    "format_duration": ".durations",
    "parse_duration": ".durations",
    "run_job": ".supervisor",
}


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
