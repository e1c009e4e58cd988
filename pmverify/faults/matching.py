"""Faults in what a matcher matches and where it puts the replacement."""

from __future__ import annotations

import functools

import torch

from ..fusions.qk_norm.config import SUPPORTED_DTYPES
from ._common import DtypesConfig, HandWrittenFault, validate_config
from ._hand import HandRMSNorm

__all__ = [
    "HandRMSNormIgnoresExtraUsers",
    "HandRMSNormInsertedBeforeInputs",
    "FusedAddRMSNormLeftUnsorted",
    "add_rms_norm_pattern",
]


class HandRMSNormIgnoresExtraUsers(HandRMSNorm):
    """Bug kind: a match despite an extra user of an intermediate, which loses that intermediate.

    Inductor's ``register_replacement`` records each pattern node's user count and does not match
    when an intermediate (``x.float()``, ``x²``, the mean, ``rsqrt``, the normalised product) is
    also used outside the pattern. This hand-written MiniMax-M2 RMS-norm matcher (see
    :mod:`pmverify.faults._hand`) skips that check and, believing the chain single-use, hands that
    other user the fused result in place of the intermediate. (Fusing anyway while keeping the
    intermediate for its other user is only duplicated work: not a finding, a note.) On the
    ``extra_user`` near misses of ``qk_norm_cases`` (per-tensor form) the other user reads another
    value (the semantics oracle), of another shape or dtype for most intermediates (the structure
    oracle: the graph's outputs change). Correct, and matching what the shipped pass matches,
    everywhere else.

    - ``config``: the :class:`QKNormConfig` to fuse for; None fuses every such chain.
    """

    allows_extra_users = True
    rewires_extra_users = True


class HandRMSNormInsertedBeforeInputs(HandRMSNorm):
    """Bug kind: a replacement inserted before one of its inputs is defined.

    A hand-written pass must insert the fused op after every node it reads (Inductor's
    ``ReplacementPatternEntry`` relies on the ``stable_topological_sort`` that follows post-grad
    passes for its multi-output replacements; a hand pass that does the same by accident leaves a
    graph that only a later sort repairs, or that is not a graph at all when the sort is skipped or
    meets a cycle). This MiniMax-M2 RMS-norm matcher (see :mod:`pmverify.faults._hand`) inserts the
    fused op right after the placeholders. Correct when the norm's input ``x`` is a graph input; when
    ``x`` is computed in the graph (``qk_norm_cases`` plant elementwise pre-ops, or a chained layer)
    the fused op comes before its input: the structure oracle reports the pair the pass left out of
    order (``RunPair.unsorted``); values are right once sorted. On in-place graphs it may also read
    an input before an earlier in-place write: the semantics oracle.

    - ``config``: the :class:`QKNormConfig` to fuse for; None fuses every such chain.
    """

    def _insert_before(self, graph: torch.fx.Graph, chain: list[torch.fx.Node]) -> torch.fx.Node:
        return next(node for node in graph.nodes if node.op != "placeholder")  # the bug: ahead of x


def add_rms_norm_pattern(x, residual, w):
    """vLLM's fused residual add and RMS norm, as a pattern with two outputs: ``h = x + residual``
    and ``rms_norm(h) * w`` in float32, cast back (``x``, ``residual``: ``[T, H]``; ``w``: ``[H]``).
    Returns ``(normed, h)``."""
    h = x + residual
    hf = h.float()
    return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(h.dtype), h


def _add_rms_norm_replacement(x, residual, w):
    h = x + residual
    return torch.ops.pmverify.rms_norm(h, w, 1e-6, False), h


def _fusable(match) -> bool:
    """Safety: ``w`` a ``[H]`` weight of float32 or the rows' dtype, and no keyword argument the
    pattern does not hold (Inductor's matcher ignores those: an ``alpha`` on the add would be lost)."""
    if any(node.kwargs for node in match.nodes):
        return False
    h, w = match.kwargs["x"].meta.get("val"), match.kwargs["w"].meta.get("val")
    if not isinstance(h, torch.Tensor) or not isinstance(w, torch.Tensor) or h.dim() < 1:
        return False
    return tuple(w.shape) == (h.shape[-1],) and w.dtype in (torch.float32, h.dtype) and h.dtype in SUPPORTED_DTYPES


@functools.lru_cache(maxsize=1)
def _add_rms_norm_patterns():
    from torch._inductor import pattern_matcher as pm

    patterns = pm.PatternMatcherPass(pass_name="pmverify_FusedAddRMSNormLeftUnsorted")
    example = [torch.empty(8, 16), torch.empty(8, 16), torch.empty(16)]
    pm.register_replacement(
        add_rms_norm_pattern, _add_rms_norm_replacement, example, pm.fwd_only, patterns, extra_check=_fusable
    )
    return patterns


class FusedAddRMSNormLeftUnsorted(HandWrittenFault):
    """Bug kind: a multi-output replacement left before its input.

    A ``register_replacement`` fusion of vLLM's residual add and RMS norm (two outputs: the normed
    rows and the new residual ``h``) into ``h`` and ``torch.ops.pmverify.rms_norm``, correct in
    values. Inductor's ``ReplacementPatternEntry`` inserts a multi-output replacement before the
    first of the match's outputs (here ``h``) and relies on the ``stable_topological_sort`` that
    follows ``post_grad_custom_post_pass``; when the weight ``w`` is computed after ``h`` (a late
    input), the fused op comes before its input. Under Inductor's own pass order that is repaired;
    in a pass manager that runs the next pass first (vLLM's runs its passes back to back and sorts
    at the end), the next pass gets a graph that does not lint. Only
    ``verify(..., strict_order=True)`` calls it a finding (the structure oracle), on
    ``planted(add_rms_norm_pattern, ...)`` cases, whose inputs may be computed late.

    - ``config``: a :class:`~pmverify.faults._common.DtypesConfig` (unused: the pattern matches
      where its ``extra_check`` allows); None takes the defaults.
    """

    def __init__(self, config: DtypesConfig | None = None) -> None:
        validate_config(config, DtypesConfig)
        self.config = config
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = _add_rms_norm_patterns().apply(graph)
