"""Launchers of the fused QK norm's Triton kernels (:mod:`.kernels`): block shapes, grid, outputs.

``qk_norm_triton`` is the tp_world = 1 op (one kernel), ``qk_norm_tp_triton`` the tensor-parallel
one (sum-of-squares kernel, float32 ``[T, 2]`` all-reduce, apply kernel). They compute what the
torch implementations in :mod:`.ops` compute, with the same rounding order; float32 results may
differ in the last bits (the reduction order differs), so a bf16/fp16 output may round to the
neighbouring value where the float32 result sits on a rounding boundary.

On CUDA tensors the kernels are compiled; on CPU tensors they run in Triton's interpreter, which
needs ``TRITON_INTERPRET=1`` in the environment before this module (and triton) is first imported.
The interpreter casts float32 to bfloat16 by truncation, not round-to-nearest: its bf16 results may
sit one bf16 ulp below the compiled kernel's per cast (up to about three with a bf16 weight applied
after the cast), and it converts subnormal bf16 values wrongly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading

import torch
from torch import Tensor

from .config import output_dtype

__all__ = [
    "Launch",
    "launch_for",
    "interpreted",
    "qk_norm_triton",
    "qk_norm_tp_triton",
    "sum_squares_triton",
    "qk_norm_apply_triton",
    # for the fault bank's faulty launchers
    "kernels_module",
    "tiling",
    "launch_one_pass",
]

#: Float32 elements one program holds per row block (q and k together), the row-block size target.
ROW_BLOCK_ELEMENTS = 8192
#: Widest chunk of a part (q or k) read at once; wider parts are read in chunks (twice at tp 1).
MAX_BLOCK = 16384
#: Most rows in one row block.
MAX_ROWS = 64
#: Programs per streaming multiprocessor in the persistent grid on CUDA.
PROGRAMS_PER_SM = 4
#: Programs of the persistent grid in the interpreter (it runs them one after another).
INTERPRETER_PROGRAMS = 4
#: Triton's largest block (``TRITON_MAX_TENSOR_NUMEL``) and most warps per program.
MAX_TILE = 1 << 20
MAX_WARPS = 32


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


@dataclasses.dataclass(frozen=True)
class Launch:
    """How a launch tiles ``[T, width]``: ``rows`` rows per row block (a power of two),
    ``block_q`` / ``block_kv`` columns per chunk of q / k (powers of two, at least 1), and
    ``num_programs`` programs in the persistent grid (each walks every ``num_programs``-th row
    block). ``num_warps`` is for the compiled kernel (ignored by the interpreter).

    Raises ``ValueError`` naming the field for a value that is not a positive int or not a power of
    two where one is needed, for more than :data:`MAX_WARPS` warps, and for a row block of a part
    (``rows · block``) over Triton's :data:`MAX_TILE` elements."""

    rows: int
    block_q: int
    block_kv: int
    num_programs: int
    num_warps: int = 4

    def __post_init__(self) -> None:
        for name in ("rows", "block_q", "block_kv", "num_programs", "num_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Launch: {name}={value!r} must be a positive int")
        for name in ("rows", "block_q", "block_kv", "num_warps"):
            value = getattr(self, name)
            if value & (value - 1):
                raise ValueError(f"Launch: {name}={value} must be a power of two (tl.arange needs one)")
        if self.num_warps > MAX_WARPS:
            raise ValueError(f"Launch: num_warps={self.num_warps} exceeds {MAX_WARPS} (1024 threads per program)")
        for name in ("block_q", "block_kv"):
            if self.rows * getattr(self, name) > MAX_TILE:
                raise ValueError(
                    f"Launch: rows·{name} = {self.rows}·{getattr(self, name)} exceeds Triton's {MAX_TILE} elements "
                    "per block"
                )

    def chunks(self, q_size: int, kv_size: int) -> tuple[int, int]:
        """Chunks per row of q and of k: ``ceil(width / block)``."""
        return -(-q_size // self.block_q), -(-kv_size // self.block_kv)

    def grid(self, tokens: int) -> tuple[int]:
        """The persistent grid: ``min(row blocks, num_programs)`` programs (at least one)."""
        return (max(1, min(-(-tokens // self.rows), self.num_programs)),)


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def launch_for(tokens: int, q_size: int, kv_size: int, device: torch.device) -> Launch:
    """The default tiling for ``tokens`` rows of ``q_size`` + ``kv_size`` columns on ``device``.

    A part narrower than :data:`MAX_BLOCK` is one chunk of ``next_pow2(width)`` columns (read once);
    row blocks hold about :data:`ROW_BLOCK_ELEMENTS` elements (at most :data:`MAX_ROWS` rows); the
    grid is :data:`PROGRAMS_PER_SM` programs per SM on CUDA, :data:`INTERPRETER_PROGRAMS` in the
    interpreter, fewer when there are fewer row blocks."""
    block_q = min(triton_next_pow2(q_size), MAX_BLOCK)
    block_kv = min(triton_next_pow2(kv_size), MAX_BLOCK)
    rows = min(MAX_ROWS, _pow2_floor(ROW_BLOCK_ELEMENTS // (block_q + block_kv)))
    elements = rows * (block_q + block_kv)
    num_warps = 4 if elements <= 2048 else 8 if elements <= 8192 else 16
    if device.type == "cuda":
        programs = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
        programs *= PROGRAMS_PER_SM
    else:
        programs = INTERPRETER_PROGRAMS
    return Launch(rows, block_q, block_kv, programs, num_warps)


def triton_next_pow2(n: int) -> int:
    """The smallest power of two ``>= n`` (1 for n <= 1)."""
    return 1 << (max(1, n) - 1).bit_length()


#: Triton's interpreter patches ``triton.language`` process-wide while a kernel runs, so interpreted
#: launches from several threads (a threaded tensor-parallel world) take turns.
_INTERPRETER_LOCK = threading.Lock()


def _serialised(x: Tensor):
    """The lock interpreted launches hold; compiled (CUDA) launches run concurrently."""
    return contextlib.nullcontext() if x.device.type == "cuda" else _INTERPRETER_LOCK


@functools.cache
def kernels_module():
    """Import :mod:`.kernels` (and triton) on first use; on CPU tensors the interpreter must be on."""
    from . import kernels

    return kernels


def interpreted() -> bool:
    """Whether the kernels run in Triton's interpreter: ours and ``triton.language``'s own jit
    functions (``tl.cdiv``, ``tl.sum``: decorated when triton is first imported) both interpreted.
    Imports the kernels (and triton)."""
    import triton.language as tl

    return all(type(fn).__name__ == "InterpretedFunction" for fn in (kernels_module().qk_norm_kernel, tl.cdiv))


def _check_inputs(qkv: Tensor, q_weight: Tensor | None, k_weight: Tensor | None, q_size: int, kv_size: int) -> None:
    """The geometry the kernels index by: what the ops check, less contiguity (any row stride)."""
    if qkv.dim() != 2 or qkv.shape[1] != q_size + 2 * kv_size or q_size < 1 or kv_size < 1:
        raise ValueError(
            f"qkv has shape {tuple(qkv.shape)}; expected [T, q_size + 2*kv_size] with q_size={q_size}, "
            f"kv_size={kv_size} positive"
        )
    for name, weight, width in (("q_weight", q_weight, q_size), ("k_weight", k_weight, kv_size)):
        if weight is not None and (weight.dim() != 1 or weight.shape[0] != width or weight.device != qkv.device):
            raise ValueError(
                f"{name} has shape {tuple(weight.shape)} on {weight.device}; expected ({width},) on {qkv.device}"
            )


def _check_device(x: Tensor) -> None:
    if x.device.type == "cuda":
        return
    if x.device.type != "cpu":
        raise ValueError(f"the Triton QK norm runs on CUDA, or on CPU in Triton's interpreter; got {x.device}")
    if not interpreted():
        raise RuntimeError(
            "the Triton QK norm on CPU tensors runs in Triton's interpreter: set TRITON_INTERPRET=1 before "
            "triton is first imported (torch._inductor imports it) and before pmverify's kernels are "
            f"(TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r} now; the kernels are compiled ones)"
        )


def _unit_stride(x: Tensor) -> Tensor:
    """``x`` itself when its columns are adjacent (the kernels take any row stride), else a
    contiguous copy; the kernels index weights and columns with stride 1."""
    return x if x.stride(-1) == 1 or x.numel() == 0 else x.contiguous()


def _outputs(qkv, q_weight, k_weight, q_size, kv_size, weight_after_cast, out):
    tokens = qkv.shape[0]
    dtypes = (
        output_dtype(qkv.dtype, q_weight.dtype, weight_after_cast),
        output_dtype(qkv.dtype, k_weight.dtype, weight_after_cast),
    )
    if out is None:
        return tuple(qkv.new_empty((tokens, w), dtype=d) for w, d in zip((q_size, kv_size), dtypes, strict=True))
    if len(out) != 2:
        raise ValueError(f"out has {len(out)} tensors; expected (q_out, k_out)")
    for name, tensor, width, dtype in zip(("q_out", "k_out"), out, (q_size, kv_size), dtypes, strict=True):
        if tensor.shape != (tokens, width) or tensor.dtype != dtype or not tensor.is_contiguous():
            raise ValueError(
                f"out {name} is {tuple(tensor.shape)} {tensor.dtype} (contiguous={tensor.is_contiguous()}); "
                f"expected contiguous ({tokens}, {width}) {dtype}"
            )
        if tensor.device != qkv.device:
            raise ValueError(f"out {name} is on {tensor.device}; qkv is on {qkv.device}")
    return tuple(out)


def tiling(qkv: Tensor, q_size: int, kv_size: int, launch: Launch | None) -> tuple[Launch, dict]:
    """``(launch, meta)``: ``launch`` (default :func:`launch_for` the qkv ``[T, q_size + 2*kv_size]``)
    and the kernels' constexprs it gives (ROWS, BLOCK_Q, CHUNKS_Q, BLOCK_KV, CHUNKS_KV)."""
    launch = launch or launch_for(qkv.shape[0], q_size, kv_size, qkv.device)
    chunks_q, chunks_kv = launch.chunks(q_size, kv_size)
    meta = dict(
        ROWS=launch.rows, BLOCK_Q=launch.block_q, CHUNKS_Q=chunks_q, BLOCK_KV=launch.block_kv, CHUNKS_KV=chunks_kv
    )
    return launch, meta


def qk_norm_triton(
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
    """``pmverify::qk_norm`` at tp_world = 1 in one kernel: each qkv row's q and k read once.

    Arguments and result as :func:`.ops.qk_norm`, except that qkv may have any row stride (its
    dtypes and eps are checked by the op, not here); ``out`` = ``(q_out, k_out)`` to write into
    (contiguous ``[T, q_size]`` / ``[T, kv_size]`` of the result dtypes), ``launch`` a tiling other
    than :func:`launch_for`'s. Raises ``ValueError`` for a qkv or weight shape other than the
    geometry's, ``out`` of the wrong shape, dtype or device, ``RuntimeError`` for CPU tensors
    without the interpreter."""
    return launch_one_pass(
        kernels_module().qk_norm_kernel, qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, out, launch
    )


def _operands(qkv, q_weight, k_weight, q_size, kv_size, weight_after_cast, out):
    """Checked, unit-stride ``(qkv, q_weight, k_weight)`` and the ``(q_out, k_out)`` to write."""
    _check_device(qkv)
    _check_inputs(qkv, q_weight, k_weight, q_size, kv_size)
    qkv, q_weight, k_weight = _unit_stride(qkv), _unit_stride(q_weight), _unit_stride(k_weight)
    return (qkv, q_weight, k_weight), _outputs(qkv, q_weight, k_weight, q_size, kv_size, weight_after_cast, out)


def launch_one_pass(kernel, qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, out, launch, **override):
    """Launch ``kernel``, which takes the arguments of ``qk_norm_kernel`` (the fault bank's faulty
    kernels do too), with the constexprs in ``override`` replacing the tiling's; ``(q_out, k_out)``."""
    (qkv, q_weight, k_weight), (q_out, k_out) = _operands(
        qkv, q_weight, k_weight, q_size, kv_size, weight_after_cast, out
    )
    tokens = qkv.shape[0]
    if tokens == 0:
        return q_out, k_out
    launch, meta = tiling(qkv, q_size, kv_size, launch)
    with _serialised(qkv):
        kernel[launch.grid(tokens)](
            qkv, q_weight, k_weight, q_out, k_out, tokens, qkv.stride(0), q_size, kv_size, float(q_size),
            float(kv_size), eps, WEIGHT_AFTER_CAST=weight_after_cast, num_warps=launch.num_warps,
            **{**meta, **override},
        )  # fmt: skip
    return q_out, k_out


def sum_squares_triton(
    qkv: Tensor, q_size: int, kv_size: int, *, out: Tensor | None = None, launch: Launch | None = None
) -> Tensor:
    """Float32 ``[T, 2]``: per row, the sum of squares of q (column 0) and of k (column 1)."""
    _check_device(qkv)
    _check_inputs(qkv, None, None, q_size, kv_size)
    qkv = _unit_stride(qkv)
    tokens = qkv.shape[0]
    sums = qkv.new_empty((tokens, 2), dtype=torch.float32) if out is None else out
    if sums.shape != (tokens, 2) or sums.dtype != torch.float32 or not sums.is_contiguous():
        raise ValueError(f"out is {tuple(sums.shape)} {sums.dtype}; expected contiguous ({tokens}, 2) torch.float32")
    if tokens == 0:
        return sums
    launch, meta = tiling(qkv, q_size, kv_size, launch)
    with _serialised(qkv):
        kernels_module().sum_squares_kernel[launch.grid(tokens)](
            qkv, sums, tokens, qkv.stride(0), q_size, kv_size, num_warps=launch.num_warps, **meta
        )
    return sums


def qk_norm_apply_triton(
    qkv: Tensor,
    sums: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    q_size: int,
    kv_size: int,
    eps: float,
    tp_world: int,
    weight_after_cast: bool = False,
    *,
    out: tuple[Tensor, Tensor] | None = None,
    launch: Launch | None = None,
) -> tuple[Tensor, Tensor]:
    """q and k scaled by ``rsqrt(sums / (width · tp_world) + eps)`` and the weights, from the
    all-reduced float32 ``sums`` ``[T, 2]`` of :func:`sum_squares_triton`."""
    (qkv, q_weight, k_weight), (q_out, k_out) = _operands(
        qkv, q_weight, k_weight, q_size, kv_size, weight_after_cast, out
    )
    tokens = qkv.shape[0]
    if tp_world < 1:
        raise ValueError(f"tp_world={tp_world} must be positive")
    if sums.shape != (tokens, 2) or sums.dtype != torch.float32 or sums.device != qkv.device:
        raise ValueError(
            f"sums is {tuple(sums.shape)} {sums.dtype} on {sums.device}; expected ({tokens}, 2) torch.float32 on "
            f"{qkv.device} (sum_squares_triton's result, all-reduced)"
        )
    if tokens == 0:
        return q_out, k_out
    launch, meta = tiling(qkv, q_size, kv_size, launch)
    with _serialised(qkv):
        kernels_module().qk_norm_apply_kernel[launch.grid(tokens)](
            qkv, sums.contiguous(), q_weight, k_weight, q_out, k_out, tokens, qkv.stride(0), q_size, kv_size,
            float(q_size * tp_world), float(kv_size * tp_world), eps,
            WEIGHT_AFTER_CAST=weight_after_cast, num_warps=launch.num_warps, **meta,
        )  # fmt: skip
    return q_out, k_out


def qk_norm_tp_triton(
    qkv: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    q_size: int,
    kv_size: int,
    eps: float,
    tp_world: int,
    group_name: str,
    weight_after_cast: bool = False,
    *,
    out: tuple[Tensor, Tensor] | None = None,
    launch: Launch | None = None,
) -> tuple[Tensor, Tensor]:
    """``pmverify::qk_norm_tp``: the sum-of-squares kernel, one float32 ``[T, 2]`` all-reduce over
    ``group_name`` (``_c10d_functional``; none at tp_world = 1), then the apply kernel. Arguments
    and result as :func:`.ops.qk_norm_tp`; ``out`` and ``launch`` as :func:`qk_norm_triton`."""
    if tp_world < 1:
        raise ValueError(f"tp_world={tp_world} must be positive")
    sums = sum_squares_triton(qkv, q_size, kv_size, launch=launch)
    if tp_world > 1:
        functional = torch.ops._c10d_functional
        sums = functional.wait_tensor(functional.all_reduce(sums, "sum", group_name))
    return qk_norm_apply_triton(
        qkv, sums, q_weight, k_weight, q_size, kv_size, eps, tp_world, weight_after_cast, out=out, launch=launch
    )
