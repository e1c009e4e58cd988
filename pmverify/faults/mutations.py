"""Faults around mutation: a hand matcher blind to mutation regions, and ``auto_functionalized``
getitems routed to the wrong tuple element."""

from __future__ import annotations

import operator

import torch

from ..fusions.qk_norm import QKNormConfig, QKNormFusionPass
from ._common import HandWrittenFault, validate_config
from ._hand import HandRMSNorm

__all__ = ["HandRMSNormIgnoresMutations", "SwappedAutoFunctionalizedGetitems"]


class HandRMSNormIgnoresMutations(HandRMSNorm):
    """Bug kind: a hand-written matcher that ignores mutation regions.

    It walks the graph itself (no ``PatternMatcherPass``) for transformers' MiniMax-M2 RMS norm in
    aten form (see :mod:`pmverify.faults._hand`) and replaces it with
    ``torch.ops.pmverify.rms_norm(x, weight, eps, True)`` inserted at the chain's last node. It
    checks what the shipped pass checks (dtype, widths, eps, weight, single users, contiguity,
    tokens) but not whether an in-place op sits between the chain's nodes, the check Inductor makes
    with mutation regions ("pattern match crosses mutation barrier - discard" in
    ``PatternMatcherPass.apply``) and graph-walking custom passes skip. Correct on functional graphs;
    when ``x`` is written between the first and the last node, the fused op reads the new ``x``.
    Shows on in-place graphs (``with_mutations``) with a mutation inside a planted norm: the
    expectations oracle (a ``mutation_inside`` near miss rewritten), the mutation_barriers oracle,
    and the semantics oracle when the mutation changes what the norm reads.

    - ``config``: the :class:`QKNormConfig` to fuse for; None fuses every such chain, whatever its
      dtype, width and eps.
    """

    respects_mutations = False


class SwappedAutoFunctionalizedGetitems(HandWrittenFault):
    """Bug kind: a replacement that routes the wrong element of an ``auto_functionalized`` tuple.

    Fusion passes over post-grad graphs (vLLM's, which rebuild ``auto_functionalized`` nodes and
    remap their ``getitem`` users by hand-written tuple indices) must send each user the element
    it read: ``(op outputs..., new values of the mutated args...)``. This pass runs the shipped
    QK-norm fusion (when given a config), then, on each ``auto_functionalized_v2`` node, swaps the
    indices of the first two ``getitem`` users whose elements have the same shape and dtype, so the
    graph stays well formed and only values are wrong: the users of one mutated arg (or of the op's
    output) get another's new value. ``matched_count`` is the fusion's count. Shows on graphs with
    mutating custom ops (``with_mutating_custom_ops``, v2): the semantics oracle, and the
    functionalization oracle.

    - ``config``: the :class:`QKNormConfig` of the QK-norm fusion run first; None runs none.
    """

    def __init__(self, config: QKNormConfig | None = None) -> None:
        validate_config(config)
        self.config = config
        self.matched_count = 0
        self.swapped = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = 0
        if self.config is not None:
            fusion = QKNormFusionPass(self.config)
            fusion(graph)
            self.matched_count = fusion.matched_count
        self.swapped = 0
        v2 = torch.ops.higher_order.auto_functionalized_v2
        for node in graph.find_nodes(op="call_function", target=v2):
            getitems = sorted(
                (u for u in node.users if u.target is operator.getitem and isinstance(u.meta.get("val"), torch.Tensor)),
                key=lambda u: u.args[1],
            )
            pair = next(
                (
                    (a, b)
                    for i, a in enumerate(getitems)
                    for b in getitems[i + 1 :]
                    if a.meta["val"].shape == b.meta["val"].shape and a.meta["val"].dtype == b.meta["val"].dtype
                ),
                None,
            )
            if pair is not None:
                a, b = pair
                a.args, b.args = (node, b.args[1]), (node, a.args[1])
                self.swapped += 1
