""":func:`run_spmd`, its argument checks and :func:`shutdown_worlds`."""

from __future__ import annotations

import atexit
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ._context import TIMEOUT_ENV

BACKENDS = ("threaded", "gloo", "nccl")

DEFAULT_TIMEOUT_S = 120.0
""":func:`run_spmd`'s ``timeout_s`` when neither the call nor :data:`TIMEOUT_ENV` gives one: generous,
since a timeout is an error of the run, not a finding (a world of a few ranks takes milliseconds on
an idle machine, seconds on a loaded one)."""


def default_timeout_s() -> float:
    """Return the ``timeout_s`` a :func:`run_spmd` call without one uses: ``$PMVERIFY_TP_TIMEOUT_S``
    (:data:`TIMEOUT_ENV`) when set, else :data:`DEFAULT_TIMEOUT_S` (120 s). Read at each call.

    Raises:
        ValueError: the variable is set but is not a positive, finite number of seconds.
    """
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"${TIMEOUT_ENV}={text!r} must be a positive number of seconds")
    return value


_run_lock = threading.Lock()  # one run at a time: threaded worlds share in-flight collectives by group name


def run_spmd(
    fn: Callable[..., Any],
    world_size: int,
    args_per_rank: Sequence[Sequence[Any]],
    *,
    backend: str = "threaded",
    timeout_s: float | None = None,
) -> list[Any]:
    """Run fn on every rank of a torch.distributed world and return the per-rank results in rank order.

    Rank ``r`` calls ``fn(*args_per_rank[r])`` inside an initialised default process group of
    ``world_size`` ranks (``dist.get_rank() == r``), so ``dist.all_reduce`` and the functional
    collectives (``torch.ops._c10d_functional.*`` with group name :data:`DEFAULT_GROUP_NAME`) really
    communicate. A world is started on the first call for its backend and size and reused by later
    calls until :func:`shutdown_worlds` (registered with :mod:`atexit`). State ``fn`` leaves behind
    in a world (groups it creates, globals it sets) persists into later calls. While a threaded run
    is in flight, torch.distributed's process-wide world state is the threaded world's: a default
    group the caller initialised is restored when the run ends, but other threads must not use it
    during the run.

    Args:
        fn: the function every rank runs. For ``"gloo"`` and ``"nccl"`` it and its arguments are
            pickled to spawned worker processes: it must be a module-level function, importable by
            name, and a script calling run_spmd must guard its entry point with
            ``if __name__ == "__main__":`` (as for any ``spawn`` start).
        world_size: the number of ranks, a positive int.
        args_per_rank: ``world_size`` argument tuples (or lists), ``args_per_rank[r]`` for rank r.
        backend: ``"threaded"``: one thread per rank in this process, torch's threaded process
            group, CPU tensors, about a millisecond per call once started; ``"gloo"``: one spawned
            process per rank (a few seconds to start a world); ``"nccl"``: as gloo, rank r on CUDA
            device r.
        timeout_s: seconds the ranks have to return, once the world runs (starting a process world
            may take longer); None (the default): :func:`default_timeout_s`, i.e.
            ``$PMVERIFY_TP_TIMEOUT_S`` or 120 s.

    Returns:
        ``[result of rank 0, ..., result of rank world_size - 1]``; for the process backends the
        results are pickled back (copies).

    Raises:
        SPMDError: a rank raised (the lowest such rank; the message names it and holds its
            traceback; ranks blocked in a collective are released), a worker process died, or
            (threaded backend) ranks wait in a collective of the default group that a rank which
            returned never joined: a collective mismatch, raised as soon as it is seen, without
            waiting for the timeout. After a threaded failure the world is reused; a failed process
            world is torn down and the next call starts a fresh one.
        SPMDTimeoutError: (an SPMDError) ranks did not return within ``timeout_s``: a loaded
            machine, or ranks that wait on each other in a way the mismatch check does not see
            (every process-backend mismatch).
        ValueError: ``world_size`` not a positive int, ``len(args_per_rank) != world_size``, an
            unknown ``backend``, ``timeout_s`` not a positive number.
        TypeError: ``fn`` not callable, an ``args_per_rank`` entry not a tuple or list, or (process
            backends) ``fn`` or the arguments not picklable; ``$PMVERIFY_TP_TIMEOUT_S`` not a
            positive number (ValueError).
        RuntimeError: called from inside ``fn`` (not re-entrant), torch.distributed unavailable, or
            ``"nccl"`` without NCCL or with fewer than ``world_size`` CUDA devices.
    """
    if timeout_s is None:
        timeout_s = default_timeout_s()
    _check(fn, world_size, args_per_rank, backend, timeout_s)
    from . import _context

    rank = _context.current_rank()
    if rank is not None:
        raise RuntimeError(f"run_spmd is not re-entrant: it was called from inside fn, on rank {rank} of a world")
    with _run_lock:
        if backend == "threaded":
            from . import _threaded

            return _threaded.run(fn, world_size, args_per_rank, timeout_s)
        from . import _processes

        return _processes.run(fn, world_size, args_per_rank, backend, timeout_s)


def _check(fn: Any, world_size: Any, args_per_rank: Any, backend: Any, timeout_s: Any) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of BACKENDS={BACKENDS}")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be a positive int")
    if isinstance(args_per_rank, (str, bytes)) or not hasattr(args_per_rank, "__len__"):
        raise TypeError(f"args_per_rank={args_per_rank!r} must be a sequence of world_size argument tuples")
    if len(args_per_rank) != world_size:
        raise ValueError(
            f"len(args_per_rank)={len(args_per_rank)} must equal world_size={world_size} (one argument tuple per rank)"
        )
    for rank, args in enumerate(args_per_rank):
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"args_per_rank[{rank}]={args!r} must be a tuple (or list) of rank {rank}'s arguments")
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    if (
        not isinstance(timeout_s, (int, float))
        or isinstance(timeout_s, bool)
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        raise ValueError(f"timeout_s={timeout_s!r} must be a positive number of seconds")
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this torch build")
    if backend == "nccl":
        if not dist.is_nccl_available():
            raise RuntimeError("backend='nccl' needs NCCL, and this torch build has none")
        if torch.cuda.device_count() < world_size:
            raise RuntimeError(
                f"backend='nccl' with world_size={world_size} needs {world_size} CUDA devices, "
                f"found {torch.cuda.device_count()}"
            )


def shutdown_worlds() -> None:
    """Tear down every world :func:`run_spmd` started: join the threaded worlds' threads, stop and
    reap the process worlds' workers. Later calls start fresh worlds. Registered with :mod:`atexit`.

    Raises:
        RuntimeError: called from inside ``fn``.
    """
    from . import _context

    rank = _context.current_rank()
    if rank is not None:
        raise RuntimeError(f"shutdown_worlds was called from inside fn, on rank {rank} of a world")
    with _run_lock:
        from . import _processes, _threaded

        _threaded.shutdown()
        _processes.shutdown()


def _shutdown_at_exit() -> None:
    from . import _context

    if _context.current_rank() is None:  # a worker process has no worlds of its own
        shutdown_worlds()


atexit.register(_shutdown_at_exit)
