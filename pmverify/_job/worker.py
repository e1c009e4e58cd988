"""The fuzzing job's worker process: runs one target's searches, so that a pass that kills its
process (a segfault, ``os._exit``) or hangs takes only the worker with it.

It talks to the job over a ``multiprocessing`` pipe. Requests, from the job:

- ``("batch", family, seed, max_examples, replay, stop_at)``: one :func:`pmverify.verify` search
  of family ``family`` (an index into the target's families); ``replay`` replays the example
  database's saved failures of that family only (no new cases), then shrinks the failure replayed
  unless it is known minimal (:mod:`.shrink`); shrinking ends by ``stop_at`` (``time.time()``:
  the end of the job's budget).
- ``("render", family, choices, violations, exit_code, timeout_s, stop_at)``: rebuild the case
  of ``choices`` (the bytes of a Hypothesis choice sequence) of a crash (``exit_code``: how the
  worker ended) or timeout (``exit_code`` None) finding and write its reproducer, the pass not
  applied in this process; with a ``stop_at`` (else None), shrink it first, each candidate in a
  forked child with the per-case ``timeout_s`` (:func:`.shrink.shrink_in_forks`).
- ``("real_model",)``: the compiled tiny MiniMax-M2 check; ``("stop",)``.

Messages, to the job: ``("ready", info)`` once; ``("case", family, choices)`` before the pass is
applied to each case (so that the job knows which case a dead or silent worker was on);
``("result", stats)`` after it (its ``summary``: the case's :class:`pmverify.VerifySummary`, which
the job adds up); ``("found", finding)`` at the first failing case of a search, with
its choices and an unshrunk reproducer already written; ``("done", finding | None, error | None)``
at the end of a search (the finding with its final choices, ``shrunk`` when it is minimal);
``("alive",)`` about every second while a forked candidate runs; ``("rendered", rendered)``
(``reproducer``, ``case``, ``note``, ``choices``, ``shrunk``); ``("real_model_done", result)``.
"""

from __future__ import annotations

import os
import time
import traceback
import unittest
from typing import Any

from .shrink import current_choices, known_minimal, search_outcome, shrink_in_forks, shrinking_from, warm_up

__all__ = ["serve"]


def _violations(violations: Any) -> list[dict]:
    return [{"oracle": v.oracle, "message": v.message, "nodes": list(v.nodes)} for v in violations]


def _finding(
    target: Any, family: int, result: Any, reproducer: Any, *, shrunk: bool, replayed: bool, error: Any = None
) -> dict:
    """A violation finding; with ``error`` (the search's ``PassVerificationError``), the other
    oracles that fired during the search on cases of their own (``other_failures``)."""
    others = error.other_failures if error is not None else {}
    return {
        "target": target.name,
        "family": target.families[family][0],
        "kind": "violation",
        "violations": _violations(result.violations),
        "case": repr(result.case),
        "reproducer": str(reproducer) if reproducer else None,
        "shrunk": shrunk,
        "replayed": replayed,
        "other_failures": [
            {
                "oracle": oracle,
                "violations": _violations(v for v in other.violations if v.oracle == oracle),
                "case": repr(other.case),
                "reproducer": str(error.other_reproducers[oracle]) if error.other_reproducers.get(oracle) else None,
            }
            for oracle, other in others.items()
        ],
    }


def _stats(result: Any) -> dict:
    from .._summary import VerifySummary
    from .._verify import case_events

    return {
        "tp_world": result.case.tp_world,
        "matches": result.rewrite_count,
        "events": [label for label in case_events(result) if not label.startswith("matches")],
        "summary": VerifySummary.of(result),
    }


class _Worker:
    def __init__(self, conn: Any, name: str, cases: str | None, options: dict) -> None:
        import pytest_pmverify

        from .targets import load

        self.conn = conn
        self.options = options
        database = pytest_pmverify.example_database(options["db"]) if options.get("db") else None
        pytest_pmverify.load_profile(options["profile"], database=database)
        self.target = load(name, cases)
        # --strict-order, or a fault of the bank only a graph judged in the pass's order shows
        self.strict_order = bool(options.get("strict_order")) or self.target.strict_order
        # Inductor's pattern matcher takes seconds to import: not inside the first case's timeout.
        import torch._inductor.pattern_matcher  # noqa: F401

    def ready(self) -> None:
        from .._verify import database_key

        self.keys = [
            database_key(self.target.pass_, strategy, strict_order=self.strict_order)
            for _, strategy in self.target.families
        ]
        self.conn.send(
            (
                "ready",
                {
                    "families": [family for family, _ in self.target.families],
                    "keys": [key.hex() for key in self.keys],
                    "real_model": self.target.real_model,
                    "pid": os.getpid(),
                },
            )
        )

    def batch(self, family: int, seed: int, max_examples: int, replay: bool, stop_at: float) -> None:
        from hypothesis import Phase, settings
        from hypothesis.internal.conjecture import engine

        from .. import _reproducer
        from .._verify import PassVerificationError, verify

        target = self.target
        first: list[dict] = []
        last: list[bytes | None] = [None]  # the choices of the case run last: a failure's, at the end

        def on_case(case: Any) -> None:
            last[0] = current_choices()
            self.conn.send(("case", family, last[0]))

        def on_result(result: Any) -> None:
            self.conn.send(("result", _stats(result)))
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
                    )
                except (OSError, ValueError):
                    path = None
                finding = _finding(target, family, result, path, shrunk=False, replayed=replay)
                finding["choices"] = last[0]
                first.append(finding)
                self.conn.send(("found", finding))
                # Hypothesis times its shrinking from when it starts, which is about now
                engine.MAX_SHRINKING_SECONDS = max(1, int(stop_at - time.time()))

        def search() -> None:
            verify(
                target.pass_,
                target.families[family][1],
                max_examples=max_examples,
                seed=seed,
                on_result=on_result,
                on_case=on_case,
                repro_dir=self.options["repro_dir"],
                pass_source=target.pass_source,
                strict_order=self.strict_order,
                allow_no_rewrites=True,  # the job judges a target's whole run (never_matched), not a batch
            )

        shrink = self.options["shrink"]
        phases = [Phase.explicit, Phase.reuse] if replay else [Phase.explicit, Phase.generate, Phase.target]
        if shrink and not replay:
            phases.append(Phase.shrink)
        previous = settings.default
        # one bug a search: shrinking starts at the first failure, not after more generation
        settings.register_profile("pmverify-job-batch", parent=previous, phases=phases, report_multiple_bugs=False)
        settings.load_profile("pmverify-job-batch")
        failure = error = None
        minimal = False
        try:
            with search_outcome() as outcome:
                search()
        except PassVerificationError as exc:
            failure = exc
            minimal = shrink and not replay and outcome["finished"]
        except unittest.SkipTest:
            if not replay:  # a replay of an empty database runs no case: Hypothesis says so this way
                error = "Hypothesis ran no case: " + traceback.format_exc(limit=2)
        except Exception as exc:  # noqa: BLE001 - a strategy or harness error ends this family's search
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"
        finally:
            settings.register_profile("pmverify-job-restored", parent=previous)
            settings.load_profile("pmverify-job-restored")
        choices = last[0]
        if failure is not None and replay:
            minimal = known_minimal(settings.default.database, self.keys[family], choices)
            if not minimal and shrink and choices is not None and stop_at - time.time() >= 1:
                # a failure saved unshrunk (a job stopped while shrinking it, --no-shrink): shrink it now
                try:
                    with shrinking_from(self.keys[family], choices, stop_at) as outcome:
                        search()
                except PassVerificationError as exc:
                    failure, choices, minimal = exc, last[0], outcome["finished"]
                except Exception:  # noqa: BLE001 - it did not fail again (flaky) or raised: the replay's stands
                    pass
        found = None
        if failure is not None:
            found = _finding(
                target, family, failure.result, failure.reproducer, shrunk=minimal, replayed=replay, error=failure
            )
            found["choices"] = choices
        self.conn.send(("done", found, error))

    def render(
        self,
        family: int,
        choices: bytes,
        violations: list[dict],
        exit_code: int | None,
        timeout_s: float,
        stop_at: float | None,
    ) -> None:
        """Write the reproducer of the case ``choices`` encode, found by the job (the worker that
        ran it died or hung): the case is drawn again from the choices, the pass is not run in this
        process. With a ``stop_at``, the case is first shrunk: each candidate in a forked child,
        interesting when it dies as the finding's worker did (``exit_code``) or, for a timeout
        (``exit_code`` None), outlasts ``timeout_s``."""
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis.database import InMemoryExampleDatabase

        from .. import _reproducer
        from ..oracles import Violation

        rendered: dict[str, Any] = {"reproducer": None, "case": None, "note": None, "choices": None, "shrunk": False}
        database = InMemoryExampleDatabase()
        database.save(b"pmverify-render", choices)
        drawn: list[Any] = []

        @settings(
            database=database,
            phases=[Phase.reuse],
            max_examples=1,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(self.target.families[family][1])
        def draw(case: Any) -> None:
            drawn.append(case)

        draw._hypothesis_internal_database_key = b"pmverify-render"
        try:
            draw()
        except Exception as exc:  # noqa: BLE001 - the job reports the note
            rendered["note"] = f"the case could not be drawn again: {type(exc).__name__}: {exc}"
            self.conn.send(("rendered", rendered))
            return
        if not drawn:
            rendered["note"] = "the saved choices no longer draw a case from this strategy"
            self.conn.send(("rendered", rendered))
            return
        case = drawn[0]
        if stop_at is not None and stop_at - time.time() >= 1:
            warm_up(case)
            try:
                shrunk = shrink_in_forks(
                    self.target.families[family][1],
                    self.target.pass_,
                    choices,
                    exit_code=exit_code,
                    timeout_s=timeout_s,
                    stop_at=stop_at,
                    heartbeat=lambda: self.conn.send(("alive",)),
                )
            except Exception as exc:  # noqa: BLE001 - the unshrunk case's reproducer is still written
                shrunk = None
                rendered["note"] = f"it was not shrunk: {type(exc).__name__}: {exc}"
            else:
                if shrunk is None:
                    rendered["note"] = "it was not shrunk: the case did not end the same way in a forked process"
            if shrunk is not None:
                rendered["choices"], case, rendered["shrunk"] = shrunk
        found = [Violation(v["oracle"], v["message"]) for v in violations]
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
            )
        except (OSError, ValueError) as exc:
            rendered["note"] = f"the reproducer was not written: {exc}"
            self.conn.send(("rendered", rendered))
            return
        rendered.update(reproducer=str(path), case=repr(case))
        self.conn.send(("rendered", rendered))

    def real_model(self) -> None:
        from ..real_models import check_minimax_m2
        from .report import jsonable

        start = time.monotonic()
        try:
            result = jsonable(check_minimax_m2(pass_factory=self.target.pass_))
        except Exception as exc:  # noqa: BLE001 - reported as a failed check
            result = {
                "name": "minimax_m2",
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "elapsed_s": round(time.monotonic() - start, 3),
            }
        self.conn.send(("real_model_done", result))


def _log_to(path: str) -> None:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so C code's output too) to
    ``path``, and have ``faulthandler`` write the Python stack there on a fatal signal."""
    import faulthandler
    import signal
    import sys

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - this process's stdout
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    faulthandler.enable(sys.stderr)
    # the job sends SIGUSR1 before it kills a worker stuck in a case: where it hung, in its log
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def _die_with_parent() -> None:
    """End this process when the job's process dies (``kill -9`` of the job alone): by the
    kernel's parent-death signal on Linux, else by a thread watching the parent."""
    import multiprocessing
    import signal
    import threading

    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        from multiprocessing.connection import wait

        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="pmverify-parent-watch", daemon=True).start()


def _quiet_tqdm() -> None:
    """Keep tqdm (which ``torch.fx.Interpreter`` runs, disabled, in every case) from making

    - the named ``multiprocessing`` semaphore it locks its bars across processes with: a semaphore
      this process registers with the job's resource tracker (a spawned process shares its
      parent's), which a killed worker never unregisters, so that every job ended warning of
      "leaked semaphore objects" (tqdm's thread lock stays: no bars cross processes here);
    - its monitor thread, so that a worker can fork a child to run a case (:mod:`.shrink`)."""
    try:
        from tqdm.std import TqdmDefaultWriteLock, tqdm
    except ImportError:  # pragma: no cover - tqdm is optional to torch
        return
    if not hasattr(TqdmDefaultWriteLock, "mp_lock"):
        TqdmDefaultWriteLock.mp_lock = None  # what tqdm sets where multiprocessing has no locks
    tqdm.monitor_interval = 0


def serve(conn: Any, name: str, cases: str | None, options: dict) -> None:
    """The worker process's main: build the target, say ready, then serve requests until
    ``("stop",)`` or the pipe closes. ``options``: ``profile``, ``db`` (spec or None),
    ``repro_dir``, ``shrink``, ``log`` (a file for its output, or None), ``strict_order``."""
    if options.get("log"):
        _log_to(options["log"])
    _die_with_parent()
    _quiet_tqdm()
    try:
        worker = _Worker(conn, name, cases, options)
    except BaseException as exc:  # noqa: BLE001 - the job reports why the worker could not start
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    worker.ready()
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        kind, *args = request
        if kind == "batch":
            worker.batch(*args)
        elif kind == "render":
            worker.render(*args)
        elif kind == "real_model":
            worker.real_model()
        else:
            return
