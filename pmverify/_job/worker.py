"""The fuzzing job's worker process: runs one target's searches, so that a pass that kills its
process (a segfault, ``os._exit``) or hangs takes only the worker with it.

It talks to the job over a ``multiprocessing`` pipe, in the messages of :mod:`.protocol`.
"""

from __future__ import annotations

import os
import pathlib
import time
import traceback
import unittest
import warnings
from typing import Any

from .._findings.severity import failure_key
from .._findings.summary import UnfusedWarning, VerifySummary
from . import protocol
from .shrink import current_choices, known_minimal, search_outcome, shrink_in_forks, shrinking_from, warm_up
from .workers import die_with_parent, log_to, quiet_tqdm, threads_per_worker, use_threads

__all__ = ["serve", "serve_options"]


def _violations(violations: Any) -> tuple[protocol.ViolationRecord, ...]:
    return tuple(protocol.ViolationRecord.of(v) for v in violations)


def _finding(
    target: Any,
    family: int,
    result: Any,
    reproducer: Any,
    *,
    shrunk: bool,
    replayed: bool,
    choices: bytes | None,
    error: Any = None,
) -> protocol.Finding:
    """A violation finding; with ``error`` (the search's ``PassVerificationError``), its other
    distinct failures (``other_failures``, most severe first): all but the one Hypothesis shrank,
    whose case ``result`` is."""
    others = [failure for failure in error.failures if failure.result is not result] if error is not None else []
    return protocol.Finding(
        target=target.name,
        family=target.families[family][0],
        violations=_violations(result.violations),
        case=repr(result.case),
        reproducer=str(reproducer) if reproducer else None,
        shrunk=shrunk,
        replayed=replayed,
        choices=choices,
        other_failures=tuple(
            protocol.OtherFailure(
                oracle=other.key[0],
                kind=other.key[1],
                violations=_violations(v for v in other.violations if failure_key(v) == other.key),
                case=repr(other.case),
                reproducer=str(other.reproducer) if other.reproducer else None,
                shrunk=other.shrunk,
            )
            for other in others
        ),
    )


def _checked(result: Any) -> protocol.CaseChecked:
    from .._engine.verify import case_events

    return protocol.CaseChecked(
        tp_world=result.case.tp_world,
        matches=result.rewrite_count,
        events=tuple(label for label in case_events(result) if not label.startswith("matches")),
        summary=VerifySummary.of(result),
    )


class _Worker:
    def __init__(self, conn: Any, name: str, cases: str | None, options: dict) -> None:
        from .. import _settings
        from .targets import load

        self.conn = conn
        self.options = options
        #: seconds a failure's shrinking may take (``--shrink-budget``; inf: the job's budget only)
        self.shrink_budget_s = float(options.get("shrink_budget_s") or float("inf"))
        database = _settings.example_database(options["db"]) if options.get("db") else None
        self.settings = _settings.profile_settings(options["profile"], database=database)
        self.target = load(name, cases)
        # --strict-order, or a fault of the bank only a graph judged in the pass's order shows
        self.strict_order = bool(options.get("strict_order")) or self.target.strict_order
        #: ``--device`` (None: CPU): every search's cases run there, and its example database key says so
        self.device = options.get("device")
        # Inductor's pattern matcher takes seconds to import: not inside the first case's timeout.
        from .._compat import pattern_matcher  # noqa: F401

    def ready(self) -> None:
        from .._engine.verify import database_key

        self.keys = [
            database_key(self.target.pass_, strategy, strict_order=self.strict_order, device=self.device)
            for _, strategy in self.target.families
        ]
        self.conn.send(
            protocol.Ready(
                pid=os.getpid(),
                families=tuple(family for family, _ in self.target.families),
                keys=tuple(self.keys),
                check=self._check_info(),
                allow_unfused=self.target.allow_unfused,
            )
        )

    def _check_info(self) -> protocol.CheckInfo | None:
        """The target's end check as the job shows it, or None."""
        check = self.target.fuzz.end_check
        return None if check is None else protocol.CheckInfo(check.name, check.about, check.skipped)

    def batch(self, request: protocol.BatchRequest) -> None:
        from hypothesis import Phase, settings

        from .._compat import set_max_shrinking_seconds
        from .._engine.verify import PassVerificationError, verify
        from .._findings import reproducer as _reproducer

        family, replay, stop_at = request.family, request.replay, request.stop_at
        target = self.target
        first: list[protocol.Finding] = []
        last: list[bytes | None] = [None]  # the choices of the case run last: a failure's, at the end

        def on_case(case: Any) -> None:
            last[0] = current_choices()
            self.conn.send(protocol.CaseStarted(family, last[0]))

        def on_result(result: Any) -> None:
            self.conn.send(_checked(result))
            if result.violations and not first:
                # Written now, unshrunk: a job stopped while this search shrinks keeps a reproducer.
                try:
                    path = _reproducer.write(
                        result.case,
                        target.pass_,
                        result.violations,
                        self.options["repro_dir"],
                        pass_source=target.pass_source,
                        strict_order=self.strict_order,
                        prelude=target.reproducer_prelude,
                    )
                except (OSError, ValueError):
                    path = None
                finding = _finding(target, family, result, path, shrunk=False, replayed=replay, choices=last[0])
                first.append(finding)
                self.conn.send(protocol.Found(finding))
                # Hypothesis times its shrinking from when it starts, which is about now
                set_max_shrinking_seconds(min(stop_at - time.time(), self.shrink_budget_s))

        def search(search_settings: settings) -> None:
            with warnings.catch_warnings():  # a batch's groups are too few: the job judges the whole run
                warnings.simplefilter("ignore", UnfusedWarning)
                _search(search_settings)

        def _search(search_settings: settings) -> None:
            verify(
                target.pass_,
                target.families[family][1],
                max_examples=request.max_examples,
                seed=request.seed,
                on_result=on_result,
                on_case=on_case,
                repro_dir=self.options["repro_dir"],
                pass_source=target.pass_source,
                reproducer_prelude=target.reproducer_prelude,
                strict_order=self.strict_order,
                device=self.device,
                allow_no_rewrites=True,  # the job judges a target's whole run (never_matched), not a batch
                settings=search_settings,
                # by the job's end too (the batch's first failure sets it again, when shrinking starts)
                shrink_budget_s=max(1.0, min(stop_at - time.time(), self.shrink_budget_s)),
            )

        shrink = self.options["shrink"]
        phases = [Phase.explicit, Phase.reuse] if replay else [Phase.explicit, Phase.generate, Phase.target]
        if shrink and not replay:
            phases.append(Phase.shrink)
        # one bug a search: shrinking starts at the first failure, not after more generation
        batch_settings = settings(self.settings, phases=phases, report_multiple_bugs=False)
        failure = error = None
        minimal = False
        try:
            with search_outcome() as outcome:
                search(batch_settings)
        except PassVerificationError as exc:
            failure = exc
            minimal = shrink and not replay and outcome["finished"]
        except unittest.SkipTest:
            if not replay:  # a replay of an empty database runs no case: Hypothesis says so this way
                error = "Hypothesis ran no case: " + traceback.format_exc(limit=2)
        except Exception as exc:  # noqa: BLE001 - a strategy or harness error ends this family's search
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"
        choices = last[0]
        if failure is not None and replay:
            minimal = known_minimal(self.settings.database, self.keys[family], choices)
            stop_at = min(stop_at, time.time() + self.shrink_budget_s)
            if not minimal and shrink and choices is not None and stop_at - time.time() >= 1:
                # a failure saved unshrunk (a job stopped while shrinking it, --no-shrink): shrink it now
                try:
                    with shrinking_from(self.keys[family], choices, stop_at, self.settings) as (outcome, shrinking):
                        search(shrinking)
                except PassVerificationError as exc:
                    failure, choices, minimal = exc, last[0], outcome["finished"]
                except Exception:  # noqa: BLE001 - it did not fail again (flaky) or raised: the replay's stands
                    pass
        found = None
        if failure is not None:
            # the failure Hypothesis reported (its choices are the last run), not one seen beside it
            reported = next((f for f in failure.failures if not f.first_only), failure.failures[0])
            found = _finding(
                target,
                family,
                reported.result,
                reported.reproducer,
                shrunk=minimal,
                replayed=replay,
                choices=choices,
                error=failure,
            )
        self.conn.send(protocol.SearchDone(found, error))

    def render(self, request: protocol.RenderRequest) -> None:
        """Write the reproducer of the case ``request.choices`` encode, found by the job (the worker
        that ran it died or hung): the case is drawn again from the choices, the pass is not run in
        this process. With a ``stop_at``, the case is first shrunk: each candidate in a forked child,
        interesting when it dies as the finding's worker did (``exit_code``) or, for a timeout
        (``exit_code`` None), outlasts ``timeout_s``. Answers :class:`~.protocol.Rendered`."""
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis.database import InMemoryExampleDatabase

        from .._compat import keyed
        from .._findings import reproducer as _reproducer
        from ..oracles import Violation

        family, exit_code, timeout_s, stop_at = request.family, request.exit_code, request.timeout_s, request.stop_at
        if stop_at is not None:
            stop_at = min(stop_at, time.time() + self.shrink_budget_s)
        database = InMemoryExampleDatabase()
        database.save(b"pmverify-render", request.choices)
        drawn: list[Any] = []

        @settings(
            self.settings,
            database=keyed(database, b"pmverify-render"),
            phases=[Phase.reuse],
            max_examples=1,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(self.target.families[family][1])
        def draw(case: Any) -> None:
            drawn.append(case)

        try:
            draw()
        except Exception as exc:  # noqa: BLE001 - the job reports the note
            self.conn.send(protocol.Rendered(note=f"the case could not be drawn again: {type(exc).__name__}: {exc}"))
            return
        if not drawn:
            self.conn.send(protocol.Rendered(note="the saved choices no longer draw a case from this strategy"))
            return
        case = drawn[0]
        note = choices = None
        shrunk_to_end = False
        if self.device is not None:
            from ..device import on_device

            case = on_device(case, self.device)  # as the search ran it
        if stop_at is not None and not _forks_run(self.device):
            note = f"it was not shrunk: its shrinking runs the pass in forked processes, where {self.device} cannot run"
        elif stop_at is not None and stop_at - time.time() >= 1:
            warm_up(case)
            try:
                shrunk = shrink_in_forks(
                    self.target.families[family][1],
                    self.target.pass_,
                    request.choices,
                    exit_code=exit_code,
                    timeout_s=timeout_s,
                    stop_at=stop_at,
                    heartbeat=lambda: self.conn.send(protocol.Alive()),
                    parent=self.settings,
                )
            except Exception as exc:  # noqa: BLE001 - the unshrunk case's reproducer is still written
                shrunk = None
                note = f"it was not shrunk: {type(exc).__name__}: {exc}"
            else:
                if shrunk is None:
                    note = "it was not shrunk: the case did not end the same way in a forked process"
            if shrunk is not None:
                choices, case, shrunk_to_end = shrunk
        found = [Violation(v.oracle, v.message) for v in request.violations]
        try:
            path = _reproducer.write(
                case,
                self.target.pass_,
                found,
                self.options["repro_dir"],
                pass_source=self.target.pass_source,
                hang_s=timeout_s if exit_code is None else None,
                dies=exit_code is not None,
                strict_order=self.strict_order,
                prelude=self.target.reproducer_prelude,
            )
        except (OSError, ValueError) as exc:
            self.conn.send(
                protocol.Rendered(note=f"the reproducer was not written: {exc}", choices=choices, shrunk=shrunk_to_end)
            )
            return
        self.conn.send(protocol.Rendered(str(path), repr(case), note, choices, shrunk_to_end))

    def real_model(self) -> None:
        """Run the target's end check (the job asks only a target that has one)."""
        check = self.target.fuzz.end_check
        start = time.monotonic()
        try:
            result = {"name": check.name, **_run_end_check(check, self.target.pass_, self.device)}
        except Exception as exc:  # noqa: BLE001 - reported as a failed check
            result = {
                "name": check.name,
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "elapsed_s": round(time.monotonic() - start, 3),
            }
        self.conn.send(protocol.ExtraCheckDone(result))


def _run_end_check(check: Any, pass_: Any, device: Any) -> dict:
    """``check.run(pass_)``, given ``device=`` too when the job runs on a device other than CPU and
    the check's ``run`` takes that argument (the shipped fusion's compiled model runs there)."""
    import inspect

    if device is not None:
        try:
            takes_device = "device" in inspect.signature(check.run).parameters
        except (TypeError, ValueError):
            takes_device = False
        if takes_device:
            return check.run(pass_, device=device)
    return check.run(pass_)


def serve_options(options: Any, log: pathlib.Path | None) -> dict[str, Any]:
    """The ``options`` of :func:`serve` for a job of :class:`~.state.JobOptions` ``options``, its
    output going to ``log`` (None: nowhere of the job's)."""
    return {
        "profile": options.profile,
        "db": options.db,
        "repro_dir": str(options.repro_dir) if options.repro_dir else None,
        "shrink": options.shrink,
        "shrink_budget_s": options.shrink_budget_s,
        "log": str(log) if log else None,
        "strict_order": options.strict_order,
        "device": options.device,
        "threads": threads_per_worker(options.jobs),
    }


def _forks_run(device: str | None) -> bool:
    """Whether a case on ``device`` (None: CPU) can run in a process forked from this one: not on
    CUDA (a forked child cannot initialise it again), where a crash's reproducer is written unshrunk."""
    return device is None or not device.startswith("cuda")


def serve(conn: Any, name: str, cases: str | None, options: dict) -> None:
    """The worker process's main: build the target, say :class:`~.protocol.Ready`, then serve
    requests until :class:`~.protocol.Stop` or the pipe closes. ``options``: ``profile``, ``db``
    (spec or None), ``repro_dir``, ``shrink``, ``shrink_budget_s`` (None: none but the job's), ``log`` (a file for its output, or None),
    ``strict_order``, ``device`` (``--device``; None: CPU), ``threads`` (torch's intra-op threads: :func:`.workers.use_threads`)."""
    if options.get("log"):
        log_to(options["log"])
    die_with_parent()
    quiet_tqdm()
    use_threads(options.get("threads"))
    try:
        worker = _Worker(conn, name, cases, options)
    except BaseException as exc:  # noqa: BLE001 - the job reports why the worker could not start
        conn.send(protocol.Failed(f"{type(exc).__name__}: {exc}"))
        return
    worker.ready()
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if isinstance(request, protocol.BatchRequest):
            worker.batch(request)
        elif isinstance(request, protocol.RenderRequest):
            worker.render(request)
        elif isinstance(request, protocol.ExtraCheckRequest):
            worker.real_model()
        else:
            return
