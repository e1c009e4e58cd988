"""Faults in the fused op's Triton kernel: a capped grid, a missing column mask, a chunk count.

Each fault has a faulty launcher with exactly the signature of
:func:`pmverify.fusions.qk_norm.triton_impl.qk_norm_triton` (a drop-in for it in kernel tests) and
a fault pass: the shipped :class:`~pmverify.fusions.qk_norm.QKNormFusionPass` whose split-form
rewrites (``qk_norm``, ``qk_norm_split3``, ``qk_norm_split_qk``) are replaced by
``torch.ops.pmverify_faults.qk_norm_kernel``, which runs the faulty launcher; the per-tensor
``rms_norm`` rewrite is the shipped one. The pass class holds its launcher as ``launcher``.

The launchers launch through the shipped launcher of :mod:`.triton_impl` (its checks, tiling,
grid and outputs; only the kernel or a constexpr differs), and their kernels are built from the
shipped jit helpers of :mod:`.kernels`; their kernels live in :mod:`._triton_kernels`, imported on
first launch, so importing this module decorates no kernel. The op always runs the Triton path: on
CPU tensors that needs Triton's interpreter, ``TRITON_INTERPRET=1`` before triton is first imported
(``triton.language``'s own jit functions are decorated then; torch imports triton with
``torch._inductor``, so with :mod:`pmverify.faults`). The ``pmverify`` command sets it when there is
no GPU; the launchers raise ``RuntimeError`` when the kernels are compiled ones on CPU tensors.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch
from torch import Tensor

from ..fusions.qk_norm import QKNormConfig, QKNormFusionPass, ops
from ..fusions.qk_norm.patterns import Rewrite
from ..fusions.qk_norm.triton_impl import (
    Launch,
    interpreted,
    kernels_module,
    launch_for,
    launch_one_pass,
    qk_norm_triton,
    tiling,
)
from .casts import replaced

__all__ = [
    "QKNormKernelGridCapped",
    "QKNormKernelUnmaskedLoads",
    "QKNormKernelLeavesKOutUnwritten",
    "qk_norm_grid_capped",
    "qk_norm_unmasked_loads",
    "qk_norm_k_out_floor_chunks",
    "LAUNCHERS",
    "validate_environment",
]


@functools.cache
def _faulty_kernels():
    """Import :mod:`._triton_kernels` (and triton) on first use."""
    from . import _triton_kernels

    return _triton_kernels


def qk_norm_grid_capped(
    qkv: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    q_size: int,
    kv_size: int,
    eps: float,
    weight_after_cast: bool = False,
    *,
    out: tuple[Tensor, Tensor] | None = None,
    launch: Launch | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`.triton_impl.qk_norm_triton` with a kernel that has no grid-stride loop: each program
    normalises row block ``program_id`` only, while the grid stays ``launch.grid(T)`` =
    ``min(row blocks, num_programs)``. Rows from ``num_programs · rows`` on are never written."""
    kernel = _faulty_kernels().grid_capped_kernel
    return launch_one_pass(kernel, qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, out, launch)


def qk_norm_unmasked_loads(
    qkv: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    q_size: int,
    kv_size: int,
    eps: float,
    weight_after_cast: bool = False,
    *,
    out: tuple[Tensor, Tensor] | None = None,
    launch: Launch | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`.triton_impl.qk_norm_triton` with a kernel whose sums of squares load q and k with the
    row mask only: a chunk reaching past a part's width sums the columns after it (k after q, v
    after k, the next row after the last column); the scaling loads and the stores keep both masks.

    The kernel reads up to ``max(block_q, block_kv)`` elements past the last row of qkv, and the
    interpreter reads raw host memory: the launcher stages qkv in a contiguous buffer with that many
    zeros after it (so no read leaves memory the process owns) and launches on the staged copy."""
    launch, _ = tiling(qkv, q_size, kv_size, launch)
    tokens, width = qkv.shape
    padded = qkv.new_zeros(tokens * width + max(launch.block_q, launch.block_kv))
    staged = padded[: tokens * width].view(tokens, width)
    staged.copy_(qkv)
    kernel = _faulty_kernels().unmasked_loads_kernel
    return launch_one_pass(kernel, staged, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, out, launch)


def qk_norm_k_out_floor_chunks(
    qkv: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    q_size: int,
    kv_size: int,
    eps: float,
    weight_after_cast: bool = False,
    *,
    out: tuple[Tensor, Tensor] | None = None,
    launch: Launch | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`.triton_impl.qk_norm_triton` counting k's chunks by floor division,
    ``kv_size // block_kv`` instead of the ceiling, and launching the shipped ``qk_norm_kernel``.
    The default tiling's ``block_kv`` is ``next_pow2(kv_size)``: 0 chunks for a ``kv_size`` that is
    not a power of two (k_out never written), 1 (exact) for one that is. A ``kv_size`` wider than
    whole chunks loses its tail chunk: neither summed nor written."""
    launch, _ = tiling(qkv, q_size, kv_size, launch)
    chunks_kv = kv_size // launch.block_kv  # the bug: -(-kv_size // launch.block_kv)
    kernel = kernels_module().qk_norm_kernel
    return launch_one_pass(
        kernel, qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, out, launch, CHUNKS_KV=chunks_kv
    )


#: The launchers ``pmverify_faults::qk_norm_kernel`` runs, by name: the faulty ones and, as a
#: control, the shipped :func:`~.triton_impl.qk_norm_triton`.
LAUNCHERS: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {
    launcher.__name__: launcher
    for launcher in (qk_norm_grid_capped, qk_norm_unmasked_loads, qk_norm_k_out_floor_chunks, qk_norm_triton)
}


@torch.library.custom_op("pmverify_faults::qk_norm_kernel", mutates_args=())
def qk_norm_kernel(
    qkv: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    q_size: int,
    kv_size: int,
    eps: float,
    weight_after_cast: bool,
    launcher: str,
) -> tuple[Tensor, Tensor]:
    """``pmverify::qk_norm`` (arguments, checks and result alike) run by the launcher named
    ``launcher`` in :data:`LAUNCHERS`, on every device: CPU tensors run in Triton's interpreter
    when it is on, else (a GPU machine) on CUDA copies, copied back, so that the bug is what shows,
    not a device error; the tiling is always the one :func:`launch_for` picks for the tensors'
    own device (in the interpreter: 4 programs), so the same cases show the capped grid on every
    machine. Raises ``ValueError`` for an unknown launcher, ``RuntimeError`` for CPU
    tensors with neither the interpreter nor a GPU."""
    ops.validate_qk_norm_args(qkv, q_weight, k_weight, q_size, kv_size, eps)
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher={launcher!r} is unknown; expected one of {', '.join(LAUNCHERS)}")
    run = LAUNCHERS[launcher]
    launch = launch_for(qkv.shape[0], q_size, kv_size, qkv.device)
    if qkv.device.type == "cpu" and torch.cuda.is_available() and not interpreted():
        outs = run(qkv.cuda(), q_weight.cuda(), k_weight.cuda(), q_size, kv_size, eps, weight_after_cast, launch=launch)
        return tuple(out.cpu() for out in outs)
    return run(qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, launch=launch)


def validate_environment() -> None:
    """Raise ``RuntimeError`` unless the kernel faults can run on CPU cases here: a GPU, or Triton's
    interpreter on (``TRITON_INTERPRET=1`` before triton was first imported). Imports triton."""
    if torch.cuda.is_available() or interpreted():
        return
    raise RuntimeError(
        "the kernel faults run their Triton kernels on a GPU or in Triton's interpreter: this machine has no "
        f"GPU and the interpreter is off (TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r} when triton "
        "was imported?); set TRITON_INTERPRET=1"
    )


@qk_norm_kernel.register_fake
def _qk_norm_kernel_fake(qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, launcher):
    return ops.qk_norm_fake(qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast)


class _KernelFault(QKNormFusionPass):
    """The shipped pass with the split forms' replacement calling ``pmverify_faults::qk_norm_kernel``
    with the launcher ``launcher`` (a subclass sets it)."""

    launcher: Callable[..., tuple[Tensor, Tensor]]

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        q_size, kv_size, eps = config.q_size, config.kv_size, config.eps
        name = cls.launcher.__name__

        def qk_norm_faulty_kernel(qkv, q_weight, k_weight):
            q_out, k_out = torch.ops.pmverify_faults.qk_norm_kernel(
                qkv, q_weight, k_weight, q_size, kv_size, eps, False, name
            )
            return q_out, k_out, qkv.split([q_size, kv_size, kv_size], dim=-1)[2]

        return replaced(config, {"qk_norm": qk_norm_faulty_kernel, "qk_norm_split3": qk_norm_faulty_kernel})


class QKNormKernelGridCapped(_KernelFault):
    """Bug kind: a grid that stops at a fixed number of blocks.

    The fused kernel has no grid-stride loop: program ``pid`` normalises row block ``pid`` only,
    while the launcher keeps the persistent grid ``min(row blocks, num_programs)`` (``num_programs``
    = 4 per SM on CUDA, 4 in Triton's interpreter). Exact while ``T <= num_programs · rows`` (the
    default tiling has up to 64 rows per block for narrow heads: up to 256 tokens in the
    interpreter); the q and k outputs of every later row are never written, which the semantics
    oracle sees as NaN (it fills uninitialised memory) where the pattern was finite. Shows only on
    the split forms (the per-tensor rewrite is the shipped one), with more tokens than the default
    strategies draw: see the fault's bank row.
    """

    launcher = staticmethod(qk_norm_grid_capped)


class QKNormKernelUnmaskedLoads(_KernelFault):
    """Bug kind: a missing mask for non-power-of-two sizes.

    The fused kernel's sums of squares load q and k with the row mask only, no column mask: each
    chunk of ``block`` (a power of two) columns is summed whole, so for a ``q_size`` or ``kv_size``
    that is not a power of two the sum takes in the columns after the part (k's after q's, v's
    after k's, the next row's after the last column) and the whole row is scaled by a wrong rstd
    (the semantics oracle). Stores stay masked, so nothing outside the outputs is written. Exact
    when each width is a multiple of its block, so that the chunks end on the part's last column:
    power-of-two q and kv widths under the default tiling.
    """

    launcher = staticmethod(qk_norm_unmasked_loads)


class QKNormKernelLeavesKOutUnwritten(_KernelFault):
    """Bug kind: an output left unwritten for some geometry (k_out).

    The launcher counts k's chunks by floor division (``kv_size // block_kv`` instead of the
    ceiling) and launches the shipped kernel. With the default tiling (``block_kv =
    next_pow2(kv_size)``) a ``kv_size`` that is not a power of two gets 0 chunks: k_out is never
    written, which the semantics oracle sees as NaN (it fills uninitialised memory). A ``kv_size``
    wider than the largest block (16384) that is not a multiple of it loses its tail chunk. Exact
    when ``kv_size`` is a multiple of ``block_kv`` (power-of-two kv widths under the default
    tiling); q is always right.
    """

    launcher = staticmethod(qk_norm_k_out_floor_chunks)
