"""Which rank, if any, the current thread or process runs ``fn`` for; :func:`run_spmd` refuses to
nest, and a rank's thread or worker process marks itself here."""

from __future__ import annotations

import threading

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
