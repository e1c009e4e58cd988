"""The tensor-parallel QK norm: the model code a pass sees at tp_world > 1, and its rewrites.

MiniMax normalises q and k over the *whole* hidden size while each rank holds a shard of the heads
(vLLM ``MiniMaxText01RMSNormTP.forward_qk``): each rank takes the float32 mean of squares of its q
and of its k per token, concatenates the two ``[T, 1]`` means, all-reduces the ``[T, 2]`` tensor
(sum) over the tensor-parallel group, divides by ``tp_world`` and splits it again before
``rsqrt · weight`` and the cast back. Under ``torch.compile`` the all-reduce is the functional
collective pair ``_c10d_functional.all_reduce(x, "sum", group_name)`` + ``wait_tensor``, which is
what :func:`qk_norm_tp_forward` calls and the patterns match.

Two search forms, each replaced by one ``torch.ops.pmverify.qk_norm_tp`` (one ``[T, 2]`` all-reduce
inside the op) and v's split:

- ``qk_norm_tp``: one ``split`` of qkv into q, k, v;
- ``qk_norm_tp_split3``: one split node per consumer (a functional qkv projection).

The pattern's literals are matched exactly (``register_replacement`` re-traces the search function
on every match): another eps, divisor, group name or reduce op is not this rewrite.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from . import ops  # noqa: F401  (registers torch.ops.pmverify.*)
from .config import QKNormConfig, kv_head_range

__all__ = ["qk_norm_tp_forward", "all_reduce", "tp_rewrites", "shard_columns"]


def shard_columns(config: QKNormConfig) -> tuple[slice, slice]:
    """Which columns of the full (all-heads) q and k — and v — rank ``config.tp_rank`` holds:
    ``(q_columns, kv_columns)`` as slices in elements, for a config with ``num_heads`` and
    ``num_kv_heads``; the norm weights are sharded the same way. Ranks that share a replicated kv
    head get the same ``kv_columns``. Raises ``ValueError`` for a config without head counts."""
    if config.num_heads is None:
        raise ValueError(f"config={config!r} has no num_heads / num_kv_heads: build it with QKNormConfig.for_heads")
    heads = kv_head_range(config.num_kv_heads, config.tp_world, config.tp_rank)
    head_dim = config.kv_size // len(heads)
    q_start = config.tp_rank * config.q_size
    return slice(q_start, q_start + config.q_size), slice(heads.start * head_dim, heads.stop * head_dim)


def all_reduce(x: torch.Tensor, group_name: str, reduce_op: str = "sum", op: Any = None) -> torch.Tensor:
    """``x`` reduced over the group named ``group_name``, as ``torch.compile`` presents the
    collective: ``_c10d_functional.all_reduce`` followed by ``wait_tensor``; or, with ``op`` (a
    project's all-reduce ``OpOverload``, ``(Tensor, str) -> Tensor``, a sum), ``op`` called as vLLM
    calls its ``torch.ops.vllm.all_reduce``: the group name by keyword. Raises ``ValueError`` for
    ``op`` with a ``reduce_op`` other than ``"sum"``."""
    if op is not None:
        if reduce_op != "sum":
            raise ValueError(f"reduce_op={reduce_op!r}: the all-reduce op {op} sums")
        return op(x, **{op._schema.arguments[1].name: group_name})
    return torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.all_reduce(x, reduce_op, group_name))


def qk_norm_tp_forward(
    qkv: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    sizes: list[int],
    eps: float,
    tp_world: int,
    group_name: str,
    dtype: torch.dtype,
    *,
    split3: bool = False,
    reduce_op: str = "sum",
    divisor: float | None = None,
    all_reduce_op: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM's ``forward_qkv`` at tp_world > 1, written out: returns ``(q_out, k_out, v)``.

    - ``qkv``: ``[T, q_size + 2*kv_size]`` (this rank's columns); ``sizes``: ``[q_size, kv_size,
      kv_size]`` elements; ``q_weight`` ``[q_size]`` and ``k_weight`` ``[kv_size]``: this rank's
      shards; ``dtype``: the dtype q_out and k_out are cast to.
    - ``split3``: one split node per consumer instead of one split.
    - ``reduce_op`` / ``divisor``: the all-reduce op and what the reduced means are divided by
      (default ``"sum"`` and ``tp_world``); other values make near misses.
    - ``all_reduce_op``: a project's all-reduce op to call instead of the functional collective
      (see :func:`all_reduce`); default None.
    """
    if split3:
        q, k, v = (qkv.split(sizes, dim=-1)[i] for i in range(3))
    else:
        q, k, v = qkv.split(sizes, dim=-1)
    qf = q.to(torch.float32)
    kf = k.to(torch.float32)
    q_var = qf.pow(2).mean(dim=-1, keepdim=True)
    k_var = kf.pow(2).mean(dim=-1, keepdim=True)
    qk_var = torch.cat([q_var, k_var], dim=-1)
    qk_var = all_reduce(qk_var, group_name, reduce_op, all_reduce_op) / (tp_world if divisor is None else divisor)
    q_var, k_var = qk_var.chunk(2, dim=-1)
    q_out = (qf * torch.rsqrt(q_var + eps) * q_weight).to(dtype)
    k_out = (kf * torch.rsqrt(k_var + eps) * k_weight).to(dtype)
    return q_out, k_out, v


def example_inputs(config: QKNormConfig, tokens: int = 4) -> tuple[torch.Tensor, ...]:
    """Placeholder ``(qkv, q_weight, k_weight)`` for registering a rewrite of ``config``: fake
    tensors, because tracing a collective on real tensors needs a started process group."""
    with FakeTensorMode():
        return (
            torch.empty(tokens, config.qkv_size, dtype=config.dtype),
            torch.empty(config.q_size, dtype=config.dtype),
            torch.empty(config.kv_size, dtype=config.dtype),
        )


def tp_rewrites(config: QKNormConfig):
    """The ``(name, search_fn, replace_fn)`` rewrites of the all-reduce form for ``config``
    (``tp_world > 1``). See the module docstring."""
    q_size, kv_size, eps, dtype = config.q_size, config.kv_size, config.eps, config.dtype
    world, group = config.tp_world, config.group_name
    sizes = [q_size, kv_size, kv_size]

    def qk_norm_tp_pattern(qkv, q_weight, k_weight):
        return qk_norm_tp_forward(qkv, q_weight, k_weight, sizes, eps, world, group, dtype)

    def qk_norm_tp_split3_pattern(qkv, q_weight, k_weight):
        return qk_norm_tp_forward(qkv, q_weight, k_weight, sizes, eps, world, group, dtype, split3=True)

    def qk_norm_tp_replacement(qkv, q_weight, k_weight):
        q_out, k_out = torch.ops.pmverify.qk_norm_tp(qkv, q_weight, k_weight, q_size, kv_size, eps, world, group, False)
        return q_out, k_out, qkv.split(sizes, dim=-1)[2]

    return [
        ("qk_norm_tp", qk_norm_tp_pattern, qk_norm_tp_replacement),
        ("qk_norm_tp_split3", qk_norm_tp_split3_pattern, qk_norm_tp_replacement),
    ]
