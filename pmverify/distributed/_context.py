"""Which rank, if any, the current thread or process runs ``fn`` for; :func:`run_spmd` refuses to
nest, and a rank's thread or worker process marks itself here."""

from __future__ import annotations

import threading

DEFAULT_GROUP_NAME = "0"
"""The group name of the default (WORLD) group in every world :func:`run_spmd` starts, what
``dist.group.WORLD.group_name`` returns on a rank: the name functional collectives take, e.g.
``torch.ops._c10d_functional.all_reduce(x, "sum", DEFAULT_GROUP_NAME)``."""

TIMEOUT_ENV = "PMVERIFY_TP_TIMEOUT_S"
"""The environment variable that sets :func:`run_spmd`'s default ``timeout_s`` (seconds, a positive
number), the timeout of every tensor-parallel world pmverify's oracles run."""

_thread = threading.local()
_process_rank: int | None = None


def current_rank() -> int | None:
    """Return the rank this thread (threaded backend) or process (process backends) runs ``fn``
    for, or None outside any world."""
    rank = getattr(_thread, "rank", None)
    return rank if rank is not None else _process_rank


def mark_thread(rank: int) -> None:
    """Mark the calling thread as the thread of ``rank``."""
    _thread.rank = rank


def mark_process(rank: int) -> None:
    """Mark the calling process as the worker process of ``rank``."""
    global _process_rank
    _process_rank = rank
