"""The fuzzing job behind ``pmverify fuzz``: targets searched in crash-isolated worker processes
within a time budget, findings saved to the example database first and checkpointed to a report."""

from .durations import format_duration, parse_duration
from .supervisor import JobOptions, run_job
from .targets import TargetError, builtin_names

__all__ = ["JobOptions", "TargetError", "builtin_names", "format_duration", "parse_duration", "run_job"]
