"""Faults in the dtypes a fusion is registered for: a pattern traced at float32 only."""

from __future__ import annotations

import dataclasses
import functools

import torch
import torch.nn.functional as F

from ._common import HandWrittenFault, validate_config

__all__ = ["GeluMulConfig", "GeluMulFusion", "GeluMulRegisteredAtFloat32Only", "gelu_mul_pattern", "GELU_MUL_EXAMPLE"]


def gelu_mul_pattern(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``gelu_tanh(x) * y`` in float32, cast back to ``x``'s dtype (``x``, ``y``: one shape ``[T, H]``):
    a GELU-and-multiply as activation fusions write it. Traced at float32 the casts are no-ops and
    leave no node; at bfloat16 or float16 they are ``convert_element_type`` nodes, another graph."""
    return (F.gelu(x.float(), approximate="tanh") * y.float()).to(x.dtype)


#: The example inputs :class:`GeluMulFusion` registers its pattern with, in each dtype it fuses.
GELU_MUL_EXAMPLE = (torch.empty(8, 16), torch.empty(8, 16))


@dataclasses.dataclass(frozen=True)
class GeluMulConfig:
    """The dtypes a GELU-mul fusion registers its pattern at (example inputs of each)."""

    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)


def _no_kwargs(match) -> bool:
    """Refuse a match whose nodes carry keyword arguments the pattern does not hold (``alpha=`` of an
    add: Inductor's matcher ignores them and the replacement would drop them), as README's recipe."""
    return not any(node.kwargs for node in match.nodes)


@functools.lru_cache(maxsize=8)
def _gelu_mul_patterns(dtypes: tuple[torch.dtype, ...]):
    from torch._inductor import pattern_matcher as pm

    patterns = pm.PatternMatcherPass(pass_name="pmverify_GeluMulFusion")
    for dtype in dtypes:
        example = [t.to(dtype) for t in GELU_MUL_EXAMPLE]
        pm.register_replacement(
            gelu_mul_pattern, gelu_mul_pattern, example, pm.fwd_only, patterns, extra_check=_no_kwargs
        )
    return patterns


class GeluMulFusion(HandWrittenFault):
    """A correct ``register_replacement`` GELU(tanh)-mul fusion (not a fault itself): its pattern
    :func:`gelu_mul_pattern` registered once per dtype of ``config.dtypes`` (float32, bfloat16,
    float16 by default), as Inductor registers its own fp16/fp32 twins, so it fuses every dtype its
    users run. The replacement recomputes the pattern (a stand-in for a fused kernel).

    - ``config``: a :class:`GeluMulConfig`; None takes the defaults.
    """

    registered: tuple[torch.dtype, ...] | None = None  # None: config.dtypes

    def __init__(self, config: GeluMulConfig | None = None) -> None:
        validate_config(config, GeluMulConfig)
        self.config = config
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        dtypes = self.registered or (self.config or GeluMulConfig()).dtypes
        self.matched_count = _gelu_mul_patterns(tuple(dtypes)).apply(graph)


class GeluMulRegisteredAtFloat32Only(GeluMulFusion):
    """Bug kind: a fusion registered only at float32 whose users run bfloat16 (a never-fused dtype).

    The pattern :func:`gelu_mul_pattern` is registered with float32 example inputs only (whatever
    ``config.dtypes`` says). Traced at float32 its upcasts vanish; a bfloat16 or float16 program
    traces with ``convert_element_type`` nodes that the float32 pattern does not match, so the
    fusion silently never fires there: correct values, no finding, no speed-up. Caught as an
    :class:`~pmverify.UnfusedWarning` (the bank's ``"unfused"`` oracle) on
    ``planted(gelu_mul_pattern, like(...))``, whose ``dtype`` near misses hold the pattern at
    bfloat16 and float16; its twin :class:`GeluMulFusion` registers every dtype and is quiet.
    """

    registered = (torch.float32,)  # the bug: the bf16 / fp16 traces are never registered
