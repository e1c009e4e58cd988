"""The fuzzing job's state: its options, a worker process's handle, and each target's run."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import pathlib
import signal
import time
from typing import Any

from .._summary import VerifySummary
from .worker import serve

__all__ = ["JobOptions", "WorkerProcess", "TargetRun", "describe_exit"]


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
    real_model: bool = True
    progress: str = "auto"
    jobs: int = 1
    strict_order: bool = False


class WorkerProcess:
    """One worker process and what it is doing; its output goes to ``log``. It runs the fuzzing
    job's :func:`.worker.serve` for target ``name``, or ``main(conn, *args)`` when given (another
    job's worker: ``pmverify audit``'s; ``options`` unused then)."""

    def __init__(
        self,
        context: Any,
        name: str,
        options: JobOptions | None,
        log: pathlib.Path | None,
        *,
        main: Any = None,
        args: tuple = (),
    ) -> None:
        self.conn, child = context.Pipe()
        self.log = log
        self.dump_from: int | None = None
        if main is None:
            worker_options = {
                "profile": options.profile,
                "db": options.db,
                "repro_dir": str(options.repro_dir) if options.repro_dir else None,
                "shrink": options.shrink,
                "log": str(log) if log else None,
                "strict_order": options.strict_order,
            }
            main, args = serve, (name, options.cases, worker_options)
        self.process = context.Process(target=main, args=(child, *args), name=f"pmverify-worker[{name}]")
        self.process.daemon = True
        self.process.start()
        child.close()
        self.state = "starting"
        self.last_seen = time.monotonic()
        self.job: tuple | None = None
        self.job_start = self.last_seen
        self.case: tuple[int, bytes] | None = None

    def send(self, job: tuple) -> None:
        self.conn.send(job)
        self.state = "busy"
        self.job = job
        self.job_start = self.last_seen = time.monotonic()
        self.case = None

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()
        with contextlib.suppress(OSError):  # nothing to keep from a worker that said nothing
            if self.log is not None and self.log.stat().st_size == 0:
                self.log.unlink()

    def dump_stacks(self) -> None:
        """Have the worker write every thread's Python stack to its log (``faulthandler`` on
        SIGUSR1), so that a case that hung says where; waits up to 2 s for it."""
        if self.log is None or not self.process.is_alive() or not hasattr(signal, "SIGUSR1"):
            return
        try:
            self.dump_from = self.log.stat().st_size
            os.kill(self.process.pid, signal.SIGUSR1)
        except OSError:
            return
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            time.sleep(0.1)
            with contextlib.suppress(OSError):
                if self.log.stat().st_size > self.dump_from:
                    time.sleep(0.2)  # the rest of the dump
                    return

    def log_tail(self, lines: int = 12) -> str | None:
        """The end of the worker's output: from the last ``Fatal Python error`` (faulthandler's
        Python stack of a fatal signal) when there is one, else its last ``lines`` lines."""
        if self.log is None:
            return None
        try:
            text = self.log.read_text(errors="replace").rstrip()
        except OSError:
            return None
        if self.dump_from is not None and len(text) > self.dump_from:  # the stacks of dump_stacks()
            return "\n".join(text[self.dump_from :].strip().splitlines()[:60])
        fatal = text.rfind("Fatal Python error")
        tail = text[fatal:].splitlines()[:60] if fatal >= 0 else text.splitlines()[-lines:]
        return "\n".join(line for line in tail if not line.startswith("Extension modules:")) or None

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
        except (OSError, ValueError):
            pass
        self.process.join(3)
        self.kill()


class TargetRun:
    """The job's state of one target."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.worker: WorkerProcess | None = None
        self.families: list[str] = []
        self.keys: list[bytes] = []
        self.check: dict[str, Any] | None = None  # the target's extra check (name, about, skipped)
        self.family_stats: dict[str, dict[str, Any]] = {}
        self.retired: set[int] = set()
        self.replay_todo: list[int] | None = None
        self.rotation = 0
        self.batches = 0
        self.findings: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        #: crash and timeout findings whose reproducer a fresh worker writes: (finding, family,
        #: choices, how the worker died: its exit code, or None for a timeout, whether to shrink it)
        self.renders: list[tuple[dict[str, Any], int, bytes, int | None, bool]] = []
        #: the choices of each family's first finding, as saved to the example database
        self.first_choices: dict[int, bytes] = {}
        self.restarts = 0
        self.start_failures = 0
        self.failed = False
        self.cases = 0
        self.matches = 0
        #: what its cases checked, added up case by case (:class:`pmverify.VerifySummary`)
        self.summary = VerifySummary()
        self.tp_worlds: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.events: collections.Counter[str] = collections.Counter()
        self.seconds = 0.0
        #: what its worker was doing when the budget ended / when the job was interrupted:
        #: ``{"doing": "starting" | "search" | "replay" | ..., "family": ..., "in_case_s": ...}``
        self.stopped_at_budget: dict[str, Any] | None = None
        self.interrupted_in: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        """Nothing left to search (rendering aside)."""
        return self.failed or (bool(self.families) and len(self.retired) == len(self.families))

    def searching_s(self) -> float:
        """Seconds its workers spent searching (replays included), the running search too."""
        worker = self.worker
        if worker is not None and worker.state == "busy" and worker.job and worker.job[0] == "batch":
            return self.seconds + time.monotonic() - worker.job_start
        return self.seconds

    def end_search(self) -> None:
        """Count the running search's seconds: it ended (done, died, killed)."""
        worker = self.worker
        if worker is not None and worker.state == "busy" and worker.job and worker.job[0] == "batch":
            elapsed = time.monotonic() - worker.job_start
            self.seconds += elapsed
            stats = self.family_stats[self.families[worker.job[1]]]
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
        ended = "the job was interrupted" if self.interrupted_in else "the budget ended"
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

    def never_matched(self) -> dict[str, Any] | None:
        """The ``never_matched`` finding of a target whose whole run rewrote nothing (judged over
        every case of every family, not batch by batch), else None: none when it checked no case or
        found something else (a pass that crashes on every case is reported as crashing)."""
        summary = self.summary
        if summary.cases == 0 or summary.rewritten_cases > 0 or self.findings:
            return None
        from .._summary import vacuous_error

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

    def as_json(self) -> dict[str, Any]:
        violations = [
            {**v, "reproducer": finding["reproducer"], "kind": finding["kind"], "family": finding["family"]}
            for finding in self.findings
            for v in finding["violations"]
        ]
        return {
            "name": self.name,
            "cases": self.cases,
            "matches": self.matches,
            "rewritten_cases": self.summary.rewritten_cases,
            "void_cases": self.summary.void_cases,
            "judged": dict(self.summary.judged),
            "planted": dict(sorted(self.summary.planted.items())),
            "elapsed_s": round(self.searching_s(), 3),
            "cases_per_min": round(60 * self.cases / max(self.searching_s(), 1e-9), 1),
            "families": {name: dict(stats) for name, stats in self.family_stats.items()},
            "tp_worlds": {str(world): dict(counts) for world, counts in sorted(self.tp_worlds.items())},
            "events": dict(sorted(self.events.items())),
            "findings": self.findings,
            "violations": violations,
            "errors": self.errors,
            "worker_restarts": self.restarts,
            "no_cases_reason": self.no_cases_reason(),
            "stopped_at_budget": self.stopped_at_budget,
            "interrupted_in": self.interrupted_in,
        }


def describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name} (signal {-code})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"
