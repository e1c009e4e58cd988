"""Shrinking, in a worker, failures the job already holds as saved choices: a replayed failure not
yet known to be minimal (each candidate case run in the worker, as in any search), and a crash or
timeout finding (each candidate run in a child process forked for it, since such a case kills or
hangs the process that runs it).

- The choices of failures shrunk to the end (Hypothesis' shrinker at its fixed point, not cut by
  its time limit) are kept under a sub-key of the family's example-database key,
  :func:`minimal_key`, so that a replay of a minimal failure does not shrink it again.
- Why an in-memory database, its secondary corpus: Hypothesis takes a failure that its reuse
  phase replayed exactly from the primary corpus as shrunk already, and does not shrink it.
- Why a forked child is sound here: it is forked from a fresh worker (the job sends a crash's or
  hang's shrinking to the worker started after the one that died, before anything else) that
  runs no thread but its parent watch, which holds no lock (workers start no tqdm monitor, the
  warm-up ends the threaded worlds it starts, and another thread makes :func:`shrink_in_forks`
  refuse); the child sets ``torch.set_num_threads(1)``, so it never enters the OpenMP pool a
  parent may have made, and dies with the worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .._compat import current_choices, finished_exit_reason, keyed, set_max_shrinking_seconds

__all__ = [
    "current_choices",
    "known_minimal",
    "minimal_key",
    "search_outcome",
    "shrinking_from",
    "shrink_in_forks",
    "warm_up",
]

logger = logging.getLogger(__name__)

#: The sub-key (after the family's key and a dot, as Hypothesis' ``secondary`` and ``pareto``).
MINIMAL = b"pmverify-minimal"


def minimal_key(key: bytes) -> bytes:
    """Where the choices of the failures under the example-database key ``key`` that are shrunk to
    the end are kept."""
    return key + b"." + MINIMAL


def known_minimal(database: Any, key: bytes, choices: bytes | None) -> bool:
    """Whether ``database`` holds ``choices`` as a failure under the example-database ``key`` shrunk
    to the end (under :func:`minimal_key`); False without a database or choices, or when the
    database cannot be read (a Redis server gone: the failure is shrunk again)."""
    if database is None or choices is None:
        return False
    try:
        return choices in set(database.fetch(minimal_key(key)))
    except Exception:  # noqa: BLE001 - see the docstring
        return False


@contextlib.contextmanager
def search_outcome() -> Iterator[dict[str, bool]]:
    """Yield a dict whose ``"finished"`` says, once the block's Hypothesis test has run, whether its
    engine ended with nothing left to do (its shrinker at its fixed point) rather than at a limit
    (``engine.MAX_SHRINKING_SECONDS``: ``very_slow_shrinking``; 500 shrinks; a flaky failure)."""
    from .._compat import statistics_collector as collector

    outcome = {"finished": False}
    finished = finished_exit_reason()

    def note(statistics: dict[str, Any]) -> None:
        outcome["finished"] = statistics.get("stopped-because") == finished

    with collector.with_value(note):
        yield outcome


@contextlib.contextmanager
def shrinking_from(
    key: bytes, choices: bytes, stop_at: float, parent: Any = None
) -> Iterator[tuple[dict[str, bool], Any]]:
    """Yield ``(outcome, settings)``: ``settings`` (from ``parent``, default
    ``hypothesis.settings.default``) replay the case ``choices`` encode and shrink it, by ``stop_at``
    (``time.time()``), for a Hypothesis test keyed ``key`` (``pmverify.verify``'s database key, or a
    test on :func:`pmverify._compat.keyed`): phases reuse and shrink, one bug, on an in-memory
    database holding the choices under ``key``'s secondary corpus (see the module's Why).
    ``outcome`` is :func:`search_outcome`'s dict for the block's test. Nothing global is changed
    but Hypothesis' shrinking time limit."""
    from hypothesis import Phase, settings
    from hypothesis.database import InMemoryExampleDatabase

    database = InMemoryExampleDatabase()
    database.save(key + b".secondary", choices)
    replay = settings(
        settings.default if parent is None else parent,
        database=database,
        phases=[Phase.reuse, Phase.shrink],
        report_multiple_bugs=False,
    )
    set_max_shrinking_seconds(stop_at - time.time())
    with search_outcome() as outcome:
        yield outcome, replay


def _in_forked_child(parent: int) -> None:
    """Set up a child forked to run one case: it dies with the worker, writes nothing to the
    worker's log, and runs torch on one thread."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the worker died before the line above
        os._exit(1)

    def watch() -> None:  # where there is no PR_SET_PDEATHSIG
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="pmverify-worker-watch", daemon=True).start()
    import faulthandler

    faulthandler.disable()  # (the finding's log holds the stack of its death)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    import torch

    torch.set_num_threads(1)


def dies_alike(
    pass_: Any,
    case: Any,
    *,
    exit_code: int | None,
    timeout_s: float,
    stop_at: float,
    heartbeat: Callable[[], None],
) -> bool | None:
    """Apply ``pass_`` to ``case`` (:func:`pmverify.check_case`) in a child process forked for it and
    say whether it dies as the finding did: ended by the same signal or exit status before it
    finishes (``exit_code``, as ``multiprocessing.Process.exitcode``: minus the signal number), or,
    for a timeout finding (``exit_code`` None), still running after ``timeout_s`` (it is then
    killed). None when ``stop_at`` (``time.time()``) came first. Calls ``heartbeat`` about every
    second while it waits."""
    from .._engine.check import check_case

    parent = os.getpid()
    read, write = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns of fork with threads: see the module's Why
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            _in_forked_child(parent)
            check_case(pass_, case)
            os.write(write, b"finished")
        except BaseException:  # noqa: BLE001 - an error is not a death: the case finished
            os.write(write, b"raised")
        finally:
            os._exit(0)
    os.close(write)
    start = time.monotonic()
    try:
        while True:
            left = min(start + timeout_s - time.monotonic(), stop_at - time.time())
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                if stop_at - time.time() <= 0 and time.monotonic() - start < timeout_s:
                    return None
                return exit_code is None
            ready, _, _ = select.select([read], [], [], min(left, 1.0))
            heartbeat()
            if ready:
                said = os.read(read, 16)
                _, status = os.waitpid(pid, 0)
                if said:
                    return False
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                return exit_code is not None and code == exit_code
    finally:
        os.close(read)


def _unchanged(graph: Any) -> None:
    """A pass that changes nothing."""


def warm_up(case: Any) -> None:
    """Check ``case`` here once with a pass that changes nothing (never the pass being shrunk), so
    that each forked child starts with what a process's first case loads (a second or more in
    each child otherwise); then end the threaded worlds a tensor-parallel case starts, so that no
    thread runs when this process forks. An error is left to the children to meet."""
    from .._engine.check import check_case
    from ..distributed import shutdown_worlds

    try:
        check_case(_unchanged, case)
    except Exception:  # noqa: BLE001 - only slower children
        logger.debug("warming up for the forked cases failed", exc_info=True)
    finally:
        shutdown_worlds()


class _DiesAlike(Exception):
    """Raised by the shrinking test for a case that dies as the finding did."""


def shrink_in_forks(
    strategy: Any,
    pass_: Any,
    choices: bytes,
    *,
    exit_code: int | None,
    timeout_s: float,
    stop_at: float,
    heartbeat: Callable[[], None],
    parent: Any = None,
) -> tuple[bytes, Any, bool] | None:
    """Shrink the crash or timeout finding whose case ``choices`` encode (drawn from ``strategy``),
    each candidate case judged by :func:`dies_alike` with the per-case ``timeout_s``, by
    ``stop_at``; return the smallest case found to die alike as ``(choices, case, finished)``
    (``finished``: the shrinker reached its fixed point before ``stop_at``), or None when the
    saved case of a crash does not die alike in a forked child (nothing to shrink from; the saved
    case of a timeout is not run again: it outlasted the timeout in the worker). Raises
    ``RuntimeError`` when this process runs other Python threads (forking would not be sound).
    ``parent``: the ``hypothesis.settings`` the shrink derives from (default the active profile)."""
    from hypothesis import HealthCheck, Verbosity, given, settings

    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if any(name != "pmverify-parent-watch" for name in others):
        raise RuntimeError(f"this worker runs other threads ({', '.join(others)}): a forked case could hang")
    # a crash's saved case is run again (a second); a hang's is not (it would take the timeout)
    judged: dict[bytes | None, bool] = {} if exit_code is not None else {choices: True}
    best: list[Any] = []
    cut = [False]
    key = b"pmverify-shrink-in-forks"

    def probe(case: Any) -> None:
        drawn = current_choices()
        alike = judged.get(drawn)
        if alike is None:
            if time.time() >= stop_at:
                cut[0] = True
                return
            alike = dies_alike(
                pass_, case, exit_code=exit_code, timeout_s=timeout_s, stop_at=stop_at, heartbeat=heartbeat
            )
            if alike is None:
                cut[0] = True
                return
            judged[drawn] = alike
        if alike:
            if not best:  # the saved case, replayed: Hypothesis starts timing its shrinking about now
                set_max_shrinking_seconds(stop_at - time.time())
            best[:] = [drawn, case]
            raise _DiesAlike

    with shrinking_from(key, choices, stop_at, parent) as (outcome, replay):
        test = settings(
            replay,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
            database=keyed(replay.database, key),
        )(given(strategy)(probe))
        try:
            test()
        except _DiesAlike:
            pass
        except Exception:
            if not best:
                raise
            outcome["finished"] = False
    if not best:
        return None
    return best[0], best[1], outcome["finished"] and not cut[0]
