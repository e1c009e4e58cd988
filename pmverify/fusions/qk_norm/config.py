"""Configuration of the QK-norm fusion: geometry, numerics and tensor-parallel placement."""

from __future__ import annotations

import dataclasses
import math

import torch

#: Activation dtypes the fusion supports, simplest first.
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclasses.dataclass(frozen=True)
class QKNormConfig:
    """What one QK-norm fusion pass is built for.

    - ``q_size``: width of q on this rank, in elements (query heads per rank × head_dim).
    - ``kv_size``: width of k (and of v) on this rank, in elements.
    - ``eps``: the epsilon added to the mean of squares; a pattern with another eps does not match.
    - ``dtype``: activation dtype of qkv (float32, float16 or bfloat16).
    - ``max_tokens``: largest token count (rows of qkv) the fused path is used for.
    - ``tp_world`` / ``tp_rank``: tensor-parallel world size (ranks) and this rank's index.

    Raises ``ValueError`` naming the field and its value when the geometry is impossible.
    """

    q_size: int
    kv_size: int
    eps: float = 1e-6
    dtype: torch.dtype = torch.bfloat16
    max_tokens: int = 2048
    tp_world: int = 1
    tp_rank: int = 0

    def __post_init__(self) -> None:
        for name in ("q_size", "kv_size", "max_tokens", "tp_world"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"QKNormConfig: {name}={value!r} must be a positive int")
        if not isinstance(self.tp_rank, int) or isinstance(self.tp_rank, bool) or not 0 <= self.tp_rank < self.tp_world:
            raise ValueError(f"QKNormConfig: tp_rank={self.tp_rank!r} must be in [0, tp_world={self.tp_world})")
        if not isinstance(self.eps, (int, float)) or isinstance(self.eps, bool) or not 0 < self.eps < math.inf:
            raise ValueError(f"QKNormConfig: eps={self.eps!r} must be a positive finite float")
        object.__setattr__(self, "eps", float(self.eps))
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(
                f"QKNormConfig: dtype={self.dtype!r} is not one of {', '.join(str(d) for d in SUPPORTED_DTYPES)}"
            )

    @property
    def qkv_size(self) -> int:
        """Width of the fused qkv activation: ``q_size + 2 * kv_size`` elements."""
        return self.q_size + 2 * self.kv_size

    def fields(self) -> dict[str, object]:
        """Every field by name, in declaration order (what ``uuid()`` hashes)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
