"""The environment the fused QK-norm ops run in, and how a reproducer recreates it.

- Without a GPU, the Triton kernels (the fused op's under ``PMVERIFY_QK_NORM_IMPL=triton``, and the
  kernel faults' of the bank) run only in Triton's interpreter, which must be on before triton is
  first imported (its own jit functions, ``tl.sum``..., are decorated then): :func:`set_up` turns it
  on, so it must run before anything imports ``torch._inductor`` (which imports triton) or the
  kernels. This module imports neither.
- ``PMVERIFY_QK_NORM_IMPL`` (:data:`.ops.IMPL_ENV`) must name an implementation the ops can run.
"""

from __future__ import annotations

import os

from .config import IMPL_ENV

__all__ = ["IMPL_ENV", "use_interpreter_without_gpu", "set_up", "reproducer_prelude"]


def use_interpreter_without_gpu() -> None:
    """Turn Triton's interpreter on when there is no GPU: ``TRITON_INTERPRET=1`` unless it is set.
    Has an effect only before triton is first imported; imports torch, not triton."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def set_up() -> None:
    """:func:`use_interpreter_without_gpu`, then check that the fused ops can run here. Raises
    ``ValueError`` for a ``PMVERIFY_QK_NORM_IMPL`` that is not auto, triton or torch,
    ``RuntimeError`` when it forces the kernels while Triton's interpreter is off (see
    :func:`.ops.validate_environment`, which imports triton then)."""
    use_interpreter_without_gpu()
    from . import ops

    ops.validate_environment()


def reproducer_prelude() -> str:
    """Python lines a reproducer runs after ``import torch`` and before pmverify or triton are
    imported: Triton's interpreter on without a GPU, and ``PMVERIFY_QK_NORM_IMPL`` as it is now
    (when set), so that the script runs the ops as the search did."""
    lines = [
        "# Triton kernels on CPU run only in its interpreter, on before triton is first imported",
        "if not torch.cuda.is_available():",
        '    os.environ["TRITON_INTERPRET"] = "1"',
    ]
    if os.environ.get(IMPL_ENV):
        lines.append(
            f"os.environ[{IMPL_ENV!r}] = {os.environ[IMPL_ENV]!r}  # the fused ops' implementation when written"
        )
    return "\n".join(lines)
