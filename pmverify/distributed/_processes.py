"""The ``"gloo"`` and ``"nccl"`` backends: one spawned worker process per rank.

One world per (backend, world size) is started on first use and kept in ``_worlds``: its workers
initialise their process group once (a ``FileStore`` in a temporary directory), then loop on a pipe
to the parent, taking a pickled ``(fn, args)`` and answering with a pickled result. Pickling is done
here with :mod:`pickle` (tensors travel by value, not through shared memory), so ``fn`` must be a
module-level function. A failed or timed-out call tears the world down (the workers are terminated
and reaped); the next call starts a fresh one.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import torch
import torch.distributed as dist

from . import _context
from ._errors import SPMDError, rank_failed, timed_out

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 120.0  # at least, for every worker to import torch and initialise its group
_FAILURE_GRACE_S = 1.0  # after a rank fails, for the others to report before the teardown
_JOIN_TIMEOUT_S = 10.0  # for the workers to stop when asked, before they are terminated
_PARENT_POLL_S = 1.0  # how often a worker checks that its parent is alive

_worlds: dict[tuple[str, int], _ProcessWorld] = {}


# -- worker process ---------------------------------------------------------------------------------


def _exit_when_orphaned(parent_pid: int) -> None:
    while True:
        time.sleep(_PARENT_POLL_S)
        if os.getppid() != parent_pid:
            os._exit(3)


def _serve(rank: int, world_size: int, backend: str, store_path: str, conn: Connection, parent_pid: int) -> None:
    """A worker's main: initialise the process group, then run tasks from ``conn`` until an empty
    message (stop) or the parent's end closes."""
    _context.mark_process(rank)
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name="orphan-watch", daemon=True).start()
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, rank=rank, world_size=world_size, store=dist.FileStore(store_path, world_size))
    except BaseException:  # noqa: BLE001 - reported to the parent
        conn.send_bytes(pickle.dumps(("error", "init", traceback.format_exc())))
        return
    conn.send_bytes(pickle.dumps(("ok", None)))
    while True:
        try:
            task = conn.recv_bytes()
        except (EOFError, OSError):
            break
        if not task:
            break
        try:
            fn, args = pickle.loads(task)
            del task
            answer = pickle.dumps(("ok", fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # from fn's frame on
            answer = pickle.dumps(
                ("error", f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(type(exc), exc, tb)))
            )
        conn.send_bytes(answer)
        del answer
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the process exits anyway
        pass


# -- parent side ------------------------------------------------------------------------------------


class _ProcessWorld:
    """``world_size`` worker processes, each in the ``backend`` default process group of the world."""

    def __init__(self, backend: str, world_size: int) -> None:
        self.backend = backend
        self.world_size = world_size
        self._dir = tempfile.mkdtemp(prefix=f"pmverify-spmd-{backend}-")
        self._conns: list[Connection] = []
        self._procs: list[Any] = []

    def start(self, timeout_s: float) -> None:
        """Spawn the workers and wait until each has initialised its process group (at least
        ``_START_TIMEOUT_S`` seconds: importing torch in a fresh process takes seconds)."""
        t0 = time.monotonic()
        ctx = torch.multiprocessing.get_context("spawn")
        store_path = os.path.join(self._dir, "store")
        try:
            for rank in range(self.world_size):
                parent_end, child_end = ctx.Pipe(duplex=True)
                proc = ctx.Process(
                    target=_serve,
                    args=(rank, self.world_size, self.backend, store_path, child_end, os.getpid()),
                    name=f"pmverify-spmd-{self.backend}-w{self.world_size}-r{rank}",
                )
                self._conns.append(parent_end)
                proc.start()
                self._procs.append(proc)
                child_end.close()
            answers, dead, pending = self._collect(range(self.world_size), max(timeout_s, _START_TIMEOUT_S))
        except BaseException:  # e.g. KeyboardInterrupt while starting
            self.close(graceful=False)
            raise
        failed = {r: a for r, a in answers.items() if a[0] != "ok"}
        if failed or dead or pending:
            self.close(graceful=False)
            if failed:
                rank = min(failed)
                tb = failed[rank][2]
                raise SPMDError(
                    f"{self.backend} world of {self.world_size}: rank {rank} failed to initialise its process group\n\n{tb}",
                    rank=rank,
                    traceback=tb,
                    backend=self.backend,
                )
            if dead:
                rank = min(dead)
                raise SPMDError(
                    f"{self.backend} world of {self.world_size}: the worker process of rank {rank} exited with code "
                    f"{dead[rank]} while starting",
                    rank=rank,
                    backend=self.backend,
                )
            raise SPMDError(
                f"{self.backend} world of {self.world_size}: ranks {pending} did not initialise their process group "
                f"within {max(timeout_s, _START_TIMEOUT_S):g} s",
                backend=self.backend,
            )
        logger.debug("started %s world of %d in %.3f s", self.backend, self.world_size, time.monotonic() - t0)

    def _collect(
        self, ranks: Sequence[int] | range, timeout_s: float
    ) -> tuple[dict[int, tuple], dict[int, int | None], list[int]]:
        """Wait for one answer from each of ``ranks``, at most ``timeout_s`` seconds, and at most
        ``_FAILURE_GRACE_S`` more once one failed; return (answers, exit codes of workers that died
        without answering, ranks still pending)."""
        deadline = time.monotonic() + timeout_s
        pending = set(ranks)
        answers: dict[int, tuple] = {}
        dead: dict[int, int | None] = {}
        by_conn = {self._conns[r]: r for r in pending}
        by_sentinel = {self._procs[r].sentinel: r for r in pending}
        while pending:
            wait_s = deadline - time.monotonic()
            if wait_s <= 0:
                break
            waitables = [self._conns[r] for r in pending] + [self._procs[r].sentinel for r in pending]
            for ready in wait(waitables, timeout=wait_s):
                if ready in by_conn:
                    rank = by_conn[ready]
                    if rank not in pending:
                        continue
                    try:
                        answers[rank] = pickle.loads(ready.recv_bytes())
                    except (EOFError, OSError):  # the worker died without answering
                        self._procs[rank].join(1.0)
                        dead[rank] = self._procs[rank].exitcode
                    except Exception:  # noqa: BLE001 - the result does not unpickle here
                        answers[rank] = (
                            "error",
                            "the result could not be unpickled in the calling process",
                            traceback.format_exc(),
                        )
                    pending.discard(rank)
                else:
                    rank = by_sentinel[ready]
                    if rank not in pending or self._conns[rank].poll():
                        continue  # an answer (or the end of the pipe) is waiting: the pipe tells
                    self._procs[rank].join(0.1)
                    dead[rank] = self._procs[rank].exitcode
                    pending.discard(rank)
            if (dead or any(a[0] != "ok" for a in answers.values())) and pending:
                deadline = min(deadline, time.monotonic() + _FAILURE_GRACE_S)
        return answers, dead, sorted(pending)

    def run(self, payloads: list[bytes], timeout_s: float) -> list[Any]:
        """Send each rank its pickled ``(fn, args)``; return the results in rank order."""
        try:
            for conn, payload in zip(self._conns, payloads, strict=True):
                conn.send_bytes(payload)
        except (BrokenPipeError, OSError) as exc:
            self.close(graceful=False)
            raise SPMDError(
                f"{self.backend} world of {self.world_size}: a worker process is gone ({exc}); the world was torn down",
                backend=self.backend,
            ) from exc
        try:
            answers, dead, pending = self._collect(range(self.world_size), timeout_s)
        except BaseException:  # e.g. KeyboardInterrupt in the caller: the ranks' state is unknown
            self.close(graceful=False)
            raise
        failed = {r: a for r, a in answers.items() if a[0] != "ok"}
        if not (failed or dead or pending):
            return [answers[rank][1] for rank in range(self.world_size)]
        self.close(graceful=False)
        note = "the world was torn down"
        if dead:  # first: the others' errors (a peer's connection reset) follow from it
            rank = min(dead)
            if failed:
                note = f"ranks {sorted(failed)} raised after it (a lost peer); {note}"
            if pending:
                note = f"ranks {pending} had not returned; {note}"
            raise SPMDError(
                f"{self.backend} world of {self.world_size}: the worker process of rank {rank} exited with code "
                f"{dead[rank]} while running fn; {note}",
                rank=rank,
                backend=self.backend,
            )
        if failed:
            rank = min(failed)
            _, summary, tb = failed[rank]
            if pending:
                note = f"ranks {pending} had not returned; {note}"
            raise rank_failed(rank, self.world_size, self.backend, summary, tb, note)
        finished = sorted(answers)
        raise timed_out(pending, finished, timeout_s, self.backend, "", note)

    def close(self, graceful: bool = True) -> None:
        """Stop the workers (asking them first if ``graceful``, else terminating them) and reap them."""
        if graceful:
            for conn in self._conns:
                try:
                    conn.send_bytes(b"")
                except OSError:
                    pass
            deadline = time.monotonic() + _JOIN_TIMEOUT_S
            for proc in self._procs:
                proc.join(max(deadline - time.monotonic(), 0.0))
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self._procs:
            proc.join(_JOIN_TIMEOUT_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
            proc.close()
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []
        shutil.rmtree(self._dir, ignore_errors=True)
        logger.debug("stopped %s world of %d", self.backend, self.world_size)


def _pickle_tasks(fn: Callable[..., Any], args_per_rank: Sequence[Sequence[Any]], backend: str) -> list[bytes]:
    payloads = []
    for rank, args in enumerate(args_per_rank):
        try:
            payloads.append(pickle.dumps((fn, tuple(args))))
        except Exception as exc:
            raise TypeError(
                f"backend {backend!r} sends fn and each rank's arguments to worker processes by pickling them, and "
                f"pickling fn={fn!r} with rank {rank}'s arguments failed ({type(exc).__name__}: {exc}); fn must be a "
                f"module-level function (not a lambda, closure or nested function) and the arguments picklable"
            ) from exc
    return payloads


def run(
    fn: Callable[..., Any], world_size: int, args_per_rank: Sequence[Sequence[Any]], backend: str, timeout_s: float
) -> list[Any]:
    """Run ``fn`` on the ``backend`` world of ``world_size``, starting it on first use."""
    payloads = _pickle_tasks(fn, args_per_rank, backend)
    key = (backend, world_size)
    world = _worlds.get(key)
    if world is None:
        world = _ProcessWorld(backend, world_size)
        world.start(timeout_s)
        _worlds[key] = world
    try:
        return world.run(payloads, timeout_s)
    except BaseException:  # the world tore itself down
        _worlds.pop(key, None)
        raise


def shutdown() -> None:
    """Stop every process world, reaping its workers."""
    worlds = list(_worlds.values())
    _worlds.clear()
    for world in worlds:
        world.close()
