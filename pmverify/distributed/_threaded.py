"""The ``"threaded"`` backend: every rank is a long-lived daemon thread of this process, in torch's
threaded process group (``torch.testing._internal.distributed.multi_threaded_pg``).

One world per world size is started on first use and kept in ``_worlds``: its threads initialise
their process group once, then take work from a queue, so a call costs a few queue hand-offs.
Collectives in flight are keyed by group name across the whole process, and every world's default
group has the same name, so only one world may run at a time (the caller holds the run lock).

The threaded process group is installed only for the duration of a call (:func:`pmverify._compat.threaded_process_group`): the
thread-local ``distributed_c10d._world``, the thread-isolated C++ group registry and autograd without
device threads. Each worker thread's world data lives in a class-level ``threading.local`` and its
groups in its thread-local C++ registry, so both outlive the uninstall between calls.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch.distributed as dist

from .._compat import threaded_process_group
from . import _context
from ._errors import SPMDError, collective_mismatch, rank_failed, timed_out

logger = logging.getLogger(__name__)

BACKEND = "threaded"
_START_TIMEOUT_S = 60.0  # for every rank thread to initialise its process group
_RELEASE_GRACE_S = 5.0  # for ranks released from their collectives to report back
_INTERRUPT_GRACE_S = 1.0  # for ranks to report after the caller was interrupted
_JOIN_TIMEOUT_S = 5.0  # for a world's threads to stop, at shutdown
_MISMATCH_POLL_S = 0.05  # how often, once a rank returned, the others are checked for a collective mismatch

_worlds: dict[int, _ThreadedWorld] = {}
_abandoned: list[_ThreadedWorld] = []  # worlds with a rank that never came back: joined at shutdown


class _Report:
    __slots__ = ("call", "rank", "value", "exc", "tb")

    def __init__(self, call: int, rank: int, value: Any = None, exc: BaseException | None = None, tb: str = ""):
        self.call, self.rank, self.value, self.exc, self.tb = call, rank, value, exc, tb


class _ThreadedWorld:
    """``world_size`` rank threads, each in the threaded default process group of the world."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.abandoned = False
        self._store = dist.HashStore()
        self._inboxes: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(world_size)]
        self._outbox: queue.SimpleQueue[_Report] = queue.SimpleQueue()
        self._world_data: list[Any] = [None] * world_size  # each rank's WorldData, to quarantine
        self._calls = itertools.count(1)
        self._threads = [
            threading.Thread(
                target=self._serve, args=(rank,), name=f"pmverify-spmd-threaded-w{world_size}-r{rank}", daemon=True
            )
            for rank in range(world_size)
        ]

    # -- rank threads -------------------------------------------------------------------------------

    def _serve(self, rank: int) -> None:
        _context.mark_thread(rank)
        try:
            dist.init_process_group(
                BACKEND,
                rank=rank,
                world_size=self.world_size,
                store=self._store,
                timeout=datetime.timedelta(seconds=_START_TIMEOUT_S),
            )
            self._world_data[rank] = dist.distributed_c10d._world._get_world()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            self._outbox.put(_Report(0, rank, exc=exc, tb=traceback.format_exc()))
            return
        self._outbox.put(_Report(0, rank))
        while True:
            task = self._inboxes[rank].get()
            if task is None:
                break
            call, fn, args = task
            try:
                report = _Report(call, rank, value=fn(*args))
            except BaseException as exc:  # noqa: BLE001 - SystemExit included: a rank released from a collective
                report = _Report(call, rank, exc=exc, tb=_format_from_fn(exc))
            del task, fn, args
            self._outbox.put(report)
            del report
        if not self.abandoned:
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - best effort at shutdown
                logger.debug(
                    "rank %d of threaded world %d: destroy_process_group failed", rank, self.world_size, exc_info=True
                )

    # -- caller side --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the rank threads and wait until each has initialised its process group."""
        t0 = time.monotonic()
        for thread in self._threads:
            thread.start()
        deadline = t0 + _START_TIMEOUT_S
        ready: set[int] = set()
        while len(ready) < self.world_size:
            try:
                report = self._outbox.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                missing = sorted(set(range(self.world_size)) - ready)
                self.close()
                raise SPMDError(
                    f"threaded world of {self.world_size}: ranks {missing} did not initialise their process group "
                    f"within {_START_TIMEOUT_S:g} s",
                    backend=BACKEND,
                ) from None
            if report.exc is not None:
                self.close()
                raise SPMDError(
                    f"threaded world of {self.world_size}: rank {report.rank} failed to initialise its process group: "
                    f"{_summary(report.exc)}\n\n{report.tb}",
                    rank=report.rank,
                    traceback=report.tb,
                    backend=BACKEND,
                ) from report.exc
            ready.add(report.rank)
        logger.debug("started threaded world of %d in %.3f s", self.world_size, time.monotonic() - t0)

    def run(
        self, plg: Any, fn: Callable[..., Any], args_per_rank: Sequence[Sequence[Any]], timeout_s: float
    ) -> list[Any]:
        """Run ``fn(*args_per_rank[r])`` on every rank thread r; ``plg``: the installed
        ``ProcessLocalGroup`` class."""
        size = self.world_size
        call = next(self._calls)
        for rank in range(size):
            self._inboxes[rank].put((call, fn, tuple(args_per_rank[rank])))
        deadline = time.monotonic() + timeout_s
        values: dict[int, Any] = {}
        failures: dict[int, _Report] = {}
        released: list[int] = []
        unfinished_at_timeout: list[int] | None = None
        mismatch: list[int] | None = None  # ranks waiting in a collective a returned rank never joined
        stacks = ""
        terminated = False
        try:
            while len(values) + len(failures) + len(released) < size:
                if values and not terminated:
                    mismatch = self._waiting_on(plg, values)
                    if mismatch:
                        stacks = self._stacks(mismatch)
                        self._terminate(plg)
                        terminated = True
                        deadline = time.monotonic() + _RELEASE_GRACE_S
                        continue
                wait = deadline - time.monotonic()
                if wait <= 0:
                    if terminated:
                        break  # released ranks that did not come back
                    unfinished_at_timeout = self._pending(values, failures, released)
                    stacks = self._stacks(unfinished_at_timeout)
                    self._terminate(plg)
                    terminated = True
                    deadline = time.monotonic() + _RELEASE_GRACE_S
                    continue
                try:
                    report = self._outbox.get(timeout=min(wait, _MISMATCH_POLL_S) if values else wait)
                except queue.Empty:
                    continue
                if report.call != call:
                    logger.debug("threaded world %d: dropping a stale report of rank %d", size, report.rank)
                    continue
                if report.exc is None:
                    values[report.rank] = report.value
                elif terminated and isinstance(report.exc, SystemExit):
                    released.append(report.rank)
                else:
                    failures[report.rank] = report
                    if not terminated:
                        # Release the ranks blocked in a collective the failed rank will never join.
                        self._terminate(plg)
                        terminated = True
                        deadline = max(deadline, time.monotonic() + _RELEASE_GRACE_S)
        except BaseException:  # e.g. KeyboardInterrupt in the caller: leave no collective in flight
            if not terminated:
                self._terminate(plg)
            returned = dict.fromkeys([*values, *failures, *released])
            self._drain(call, returned, _INTERRUPT_GRACE_S)
            lost = [rank for rank in range(size) if rank not in returned]
            if lost:
                self._abandon(lost)
            plg.reset()
            raise
        lost = self._pending(values, failures, released)
        if terminated:
            if lost:
                self._abandon(lost)
            plg.reset()
        if failures:
            rank = min(failures)
            report = failures[rank]
            notes = []
            if released:
                notes.append(f"ranks {sorted(released)} were released from a collective")
            if lost:
                notes.append(f"ranks {lost} never returned and the world was abandoned")
            raise rank_failed(rank, size, BACKEND, _summary(report.exc), report.tb, "; ".join(notes)) from report.exc
        if mismatch:
            note = "the ranks were released and the world is reused"
            if lost:
                note = f"ranks {lost} never returned even when released, and the world was abandoned"
            returned = sorted(rank for rank in values if rank not in mismatch)
            raise collective_mismatch(mismatch, returned, BACKEND, stacks, note)
        if unfinished_at_timeout is not None:
            note = "the ranks were released and the world is reused"
            if lost:
                note = f"ranks {lost} never returned even when released, and the world was abandoned"
            finished = sorted(
                rank for rank in values if rank not in unfinished_at_timeout
            )  # not those that returned late
            raise timed_out(unfinished_at_timeout, finished, timeout_s, BACKEND, stacks, note)
        return [values[rank] for rank in range(size)]

    def _drain(self, call: int, returned: dict[int, Any], grace_s: float) -> None:
        """Wait up to ``grace_s`` seconds for the ranks not in ``returned`` to report on ``call``,
        whatever they report, and add them to ``returned``."""
        end = time.monotonic() + grace_s
        while len(returned) < self.world_size:
            try:
                report = self._outbox.get(timeout=max(end - time.monotonic(), 0.0))
            except queue.Empty:
                return
            if report.call == call:
                returned.setdefault(report.rank, None)

    def _waiting_on(self, plg: Any, returned: dict[int, Any]) -> list[int]:
        """The ranks waiting in the default group's collective in flight when one of the ``returned``
        ranks (which left ``fn``: it calls no collective again) has not joined it and every other rank
        has either returned or joined it; [] when none (or while a rank still runs)."""
        from ._context import DEFAULT_GROUP_NAME

        with plg._coll_lock:
            collective = plg._cur_coll_on_pgs.get(DEFAULT_GROUP_NAME)
            if collective is None or collective._world_size != self.world_size:
                return []
            with collective._start_cond:
                joined = [rank for rank in range(self.world_size) if collective._data[rank] is not None]
        if any(rank in returned for rank in joined) or not any(rank not in joined for rank in returned):
            return []
        if len(set(joined) | set(returned)) < self.world_size:
            return []  # a rank still runs: wait for it to return or join, so the report does not hang on timing
        return joined

    def _pending(self, values: dict, failures: dict, released: list[int]) -> list[int]:
        return [r for r in range(self.world_size) if r not in values and r not in failures and r not in released]

    def _stacks(self, ranks: list[int]) -> str:
        frames = sys._current_frames()
        parts = []
        for rank in ranks:
            frame = frames.get(self._threads[rank].ident or -1)
            if frame is None:
                where = "  (no frame)\n"
            else:
                entries = traceback.extract_stack(frame)
                starts = [i for i, e in enumerate(entries) if e.name == "_serve" and e.filename == __file__]
                where = "".join(traceback.format_list(entries[starts[-1] + 1 if starts else 0 :]))
            parts.append(f"rank {rank}:\n{where}")
        return "".join(parts)

    @staticmethod
    def _terminate(plg: Any) -> None:
        # exception_handle walks the collectives in flight without the lock that guards them.
        with plg._coll_lock:
            plg.exception_handle(None)

    def _abandon(self, lost: list[int]) -> None:
        """Give up on this world: ``lost`` ranks still run ``fn`` after their release. Unname every
        rank's groups and drop its default group, so a collective a lost rank calls later raises
        (a ``KeyError`` for the group's name, or "default process group has not been initialized")
        instead of joining a collective of the next world, whose default group has the same name."""
        logger.warning(
            "threaded world of %d: ranks %s did not return after their release; abandoning the world "
            "(its daemon threads finish on their own)",
            self.world_size,
            lost,
        )
        self.abandoned = True
        for data in self._world_data:
            if data is not None:
                data.pg_names.clear()
                data.default_pg = None
        for inbox in self._inboxes:
            inbox.put(None)

    def close(self, join_timeout_s: float = _JOIN_TIMEOUT_S) -> list[str]:
        """Stop the rank threads and join them, waiting ``join_timeout_s`` seconds in all; return
        the names of those still alive."""
        if not self.abandoned:
            for inbox in self._inboxes:
                inbox.put(None)
        deadline = time.monotonic() + join_timeout_s
        alive = []
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(max(deadline - time.monotonic(), 0.0))
                if thread.is_alive():
                    alive.append(thread.name)
        return alive


def _format_from_fn(exc: BaseException) -> str:
    """Format ``exc``'s traceback from ``fn``'s frame on (without the worker loop's frame)."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _summary(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {exc}"


def run(fn: Callable[..., Any], world_size: int, args_per_rank: Sequence[Sequence[Any]], timeout_s: float) -> list[Any]:
    """Run ``fn`` on the threaded world of ``world_size``, starting it on first use."""
    with threaded_process_group() as plg:
        world = _worlds.get(world_size)
        if world is None:
            world = _ThreadedWorld(world_size)
            world.start()
            _worlds[world_size] = world
        try:
            return world.run(plg, fn, args_per_rank, timeout_s)
        finally:
            if world.abandoned:
                _worlds.pop(world_size, None)
                _abandoned.append(world)


def shutdown() -> None:
    """Stop every threaded world, joining its threads."""
    if not _worlds and not _abandoned:
        return
    with threaded_process_group():
        worlds = [*_worlds.values(), *_abandoned]
        _worlds.clear()
        _abandoned.clear()
        for world in worlds:
            alive = world.close()
            if alive:
                logger.warning("threads %s did not stop within %g s; left to run as daemons", alive, _JOIN_TIMEOUT_S)
            logger.debug("stopped threaded world of %d", world.world_size)
