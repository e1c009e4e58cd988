"""Custom ops in the ``pmvllm`` test namespace, shaped as vLLM's ``_C`` ops: each writes its result
into a buffer it is given (``Tensor(a!) result``) and returns nothing, so a compiled graph holds
``auto_functionalized(op, result=empty(...), ...)`` and reads ``getitem(node, 1)``. Registered once
per process on import (idempotent: a reloaded module reuses the ops).

Math (activations ``[T, H]``, weights ``[H]``, ``scale`` a float32 tensor of one element):

- ``rms_norm(result!, input, weight, epsilon)``: ``(x.float() * rsqrt(mean(x.float()**2, -1) + eps))
  .to(x.dtype) * weight``, rounding where vLLM's kernel rounds.
- ``fused_add_rms_norm(input!, residual!, weight, epsilon)``: ``residual = input + residual``, then
  ``input = rms_norm(residual)``.
- ``static_scaled_fp8_quant(result!, input, scale)``: ``clamp(x.float() / scale, -448, 448)`` cast
  to ``result``'s dtype (float8_e4m3fn in vLLM; any float dtype here).
- ``rms_norm_static_fp8_quant(result!, input, weight, scale, epsilon)``: the two above in one.
- ``fused_add_rms_norm_static_fp8_quant(result!, input, residual!, weight, scale, epsilon)``:
  ``residual = input + residual``; ``result = quant(rms_norm(residual))`` (``input`` only read).
- ``silu_and_mul(result!, input)``: ``silu(x[..., :d].float()).to(dtype) * x[..., d:]``, ``d`` half
  the last dim.
- ``all_reduce(x, group_name) -> Tensor``: functional sum over the named process group
  (``_c10d_functional.all_reduce`` + ``wait_tensor``, as pmverify's threaded worlds run them).
- ``all_reduce_rms_norm(result!, input, weight, epsilon, group_name, tp_rank, tp_world)``: the sum
  over the group, then ``rms_norm`` of it, computed row-parallel as fused collectives do: rank
  ``tp_rank`` normalises its own block of rows (``tensor_split`` into ``tp_world`` blocks), a
  second all-reduce of the blocks (zeros elsewhere, so exact) gathers them, and each rank scales
  them by its own ``weight``: bit-identical to the two ops on any placement. A wrong ``tp_rank``
  leaves blocks missing and others counted twice.
"""

from __future__ import annotations

import torch
from torch import Tensor

NAMESPACE = "pmvllm"
FP8_MAX = 448.0


def _normalised(x: Tensor, epsilon: float) -> Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon)).to(x.dtype)


def _rms(x: Tensor, weight: Tensor, epsilon: float) -> Tensor:
    return _normalised(x, epsilon) * weight


def _quant(x: Tensor, scale: Tensor, dtype: torch.dtype) -> Tensor:
    return (x.float() / scale.float()).clamp(-FP8_MAX, FP8_MAX).to(dtype)


def _sum(x: Tensor, group_name: str) -> Tensor:
    funcol = torch.ops._c10d_functional
    return funcol.wait_tensor(funcol.all_reduce(x, "sum", group_name))


def _defined(name: str) -> bool:
    return hasattr(getattr(torch.ops, NAMESPACE), name)


def _define() -> None:
    ns = f"{NAMESPACE}::"

    @torch.library.custom_op(ns + "rms_norm", mutates_args=("result",))
    def rms_norm(result: Tensor, input: Tensor, weight: Tensor, epsilon: float) -> None:
        result.copy_(_rms(input, weight, epsilon))

    @torch.library.custom_op(ns + "fused_add_rms_norm", mutates_args=("input", "residual"))
    def fused_add_rms_norm(input: Tensor, residual: Tensor, weight: Tensor, epsilon: float) -> None:
        residual.copy_(input + residual)
        input.copy_(_rms(residual, weight, epsilon))

    @torch.library.custom_op(ns + "static_scaled_fp8_quant", mutates_args=("result",))
    def static_scaled_fp8_quant(result: Tensor, input: Tensor, scale: Tensor) -> None:
        result.copy_(_quant(input, scale, result.dtype))

    @torch.library.custom_op(ns + "rms_norm_static_fp8_quant", mutates_args=("result",))
    def rms_norm_static_fp8_quant(result: Tensor, input: Tensor, weight: Tensor, scale: Tensor, epsilon: float) -> None:
        result.copy_(_quant(_rms(input, weight, epsilon), scale, result.dtype))

    @torch.library.custom_op(ns + "fused_add_rms_norm_static_fp8_quant", mutates_args=("result", "residual"))
    def fused_add_rms_norm_static_fp8_quant(
        result: Tensor, input: Tensor, residual: Tensor, weight: Tensor, scale: Tensor, epsilon: float
    ) -> None:
        residual.copy_(input + residual)
        result.copy_(_quant(_rms(residual, weight, epsilon), scale, result.dtype))

    @torch.library.custom_op(ns + "silu_and_mul", mutates_args=("result",))
    def silu_and_mul(result: Tensor, input: Tensor) -> None:
        d = input.shape[-1] // 2
        result.copy_(torch.nn.functional.silu(input[..., :d].float()).to(input.dtype) * input[..., d:])

    @torch.library.custom_op(ns + "all_reduce", mutates_args=())
    def all_reduce(x: Tensor, group_name: str) -> Tensor:
        return _sum(x, group_name)

    @all_reduce.register_fake
    def _(x, group_name):
        return torch.empty_like(x)

    @torch.library.custom_op(ns + "all_reduce_rms_norm", mutates_args=("result",))
    def all_reduce_rms_norm(
        result: Tensor, input: Tensor, weight: Tensor, epsilon: float, group_name: str, tp_rank: int, tp_world: int
    ) -> None:
        total = _sum(input, group_name)
        block = torch.zeros_like(total)
        rows = torch.arange(total.shape[0]).tensor_split(tp_world)[tp_rank]
        block[rows] = _normalised(total[rows], epsilon)
        result.copy_(_sum(block, group_name) * weight)

    for op in (
        rms_norm,
        fused_add_rms_norm,
        static_scaled_fp8_quant,
        rms_norm_static_fp8_quant,
        fused_add_rms_norm_static_fp8_quant,
        silu_and_mul,
        all_reduce_rms_norm,
    ):
        op.register_fake(lambda *args, **kwargs: None)


if not _defined("rms_norm"):
    _define()

ops = getattr(torch.ops, NAMESPACE)

#: The mutable out-variant ops, as ``with_mutating_custom_ops(..., ops=...)`` will take them.
MUTABLE_OPS = (
    ops.rms_norm.default,
    ops.fused_add_rms_norm.default,
    ops.static_scaled_fp8_quant.default,
    ops.rms_norm_static_fp8_quant.default,
    ops.fused_add_rms_norm_static_fp8_quant.default,
    ops.silu_and_mul.default,
)
