"""Faults that drop an op's scalar arguments, with the cases that show them.

Outside the QK-norm domain: :func:`addmm_cases` plants ``addmm`` with and without ``beta`` /
``alpha`` into random :func:`~pmverify.strategies.fx_graphs` contexts.
"""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import strategies as st

from .._case import GraphCase
from ._common import HandWrittenFault, aten, check_config

__all__ = ["AddmmDropsScalars", "UnfuseAddmmConfig", "addmm_cases"]


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
        check_config(config, UnfuseAddmmConfig)
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
