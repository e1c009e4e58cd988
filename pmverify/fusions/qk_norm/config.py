"""Configuration of the QK-norm fusion: geometry, numerics and tensor-parallel placement.

Tensor-parallel geometry follows MiniMax-M2 (vLLM ``MiniMaxM2Attention``): the query heads are split
evenly over the ``tp_world`` ranks; the key-value heads are split too while there are at least as
many of them as ranks, and replicated once there are fewer: **kv heads per rank =
max(1, num_kv_heads // tp_world)**, every group of ``tp_world // num_kv_heads`` consecutive ranks
holding the same kv head. Per rank, ``q_size = num_heads // tp_world * head_dim`` and
``kv_size = max(1, num_kv_heads // tp_world) * head_dim`` elements.
"""

from __future__ import annotations

import dataclasses
import math

import torch

#: The group name a config's all-reduce uses by default: the name torch gives the default (WORLD)
#: process group of a world, the first group it creates (``dist.group.WORLD.group_name``), as in the
#: worlds ``pmverify.distributed.run_spmd`` starts. Written here, not imported: the fusion's
#: config does not depend on pmverify's distributed runner.
DEFAULT_GROUP_NAME = "0"

#: Activation dtypes the fusion supports, simplest first.
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

__all__ = [
    "IMPL_ENV",
    "QKNormConfig",
    "SUPPORTED_DTYPES",
    "DEFAULT_GROUP_NAME",
    "kv_heads_per_rank",
    "kv_head_range",
    "output_dtype",
]

#: The environment variable that picks the fused QK-norm ops' implementation (``auto``, ``triton`` or
#: ``torch``; read by :mod:`.ops`, set up by :mod:`.environment`).
IMPL_ENV = "PMVERIFY_QK_NORM_IMPL"


def output_dtype(x_dtype: torch.dtype, w_dtype: torch.dtype, weight_after_cast: bool) -> torch.dtype:
    """The dtype of a fused QK norm's output for an activation of ``x_dtype`` and a weight of
    ``w_dtype``: ``x_dtype`` when the weight is applied before the cast back (vLLM), their
    promotion when after it (transformers' ``weight * normed.to(x_dtype)``)."""
    return torch.promote_types(w_dtype, x_dtype) if weight_after_cast else x_dtype


def _positive_int(owner: str, name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{owner}: {name}={value!r} must be a positive int")


def kv_heads_per_rank(num_kv_heads: int, tp_world: int) -> int:
    """Key-value heads each rank holds: ``max(1, num_kv_heads // tp_world)`` (MiniMax-M2's rule).

    Raises ``ValueError`` unless one of ``num_kv_heads`` and ``tp_world`` divides the other (vLLM's
    ``QKVParallelLinear`` condition: heads split evenly, or each head replicated on an equal number
    of ranks)."""
    _positive_int("kv_heads_per_rank", "num_kv_heads", num_kv_heads)
    _positive_int("kv_heads_per_rank", "tp_world", tp_world)
    if num_kv_heads % tp_world and tp_world % num_kv_heads:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} and tp_world={tp_world}: one must divide the other "
            "(kv heads split evenly over the ranks, or each replicated on tp_world // num_kv_heads ranks)"
        )
    return max(1, num_kv_heads // tp_world)


def kv_head_range(num_kv_heads: int, tp_world: int, tp_rank: int) -> range:
    """The kv heads (indices into all ``num_kv_heads``) that rank ``tp_rank`` holds: its shard, or the
    one head it shares with ``tp_world // num_kv_heads - 1`` other ranks when heads are replicated.
    Raises ``ValueError`` for an impossible geometry or rank."""
    per_rank = kv_heads_per_rank(num_kv_heads, tp_world)
    if not isinstance(tp_rank, int) or isinstance(tp_rank, bool) or not 0 <= tp_rank < tp_world:
        raise ValueError(f"kv_head_range: tp_rank={tp_rank!r} must be in [0, tp_world={tp_world})")
    if tp_world > num_kv_heads:
        head = tp_rank // (tp_world // num_kv_heads)
        return range(head, head + 1)
    return range(tp_rank * per_rank, (tp_rank + 1) * per_rank)


@dataclasses.dataclass(frozen=True)
class QKNormConfig:
    """What one QK-norm fusion pass is built for.

    - ``q_size``: width of q on this rank, in elements (query heads per rank × head_dim).
    - ``kv_size``: width of k (and of v) on this rank, in elements.
    - ``eps``: the epsilon added to the mean of squares; a pattern with another eps does not match.
    - ``dtype``: activation dtype of qkv (float32, float16 or bfloat16).
    - ``max_tokens``: largest token count (rows of qkv) the fused path is used for.
    - ``tp_world`` / ``tp_rank``: tensor-parallel world size (ranks) and this rank's index. With
      ``tp_world > 1`` the pass matches the all-reduce form of the norm (see
      :mod:`~pmverify.fusions.qk_norm.tp`).
    - ``group_name``: the process group the all-reduce runs on, by name, as
      ``torch.ops._c10d_functional.all_reduce(x, "sum", group_name)`` takes it; default ``"0"``,
      the default group's name. Only read when ``tp_world > 1``.
    - ``num_heads`` / ``num_kv_heads``: total query and key-value heads over all ranks, or None.
      When given, the geometry is checked: ``num_heads`` divisible by ``num_kv_heads`` and by
      ``tp_world``, ``q_size`` a
      multiple of ``num_heads // tp_world`` (that multiple is head_dim), and ``kv_size`` =
      :func:`kv_heads_per_rank` × head_dim. :meth:`for_heads` computes q_size and kv_size from them.

    Raises ``ValueError`` naming the field and its value when the geometry is impossible.
    """

    q_size: int
    kv_size: int
    eps: float = 1e-6
    dtype: torch.dtype = torch.bfloat16
    max_tokens: int = 2048
    tp_world: int = 1
    tp_rank: int = 0
    group_name: str = DEFAULT_GROUP_NAME
    num_heads: int | None = None
    num_kv_heads: int | None = None

    def __post_init__(self) -> None:
        for name in ("q_size", "kv_size", "max_tokens", "tp_world"):
            _positive_int("QKNormConfig", name, getattr(self, name))
        if not isinstance(self.tp_rank, int) or isinstance(self.tp_rank, bool) or not 0 <= self.tp_rank < self.tp_world:
            raise ValueError(f"QKNormConfig: tp_rank={self.tp_rank!r} must be in [0, tp_world={self.tp_world})")
        if not isinstance(self.eps, (int, float)) or isinstance(self.eps, bool) or not 0 < self.eps < math.inf:
            raise ValueError(f"QKNormConfig: eps={self.eps!r} must be a positive finite float")
        object.__setattr__(self, "eps", float(self.eps))
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(
                f"QKNormConfig: dtype={self.dtype!r} is not one of {', '.join(str(d) for d in SUPPORTED_DTYPES)}"
            )
        if not isinstance(self.group_name, str) or not self.group_name:
            raise ValueError(f"QKNormConfig: group_name={self.group_name!r} must be a non-empty str")
        if (self.num_heads is None) != (self.num_kv_heads is None):
            raise ValueError(
                f"QKNormConfig: num_heads={self.num_heads!r} and num_kv_heads={self.num_kv_heads!r}: give both or neither"
            )
        if self.num_heads is not None:
            self._check_heads()

    def _check_heads(self) -> None:
        _positive_int("QKNormConfig", "num_heads", self.num_heads)
        _positive_int("QKNormConfig", "num_kv_heads", self.num_kv_heads)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"QKNormConfig: num_heads={self.num_heads} is not divisible by num_kv_heads={self.num_kv_heads} "
                "(each kv head serves an equal group of query heads)"
            )
        if self.num_heads % self.tp_world:
            raise ValueError(f"QKNormConfig: num_heads={self.num_heads} is not divisible by tp_world={self.tp_world}")
        heads = self.num_heads // self.tp_world
        if self.q_size % heads:
            raise ValueError(
                f"QKNormConfig: q_size={self.q_size} is not a multiple of the {heads} query heads per rank "
                f"(num_heads={self.num_heads}, tp_world={self.tp_world})"
            )
        head_dim = self.q_size // heads
        try:
            kv_heads = kv_heads_per_rank(self.num_kv_heads, self.tp_world)
        except ValueError as exc:
            raise ValueError(f"QKNormConfig: {exc}") from None
        if self.kv_size != kv_heads * head_dim:
            raise ValueError(
                f"QKNormConfig: kv_size={self.kv_size}; expected {kv_heads} kv heads per rank × head_dim {head_dim} "
                f"= {kv_heads * head_dim} (num_kv_heads={self.num_kv_heads}, tp_world={self.tp_world}: "
                "kv heads per rank = max(1, num_kv_heads // tp_world))"
            )

    @classmethod
    def for_heads(
        cls, num_heads: int, num_kv_heads: int, head_dim: int, *, tp_world: int = 1, tp_rank: int = 0, **fields
    ) -> QKNormConfig:
        """The config of rank ``tp_rank`` of a model with ``num_heads`` query and ``num_kv_heads``
        key-value heads of ``head_dim`` elements (MiniMax-M2: 48, 8, 128), kv heads replicated when
        ``tp_world`` exceeds their count. Other fields (eps, dtype, max_tokens, group_name) pass
        through. Raises ``ValueError`` for an impossible geometry."""
        for name, value in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
            _positive_int("QKNormConfig.for_heads", name, value)
        _positive_int("QKNormConfig.for_heads", "tp_world", tp_world)
        if num_heads % tp_world:
            raise ValueError(f"QKNormConfig.for_heads: num_heads={num_heads} is not divisible by tp_world={tp_world}")
        try:
            kv_heads = kv_heads_per_rank(num_kv_heads, tp_world)
        except ValueError as exc:
            raise ValueError(f"QKNormConfig.for_heads: {exc}") from None
        try:
            return cls(
                q_size=num_heads // tp_world * head_dim,
                kv_size=kv_heads * head_dim,
                tp_world=tp_world,
                tp_rank=tp_rank,
                num_heads=num_heads,
                num_kv_heads=num_kv_heads,
                **fields,
            )
        except ValueError as exc:
            raise ValueError(f"QKNormConfig.for_heads: {str(exc).removeprefix('QKNormConfig: ')}") from None

    @property
    def qkv_size(self) -> int:
        """Width of the fused qkv activation: ``q_size + 2 * kv_size`` elements."""
        return self.q_size + 2 * self.kv_size

    def fields(self) -> dict[str, object]:
        """Every field by name, in declaration order (what ``uuid()`` hashes)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
