"""The fused QK-norm ops, registered with ``torch.library.custom_op`` under ``pmverify``.

The math is the RMS norm of Zhang & Sennrich (2019), as MiniMax applies it to q and k:

    y = x / sqrt(mean(x², over the last dim) + eps) · weight

computed in float32 whatever the activation dtype. Two rounding orders exist in the wild and each
op reproduces the one of the pattern it replaces:

- ``weight_after_cast=False`` (vLLM ``MiniMaxText01RMSNormTP.forward_qk``):
  ``((x.float() * rsqrt(ms + eps)) * weight).to(x.dtype)``; output dtype = ``x.dtype``.
- ``weight_after_cast=True`` (transformers ``MiniMaxM2RMSNorm``):
  ``weight * (x.float() * rsqrt(ms + eps)).to(x.dtype)``; output dtype = the promotion of
  ``weight.dtype`` and ``x.dtype``.

For bf16/fp16 the two orders round differently: swapping them is a semantic change.

``qk_norm_tp`` is the tensor-parallel form (vLLM ``MiniMaxText01RMSNormTP.forward_qk`` at
tp_world > 1): q and k are sharded over the ranks but normalised over the whole hidden size, so the
per-token mean of squares is ``all_reduce(sum over the rank's slice) / (width · tp_world)``.

Implementations: ``qk_norm`` and ``qk_norm_tp`` run the Triton kernels of :mod:`.triton_impl` on CUDA
tensors and the torch code below on every other device. The environment variable
``PMVERIFY_QK_NORM_IMPL`` (read at each call) overrides that: ``triton`` forces the kernels (on CPU
tensors they run in Triton's interpreter, which needs ``TRITON_INTERPRET=1`` before triton is
imported), ``torch`` forces the torch code, ``auto`` (or unset) is the default.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from . import triton_impl
from .config import IMPL_ENV, SUPPORTED_DTYPES, output_dtype

__all__ = [
    "qk_norm",
    "qk_norm_tp",
    "rms_norm",
    "IMPL_ENV",
    "implementation",
    "validate_environment",
    "validate_qk_norm_args",
    "qk_norm_fake",
]

#: The values of :data:`IMPL_ENV`.
_IMPLS = ("auto", "triton", "torch")


def implementation(x: Tensor) -> str:
    """``"triton"`` or ``"torch"``: what ``qk_norm`` / ``qk_norm_tp`` run for an activation ``x``.

    ``auto`` (or :data:`IMPL_ENV` unset): Triton for CUDA tensors, torch otherwise. Raises
    ``ValueError`` naming the variable and its value for anything but auto, triton or torch."""
    value = os.environ.get(IMPL_ENV, "").strip().lower() or "auto"
    if value not in _IMPLS:
        raise ValueError(f"{IMPL_ENV}={os.environ[IMPL_ENV]!r}: expected one of {', '.join(_IMPLS)}")
    if value == "auto":
        return "triton" if x.is_cuda else "torch"
    return value


def validate_environment() -> None:
    """Raise unless the ops can run on CPU tensors (pmverify's cases) with this environment:
    ``ValueError`` for a bad :data:`IMPL_ENV`, ``RuntimeError`` when it forces the kernels while
    Triton's interpreter is off (imports triton then)."""
    if implementation(torch.empty(0)) == "triton" and not triton_impl.interpreted():
        raise RuntimeError(
            f"{IMPL_ENV}=triton runs the Triton kernels on CPU tensors in Triton's interpreter, which is off: set "
            "TRITON_INTERPRET=1 before triton is first imported"
        )


def _scale(xf: Tensor, rstd: Tensor, weight: Tensor, dtype: torch.dtype, weight_after_cast: bool) -> Tensor:
    """``xf · rstd`` (float32) with the weight applied before or after the cast to ``dtype``."""
    normed = xf * rstd
    return weight * normed.to(dtype) if weight_after_cast else (normed * weight).to(dtype)


def _norm_rows(x: Tensor, weight: Tensor, eps: float, weight_after_cast: bool) -> Tensor:
    """RMS-normalise the last dim of ``x`` in float32, with the rounding order asked for."""
    xf = x.float()
    return _scale(xf, torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps), weight, x.dtype, weight_after_cast)


def _check_weight(name: str, weight: Tensor, width: int, x: Tensor) -> None:
    if weight.dim() != 1 or weight.shape[0] != width:
        raise ValueError(f"{name} has shape {tuple(weight.shape)}; expected ({width},)")
    if weight.dtype not in (torch.float32, x.dtype):
        raise ValueError(f"{name} has dtype {weight.dtype}; expected torch.float32 or the activation dtype {x.dtype}")
    if weight.device != x.device:
        raise ValueError(f"{name} is on {weight.device}; the activation is on {x.device}")


def _validate_activation(name: str, x: Tensor) -> None:
    if x.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"{name} has dtype {x.dtype}; expected float32, float16 or bfloat16")
    if not x.is_contiguous():
        raise ValueError(f"{name} with shape {tuple(x.shape)} and stride {x.stride()} is not contiguous")


def validate_qk_norm_args(
    qkv: Tensor, q_weight: Tensor, k_weight: Tensor, q_size: int, kv_size: int, eps: float
) -> None:
    """Raise ``ValueError`` unless ``qk_norm``'s arguments are valid: a 2-D contiguous qkv
    ``[T, q_size + 2*kv_size]`` of a supported dtype, positive sizes and eps, 1-D weights of
    ``q_size`` / ``kv_size`` elements in float32 or qkv's dtype, on qkv's device."""
    if qkv.dim() != 2:
        raise ValueError(f"qkv must be 2-D [tokens, q_size + 2*kv_size]; got shape {tuple(qkv.shape)}")
    _validate_activation("qkv", qkv)
    if q_size < 1 or kv_size < 1:
        raise ValueError(f"q_size={q_size} and kv_size={kv_size} must be positive")
    if qkv.shape[1] != q_size + 2 * kv_size:
        raise ValueError(
            f"qkv last dim is {qkv.shape[1]}; expected q_size + 2*kv_size = {q_size + 2 * kv_size} "
            f"(q_size={q_size}, kv_size={kv_size})"
        )
    if not eps > 0:
        raise ValueError(f"eps={eps} must be positive")
    _check_weight("q_weight", q_weight, q_size, qkv)
    _check_weight("k_weight", k_weight, kv_size, qkv)


@torch.library.custom_op("pmverify::qk_norm", mutates_args=())
def qk_norm(
    qkv: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    q_size: int,
    kv_size: int,
    eps: float,
    weight_after_cast: bool = False,
) -> tuple[Tensor, Tensor]:
    """RMS-normalise the q and k parts of a fused qkv activation in one op.

    - ``qkv``: ``[T, q_size + 2*kv_size]``, contiguous, float32/float16/bfloat16; T tokens.
    - ``q_weight``: ``[q_size]``; ``k_weight``: ``[kv_size]``; float32 or ``qkv.dtype``.
    - ``eps``: added to the float32 mean of squares.
    - ``weight_after_cast``: rounding order (see the module docstring).

    Returns ``(q_out [T, q_size], k_out [T, kv_size])``; v is left to the caller as a view of qkv.
    Runs :func:`.triton_impl.qk_norm_triton` (one kernel) where :func:`implementation` says so.
    Raises ``ValueError`` for a non-2-D or non-contiguous qkv, a last dim other than
    ``q_size + 2*kv_size``, or a weight of the wrong length, dtype or device.
    """
    validate_qk_norm_args(qkv, q_weight, k_weight, q_size, kv_size, eps)
    if implementation(qkv) == "triton":
        return triton_impl.qk_norm_triton(qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast)
    q = qkv[:, :q_size]
    k = qkv[:, q_size : q_size + kv_size]
    return (
        _norm_rows(q, q_weight, eps, weight_after_cast),
        _norm_rows(k, k_weight, eps, weight_after_cast),
    )


@qk_norm.register_fake
def qk_norm_fake(qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast=False):
    """``qk_norm``'s fake (meta) implementation: checks the arguments, returns empty
    ``([T, q_size], [T, kv_size])`` of the output dtypes (:func:`.config.output_dtype`)."""
    validate_qk_norm_args(qkv, q_weight, k_weight, q_size, kv_size, eps)
    tokens = qkv.shape[0]
    return (
        qkv.new_empty((tokens, q_size), dtype=output_dtype(qkv.dtype, q_weight.dtype, weight_after_cast)),
        qkv.new_empty((tokens, kv_size), dtype=output_dtype(qkv.dtype, k_weight.dtype, weight_after_cast)),
    )


def _validate_qk_norm_tp_args(qkv, q_weight, k_weight, q_size, kv_size, eps, tp_world, group_name) -> None:
    validate_qk_norm_args(qkv, q_weight, k_weight, q_size, kv_size, eps)
    if tp_world < 1:
        raise ValueError(f"tp_world={tp_world} must be positive")
    if not group_name:
        raise ValueError(f"group_name={group_name!r} must name a process group")


@torch.library.custom_op("pmverify::qk_norm_tp", mutates_args=())
def qk_norm_tp(
    qkv: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    q_size: int,
    kv_size: int,
    eps: float,
    tp_world: int,
    group_name: str,
    weight_after_cast: bool = False,
) -> tuple[Tensor, Tensor]:
    """RMS-normalise the rank's q and k shards of a fused qkv over the whole hidden size.

    - ``qkv``: ``[T, q_size + 2*kv_size]``, this rank's columns, contiguous, float32/float16/bfloat16.
    - ``q_weight``: ``[q_size]``; ``k_weight``: ``[kv_size]``: this rank's norm-weight shards,
      float32 or ``qkv.dtype``.
    - ``tp_world``: ranks in the group (the divisor of the all-reduced mean); ``group_name``: the
      process group, by name (``ProcessGroup.group_name``), that every rank calls this op on.

    Computes the float32 sums of squares of q and k per token in one pass over qkv, all-reduces
    that one ``[T, 2]`` float32 tensor over the group (``_c10d_functional.all_reduce`` +
    ``wait_tensor``; skipped at ``tp_world == 1``), then ``x · rsqrt(sum / (width · tp_world) + eps)
    · weight`` cast back as the pattern does (``weight_after_cast``, see the module docstring). With
    kv heads replicated over ranks, the ranks of one head hold the same k, so the sum still divides
    by ``kv_size · tp_world`` to the mean over all heads. Returns ``(q_out [T, q_size], k_out
    [T, kv_size])``. Runs :func:`.triton_impl.qk_norm_tp_triton` (sum-of-squares kernel, the
    all-reduce, apply kernel) where :func:`implementation` says so. Raises ``ValueError`` as
    :func:`qk_norm` does, and for ``tp_world < 1``; the
    collective raises when ``group_name`` is not a group of this process.
    """
    _validate_qk_norm_tp_args(qkv, q_weight, k_weight, q_size, kv_size, eps, tp_world, group_name)
    if implementation(qkv) == "triton":
        return triton_impl.qk_norm_tp_triton(
            qkv, q_weight, k_weight, q_size, kv_size, eps, tp_world, group_name, weight_after_cast
        )
    q = qkv[:, :q_size].float()
    k = qkv[:, q_size : q_size + kv_size].float()
    sums = torch.stack([q.pow(2).sum(-1), k.pow(2).sum(-1)], dim=-1)  # [T, 2] float32
    if tp_world > 1:
        sums = torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.all_reduce(sums, "sum", group_name))
    q_ms, k_ms = sums[:, :1] / (q_size * tp_world), sums[:, 1:] / (kv_size * tp_world)
    return (
        _scale(q, torch.rsqrt(q_ms + eps), q_weight, qkv.dtype, weight_after_cast),
        _scale(k, torch.rsqrt(k_ms + eps), k_weight, qkv.dtype, weight_after_cast),
    )


@qk_norm_tp.register_fake
def _qk_norm_tp_fake(qkv, q_weight, k_weight, q_size, kv_size, eps, tp_world, group_name, weight_after_cast=False):
    _validate_qk_norm_tp_args(qkv, q_weight, k_weight, q_size, kv_size, eps, tp_world, group_name)
    return qk_norm_fake(qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast)


def _check_rms_norm(x: Tensor, weight: Tensor, eps: float) -> None:
    if x.dim() < 1:
        raise ValueError("x must have at least one dim [..., hidden]; got a 0-d tensor")
    _validate_activation("x", x)
    if not eps > 0:
        raise ValueError(f"eps={eps} must be positive")
    _check_weight("weight", weight, x.shape[-1], x)


@torch.library.custom_op("pmverify::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Tensor, eps: float, weight_after_cast: bool = True) -> Tensor:
    """RMS-normalise one of q or k on its own (the per-tensor form of transformers' MiniMax-M2).

    - ``x``: ``[..., hidden]``, contiguous, float32/float16/bfloat16.
    - ``weight``: ``[hidden]``, float32 or ``x.dtype``.
    - ``weight_after_cast``: rounding order (see the module docstring); True is the
      transformers form ``weight * x_normed.to(x.dtype)``.

    Returns a tensor of ``x``'s shape. Raises ``ValueError`` for a non-contiguous ``x`` or a weight
    of the wrong length, dtype or device.
    """
    _check_rms_norm(x, weight, eps)
    return _norm_rows(x, weight, eps, weight_after_cast)


@rms_norm.register_fake
def _rms_norm_fake(x, weight, eps, weight_after_cast=True):
    _check_rms_norm(x, weight, eps)
    return x.new_empty(x.shape, dtype=output_dtype(x.dtype, weight.dtype, weight_after_cast))
