"""The faulty Triton kernels of :mod:`pmverify.faults.kernels`, built from the shipped jit helpers.

Importing this module imports triton and decorates the kernels: the faulty launchers import it on
first use, ``import pmverify.faults`` never does. On a machine without a GPU, set
``TRITON_INTERPRET=1`` before triton is first imported to run them in Triton's interpreter.

Each kernel takes the arguments of the shipped ``qk_norm_kernel``
(:mod:`pmverify.fusions.qk_norm.kernels`, whose layout it keeps) and differs from it in one bug,
marked ``# the bug``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..fusions.qk_norm.kernels import apply_norm, block_rows, inv_rms, norm_part

__all__ = ["grid_capped_kernel", "unmasked_loads_kernel"]


@triton.jit
def grid_capped_kernel(
    qkv_ptr,
    q_weight_ptr,
    k_weight_ptr,
    q_out_ptr,
    k_out_ptr,
    T,
    stride,
    q_size,
    kv_size,
    q_divisor,
    k_divisor,
    eps,
    ROWS: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    CHUNKS_Q: tl.constexpr,
    BLOCK_KV: tl.constexpr,
    CHUNKS_KV: tl.constexpr,
    WEIGHT_AFTER_CAST: tl.constexpr,
):
    """``qk_norm_kernel`` without its grid-stride loop: program ``pid`` normalises row block ``pid``."""
    act_dtype = qkv_ptr.dtype.element_ty
    rows, row_mask = block_rows(tl.program_id(0), T, ROWS)  # the bug: no loop over pid + k · num_programs
    norm_part(
        qkv_ptr, q_weight_ptr, q_out_ptr, rows, row_mask, stride, q_size, q_divisor, eps,
        ROWS, BLOCK_Q, CHUNKS_Q, WEIGHT_AFTER_CAST, act_dtype,
    )  # fmt: skip
    norm_part(
        qkv_ptr + q_size, k_weight_ptr, k_out_ptr, rows, row_mask, stride, kv_size, k_divisor, eps,
        ROWS, BLOCK_KV, CHUNKS_KV, WEIGHT_AFTER_CAST, act_dtype,
    )  # fmt: skip


@triton.jit
def _sum_squares_row_mask_only(
    src_ptr, rows, row_mask, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr, CHUNKS: tl.constexpr
):
    """``_sum_squares`` with the row mask only: every chunk's ``BLOCK`` columns are summed, those
    past the part's width included."""
    acc = tl.zeros([ROWS], dtype=tl.float32)
    for chunk in tl.static_range(CHUNKS):
        cols = chunk * BLOCK + tl.arange(0, BLOCK)
        # the bug: no (cols < width) in the mask
        x = tl.load(src_ptr + rows[:, None] * stride + cols[None, :], mask=row_mask[:, None], other=0.0)
        x = x.to(tl.float32)
        acc += tl.sum(x * x, axis=1)
    return acc


@triton.jit
def unmasked_loads_kernel(
    qkv_ptr,
    q_weight_ptr,
    k_weight_ptr,
    q_out_ptr,
    k_out_ptr,
    T,
    stride,
    q_size,
    kv_size,
    q_divisor,
    k_divisor,
    eps,
    ROWS: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    CHUNKS_Q: tl.constexpr,
    BLOCK_KV: tl.constexpr,
    CHUNKS_KV: tl.constexpr,
    WEIGHT_AFTER_CAST: tl.constexpr,
):
    """``qk_norm_kernel`` whose sums of squares load q and k without the column mask; the scaling
    (``apply_norm``) loads and stores with both masks."""
    act_dtype = qkv_ptr.dtype.element_ty
    for block in range(tl.program_id(0), tl.cdiv(T, ROWS), tl.num_programs(0)):
        rows, row_mask = block_rows(block, T, ROWS)
        q_sum = _sum_squares_row_mask_only(qkv_ptr, rows, row_mask, stride, ROWS, BLOCK_Q, CHUNKS_Q)
        k_sum = _sum_squares_row_mask_only(qkv_ptr + q_size, rows, row_mask, stride, ROWS, BLOCK_KV, CHUNKS_KV)
        apply_norm(
            qkv_ptr, q_weight_ptr, q_out_ptr, rows, row_mask, stride, q_size, inv_rms(q_sum, q_divisor, eps),
            BLOCK_Q, CHUNKS_Q, WEIGHT_AFTER_CAST, act_dtype,
        )  # fmt: skip
        apply_norm(
            qkv_ptr + q_size, k_weight_ptr, k_out_ptr, rows, row_mask, stride, kv_size, inv_rms(k_sum, k_divisor, eps),
            BLOCK_KV, CHUNKS_KV, WEIGHT_AFTER_CAST, act_dtype,
        )  # fmt: skip
