"""Triton kernels of the fused QK norm (the math of :mod:`.ops`).

Importing this module imports triton and decorates the kernels: on a machine without a GPU, set
``TRITON_INTERPRET=1`` before the import to run them in Triton's interpreter. Launch them through
:mod:`.triton_impl`, which picks block shapes and grids.

Layout: ``qkv`` is ``[T, q_size + 2*kv_size]`` contiguous with a row stride of ``stride``; q is
columns ``[0, q_size)``, k columns ``[q_size, q_size + kv_size)``; outputs are ``[T, width]``
contiguous. Each program walks row blocks ``pid, pid + num_programs, ...`` (a grid-stride loop), so
any grid covers every row for any T. A row block is ``ROWS`` rows; a part (q or k) of a row is read
in ``CHUNKS`` chunks of ``BLOCK`` columns: with one chunk the part is read once and held in
registers for the scaling, with more it is read twice (sum of squares, then scale).

All arithmetic is float32: ``rstd = 1 / sqrt(sum / divisor + eps)`` with correctly rounded sqrt and
division (``divisor``, a float32 argument: width at tp 1, width · tp_world after the all-reduce), then the weight on
the side of the cast to the activation dtype that ``WEIGHT_AFTER_CAST`` says.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Kernel signatures and calls are kept compact, one positional list each.
# fmt: off
__all__ = [
    "qk_norm_kernel",
    "sum_squares_kernel",
    "qk_norm_apply_kernel",
    # jit helpers the fault bank's faulty kernels reuse
    "inv_rms",
    "apply_norm",
    "norm_part",
    "block_rows",
]


@triton.jit
def inv_rms(sum_squares, divisor, eps):
    """``1 / sqrt(sum / divisor + eps)`` in float32, each step correctly rounded (as torch does)."""
    return tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(sum_squares, divisor) + eps))


@triton.jit
def _scaled(x, rstd, w_ptr, cols, col_mask, WEIGHT_AFTER_CAST: tl.constexpr, ACT_DTYPE: tl.constexpr):
    """``x · rstd`` with the weight applied before (vLLM) or after (transformers) the cast to the
    activation dtype; float32, to be cast to the output dtype by the store."""
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    normed = x * rstd[:, None]
    if WEIGHT_AFTER_CAST:
        return w[None, :] * normed.to(ACT_DTYPE).to(tl.float32)
    return normed * w[None, :]


@triton.jit
def _sum_squares(src_ptr, rows, row_mask, stride, width, ROWS: tl.constexpr, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    """Float32 sums of squares of ``src[rows, :width]``, ``[ROWS]``, reading ``CHUNKS`` chunks."""
    acc = tl.zeros([ROWS], dtype=tl.float32)
    for chunk in tl.static_range(CHUNKS):
        cols = chunk * BLOCK + tl.arange(0, BLOCK)
        mask = row_mask[:, None] & (cols < width)[None, :]
        x = tl.load(src_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        acc += tl.sum(x * x, axis=1)
    return acc


@triton.jit
def apply_norm(src_ptr, w_ptr, dst_ptr, rows, row_mask, stride, width, rstd, BLOCK: tl.constexpr, CHUNKS: tl.constexpr,
           WEIGHT_AFTER_CAST: tl.constexpr, ACT_DTYPE: tl.constexpr):
    """``dst[rows, :width] = scaled(src[rows, :width])``, reading ``src`` in ``CHUNKS`` chunks."""
    for chunk in tl.static_range(CHUNKS):
        cols = chunk * BLOCK + tl.arange(0, BLOCK)
        col_mask = cols < width
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(src_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        y = _scaled(x, rstd, w_ptr, cols, col_mask, WEIGHT_AFTER_CAST, ACT_DTYPE)
        tl.store(dst_ptr + rows[:, None] * width + cols[None, :], y.to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def norm_part(src_ptr, w_ptr, dst_ptr, rows, row_mask, stride, width, divisor, eps, ROWS: tl.constexpr,
               BLOCK: tl.constexpr, CHUNKS: tl.constexpr, WEIGHT_AFTER_CAST: tl.constexpr, ACT_DTYPE: tl.constexpr):
    """RMS-normalise ``src[rows, :width]`` into ``dst``: one read when the part fits one chunk."""
    if CHUNKS == 1:
        cols = tl.arange(0, BLOCK)
        col_mask = cols < width
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(src_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = inv_rms(tl.sum(x * x, axis=1), divisor, eps)
        y = _scaled(x, rstd, w_ptr, cols, col_mask, WEIGHT_AFTER_CAST, ACT_DTYPE)
        tl.store(dst_ptr + rows[:, None] * width + cols[None, :], y.to(dst_ptr.dtype.element_ty), mask=mask)
    else:
        rstd = inv_rms(_sum_squares(src_ptr, rows, row_mask, stride, width, ROWS, BLOCK, CHUNKS), divisor, eps)
        apply_norm(src_ptr, w_ptr, dst_ptr, rows, row_mask, stride, width, rstd, BLOCK, CHUNKS, WEIGHT_AFTER_CAST,
               ACT_DTYPE)


@triton.jit
def block_rows(block, T, ROWS: tl.constexpr):
    """The int64 row indices of row block ``block`` and their in-range mask."""
    rows = (block * ROWS + tl.arange(0, ROWS)).to(tl.int64)  # < T + ROWS: no int32 overflow before the cast
    return rows, rows < T


@triton.jit
def qk_norm_kernel(qkv_ptr, q_weight_ptr, k_weight_ptr, q_out_ptr, k_out_ptr, T, stride, q_size, kv_size, q_divisor,
                   k_divisor, eps, ROWS: tl.constexpr, BLOCK_Q: tl.constexpr, CHUNKS_Q: tl.constexpr,
                   BLOCK_KV: tl.constexpr, CHUNKS_KV: tl.constexpr, WEIGHT_AFTER_CAST: tl.constexpr):
    """tp_world = 1: q and k of each qkv row normalised in one pass; v is not touched."""
    act_dtype = qkv_ptr.dtype.element_ty
    for block in range(tl.program_id(0), tl.cdiv(T, ROWS), tl.num_programs(0)):
        rows, row_mask = block_rows(block, T, ROWS)
        norm_part(qkv_ptr, q_weight_ptr, q_out_ptr, rows, row_mask, stride, q_size, q_divisor, eps, ROWS, BLOCK_Q,
                   CHUNKS_Q, WEIGHT_AFTER_CAST, act_dtype)
        norm_part(qkv_ptr + q_size, k_weight_ptr, k_out_ptr, rows, row_mask, stride, kv_size, k_divisor, eps, ROWS,
                   BLOCK_KV, CHUNKS_KV, WEIGHT_AFTER_CAST, act_dtype)


@triton.jit
def sum_squares_kernel(qkv_ptr, sums_ptr, T, stride, q_size, kv_size, ROWS: tl.constexpr, BLOCK_Q: tl.constexpr,
                       CHUNKS_Q: tl.constexpr, BLOCK_KV: tl.constexpr, CHUNKS_KV: tl.constexpr):
    """tp_world > 1, before the all-reduce: ``sums[t] = (Σ q[t]², Σ k[t]²)``, float32 ``[T, 2]``."""
    for block in range(tl.program_id(0), tl.cdiv(T, ROWS), tl.num_programs(0)):
        rows, row_mask = block_rows(block, T, ROWS)
        q_sum = _sum_squares(qkv_ptr, rows, row_mask, stride, q_size, ROWS, BLOCK_Q, CHUNKS_Q)
        k_sum = _sum_squares(qkv_ptr + q_size, rows, row_mask, stride, kv_size, ROWS, BLOCK_KV, CHUNKS_KV)
        tl.store(sums_ptr + rows * 2, q_sum, mask=row_mask)
        tl.store(sums_ptr + rows * 2 + 1, k_sum, mask=row_mask)


@triton.jit
def qk_norm_apply_kernel(qkv_ptr, sums_ptr, q_weight_ptr, k_weight_ptr, q_out_ptr, k_out_ptr, T, stride, q_size,
                         kv_size, q_divisor, k_divisor, eps, ROWS: tl.constexpr, BLOCK_Q: tl.constexpr,
                         CHUNKS_Q: tl.constexpr, BLOCK_KV: tl.constexpr, CHUNKS_KV: tl.constexpr,
                         WEIGHT_AFTER_CAST: tl.constexpr):
    """tp_world > 1, after the all-reduce: scale q and k by ``rsqrt(sums / divisor + eps)``."""
    act_dtype = qkv_ptr.dtype.element_ty
    for block in range(tl.program_id(0), tl.cdiv(T, ROWS), tl.num_programs(0)):
        rows, row_mask = block_rows(block, T, ROWS)
        q_rstd = inv_rms(tl.load(sums_ptr + rows * 2, mask=row_mask, other=0.0), q_divisor, eps)
        k_rstd = inv_rms(tl.load(sums_ptr + rows * 2 + 1, mask=row_mask, other=0.0), k_divisor, eps)
        apply_norm(qkv_ptr, q_weight_ptr, q_out_ptr, rows, row_mask, stride, q_size, q_rstd, BLOCK_Q, CHUNKS_Q,
               WEIGHT_AFTER_CAST, act_dtype)
        apply_norm(qkv_ptr + q_size, k_weight_ptr, k_out_ptr, rows, row_mask, stride, kv_size, k_rstd, BLOCK_KV,
               CHUNKS_KV, WEIGHT_AFTER_CAST, act_dtype)


# fmt: on
