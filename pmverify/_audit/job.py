"""The audit job: each entry (a rewrite, or a graph or lowering handler; "rewrite" below) audited in a
crash-isolated worker process, ``jobs`` at a time.

- Workers are spawned processes (:mod:`.worker`) that record the sources once and audit rewrites
  one after another. A worker that dies, or runs one rewrite past the per-rewrite timeout (it is
  then killed, its Python stacks first written to its log), makes that rewrite an ``error`` of
  pmverify with the end of its log; the next rewrite goes on in a fresh worker.
- A rewrite ``register_replacement`` skipped as a duplicate is ``not registered``, not sent to a
  worker. Once the budget is spent no rewrite is started (those running finish); the rest are
  ``not run``, as they are when the audit is interrupted.
- The JSON report is rewritten atomically after every rewrite (a file, not a stream).
- Lowering entries (``--kinds lowering``: two cold ``torch.compile`` runs a case) come last, in a
  seeded order spread over their handlers (:func:`lowering_order`); once they have taken
  ``lowering_budget_s`` (default :data:`LOWERING_BUDGET_S`) none more is started, and the rest are
  ``not run``, the reason saying so: a sample within a budget, for a nightly run.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import multiprocessing
import pathlib
import time
import zlib
from typing import Any, TextIO

from .._engine.verify import batch_seed
from .._job.protocol import CheckRequest, Failed, Ready, RewriteChecked
from .._job.workers import WorkerProcess, WorkerState, describe_exit, poll, threads_per_worker
from .._settings import AUDIT_MAX_EXAMPLES
from .check import ERROR, FINDING, NOT_REGISTERED, NOT_RUN, STATUSES, describe_counts, planted_examples
from .report import write_outputs
from .sources import AuditedRewrite
from .worker import serve

__all__ = ["AuditOptions", "run_audit", "rewrite_seed"]

#: A worker that could not start this many times in a row ends the audit's checking.
MAX_START_FAILURES = 3
#: The case counts of a rewrite that was not checked (not registered, not run).
NO_CASES = {"checked": 0, "rewritten": 0, "void": 0, "rejected": 0}
#: The worker processes' main (a module-level function, for spawn): the tests give a light one.
_WORKER_MAIN = serve


@dataclasses.dataclass
class AuditOptions:
    """What ``pmverify audit`` was asked; seconds throughout (``budget_s`` None: no budget)."""

    sources: list[str]
    kinds: tuple[str, ...] = ("replacement", "graph")
    max_examples: int = AUDIT_MAX_EXAMPLES
    seed: int = 0
    jobs: int = 1
    timeout_s: float = 300.0
    budget_s: float | None = None
    budget_text: str | None = None
    start_timeout_s: float = 300.0
    repro_dir: pathlib.Path | None = None
    report: pathlib.Path | None = None
    junit: pathlib.Path | None = None
    markdown: pathlib.Path | None = None
    command: str = "pmverify audit"
    reproducer_prelude: str | None = None
    lowering_budget_s: float | None = None
    #: where every entry is checked (``--device``: ``"cpu"``, ``"cuda:0"``); None: CPU
    device: str | None = None


#: Seconds the lowering entries of an audit may take together, by default (``--lowering-budget``).
LOWERING_BUDGET_S = 600.0


def lowering_order(rewrites: list[AuditedRewrite], indices: list[int], seed: int) -> list[int]:
    """``indices`` (of lowering entries in ``rewrites``) in the order the audit samples them: grouped
    by handler, each group shuffled and the groups in a shuffled order (``seed``), then taken one per
    group in turn, so that a budget that runs a few of them runs as many handlers as it can."""
    import random

    rng = random.Random(seed)
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for i in indices:
        rewrite = rewrites[i]
        groups[rewrite.handler or rewrite.label].append(i)
    keys = sorted(groups)
    rng.shuffle(keys)
    for key in keys:
        rng.shuffle(groups[key])
    order: list[int] = []
    while any(groups.values()):
        for key in keys:
            if groups[key]:
                order.append(groups[key].pop(0))
    return order


def rewrite_seed(seed: int, rewrite: AuditedRewrite) -> int:
    """The seed of ``rewrite``'s checks: from the audit's ``seed`` and the rewrite's name only, so
    that a rewrite's outcome does not depend on which others are audited with it."""
    return batch_seed(seed, zlib.crc32(f"{rewrite.source}/{rewrite.label}".encode()))


class _Slot:
    """A place for one worker at a time, and the rewrite it audits (an index into the listing)."""

    def __init__(self) -> None:
        self.worker: WorkerProcess | None = None
        self.index: int | None = None
        self.started = 0.0


class _Audit:
    def __init__(self, options: AuditOptions, rewrites: list[AuditedRewrite], out: TextIO) -> None:
        from .._findings.reproducer import default_repro_dir

        self.options = options
        self.rewrites = rewrites
        self.out = out
        self.context = multiprocessing.get_context("spawn")
        self.start = time.monotonic()
        self.started_at = datetime.datetime.now(datetime.timezone.utc)
        self.repro_dir = options.repro_dir or default_repro_dir()
        self.log_dir = self.repro_dir / "worker-logs"
        self.results: list[dict[str, Any] | None] = [None] * len(rewrites)
        checked = [i for i, r in enumerate(rewrites) if not r.duplicate]
        lowerings = [i for i in checked if rewrites[i].kind == "lowering"]
        self.lowering_budget_s = LOWERING_BUDGET_S if options.lowering_budget_s is None else options.lowering_budget_s
        self.lowering_s = 0.0  # seconds the finished lowering entries took
        self.pending = collections.deque(
            [i for i in checked if rewrites[i].kind != "lowering"] + lowering_order(rewrites, lowerings, options.seed)
        )
        self.slots = [_Slot() for _ in range(options.jobs)]
        self.workers_started = 0
        self.start_failures = 0
        self.start_failure: str | None = None
        self.status = "running"
        self.done = 0
        self.to_check = len(self.pending)
        for i, rewrite in enumerate(rewrites):
            if rewrite.duplicate:
                self.results[i] = {
                    "status": NOT_REGISTERED,
                    "reason": "register_replacement skipped it as a duplicate of a rewrite registered before "
                    "into the same pass (skip_duplicates=True): it never rewrites a graph, so it was not checked",
                    "violations": [],
                    "reproducer": None,
                    "seconds": 0.0,
                    "cases": dict(NO_CASES),
                }

    # -- the report -------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        import torch

        from .._version import __version__

        rows = []
        for rewrite, result in zip(self.rewrites, self.results, strict=True):
            if result is None:
                result = {
                    "status": NOT_RUN,
                    "reason": self._not_run_reason(),
                    "violations": [],
                    "reproducer": None,
                    "cases": dict(NO_CASES),
                }
            result = dict(result)
            # the outcome's kind of finding (violation, never_matched) goes by another name in the row,
            # whose "kind" is the entry's
            finding_kind = result.pop("kind", None)
            if finding_kind is not None:
                result["finding_kind"] = finding_kind
            row = {
                "kind": rewrite.kind,
                "module": rewrite.module,
                "name": rewrite.name,
                "source": rewrite.source,
                "pass": rewrite.pass_name,
                "handler": rewrite.handler,
                "trace_fn": rewrite.trace_fn,
                "duplicate": rewrite.duplicate,
                "seed": rewrite_seed(self.options.seed, rewrite),
                **result,
            }
            row.setdefault("seconds", None)
            row.setdefault("cases", None)
            rows.append(row)
        counts = collections.Counter(row["status"] for row in rows)
        return {
            "pmverify": __version__,
            "torch": torch.__version__,
            "date": self.started_at.isoformat(timespec="seconds"),
            "command": self.options.command,
            "status": self.status,
            "seed": self.options.seed,
            "device": self.options.device or "cpu",
            "max_examples": self.options.max_examples,
            "planted_examples": planted_examples(self.options.max_examples),
            "timeout_s": self.options.timeout_s,
            "budget_s": self.options.budget_s,
            "lowering_budget_s": self.lowering_budget_s if "lowering" in self.options.kinds else None,
            "jobs": self.options.jobs,
            "sources": list(self.options.sources),
            "kinds": list(self.options.kinds),
            "elapsed_s": round(time.monotonic() - self.start, 3),
            "counts": {status: counts[status] for status in STATUSES if counts[status]},
            "rewrites": rows,
        }

    def _not_run_reason(self) -> str:
        if self.status == "interrupted":
            return "the audit was interrupted before it finished"
        if self.start_failure is not None:
            return f"no worker could start ({MAX_START_FAILURES} tries in a row): {self.start_failure}"
        if self.status == "running":
            return "not audited yet"
        return f"the budget ({self.options.budget_text}) was spent before it started"

    def checkpoint(self) -> None:
        write_outputs(self.report(), self.options, streams=False)

    # -- the workers ------------------------------------------------------------------------

    def budget_spent(self) -> bool:
        return self.options.budget_s is not None and time.monotonic() - self.start >= self.options.budget_s

    def start_worker(self, slot: _Slot) -> None:
        self.workers_started += 1
        log: pathlib.Path | None = self.log_dir / f"{self.started_at:%Y%m%dT%H%M%S}-audit-{self.workers_started}.log"
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            log = None
        # shrinking is bounded in calls (check_one); past this it is cut, well inside the timeout
        shrink_s = max(1.0, self.options.timeout_s / 2)
        options = {
            "log": str(log) if log else None,
            "max_examples": self.options.max_examples,
            "repro_dir": str(self.repro_dir),
            "shrink_s": shrink_s,
            "reproducer_prelude": self.options.reproducer_prelude,
            "device": self.options.device,
            "threads": threads_per_worker(self.options.jobs),
        }
        name = f"audit-{self.workers_started}"
        slot.worker = WorkerProcess(self.context, name, log, _WORKER_MAIN, (self.options.sources, options))
        slot.started = time.monotonic()

    def send(self, slot: _Slot) -> None:
        rewrite = self.rewrites[slot.index]
        seed = rewrite_seed(self.options.seed, rewrite)
        slot.worker.send(CheckRequest(rewrite.source, rewrite.module, rewrite.name, seed, rewrite.kind))

    def finish(self, slot: _Slot, result: dict[str, Any]) -> None:
        index, slot.index = slot.index, None
        result.setdefault("seconds", round(time.monotonic() - slot.worker.job_start, 3))
        self.results[index] = result
        self.done += 1
        rewrite = self.rewrites[index]
        if rewrite.kind == "lowering":
            self.lowering_s += result["seconds"] or 0.0
        print(
            f"[{self.done}/{self.to_check}] {rewrite.label}: {result['status']} ({result['seconds']:.1f}s; "
            f"{describe_counts(result.get('cases'))}) "
            f"{result.get('reason') or ''}".rstrip(),
            file=self.out,
            flush=True,
        )
        self.checkpoint()

    def lost(self, slot: _Slot, what: str) -> None:
        """The worker of ``slot`` died or was killed (``what`` says how, a clause): its rewrite, if it
        was auditing one, is an error of pmverify (its worker's, not a finding of the rewrite); a
        worker that never got ready is tried again (its rewrite kept for the next one), up to
        :data:`MAX_START_FAILURES` times in a row."""
        worker = slot.worker
        worker.kill()
        tail = (worker.log_tail() or "").strip()
        said = f"; its output ends:\n{tail}" if tail else ""
        if worker.state is WorkerState.STARTING:
            slot.worker = None
            self.start_failures += 1
            self.start_failure = f"{what} before it was ready{said}"
            if self.start_failures >= MAX_START_FAILURES:
                self.pending.appendleft(slot.index)
                slot.index = None
                self.pending_failed()
            return
        log = f" (its log: {worker.log})" if worker.log and worker.log.exists() else ""
        result = {
            "status": ERROR,
            "reason": f"{what}: pmverify's worker, not judged a finding{log}",
            "error": f"{what}{said}",
            "log": str(worker.log) if log else None,
            "violations": [],
            "reproducer": None,
            "seconds": round(time.monotonic() - worker.job_start, 3),
        }
        self.finish(slot, result)
        slot.worker = None

    def pending_failed(self) -> None:
        """No worker can start: every rewrite still to audit is an error saying why."""
        while self.pending:
            index = self.pending.popleft()
            self.results[index] = {
                "status": ERROR,
                "reason": one_line_of(self._not_run_reason()),
                "error": self._not_run_reason(),
                "violations": [],
                "reproducer": None,
                "seconds": 0.0,
            }

    def dispatch(self) -> None:
        """Give each free slot the next rewrite (none once the budget is spent), and a worker to
        each slot with a rewrite and none (a new one, or after one was lost while starting)."""
        for slot in self.slots:
            if slot.index is None:
                self.skip_lowerings()
                if not self.pending or self.budget_spent():
                    continue
                slot.index = self.pending.popleft()
                if slot.worker is not None:
                    self.send(slot)
                    continue
            if slot.worker is None:
                self.start_worker(slot)

    def skip_lowerings(self) -> None:
        """Once the lowering entries have taken the lowering budget (those running included), mark
        every lowering entry still pending ``not run``, saying why."""
        now = time.monotonic()
        running = sum(
            now - slot.worker.job_start
            for slot in self.slots
            if slot.index is not None and slot.worker is not None and self.rewrites[slot.index].kind == "lowering"
        )
        if self.lowering_s + running < self.lowering_budget_s:
            return
        lowerings = sum(r.kind == "lowering" and not r.duplicate for r in self.rewrites)
        skipped = [i for i in self.pending if self.rewrites[i].kind == "lowering"]
        if not skipped:
            return
        ran = lowerings - len(skipped)
        reason = (
            f"not sampled: the lowering budget ({self.lowering_budget_s:g} s, --lowering-budget) was spent on {ran} "
            f"of {lowerings} lowering entries, taken in a seeded order spread over their handlers"
        )
        for i in skipped:
            self.pending.remove(i)
            self.results[i] = {
                "status": NOT_RUN,
                "reason": reason,
                "violations": [],
                "reproducer": None,
                "seconds": 0.0,
                "cases": dict(NO_CASES),
            }
            self.done += 1

    def handle(self, slot: _Slot, message: Any) -> None:
        """Act on ``message`` (one of :mod:`pmverify._job.protocol`'s) from ``slot``'s worker."""
        if isinstance(message, Ready):
            slot.worker.state = WorkerState.IDLE
            self.start_failures = 0
            if slot.index is not None:
                self.send(slot)
        elif isinstance(message, Failed):
            slot.worker.state = WorkerState.STARTING  # (it is exiting: a start failure)
            self.lost(slot, f"the worker could not record {', '.join(self.options.sources)}: {message.error}")
        elif isinstance(message, RewriteChecked):
            slot.worker.done()
            self.finish(slot, message.outcome)

    def poll(self) -> None:
        def died(slot: _Slot, worker: WorkerProcess) -> None:
            during = " while auditing it" if worker.state is WorkerState.BUSY else ""
            self.lost(slot, f"the worker process {describe_exit(worker.process.exitcode)}{during}")

        live = poll(self.slots, 1.0, worker_of=lambda slot: slot.worker, handle=self.handle, died=died)
        now = time.monotonic()
        for slot in live:
            worker = slot.worker
            if worker is None:
                continue
            if worker.state is WorkerState.BUSY and now - worker.job_start > self.options.timeout_s:
                worker.dump_stacks()
                self.lost(
                    slot, f"its audit ran past the per-rewrite timeout of {self.options.timeout_s:g}s (worker killed)"
                )
            elif worker.state is WorkerState.STARTING and now - slot.started > self.options.start_timeout_s:
                self.lost(slot, f"the worker did not start within {self.options.start_timeout_s:g}s")

    def run(self) -> None:
        self.checkpoint()
        while True:
            self.dispatch()
            busy = any(slot.index is not None for slot in self.slots)
            if not busy and (not self.pending or self.budget_spent()):
                break
            self.poll()
        self.status = "budget spent" if self.pending else "finished"

    def stop_workers(self) -> None:
        for slot in self.slots:
            if slot.worker is not None:
                slot.worker.end()
                slot.worker = None
            slot.index = None


def one_line_of(text: str) -> str:
    return text.splitlines()[0] if text else text


def run_audit(options: AuditOptions, rewrites: list[AuditedRewrite], out: TextIO) -> tuple[dict[str, Any], int]:
    """Audit ``rewrites`` (in order); return the report and the exit status: 1 when a rewrite has a
    finding, 130 when interrupted (SIGINT or SIGTERM: the report says so, the rest ``not run``),
    else 0. The report's file outputs are written as it goes; streams are left to the caller."""
    audit = _Audit(options, rewrites, out)
    code = 0
    try:
        audit.run()
    except KeyboardInterrupt:
        audit.status = "interrupted"
        code = 130
    finally:
        audit.stop_workers()
        if audit.status == "running":
            audit.status = "interrupted"
        report = audit.report()
        write_outputs(report, options, streams=False)
    if code == 0 and any(row["status"] == FINDING for row in report["rewrites"]):
        code = 1
    return report, code
