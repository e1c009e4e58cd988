"""Run a function on every rank of a real torch.distributed world: :func:`run_spmd`.

Three backends (:data:`BACKENDS`): ``"threaded"`` (torch's threaded process group, one thread per
rank in this process: fast enough for a Hypothesis test), ``"gloo"`` (one process per rank, for
end-to-end checks) and ``"nccl"`` (as gloo, one CUDA device per rank). Worlds are started on first
use and reused; :func:`shutdown_worlds` tears them down.

A run's timeout is a setting, not a verdict: ``timeout_s``, else ``$PMVERIFY_TP_TIMEOUT_S``
(:data:`TIMEOUT_ENV`), else 120 s; a run past it raises :class:`SPMDTimeoutError`. A collective
mismatch the threaded backend can prove is an :class:`SPMDError` raised at once.
"""

from ._context import DEFAULT_GROUP_NAME, TIMEOUT_ENV
from ._errors import SPMDError, SPMDTimeoutError
from ._run import (
    BACKENDS,
    DEFAULT_TIMEOUT_S,
    default_timeout_s,
    run_spmd,
    shutdown_worlds,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_GROUP_NAME",
    "DEFAULT_TIMEOUT_S",
    "SPMDError",
    "SPMDTimeoutError",
    "TIMEOUT_ENV",
    "default_timeout_s",
    "run_spmd",
    "shutdown_worlds",
]
