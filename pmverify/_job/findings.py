"""The fuzzing job's record (see :mod:`.supervisor`): each target's findings, saved to the example
database before they are reported, the reproducers drawn for them, the JSON report and its
checkpoints, and what the display says of them. The scheduling of the work is
:class:`.supervisor._Job`'s, built on this."""

from __future__ import annotations

import dataclasses
import datetime
import sys
import time
from typing import Any, TextIO

from . import report as reports
from .progress import make_display
from .protocol import ExtraCheckRequest, Rendered, RenderRequest
from .shrink import known_minimal, minimal_key
from .state import JobOptions, PendingRender, TargetRun
from .workers import WorkerState

__all__ = ["MAX_START_FAILURES", "Findings"]

#: Restarting a worker that never got ready is given up after this many tries in a row.
MAX_START_FAILURES = 3


class Findings:
    """The record of one run of the job: its targets' state (:class:`.state.TargetRun`), the
    example database, the real-model checks' results, its status, report and display."""

    def __init__(self, options: JobOptions, out: TextIO) -> None:
        from .. import _settings
        from .._version import __version__

        self.options = options
        self.out = out
        database = _settings.example_database(options.db) if options.db else None
        self.database = _settings.profile_settings(options.profile, database=database).database
        self.database_text = _settings.redacted(options.db) if options.db else repr(self.database)
        self.runs = [TargetRun(name) for name in dict.fromkeys(options.targets)]
        self.start = time.monotonic()
        self.started_at = datetime.datetime.now(datetime.timezone.utc)
        self.last_checkpoint = self.start
        self.real_models: list[dict[str, Any]] = []
        self.status = "running"
        self.version = __version__
        self.display = make_display(options.progress, out, options.budget_s)

    # -- the report -------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        from importlib import metadata

        def version(name: str) -> str:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                return "not installed"

        return {
            "pmverify": self.version,
            "status": self.status,
            "versions": {
                "python": sys.version.split()[0],
                **{name: version(name) for name in ("torch", "triton", "hypothesis")},
            },
            "profile": self.options.profile,
            "seed": self.options.seed,
            "device": self.options.device or "cpu",
            "budget_s": self.options.budget_s,
            "database": self.database_text,
            "started": self.started_at.isoformat(timespec="seconds"),
            "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "elapsed_s": round(time.monotonic() - self.start, 3),
            "targets": [run.as_json() for run in self.runs],
            "real_models": self.real_models,
        }

    def checkpoint(self) -> None:
        self.last_checkpoint = time.monotonic()
        data = self.report()  # to the files only: the caller writes a stream once, at the end
        reports.write_outputs(data, self.options.report, self.options.junit, streams=False)

    # -- findings ---------------------------------------------------------------------------

    def _save(
        self, run: TargetRun, family: int, choices: bytes, *, minimal: bool = False, replaces: bytes | None = None
    ) -> str | None:
        """Into the example database, under the key ``verify`` uses for this pass and family, and,
        when ``minimal`` (shrunk to the end), under its :func:`.shrink.minimal_key` too;
        ``replaces``: the choices it was shrunk from, moved to the key's secondary corpus (as
        Hypothesis does with a case it shrank). Returns why it could not be saved (a Redis server
        gone), else None."""
        if self.database is None or family >= len(run.keys):
            return None
        key = run.keys[family]
        try:
            self.database.save(key, choices)
            if replaces is not None and replaces != choices:
                self.database.move(key, key + b".secondary", replaces)
            if minimal:
                self.database.save(minimal_key(key), choices)
        except Exception as exc:  # noqa: BLE001 - the finding is still reported, with the reason
            return f"it could not be saved to the example database: {type(exc).__name__}: {exc}"
        return None

    def _note_unsaved(self, run: TargetRun, finding: dict[str, Any], unsaved: str | None) -> None:
        if unsaved is not None:
            finding["note"] = unsaved
            run.errors.append({"family": finding["family"], "message": unsaved})

    def found(self, run: TargetRun, finding: dict[str, Any]) -> None:
        family = run.families.index(finding["family"])
        choices = finding.pop("choices", None)
        if choices is not None:
            run.first_choices[family] = choices
            # before it is reported
            self._note_unsaved(run, finding, self._save(run, family, choices, minimal=finding.get("shrunk", False)))
        finding["seconds"] = round(time.monotonic() - self.start, 3)
        run.findings.append(finding)
        run.retired.add(family)
        self.checkpoint()
        self.display.line(f"FOUND in {run.name} ({finding['family']}): {finding['kind']}")
        for violation in finding["violations"]:
            self.display.line(f"  - {violation['oracle']}: {violation['message']}")
        if finding.get("stack"):
            self.display.line("  where it hung (innermost frame first):")
            for frame in finding["stack"].splitlines():
                self.display.line(f"    {frame}")
        self.display.line(f"  reproducer: {finding['reproducer'] or 'being written'}")
        if finding.get("note"):
            self.display.line(f"  note: {finding['note']}")
        if finding.get("log"):
            self.display.line(f"  worker output: {finding['log']}")

    def died(self, run: TargetRun, kind: str, message: str) -> None:
        """The worker of ``run`` died or was killed: a finding when it was running a case."""
        worker = run.worker
        run.end_search()
        run.worker = None
        job = worker.job
        if worker.state is WorkerState.STARTING:
            run.start_failures += 1
            tail = (worker.log_tail() or "").strip()
            said = message if message.startswith("the worker") else f"the worker: {message}"
            run.errors.append(
                {
                    "family": None,
                    "message": f"{said} before it was ready" + (f"; its output ends:\n{tail}" if tail else ""),
                    "log": str(worker.log) if worker.log else None,
                }
            )
            if run.start_failures >= MAX_START_FAILURES:
                run.failed = True
            self.checkpoint()
            return
        if job is None:
            return
        if isinstance(job, RenderRequest):
            if not run.renders:
                return
            job_finding = run.renders[0].finding
            if job.stop_at is not None:  # it was shrinking it: drawn again by the next worker, unshrunk
                run.renders[0] = dataclasses.replace(run.renders[0], shrink=False)
                job_finding["note"] = f"not shrunk: the worker shrinking the case ended ({message})"
            else:
                run.renders.pop(0)
                job_finding["note"] = f"no reproducer: the worker drawing the case again ended ({message})"
            return
        if isinstance(job, ExtraCheckRequest):
            name = run.check.name if run.check else "check"
            self.real_models.append({"name": name, "target": run.name, "ok": False, "error": message})
            return
        family = worker.case[0] if worker.case is not None else job.family
        oracle = "timeout" if kind == "timeout" else "crash"
        finding = {
            "target": run.name,
            "family": run.families[family],
            "kind": kind,
            "violations": [{"oracle": oracle, "message": message, "nodes": []}],
            "case": None,
            "reproducer": None,
            "shrunk": False,
            "replayed": job.replay,
        }
        if worker.log is not None and worker.log.exists():
            finding["log"] = str(worker.log)
            finding["log_tail"] = worker.log_tail()
        if kind == "timeout" and (stack := worker.hang_stack()):
            finding["stack"] = stack  # where it hung: the innermost frames of the case's thread
        if worker.case is not None and worker.case[1] is not None:
            finding["choices"] = worker.case[1]
            known = family < len(run.keys) and known_minimal(self.database, run.keys[family], worker.case[1])
            finding["shrunk"] = known
            exit_code = worker.process.exitcode if kind == "crash" else None
            run.renders.append(PendingRender(finding, family, worker.case[1], exit_code, shrink=True))
        elif worker.case is not None:
            finding["note"] = "this Hypothesis does not expose the case's choices: no reproducer"
        else:
            finding["note"] = "the worker died between cases: no case to reproduce"
        self.found(run, finding)

    def _rendered(self, run: TargetRun, rendered: Rendered) -> None:
        """The reproducer of ``run``'s first pending crash or timeout finding is written (or not)."""
        pending = run.renders.pop(0)
        finding, family, choices = pending.finding, pending.family, pending.choices
        if rendered.choices is not None:  # shrunk (to the end, or as far as the budget let it)
            finding["shrunk"] = rendered.shrunk
            saved = self._save(run, family, rendered.choices, minimal=rendered.shrunk, replaces=choices)
            self._note_unsaved(run, finding, saved)
        finding["reproducer"] = rendered.reproducer
        finding["case"] = rendered.case or finding["case"]
        if rendered.note:
            finding["note"] = rendered.note
        what = f"{'shrunk ' if finding['shrunk'] else ''}{finding['kind']}"
        self.display.line(f"reproducer of the {what} in {run.name}: {rendered.reproducer or rendered.note}")
        if rendered.reproducer and rendered.note:
            self.display.line(f"  note: {rendered.note}")

    def _shrunk(self, run: TargetRun, shrunk: dict[str, Any]) -> None:
        """The search's final (shrunk) finding replaces the first one it reported; its choices are
        saved (the first one's moved aside), and marked minimal when they are."""
        family = run.families.index(shrunk["family"])
        for finding in run.findings:
            if finding["family"] == shrunk["family"] and finding["kind"] == "violation" and not finding["shrunk"]:
                choices = shrunk.pop("choices", None)
                if choices is not None:
                    first = run.first_choices.get(family)
                    saved = self._save(run, family, choices, minimal=shrunk["shrunk"], replaces=first)
                    self._note_unsaved(run, shrunk, saved)
                finding.update(shrunk)
                break
        else:
            self.found(run, shrunk)
            return
        done = "shrunk" if shrunk["shrunk"] else "search over"
        self.display.line(f"{done} in {run.name} ({shrunk['family']}): {shrunk['case']}")
        self.display.line(f"  reproducer: {shrunk['reproducer'] or 'not written'}")
        self.checkpoint()

    def judge_rewrites(self) -> None:
        """Add the ``never_matched`` finding of each target whose whole run rewrote nothing."""
        for run in self.runs:
            finding = run.never_matched()
            if finding is None:
                continue
            finding["seconds"] = round(time.monotonic() - self.start, 3)
            run.findings.append(finding)
            self.display.line(f"NEVER MATCHED in {run.name}: {run.summary.describe()}")

    def warn_unfused(self) -> None:
        """Show each target's warnings: groups of planted instances its whole run never rewrote."""
        for run in self.runs:
            for text in run.unfused():
                self.display.line(f"WARNING in {run.name}: {text}")
