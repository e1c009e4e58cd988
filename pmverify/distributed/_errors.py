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


class SPMDTimeoutError(SPMDError):
    """A :func:`~pmverify.distributed.run_spmd` run did not finish within its ``timeout_s``: an error
    of the run, not a verdict on ``fn`` (a loaded machine is the usual cause: raise the timeout,
    :data:`~pmverify.distributed.TIMEOUT_ENV`). A collective mismatch the threaded backend can
    prove (a rank waits in a collective that a rank which returned never joined) is a plain
    :class:`SPMDError` instead, raised as soon as it is seen.

    Attributes (besides :class:`SPMDError`'s; ``rank`` is None):
        unfinished: the ranks that had not returned; finished: those that had;
        timeout_s: the timeout, in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        traceback: str = "",
        backend: str,
        unfinished: list[int],
        finished: list[int],
        timeout_s: float,
    ) -> None:
        super().__init__(message, rank=None, traceback=traceback, backend=backend)
        self.unfinished = unfinished
        self.finished = finished
        self.timeout_s = timeout_s

    def __reduce__(self):
        return _rebuild_timeout, (
            str(self),
            self.traceback,
            self.backend,
            self.unfinished,
            self.finished,
            self.timeout_s,
        )


def _rebuild_timeout(
    message: str, traceback: str, backend: str, unfinished: list[int], finished: list[int], timeout_s: float
) -> SPMDTimeoutError:
    return SPMDTimeoutError(
        message, traceback=traceback, backend=backend, unfinished=unfinished, finished=finished, timeout_s=timeout_s
    )


def timed_out(
    unfinished: list[int], finished: list[int], timeout_s: float, backend: str, stacks: str, note: str
) -> SPMDTimeoutError:
    """Return the error for ranks ``unfinished`` not having returned within ``timeout_s`` seconds."""
    from ._context import TIMEOUT_ENV

    message = (
        f"ranks {unfinished} did not finish within timeout_s={timeout_s:g} s (backend {backend!r}; "
        f"ranks {finished} returned): an error of the run, not a finding; on a loaded machine, raise the "
        f"timeout (run_spmd's timeout_s, or ${TIMEOUT_ENV}); {note}"
    )
    if stacks:
        message += f"\n\nWhere the unfinished ranks were:\n{stacks.rstrip()}"
    return SPMDTimeoutError(
        message, traceback=stacks, backend=backend, unfinished=unfinished, finished=finished, timeout_s=timeout_s
    )


def collective_mismatch(waiting: list[int], returned: list[int], backend: str, stacks: str, note: str) -> SPMDError:
    """Return the error for ranks ``waiting`` blocked in a collective of the default group that
    ranks ``returned``, which returned from ``fn``, never joined."""
    message = (
        f"ranks {waiting} wait in a collective that ranks {returned} returned without calling (backend "
        f"{backend!r}): a collective mismatch (some ranks calling a collective the others do not call, or "
        f"calling collectives in a different order); {note}"
    )
    if stacks:
        message += f"\n\nWhere the waiting ranks were:\n{stacks.rstrip()}"
    return SPMDError(message, rank=None, traceback=stacks, backend=backend)
