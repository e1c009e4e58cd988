"""A job's worker processes: what the job holds of one (:class:`WorkerProcess`, its
:class:`WorkerState`), the loop that waits on them (:func:`poll`), and what a worker process does to
itself first (:func:`log_to`, :func:`die_with_parent`, :func:`quiet_tqdm`, :func:`use_threads`). Shared by the fuzzing job
(:mod:`.supervisor`) and the audit job (:mod:`pmverify._audit.job`). Torch-free."""

from __future__ import annotations

import contextlib
import enum
import os
import pathlib
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any, TypeVar

from .protocol import Stop

__all__ = [
    "WorkerProcess",
    "WorkerState",
    "describe_exit",
    "die_with_parent",
    "hang_stack",
    "log_to",
    "poll",
    "quiet_tqdm",
    "serve_requests",
    "threads_per_worker",
    "use_threads",
]

H = TypeVar("H")


class WorkerState(enum.Enum):
    """What a worker process is doing, as the job sees it."""

    STARTING = "starting"  #: started, not yet :class:`~.protocol.Ready`
    IDLE = "idle"  #: ready, no request
    BUSY = "busy"  #: working on :attr:`WorkerProcess.job`

    @property
    def at_work(self) -> bool:
        """Starting or busy: the job waits on it, and times it."""
        return self is not WorkerState.IDLE


class WorkerProcess:
    """One worker process, ``main(conn, *args)`` in a process of ``context`` (``spawn``), and what it
    is doing; its output goes to ``log`` (None: nowhere of the job's). ``name``: the process's name.

    - ``state``: a :class:`WorkerState`; ``job``: the request it is busy with (None when idle);
    - ``last_seen``: ``time.monotonic()`` of its last message (or request); ``job_start``: of the
      request it is busy with (or of its start);
    - ``case``: ``(family, choices)`` of the fuzz case it is on, from its last
      :class:`~.protocol.CaseStarted` (None between cases)."""

    def __init__(
        self, context: Any, name: str, log: pathlib.Path | None, main: Callable[..., None], args: tuple
    ) -> None:
        self.conn, child = context.Pipe()
        self.log = log
        self.dump_from: int | None = None
        self.process = context.Process(target=main, args=(child, *args), name=f"pmverify-worker[{name}]")
        self.process.daemon = True
        self.process.start()
        child.close()
        self.state = WorkerState.STARTING
        self.last_seen = time.monotonic()
        self.job: Any = None
        self.job_start = self.last_seen
        self.case: tuple[int, bytes | None] | None = None

    def send(self, job: Any) -> None:
        """Send the request ``job``; the worker is busy with it from now."""
        self.conn.send(job)
        self.state = WorkerState.BUSY
        self.job = job
        self.job_start = self.last_seen = time.monotonic()
        self.case = None

    def done(self) -> None:
        """The worker answered its request: idle."""
        self.state = WorkerState.IDLE
        self.job = None

    def kill(self) -> None:
        """Kill the process (when alive), close the pipe, and remove its log when it is empty."""
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

    def hang_stack(self) -> str | None:
        """Where the case hung: :func:`hang_stack` of what :meth:`dump_stacks` wrote, or None."""
        if self.log is None or self.dump_from is None:
            return None
        try:
            return hang_stack(self.log.read_text(errors="replace")[self.dump_from :])
        except OSError:
            return None

    def end(self) -> None:
        """:meth:`stop` it when idle, else :meth:`kill` it."""
        if self.state is WorkerState.IDLE:
            self.stop()
        else:
            self.kill()

    def stop(self) -> None:
        """Ask the worker to end (:class:`~.protocol.Stop`), give it 3 s, then :meth:`kill` it."""
        try:
            self.conn.send(Stop())
        except (OSError, ValueError):
            pass
        self.process.join(3)
        self.kill()


#: the frame of pmverify that ran a case, found in the thread that hung
_CASE_FRAME = " in check_case"
_PACKAGE = str(pathlib.Path(__file__).resolve().parents[1])
#: pmverify's users shipped with it: their frames are a pass's, not the tool's
_USERS = tuple(os.path.join(_PACKAGE, user) + os.sep for user in ("fusions", "faults"))


def _tool_frame(frame: str) -> bool:
    """Whether a ``File "...", line N in f`` line of faulthandler is one of pmverify's own."""
    path = frame.split('"')[1] if frame.count('"') >= 2 else ""
    return path.startswith(_PACKAGE + os.sep) and not path.startswith(_USERS)


def hang_stack(dump: str, *, most: int = 12, least: int = 3) -> str | None:
    """The innermost frames of the thread that ran the case, from ``faulthandler``'s dump of every
    thread (most recent call first): the thread holding pmverify's ``check_case`` (else the current
    thread, else the first); its frames down to the first of pmverify's own (the one that called
    the pass, or ran the graph), ``least`` at least and ``most`` at most. None when the dump holds
    no frame."""
    blocks = [block.strip().splitlines() for block in dump.split("\n\n") if "most recent call first" in block]
    if not blocks:
        return None
    chosen = next((b for b in blocks if any(line.endswith(_CASE_FRAME) for line in b)), None)
    chosen = chosen or next((b for b in blocks if b[0].startswith("Current thread")), blocks[0])
    frames = [line.strip() for line in chosen[1:] if line.strip().startswith("File ")]
    if not frames:
        return None
    ours = next((i for i, frame in enumerate(frames) if _tool_frame(frame)), len(frames))
    keep = max(least, min(most, ours + 1))
    cut = len(frames) - keep
    return "\n".join(frames[:keep] + ([f"... {cut} outer frames"] if cut > 0 else []))


def describe_exit(code: int | None) -> str:
    """How a process of exit code ``code`` ended, as a clause: ``"exited with status 3"``, ``"was
    killed by SIGSEGV (signal 11)"``, ``"did not exit"`` (None)."""
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name} (signal {-code})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def poll(
    holders: Sequence[H],
    timeout: float,
    *,
    worker_of: Callable[[H], WorkerProcess | None],
    handle: Callable[[H, Any], None],
    died: Callable[[H, WorkerProcess], None],
) -> list[H]:
    """Wait up to ``timeout`` seconds on the workers at work (:attr:`WorkerState.at_work`) of
    ``holders`` (``worker_of(holder)``: its worker or None); pass each message that arrives to
    ``handle(holder, message)``, and call ``died(holder, worker)`` for a worker whose process ended
    while still at work (after handling what it sent before it died). Return the holders whose
    worker was at work when the wait began, for the caller to time them; sleeps briefly (at most
    ``timeout``) and returns ``[]`` when none was."""
    live = [h for h in holders if (w := worker_of(h)) is not None and w.state.at_work]
    if not live:
        time.sleep(min(timeout, 0.05))
        return []
    handles: dict[Any, H] = {}
    for holder in live:
        worker = worker_of(holder)
        handles[worker.conn] = holder
        handles[worker.process.sentinel] = holder

    def receive(holder: H) -> None:
        try:
            while (worker := worker_of(holder)) is not None and worker.conn.poll():
                handle(holder, worker.conn.recv())
        except (EOFError, OSError):
            pass

    for ready in wait(list(handles), timeout=timeout):
        holder = handles[ready]
        receive(holder)
        worker = worker_of(holder)
        if worker is not None and worker.state.at_work and not worker.process.is_alive():
            receive(holder)  # what it sent before it died
            worker.process.join(1)
            if worker_of(holder) is worker and worker.state.at_work:
                died(holder, worker)
    return live


def log_to(path: str) -> None:
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


def die_with_parent() -> None:
    """End this process when the job's process dies (``kill -9`` of the job alone): by the
    kernel's parent-death signal on Linux, else by a thread watching the parent; and ignore
    SIGINT, which a Ctrl-C sends to the job's whole process group (the job stops its workers)."""
    import multiprocessing
    import signal
    import threading

    # Ctrl-C reaches the whole process group: the job, not its workers, ends them and reports it
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
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


def quiet_tqdm() -> None:
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


def threads_per_worker(jobs: int) -> int:
    """The intra-op threads each of ``jobs`` workers gets: this process's cores (its CPU affinity)
    shared out, at least one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - no affinity on this platform
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, jobs))


def use_threads(threads: int | None) -> None:
    """Have torch's intra-op pool use ``threads`` threads (:func:`threads_per_worker`; None: torch's
    default, one per core). By default every worker starts one per core, and ``N`` workers on ``N``
    cores oversubscribe them: OpenMP threads spin waiting for one another (measured: two audit
    workers on 2 cores ran each rewrite 2.5 to 3 times slower than with one thread each)."""
    if threads is None:
        return
    import torch

    torch.set_num_threads(threads)


def serve_requests(conn: Any, kind: type, answer: Callable[[Any], Any]) -> None:
    """A worker's request loop: send ``answer(request)`` back on ``conn`` for each request of type
    ``kind``, until another request (:class:`~.protocol.Stop`) or the job's end of the pipe closes."""
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if not isinstance(request, kind):
            return
        conn.send(answer(request))
