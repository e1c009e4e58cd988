"""Faults around aliasing: a reinplacing pass that lets an op read what it writes."""

from __future__ import annotations

import operator

import torch

from ..fusions.qk_norm import QKNormConfig, QKNormFusionPass
from ._common import HandWrittenFault, aten, is_call, validate_config

__all__ = ["ReinplaceReadsWhatItWrites"]

_V1 = torch.ops.higher_order.auto_functionalized
_V2 = torch.ops.higher_order.auto_functionalized_v2


def _same_layout(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return (
        isinstance(va, torch.Tensor)
        and isinstance(vb, torch.Tensor)
        and va.shape == vb.shape
        and va.stride() == vb.stride()
        and va.dtype == vb.dtype
    )


class ReinplaceReadsWhatItWrites(HandWrittenFault):
    """Bug kind: a reinplacing that lets an op read what it writes.

    Functionalization turns ``y = x.clone(); op(x, out=y)`` into ``clone = aten.clone(x);
    auto_functionalized(op, x=x, out=clone)`` (v1, or ``auto_functionalized_v2`` with ``clone`` in
    ``_all_bases``). A reinplacing pass saves the copy by letting the op write ``x`` itself: a clone
    that looks like a no-op (same sizes, strides, dtype as its source, the pattern of Inductor's
    ``remove_noop_ops``) whose source is not read after the call is dropped and the call made in
    place, ``op(x, out=x)``, its new-value ``getitem`` users reading ``x``. This pass does that for
    every ``auto_functionalized`` node whose one mutated argument is such a clone, and checks what
    a reinplacing must check about later readers (no reader of ``x`` after the call, ``x`` neither
    a graph input nor a view) but not whether the same call reads ``x`` through another argument: then the op
    reads rows it has already written (``reverse_into``, ``roll_into``, ``cummean_into``,
    ``transpose_into``) or, for an elementwise op, happens to compute the right values. Right where
    the clone's source is not an argument of the call. Shows on graphs with mutating custom ops
    (``with_mutating_custom_ops``: ``y = x.clone(); op(x, out=y)`` with ``x`` a buffer read by
    nothing after it): the aliasing oracle, whatever the op computes; the semantics oracle for the
    order-dependent ops.

    - ``config``: the :class:`QKNormConfig` of the QK-norm fusion run first; None runs none.
    """

    def __init__(self, config: QKNormConfig | None = None) -> None:
        validate_config(config)
        self.config = config
        self.matched_count = 0
        self.reinplaced = 0

    def _clone_written(self, node: torch.fx.Node) -> tuple[str, torch.fx.Node] | None:
        """``(mutated arg, clone)`` when ``node``'s one mutated argument is a whole ``clone``."""
        op = node.args[0]
        if not isinstance(op, torch._ops.OpOverload):
            return None
        mutated = [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        if len(mutated) != 1:
            return None
        (name,) = mutated
        if node.target is _V1:
            written = node.kwargs.get(name)
        else:
            if any(key.startswith(f"_{name}_") and key != f"_{name}_base_index" for key in node.kwargs):
                return None  # a view of the base
            bases = node.kwargs.get("_all_bases") or []
            index = node.kwargs.get(f"_{name}_base_index")
            written = bases[index] if isinstance(index, int) and index < len(bases) else None
        if not is_call(written, aten.clone.default) or set(written.users) != {node}:
            return None
        return name, written

    def _reinplace(self, graph: torch.fx.Graph, node: torch.fx.Node, order: dict) -> bool:
        found = self._clone_written(node)
        if found is None:
            return False
        name, clone = found
        source = clone.args[0]
        if (
            not isinstance(source, torch.fx.Node)
            or source.op != "call_function"
            or getattr(source.target, "is_view", True)
            or not _same_layout(source, clone)
            or any(order[user] > order[node] for user in source.users)
        ):
            return False  # a graph input, a layout change, or read after the call
        if any(user.target is not operator.getitem for user in node.users):
            return False
        # Missing: `source` must not be read by `node` itself through another argument.
        op = node.args[0]
        kwargs = {}
        for argument in op._schema.arguments:
            if argument.name == name:
                kwargs[name] = source
            elif argument.name in node.kwargs:
                kwargs[argument.name] = node.kwargs[argument.name]
        with graph.inserting_before(node):
            call = graph.call_function(op, (), kwargs)
        call.meta["val"] = None
        outputs = max(1, len(op._schema.returns))
        for user in list(node.users):
            index = user.args[1]
            user.replace_all_uses_with(source if index >= outputs else call)
            graph.erase_node(user)
        graph.erase_node(node)
        graph.erase_node(clone)
        return True

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = 0
        if self.config is not None:
            fusion = QKNormFusionPass(self.config)
            fusion(graph)
            self.matched_count = fusion.matched_count
        self.reinplaced = 0
        order = {node: i for i, node in enumerate(graph.nodes)}
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target in (_V1, _V2) and self._reinplace(graph, node, order):
                self.reinplaced += 1
