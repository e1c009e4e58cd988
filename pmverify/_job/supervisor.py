"""The fuzzing job: searches targets in worker processes within a time budget, survives passes that
crash or hang, and never loses what it found.

- Each target runs in its own worker process (:mod:`.worker`). A worker that dies (a segfault,
  ``os._exit``) or stays silent for longer than the per-case timeout is killed if need be and
  restarted; the case it was on becomes a finding (kind ``crash`` or ``timeout``), saved to the
  example database and given a reproducer drawn again from its choices by the next worker (fresh:
  that is its first work), which first shrinks it within the budget (:mod:`.shrink`).
- Every finding is saved to the example database before it is reported; the job's first work is
  to replay each family's saved failures, so what an earlier run (or another machine sharing a
  Redis database) found is checked first; a replayed failure not marked minimal is shrunk.
- A target that checked no case makes the run exit 2 (unless something was found, or it was
  interrupted); its ``no_cases_reason`` says why.
- A family with a finding is not searched again in this run; the job goes on with the others.
- A target whose whole run (every family, not a batch) rewrote nothing and found nothing else
  gets a ``never_matched`` finding at the end: nothing it rewrites was checked.
- The JSON report is rewritten atomically at the start, after each finding, every
  ``checkpoint_s`` and at the end; a report or JUnit path that is a stream (``-``,
  ``/dev/stdout``) is left to the caller, which writes the returned report to it once.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from typing import Any, TextIO

from .._engine.verify import batch_seed
from .findings import Findings
from .protocol import (
    Alive,
    BatchRequest,
    CaseChecked,
    CaseStarted,
    ExtraCheckDone,
    ExtraCheckRequest,
    Failed,
    Found,
    Ready,
    Rendered,
    RenderRequest,
    SearchDone,
    ViolationRecord,
)
from .state import JobOptions, TargetRun
from .worker import serve, serve_options
from .workers import WorkerProcess, WorkerState, describe_exit, poll

__all__ = ["JobOptions", "run_job"]

REAL_MODEL_TIMEOUT_S = 1200.0


class _Job(Findings):
    """One run of the job: the scheduling of its targets' work on their workers (started,
    fed round robin, polled, timed out, stopped), on top of :class:`.findings.Findings`, the record
    of what they found, the report and the display."""

    def __init__(self, options: JobOptions, out: TextIO) -> None:
        super().__init__(options, out)
        self.context = multiprocessing.get_context("spawn")
        self.turn = 0
        self.deadline = self.start + options.budget_s
        from .._findings.reproducer import default_repro_dir

        self.log_dir = (options.repro_dir or default_repro_dir()) / "worker-logs"
        self.workers_started = 0

    def start_worker(self, run: TargetRun) -> WorkerProcess:
        """A new worker process for ``run``; its output goes to a log file of its own."""
        self.workers_started += 1
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in run.name)
        log = self.log_dir / f"{self.started_at:%Y%m%dT%H%M%S}-{safe}-{self.workers_started}.log"
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            log = None
        args = (run.name, self.options.cases, serve_options(self.options, log))
        run.worker = WorkerProcess(self.context, run.name, log, serve, args)
        return run.worker

    def progress(self, *, force: bool = False) -> None:
        busy = []
        for run in self.runs:
            worker = run.worker
            if worker is None or not worker.state.at_work:
                continue
            job = worker.job if worker.state is WorkerState.BUSY else None
            if isinstance(job, BatchRequest):
                doing = f"{'replay ' if job.replay else ''}{run.families[job.family]}"
            elif isinstance(job, RenderRequest):
                kind = run.renders[0].finding["kind"] if run.renders else "finding"
                doing = f"{'shrinking' if job.stop_at is not None else 'reproducing'} its {kind}"
            elif isinstance(job, ExtraCheckRequest):
                doing = "real model"
            else:
                doing = "starting"
            busy.append({"name": run.name, "doing": doing, **run.counts()})
        counts = [run.counts() for run in self.runs]
        self.display.status(
            {
                "elapsed_s": time.monotonic() - self.start,
                "budget_s": self.options.budget_s,
                "budget": self.options.budget_text,
                "busy": busy,
                "total": {name: sum(each[name] for each in counts) for name in counts[0]},
            },
            force=force,
        )

    # -- the worker loop --------------------------------------------------------------------

    def _next_job(self, run: TargetRun) -> BatchRequest | RenderRequest | None:
        # the wall-clock time (shared with the worker) by which its shrinking must be over
        stop_at = time.time() + self.deadline - time.monotonic() - 2.0
        if run.renders:
            pending = run.renders[0]
            finding, family, choices, exit_code = pending.finding, pending.family, pending.choices, pending.exit_code
            # shrunk in the budget's time only, not after it (a crash's exit code known)
            shrink = pending.shrink and self.options.shrink and self.status == "running" and not finding["shrunk"]
            shrink = shrink and (finding["kind"] == "timeout" or exit_code is not None)
            timeout = self.options.case_timeout_s
            violations = tuple(
                ViolationRecord(v["oracle"], v["message"], tuple(v["nodes"]), v.get("oracle_kind", ""))
                for v in finding["violations"]
            )
            return RenderRequest(family, choices, violations, exit_code, timeout, stop_at if shrink else None)
        if run.finished:
            return None
        todo = self.options.batch
        if self.options.max_examples is not None:  # cases per target
            todo = min(todo, self.options.max_examples - run.cases)
            if todo <= 0:
                return None
        if run.replay_todo:
            family = run.replay_todo.pop(0)
            return BatchRequest(family, self.options.seed, todo, True, stop_at)
        active = [i for i in range(len(run.families)) if i not in run.retired]
        family = active[run.rotation % len(active)]
        run.rotation += 1
        seed = batch_seed(self.options.seed, run.batches)
        run.batches += 1
        return BatchRequest(family, seed, todo, False, stop_at)

    def _dispatch(self) -> bool:
        """Start or feed targets' workers, round robin, until ``jobs`` of them are at work; False
        when none is at work and no target has work left."""
        active = sum(run.worker is not None and run.worker.state.at_work for run in self.runs)
        count = len(self.runs)
        for offset in range(count):
            if active >= self.options.jobs:
                break
            index = (self.turn + offset) % count
            run = self.runs[index]
            if run.worker is not None and run.worker.state.at_work:
                continue
            if run.failed or (run.finished and not run.renders):
                continue
            if run.worker is None or not run.worker.process.is_alive():
                if run.worker is not None:
                    run.worker.kill()
                if run.families:
                    run.restarts += 1
                self.start_worker(run)
                active += 1
                continue
            job = self._next_job(run)
            if job is None:
                continue
            run.worker.send(job)
            active += 1
            if not isinstance(job, RenderRequest):  # a target's reproducers first, then the next target's turn
                self.turn = (index + 1) % count
        return active > 0

    def _handle(self, run: TargetRun, message: Any) -> None:
        """Act on ``message`` (one of :mod:`.protocol`'s) from ``run``'s worker."""
        worker = run.worker
        worker.last_seen = time.monotonic()
        if isinstance(message, Ready):
            worker.state = WorkerState.IDLE
            run.start_failures = 0
            if not run.families:
                run.families = list(message.families)
                run.keys = list(message.keys)
                run.check = message.check
                run.allow_unfused = frozenset(message.allow_unfused)
                run.family_stats = {name: {"cases": 0, "batches": 0, "seconds": 0.0} for name in run.families}
                run.replay_todo = list(range(len(run.families)))
        elif isinstance(message, Failed):
            run.errors.append({"family": None, "message": f"the worker could not load the target: {message.error}"})
            run.failed = True
            worker.state = WorkerState.IDLE
        elif isinstance(message, CaseStarted):
            worker.case = (message.family, message.choices)
        elif isinstance(message, CaseChecked):
            worker.case = None
            family = run.families[worker.job.family]
            run.cases += 1
            run.matches += message.matches
            if message.summary.internal_errors and not run.summary.internal_errors:  # the first: shown once
                first = (message.summary.first_internal_error or "").splitlines()[0]
                self.display.line(
                    f"PMVERIFY INTERNAL ERROR in {run.name} ({family}), not a finding of the pass: {first}"
                )
            run.summary = run.summary + message.summary
            run.family_stats[family]["cases"] += 1
            run.tp_worlds[message.tp_world].update(cases=1, matches=message.matches)
            run.events.update(message.events)
        elif isinstance(message, Found):
            self.found(run, message.finding.as_row())
        elif isinstance(message, SearchDone):
            family = run.families[worker.job.family]
            run.end_search()
            run.family_stats[family]["batches"] += 1
            if message.finding is not None:
                self._shrunk(run, message.finding.as_row())
            if message.error is not None:
                run.errors.append({"family": family, "message": message.error})
                run.retired.add(worker.job.family)
                self.display.line(f"ERROR in {run.name} ({family}): {message.error.splitlines()[0]}")
                self.checkpoint()
            worker.done()
        elif isinstance(message, Rendered):
            self._rendered(run, message)
            worker.done()
            self.checkpoint()
        elif isinstance(message, Alive):  # a forked candidate of a crash's shrinking is still running
            pass
        elif isinstance(message, ExtraCheckDone):
            self.real_models.append({"target": run.name, **message.result})
            worker.done()

    def _poll(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the running workers; handle their messages, death or silence."""

        def died(run: TargetRun, worker: WorkerProcess) -> None:
            self.died(run, "crash", f"the worker process {describe_exit(worker.process.exitcode)}")

        live = poll(self.runs, timeout, worker_of=lambda run: run.worker, handle=self._handle, died=died)
        now = time.monotonic()
        for run in live:
            worker = run.worker
            if worker is None or not worker.state.at_work:
                continue
            if worker.state is WorkerState.STARTING:
                limit = self.options.start_timeout_s
            elif isinstance(worker.job, ExtraCheckRequest):
                limit = REAL_MODEL_TIMEOUT_S
            else:
                limit = self.options.case_timeout_s
            if now - worker.last_seen > limit:
                worker.dump_stacks()
                worker.kill()
                what = "a case" if worker.case is not None else "its work"
                self.died(run, "timeout", f"{what} did not finish within the per-case timeout of {limit:g}s")

    def search(self) -> None:
        self.checkpoint()
        while time.monotonic() < self.deadline:
            busy = any(run.worker is not None and run.worker.state.at_work for run in self.runs)
            if not busy and all(run.finished and not run.renders for run in self.runs):
                break  # (a search that found its family's failure is still shrinking it while busy)
            if not self._dispatch():
                break
            self._poll(min(1.0, max(0.0, self.deadline - time.monotonic())))
            if time.monotonic() - self.last_checkpoint >= self.options.checkpoint_s:
                self.checkpoint()
            self.progress()

    def _run_on_worker(self, run: TargetRun, job: Any) -> None:
        """Give ``job`` to ``run``'s worker (started if none is alive, once it is ready) and wait
        until the worker has done it, died or been killed."""
        if run.worker is None or not run.worker.process.is_alive():
            self.start_worker(run)
        while run.worker is not None and run.worker.state is WorkerState.STARTING:
            self._poll(1.0)
        if run.worker is None or run.failed:
            return
        run.worker.send(job)
        while run.worker is not None and run.worker.state is WorkerState.BUSY:
            self._poll(1.0)

    def finish_renders(self) -> None:
        """Reproducers of crashes found at the very end of the budget (the workers are stopped)."""
        for run in self.runs:
            while run.renders and not run.failed:
                if run.worker is None or not run.worker.process.is_alive():
                    run.restarts += 1
                self._run_on_worker(run, self._next_job(run))

    def check_real_models(self) -> None:
        for run in self.runs:
            if not run.families or run.failed:
                continue
            if run.check is None:
                continue  # a target without an extra check
            if run.check.skipped:
                reason = run.check.skipped
                self.display.line(f"real model: skipped ({reason})")
                self.real_models.append({"name": run.check.name, "target": run.name, "skipped": reason, "ok": True})
                continue
            self.display.line(f"real model: {run.check.about} ({run.name})...")
            self._run_on_worker(run, ExtraCheckRequest())

    def _stopped(self, run: TargetRun, worker: WorkerProcess) -> None:
        """Say what a worker stopped at the end of the budget, or by an interrupt, was doing: a
        case that had run for long may be a hang the per-case timeout had no time to catch."""
        interrupted = self.status == "interrupted"
        job = worker.job if worker.state is WorkerState.BUSY else None
        if isinstance(job, (RenderRequest, ExtraCheckRequest)) and not interrupted:
            return  # a reproducer cut at the budget's end is written after it
        if isinstance(job, BatchRequest):
            doing = "replay" if job.replay else "search"
        elif isinstance(job, RenderRequest):
            doing = "reproducer"
        else:
            doing = "real model" if isinstance(job, ExtraCheckRequest) else "starting"
        family = run.families[job.family] if isinstance(job, (BatchRequest, RenderRequest)) else None
        in_case = time.monotonic() - worker.last_seen if worker.case is not None else None
        where = {"doing": doing, "family": family, "in_case_s": None if in_case is None else round(in_case, 1)}
        if interrupted:
            run.interrupted_in = where
        else:
            run.stopped_at_budget = where
        places = {"search": "between cases", "replay": "between cases", "starting": "while its worker was starting"}
        place = f"{in_case:.0f}s into a case" if in_case is not None else places.get(doing, f"in its {doing}")
        what = "interrupted" if interrupted else "stopped at the end of the budget"
        self.display.line(f"{what}: {run.name}{f' ({family})' if family else ''}, {place}")

    def stop_workers(self) -> None:
        for run in self.runs:
            if run.worker is not None:
                if run.worker.state.at_work:
                    self._stopped(run, run.worker)
                    run.end_search()
                run.worker.end()
                run.worker = None


def run_job(options: JobOptions, out: TextIO | None = None) -> tuple[dict[str, Any], int]:
    """Run the fuzzing job; return its report and exit status: 1 when something was found (a
    target that rewrote nothing in its whole run included: ``never_matched``), else 2
    when a target or family could not be searched (its worker failed to start, its strategy
    raised) or a target checked no case (its ``no_cases_reason`` says why), else 0; 130 when
    interrupted (SIGINT or SIGTERM), the report then says so."""
    out = out if out is not None else sys.stdout
    return _run(_Job(options, out))


def _run(job: _Job) -> tuple[dict[str, Any], int]:
    options = job.options
    budget = options.budget_text
    job.display.line(
        f"pmverify {job.version}: fuzzing {', '.join(r.name for r in job.runs)} for {budget} "
        f"(profile {options.profile}, seed {options.seed}, device {options.device or 'cpu'}, database "
        f"{job.database_text})"
    )
    code = 0
    try:
        job.search()
        job.status = "finishing"
        job.stop_workers()
        job.finish_renders()
        job.judge_rewrites()
        job.warn_unfused()
        job.checkpoint()
        if options.real_model:
            job.check_real_models()
        job.status = "finished"
    except KeyboardInterrupt:
        searching = job.status == "running"  # (not in the budget's end: the searches were over)
        job.status = "interrupted"
        code = 130
        for run in job.runs:  # each target not done, whatever its worker was doing, or not doing
            run.interrupted = bool(run.renders) or (searching and not run.finished)
    finally:
        job.stop_workers()
        for run in job.runs:
            reason = run.no_cases_reason()
            if reason is not None:
                job.display.line(f"NO CASES checked in {run.name}: {reason}")
        job.display.close()
        job.checkpoint()
    data = job.report()
    if code == 0:
        found = any(run.findings for run in job.runs) or any(
            not model["ok"] and not model.get("skipped") for model in job.real_models
        )
        unchecked = any(run.errors or not run.cases for run in job.runs)
        code = 1 if found else 2 if unchecked else 0
    return data, code
