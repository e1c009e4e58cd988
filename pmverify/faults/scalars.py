"""Faults that drop an op's scalar arguments, with the cases that show them.

Outside the QK-norm domain: :func:`addmm_cases` plants ``addmm`` with and without ``beta`` /
``alpha`` into random :func:`~pmverify.strategies.fx_graphs` contexts.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
from hypothesis import strategies as st

from pmverify import GraphCase

from ._common import DtypesConfig, HandWrittenFault, aten, validate_config

__all__ = [
    "AddmmDropsScalars",
    "UnfuseAddmmConfig",
    "addmm_cases",
    "AddcmulFusionDropsAlpha",
    "addcmul_pattern",
    "RMSNormHardCodedEps",
    "RMSNormEpsConfig",
    "rms_norm_pattern",
]


@dataclasses.dataclass(frozen=True)
class UnfuseAddmmConfig:
    """What :class:`AddmmDropsScalars` is built for.

    - ``dtype``: the dtype of the ``addmm`` nodes it rewrites (default float32: there ``mm`` then
      ``add`` rounds as ``addmm`` does; in bf16/fp16 it rounds twice).
    - ``max_k``: the largest contracted size, in elements, it rewrites (default 1024).
    """

    dtype: torch.dtype = torch.float32
    max_k: int = 1024


class AddmmDropsScalars(HandWrittenFault):
    """Bug kind: a replacement that drops an op's scalar keyword arguments (``beta`` / ``alpha``).

    Modelled on Inductor's ``unfuse_bias_add_to_pointwise`` (post_grad.py), which rewrites
    ``addmm(inp, a, b)`` into ``a @ b + inp`` so the bias add can fuse with a pointwise consumer. This
    hand-written version rewrites every ``aten.addmm`` of ``config.dtype`` with a contracted size up
    to ``config.max_k`` into ``add(mm(a, b), bias)`` without reading the node's ``beta`` and ``alpha``
    kwargs: exact for ``addmm(bias, a, b)`` (beta = alpha = 1, the only form random context graphs
    hold); for ``addmm(bias, a, b, beta=β, alpha=α)`` it computes ``a @ b + bias`` instead of
    ``β·bias + α·(a @ b)``: the semantics oracle, on :func:`addmm_cases`.

    - ``config``: an :class:`UnfuseAddmmConfig`; None takes the defaults. ``TypeError`` for anything
      else.
    """

    def __init__(self, config: UnfuseAddmmConfig | None = None) -> None:
        validate_config(config, UnfuseAddmmConfig)
        self.config = config
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        config = self.config or UnfuseAddmmConfig()
        count = 0
        for node in list(graph.find_nodes(op="call_function", target=aten.addmm.default)):
            bias, a, b = node.args[:3]
            out, av = node.meta.get("val"), getattr(a, "meta", {}).get("val")
            if not isinstance(out, torch.Tensor) or not isinstance(av, torch.Tensor):
                continue
            if out.dtype != config.dtype or av.shape[-1] > config.max_k:
                continue
            with graph.inserting_before(node):  # the bug: node.kwargs (beta, alpha) are never read
                product = graph.call_function(aten.mm.default, (a, b))
                fused = graph.call_function(aten.add.Tensor, (product, bias))
            product.meta["val"] = fused.meta["val"] = out  # [M, N] both: the bias broadcasts
            node.replace_all_uses_with(fused)
            graph.erase_node(node)
            count += 1
        self.matched_count = count


def addmm_pattern(bias, a, b):
    return torch.addmm(bias, a, b)


def addmm_beta_pattern(bias, a, b):
    return torch.addmm(bias, a, b, beta=0.5)


def addmm_alpha_pattern(bias, a, b):
    return torch.addmm(bias, a, b, alpha=2.0)


def addmm_beta_alpha_pattern(bias, a, b):
    return torch.addmm(bias, a, b, beta=-1.0, alpha=0.5)


#: Planted forms, simplest first: the default scalars (the fault is exact there), then others.
ADDMM_PATTERNS = (addmm_pattern, addmm_beta_pattern, addmm_alpha_pattern, addmm_beta_alpha_pattern)


def addmm_cases(*, scaled: bool = True, max_instances: int = 2) -> st.SearchStrategy[GraphCase]:
    """Return a strategy for float32 :class:`~pmverify.GraphCase` graphs with 1..``max_instances``
    ``addmm(bias[N], a[M, K], b[K, N])`` instances (M, K, N in 2..8 elements) planted into random
    :func:`~pmverify.strategies.fx_graphs` contexts, ``pass_config=UnfuseAddmmConfig()``.

    - ``scaled``: whether the instances may carry non-default ``beta`` / ``alpha`` (0.5, 2.0, or
      -1.0 and 0.5); False plants ``addmm(bias, a, b)`` only. Default True; shrinks toward the
      default scalars.
    - ``max_instances``: at most this many instances per case (default 2).

    Near misses: ``"dtype"`` and ``"unused"`` only (``must_match=None``); a ``"constant"`` near miss
    would change ``beta``, which an addmm rewrite must handle, not refuse.
    """
    from ..strategies import like, planted

    example = (torch.empty(4), torch.empty(3, 5), torch.empty(5, 4))
    # From 2 up: at size 1 Inductor's tracer emits other ops than addmm (planted: "trace_differs").
    inputs = like(example, vary={"m": [(1, 0)], "k": [(1, 1), (2, 0)], "n": [(0, 0), (2, 1)]}, min_side=2, max_side=8)
    patterns = ADDMM_PATTERNS if scaled else ADDMM_PATTERNS[:1]
    return st.one_of(
        [
            planted(
                pattern,
                inputs,
                min_instances=1,
                max_instances=max_instances,
                near_misses=("dtype", "unused"),
                pass_config=UnfuseAddmmConfig(),
                name="addmm",
            )
            for pattern in patterns
        ]
    )


# ------------------------------------------------------------------ arguments a pattern never names


def addcmul_pattern(x, y, z):
    """``x + y * z`` (``x``, ``y``, ``z``: one shape): what :class:`AddcmulFusionDropsAlpha` fuses."""
    return x + y * z


class AddcmulFusionDropsAlpha(HandWrittenFault):
    """Bug kind: a rewrite of ``add`` that drops the ``alpha`` its pattern never mentions.

    A hand-written peephole pass, matching nodes by target as graph-walking custom passes do,
    rewrites ``aten.add.Tensor(x, aten.mul.Tensor(y, z))`` into ``aten.addcmul.default(x, y, z)``
    (one fused multiply-add). It was written against ``x + y * z``, which carries no ``alpha``, and
    never reads the add's own arguments past the two operands: ``add(x, y * z, alpha=a)`` (that is,
    ``x + a * y * z``) becomes ``x + y * z``. Exact where ``alpha`` is 1; a planted instance whose add
    carries another ``alpha`` (an argument near miss of ``planted(addcmul_pattern, ...)``, which
    Inductor's matcher for the pattern leaves alone) is rewritten wrong: the semantics oracle, and
    the expectations oracle for the near miss rewritten.

    - ``config``: a :class:`~pmverify.faults._common.DtypesConfig`; None takes the defaults.
    """

    def __init__(self, config: DtypesConfig | None = None) -> None:
        validate_config(config, DtypesConfig)
        self.config = config
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        count = 0
        for node in list(graph.find_nodes(op="call_function", target=aten.add.Tensor)):
            x, product = node.args[:2]
            if not (
                isinstance(product, torch.fx.Node) and product.target is aten.mul.Tensor and len(product.users) == 1
            ):
                continue
            y, z = product.args[:2]
            values = [n.meta.get("val") if isinstance(n, torch.fx.Node) else None for n in (node, x, y, z)]
            if not all(isinstance(v, torch.Tensor) for v in values):
                continue
            out = values[0]
            if any(v.shape != out.shape or v.dtype != out.dtype for v in values[1:]):
                continue
            if out.dtype not in (self.config or DtypesConfig()).dtypes:
                continue
            with graph.inserting_before(node):  # the bug: node.kwargs (alpha) is never read
                fused = graph.call_function(aten.addcmul.default, (x, y, z))
            fused.meta["val"] = out
            node.replace_all_uses_with(fused)
            graph.erase_node(node)
            graph.erase_node(product)
            count += 1
        self.matched_count = count


@dataclasses.dataclass(frozen=True)
class RMSNormEpsConfig:
    """What :class:`RMSNormHardCodedEps` is built for: the ``eps`` of its pattern (default 1e-6)."""

    eps: float = 1e-6


def rms_norm_pattern_with(eps: float):
    """The float32 RMS norm of :data:`rms_norm_pattern` with ``eps`` as its literal."""

    def rms_norm_pattern(x, w):
        xf = x.float()
        return ((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)) * w).to(x.dtype)

    return rms_norm_pattern


#: ``x * rsqrt(mean(x², -1) + 1e-6) * w`` in float32, cast back (``x``: ``[T, H]``, ``w``: ``[H]``):
#: the RMS norm :class:`RMSNormHardCodedEps` rewrites, its eps a literal.
rms_norm_pattern = rms_norm_pattern_with(1e-6)


@functools.lru_cache(maxsize=8)
def _rms_patterns(eps: float):
    from torch._inductor import pattern_matcher as pm

    patterns = pm.PatternMatcherPass(pass_name="pmverify_RMSNormHardCodedEps")
    example = [torch.empty(8, 16), torch.empty(16)]
    pm.register_replacement(
        rms_norm_pattern_with(eps), rms_norm_pattern_with(1e-5), example, pm.fwd_only, patterns
    )  # the bug: 1e-5
    return patterns


class RMSNormHardCodedEps(HandWrittenFault):
    """Bug kind: a replacement that hard-codes a nearby eps.

    A ``register_replacement`` RMS-norm rewrite whose pattern holds the model's eps
    (``config.eps``, 1e-6) as a literal, so it matches only norms of that eps, but whose
    replacement was written with the common default 1e-5. The two agree wherever a row's mean
    square is far above 1e-5 (inputs of magnitude about 1, what hand-picked tests draw) and differ
    for rows of small magnitude: the semantics oracle, on ``planted(rms_norm_pattern, like(...))``
    cases, whose tensors are drawn at scales down to 2^-24.

    - ``config``: an :class:`RMSNormEpsConfig`; None takes the defaults.
    """

    def __init__(self, config: RMSNormEpsConfig | None = None) -> None:
        validate_config(config, RMSNormEpsConfig)
        self.config = config
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = _rms_patterns((self.config or RMSNormEpsConfig()).eps).apply(graph)
