"""Run a function on every rank of a real torch.distributed world: :func:`run_spmd`.

Three backends (:data:`BACKENDS`): ``"threaded"`` (torch's threaded process group, one thread per
rank in this process: fast enough for a Hypothesis test), ``"gloo"`` (one process per rank, for
end-to-end checks) and ``"nccl"`` (as gloo, one CUDA device per rank). Worlds are started on first
use and reused; :func:`shutdown_worlds` tears them down.
"""

from ._errors import SPMDError
from ._run import BACKENDS, DEFAULT_GROUP_NAME, run_spmd, shutdown_worlds

__all__ = ["BACKENDS", "DEFAULT_GROUP_NAME", "SPMDError", "run_spmd", "shutdown_worlds"]
