"""The fuzzing job's state: its options and each target's run."""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import time
from typing import Any

from .._findings.summary import VerifySummary
from .protocol import BatchRequest
from .workers import WorkerProcess, WorkerState

__all__ = ["JobOptions", "PendingRender", "TargetRun"]


@dataclasses.dataclass
class JobOptions:
    """What ``pmverify fuzz`` was asked; seconds throughout."""

    targets: list[str]
    cases: str | None = None
    profile: str = "ci"
    budget_s: float = 60.0
    budget_text: str = "60s"
    max_examples: int | None = None
    seed: int = 0
    db: str | None = None
    report: pathlib.Path | None = None
    junit: pathlib.Path | None = None
    repro_dir: pathlib.Path | None = None
    case_timeout_s: float = 120.0
    start_timeout_s: float = 300.0
    batch: int = 25
    checkpoint_s: float = 60.0
    shrink: bool = True
    #: seconds the shrinking of one failure may take (within the job's budget); None: no bound but that
    shrink_budget_s: float | None = 180.0
    real_model: bool = True
    progress: str = "auto"
    jobs: int = 1
    strict_order: bool = False
    #: where every case runs (``--device``: ``"cpu"``, ``"cuda:0"``, as :func:`pmverify.device.require_device`
    #: gives it); None: CPU, where the strategies draw
    device: str | None = None


@dataclasses.dataclass(frozen=True)
class PendingRender:
    """A crash or timeout finding whose reproducer a fresh worker is to write: the ``finding`` (its
    report row, which the reproducer completes), its ``family`` (an index) and ``choices``, how the
    worker died (``exit_code``: its exit code, or None for a timeout) and whether to ``shrink`` it."""

    finding: dict[str, Any]
    family: int
    choices: bytes
    exit_code: int | None
    shrink: bool


class TargetRun:
    """The job's state of one target."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.worker: WorkerProcess | None = None
        self.families: list[str] = []
        self.keys: list[bytes] = []
        self.check: Any = None  # the target's extra check (a protocol.CheckInfo), if it has one
        self.family_stats: dict[str, dict[str, Any]] = {}
        self.retired: set[int] = set()
        self.replay_todo: list[int] | None = None
        self.rotation = 0
        self.batches = 0
        self.findings: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        #: crash and timeout findings whose reproducer a fresh worker writes, in order
        self.renders: list[PendingRender] = []
        #: the choices of each family's first finding, as saved to the example database
        self.first_choices: dict[int, bytes] = {}
        self.restarts = 0
        self.start_failures = 0
        self.failed = False
        self.cases = 0
        self.matches = 0
        #: what its cases checked, added up case by case (:class:`pmverify.VerifySummary`)
        self.summary = VerifySummary()
        #: the group keys its target's ``allow_unfused`` silences (from its worker's ``Ready``)
        self.allow_unfused: frozenset[str] = frozenset()
        self.tp_worlds: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.events: collections.Counter[str] = collections.Counter()
        self.seconds = 0.0
        #: what its worker was doing when the budget ended / when the job was interrupted:
        #: ``{"doing": "starting" | "search" | "replay" | ..., "family": ..., "in_case_s": ...}``
        self.stopped_at_budget: dict[str, Any] | None = None
        self.interrupted_in: dict[str, Any] | None = None
        #: the job was interrupted (Ctrl-C, SIGTERM) before this target's run was over
        self.interrupted = False

    @property
    def finished(self) -> bool:
        """Nothing left to search (rendering aside)."""
        return self.failed or (bool(self.families) and len(self.retired) == len(self.families))

    def searching_s(self) -> float:
        """Seconds its workers spent searching (replays included), the running search too."""
        worker = self.worker
        if worker is not None and worker.state is WorkerState.BUSY and isinstance(worker.job, BatchRequest):
            return self.seconds + time.monotonic() - worker.job_start
        return self.seconds

    def end_search(self) -> None:
        """Count the running search's seconds: it ended (done, died, killed)."""
        worker = self.worker
        if worker is not None and worker.state is WorkerState.BUSY and isinstance(worker.job, BatchRequest):
            elapsed = time.monotonic() - worker.job_start
            self.seconds += elapsed
            stats = self.family_stats[self.families[worker.job.family]]
            stats["seconds"] = round(stats["seconds"] + elapsed, 3)
            worker.job_start = time.monotonic()  # counted once

    def counts(self) -> dict[str, int]:
        """Its cases, matches, findings and worker restarts so far."""
        return {"cases": self.cases, "matches": self.matches, "findings": len(self.findings), "restarts": self.restarts}

    def no_cases_reason(self) -> str | None:
        """Why it checked no case (None when it checked one): its worker could not start, the
        budget ended (or the job was interrupted) while it was starting or in its first case,
        every family's search raised, or its cases crashed or hung its worker."""
        if self.cases:
            return None
        if self.failed:
            return "its worker could not start (see its errors)"
        cut = self.interrupted_in or self.stopped_at_budget
        ended = "the job was interrupted" if self.interrupted or self.interrupted_in else "the budget ended"
        if cut is not None and cut["doing"] == "starting":
            if self.families:
                return f"{ended} while its worker was restarting"
            return f"{ended} while its worker was starting (a worker takes about 10 s to import torch and Inductor)"
        if not self.families:
            return f"{ended} before its worker started"
        if cut is not None and cut["in_case_s"] is not None:
            return f"{ended} during its first case ({cut['in_case_s']:g}s into it)"
        if self.findings:
            return "its cases crashed or hung its worker (see its findings)"
        if self.errors and len(self.retired) == len(self.families):
            return "every family's search raised or ran no case (see its errors)"
        return f"{ended} before it checked a case"

    def status(self) -> str:
        """``interrupted`` (the job was, before this target was done), ``failed`` (its worker could not
        start) or ``done``."""
        if self.interrupted:
            return "interrupted"
        return "failed" if self.failed else "done"

    def unrun_families(self) -> list[str]:
        """Its families that checked no case and have no finding nor error."""
        touched = {f["family"] for f in self.findings} | {e.get("family") for e in self.errors}
        stats = self.family_stats
        return [name for name in self.families if not stats.get(name, {}).get("cases") and name not in touched]

    def never_matched(self) -> dict[str, Any] | None:
        """The ``never_matched`` finding of a target whose whole run rewrote nothing (judged over
        every case of every family, not batch by batch), else None: none when it checked no case or
        found something else (a pass that crashes on every case is reported as crashing)."""
        summary = self.summary
        if summary.cases == 0 or summary.rewritten_cases > 0 or self.findings:
            return None
        from .._findings.summary import vacuous_error

        message = str(vacuous_error(summary, f"{self.name} on {', '.join(self.families)}"))
        message = message.replace("pass allow_no_rewrites=True", "leave this target out of the run")
        return {
            "target": self.name,
            "family": None,
            "kind": "never_matched",
            "violations": [{"oracle": "never_matched", "message": message, "nodes": []}],
            "case": None,
            "reproducer": None,
            "shrunk": False,
            "replayed": False,
        }

    def unfused(self) -> list[str]:
        """The warnings of its whole run: groups of planted instances never rewritten
        (:func:`pmverify._findings.summary.unfused_warnings`), less those its target allows."""
        from .._findings.summary import unfused_warnings

        return unfused_warnings(self.summary, self.allow_unfused)

    def ordered_findings(self) -> list[dict[str, Any]]:
        """Its findings, most severe first (:mod:`pmverify._findings.severity`: by the most severe violation
        of each), in the order found among equals."""
        from .._findings.severity import failure_key, severity

        def rank(finding: dict[str, Any]) -> Any:
            return min((severity(failure_key(v)) for v in finding["violations"]), default=(len(self.findings),))

        return sorted(self.findings, key=rank)

    def as_json(self) -> dict[str, Any]:
        findings = self.ordered_findings()
        violations = [
            {**v, "reproducer": finding["reproducer"], "kind": finding["kind"], "family": finding["family"]}
            for finding in findings
            for v in finding["violations"]
        ]
        return {
            "name": self.name,
            "status": self.status(),
            "cases": self.cases,
            "matches": self.matches,
            "rewritten_cases": self.summary.rewritten_cases,
            "void_cases": self.summary.void_cases,
            "internal_errors": self.summary.internal_errors,
            "first_internal_error": self.summary.first_internal_error,
            "judged": dict(self.summary.judged_counts),
            "planted": dict(sorted(self.summary.planted_counts.items())),
            "warnings": self.unfused(),
            "elapsed_s": round(self.searching_s(), 3),
            "cases_per_min": round(60 * self.cases / max(self.searching_s(), 1e-9), 1),
            "families": {name: dict(stats) for name, stats in self.family_stats.items()},
            "unrun_families": self.unrun_families(),
            "tp_worlds": {str(world): dict(counts) for world, counts in sorted(self.tp_worlds.items())},
            "events": dict(sorted(self.events.items())),
            "findings": findings,
            "violations": violations,
            "errors": self.errors,
            "worker_restarts": self.restarts,
            "no_cases_reason": self.no_cases_reason(),
            "stopped_at_budget": self.stopped_at_budget,
            "interrupted_in": self.interrupted_in,
        }
