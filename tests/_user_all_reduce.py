"""A project's own all-reduce op and fused collectives, defined as vLLM defines its own (in our words).

vLLM registers ``vllm::all_reduce(Tensor tensor, str group_name) -> Tensor`` (functional, no
``wait_tensor``) whose kernel calls its group coordinator; a test's stand-in sums over the group
named with torch.distributed's functional all-reduce, and gives a fake kernel for tracing. The
fused ops take ``tp_rank`` and ``tp_world`` as vLLM's fused collectives do, and all-reduce inside.
"""

from __future__ import annotations

import torch

_lib = torch.library.Library("pmtest", "FRAGMENT")
_lib.define("all_reduce(Tensor x, str group_name) -> Tensor")
_lib.define("tp_rms_norm(Tensor x, Tensor w, float eps, int tp_rank, int tp_world, str group_name, int bug) -> Tensor")
_lib.define(
    "tp_qk_norm(Tensor qkv, Tensor q_weight, Tensor k_weight, int q_size, int kv_size, float eps, int tp_rank, "
    "int tp_world, str group_name, int bug) -> (Tensor, Tensor)"
)
_lib.define("two_args(Tensor x, Tensor y) -> Tensor")

#: ``bug`` of the fused ops: none; the all-reduced sums not divided by ``tp_world``; divided by
#: ``tp_rank + 1`` instead (right on rank 1 of 2 only).
NO_BUG, NO_TP_DIVISOR, RANK_DIVISOR = 0, 1, 2


@torch.library.impl(_lib, "all_reduce", "CompositeExplicitAutograd")
def _all_reduce(x: torch.Tensor, group_name: str) -> torch.Tensor:
    functional = torch.ops._c10d_functional
    return functional.wait_tensor(functional.all_reduce(x, "sum", group_name))


@torch.library.register_fake("pmtest::all_reduce", lib=_lib)
def _all_reduce_fake(x: torch.Tensor, group_name: str) -> torch.Tensor:
    return torch.empty_like(x)


def _world(bug: int, tp_rank: int, tp_world: int) -> int:
    return {NO_BUG: tp_world, NO_TP_DIVISOR: 1, RANK_DIVISOR: tp_rank + 1}[bug]


@torch.library.impl(_lib, "tp_rms_norm", "CompositeExplicitAutograd")
def _tp_rms_norm(x, w, eps, tp_rank, tp_world, group_name, bug):
    """The rms-norm of ``x`` ``[T, H]`` (this rank's H of the full ``tp_world * H``): the sum of
    squares all-reduced, over ``H * tp_world`` elements."""
    xf = x.to(torch.float32)
    sums = torch.ops.pmtest.all_reduce(xf.pow(2).sum(-1, keepdim=True), group_name)
    return (xf * torch.rsqrt(sums / (x.shape[-1] * _world(bug, tp_rank, tp_world)) + eps) * w).to(x.dtype)


@torch.library.register_fake("pmtest::tp_rms_norm", lib=_lib)
def _tp_rms_norm_fake(x, w, eps, tp_rank, tp_world, group_name, bug):
    return torch.empty_like(x)


@torch.library.impl(_lib, "tp_qk_norm", "CompositeExplicitAutograd")
def _tp_qk_norm(qkv, q_weight, k_weight, q_size, kv_size, eps, tp_rank, tp_world, group_name, bug):
    """MiniMax's QK norm of this rank's q and k columns of ``qkv``: one ``[T, 2]`` all-reduce of the
    per-rank means of squares, divided by ``tp_world``."""
    q = qkv[:, :q_size].to(torch.float32)
    k = qkv[:, q_size : q_size + kv_size].to(torch.float32)
    means = torch.cat([q.pow(2).mean(-1, keepdim=True), k.pow(2).mean(-1, keepdim=True)], dim=-1)
    var = torch.ops.pmtest.all_reduce(means, group_name) / _world(bug, tp_rank, tp_world)
    q_out = (q * torch.rsqrt(var[:, :1] + eps) * q_weight).to(qkv.dtype)
    k_out = (k * torch.rsqrt(var[:, 1:] + eps) * k_weight).to(qkv.dtype)
    return q_out, k_out


@torch.library.register_fake("pmtest::tp_qk_norm", lib=_lib)
def _tp_qk_norm_fake(qkv, q_weight, k_weight, q_size, kv_size, eps, tp_rank, tp_world, group_name, bug):
    rows = qkv.shape[0]
    return qkv.new_empty(rows, q_size), qkv.new_empty(rows, kv_size)


@torch.library.impl(_lib, "two_args", "CompositeExplicitAutograd")
def _two_args(x, y):
    return x + y


ALL_REDUCE = torch.ops.pmtest.all_reduce.default
