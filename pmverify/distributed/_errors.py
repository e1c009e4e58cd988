"""The error :func:`~pmverify.distributed.run_spmd` raises when a run fails."""

from __future__ import annotations


class SPMDError(RuntimeError):
    """A :func:`~pmverify.distributed.run_spmd` run failed: a rank raised, a rank's worker process
    died, or ranks did not finish within ``timeout_s``.

    Attributes:
        rank: the failing rank (the lowest one when several raised), or None when the run failed as
            a whole (a timeout, a world that could not start).
        traceback: the failing rank's formatted traceback; for a threaded timeout, where each
            unfinished rank was when the timeout expired; "" where nothing is known.
        backend: the backend the run used (``"threaded"``, ``"gloo"`` or ``"nccl"``).
    """

    def __init__(self, message: str, *, rank: int | None = None, traceback: str = "", backend: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback
        self.backend = backend

    def __reduce__(self):
        return _rebuild, (str(self), self.rank, self.traceback, self.backend)


def _rebuild(message: str, rank: int | None, traceback: str, backend: str) -> SPMDError:
    return SPMDError(message, rank=rank, traceback=traceback, backend=backend)


def rank_failed(rank: int, world_size: int, backend: str, summary: str, traceback: str, note: str = "") -> SPMDError:
    """Return the error for ``rank`` having raised (``summary``: ``"Type: message"``)."""
    message = f"rank {rank} of world {world_size} (backend {backend!r}) raised {summary}"
    if note:
        message += f"; {note}"
    message += f"\n\nTraceback of rank {rank}:\n{traceback.rstrip()}"
    return SPMDError(message, rank=rank, traceback=traceback, backend=backend)


def timed_out(
    unfinished: list[int], finished: list[int], timeout_s: float, backend: str, stacks: str, note: str
) -> SPMDError:
    """Return the error for ranks ``unfinished`` not having returned within ``timeout_s`` seconds."""
    message = (
        f"ranks {unfinished} did not finish within timeout_s={timeout_s:g} s (backend {backend!r}; "
        f"ranks {finished} returned); a collective mismatch (some ranks calling a collective the others "
        f"do not call, or calling collectives in a different order) is the likely cause; {note}"
    )
    if stacks:
        message += f"\n\nWhere the unfinished ranks were:\n{stacks.rstrip()}"
    return SPMDError(message, rank=None, traceback=stacks, backend=backend)
