"""Faults in defunctionalization: a pass that turns ``auto_functionalized`` calls back into in-place
calls of the op without checking who still reads the old operand.

The ops are a project's own (registered here, as a project registers its kernels): an RMS norm
written into an out buffer and a fused residual add + RMS norm that writes both its input and its
residual, the two forms vLLM's defunctionalization rewrites most.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch import Tensor

from ._common import HandWrittenFault, aten, is_call, validate_config

__all__ = [
    "BlindDefunctionalization",
    "Defunctionalization",
    "DefuncConfig",
    "DEFUNC_OPS",
    "defunc_examples",
    "defunc_cases",
]


@dataclasses.dataclass(frozen=True)
class DefuncConfig:
    """What a defunctionalization rewrites: calls of the ops named in ``ops`` (``"ns::name"``),
    None for every op."""

    ops: tuple[str, ...] | None = None


_NAMESPACE = "pmverify_faults"
_V1 = torch.ops.higher_order.auto_functionalized
_V2 = torch.ops.higher_order.auto_functionalized_v2


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _define() -> None:
    if hasattr(getattr(torch.ops, _NAMESPACE), "rms_norm_into"):
        return

    @torch.library.custom_op(f"{_NAMESPACE}::rms_norm_into", mutates_args=("result",))
    def rms_norm_into(result: Tensor, x: Tensor, weight: Tensor, eps: float) -> None:
        result.copy_(_rms(x, weight, eps))

    @rms_norm_into.register_fake
    def _(result, x, weight, eps):
        torch._check(result.shape == x.shape and weight.shape == x.shape[-1:])

    @torch.library.custom_op(f"{_NAMESPACE}::add_rms_norm_", mutates_args=("x", "residual"))
    def add_rms_norm_(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
        residual.add_(x)
        x.copy_(_rms(residual, weight, eps))

    @add_rms_norm_.register_fake
    def _(x, residual, weight, eps):
        torch._check(residual.shape == x.shape and weight.shape == x.shape[-1:])


_define()
#: The ops the faults' cases call.
DEFUNC_OPS = (
    getattr(torch.ops, _NAMESPACE).rms_norm_into.default,
    getattr(torch.ops, _NAMESPACE).add_rms_norm_.default,
)


def defunc_examples() -> dict[Any, list[tuple]]:
    """One example call of each op of :data:`DEFUNC_OPS` (8 tokens, a 16-wide hidden dim)."""
    rms_into, add_rms = DEFUNC_OPS
    x, w = torch.empty(8, 16), torch.empty(16)
    return {rms_into: [(x, x, w, 1e-6)], add_rms: [(x, x, w, 1e-6)]}


def defunc_cases() -> Any:
    """Random graphs with calls of :data:`DEFUNC_OPS` (``with_mutating_custom_ops(fx_graphs(),
    ops=DEFUNC_OPS)``, v1 and v2, write-backs at the end as AOTAutograd puts them)."""
    from ..strategies import fx_graphs, with_mutating_custom_ops

    return with_mutating_custom_ops(fx_graphs(), ops=list(DEFUNC_OPS), examples=defunc_examples(), write_backs="end")


def _mutated(op: Any) -> list[str]:
    return [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def _written(node: torch.fx.Node) -> dict[str, Any] | None:
    """Each mutated arg of ``node`` (an auto_functionalized node) by name: the whole tensor it
    writes; None when one is a view (v2 view metadata) or missing."""
    op, found = node.args[0], {}
    for name in _mutated(op):
        if node.target is _V1:
            found[name] = node.kwargs.get(name)
        else:
            if any(k.startswith(f"_{name}_") and k != f"_{name}_base_index" for k in node.kwargs):
                return None
            index = node.kwargs.get(f"_{name}_base_index")
            found[name] = None if index is None else node.kwargs["_all_bases"][index]
    if not all(isinstance(v, torch.fx.Node) for v in found.values()):
        return None
    return found


#: Ops whose output may share storage with their input although their schema does not say so.
_HIDDEN_VIEWS = frozenset({"aten::_unsafe_view", "aten::_reshape_alias", "aten::lift_fresh"})


def _is_view(node: torch.fx.Node) -> bool:
    target = node.target
    if target is operator.getitem:
        return True
    return isinstance(target, torch._ops.OpOverload) and (target.is_view or target._schema.name in _HIDDEN_VIEWS)


def _aliases(node: torch.fx.Node) -> set[torch.fx.Node]:
    """``node``'s storage: its root (through views and getitem) and every view of that root."""
    root = node
    while root.op == "call_function" and _is_view(root) and isinstance(root.args[0], torch.fx.Node):
        root = root.args[0]
    found, pending = {root}, [root]
    while pending:
        for user in pending.pop().users:
            if user.op == "call_function" and _is_view(user):
                if user not in found and not isinstance(user.args[0], (list, tuple)):
                    found.add(user)
                    pending.append(user)
    return found


class Defunctionalization(HandWrittenFault):
    """A defunctionalization: each ``auto_functionalized`` / ``auto_functionalized_v2`` call of an
    op of ``ops`` (default every op) whose mutated args are whole tensors becomes the in-place call
    of the op on those tensors, its ``getitem`` users reading the op's outputs and the written
    tensors. It refuses where that changes what a node reads: a written tensor (or a view of its
    storage) read after the call by anything but the ``copy_`` that writes a graph input back, a
    tensor written twice or read through another argument of the call.

    - ``config``: a :class:`DefuncConfig`; None rewrites every op.
    """

    checks_readers = True

    def __init__(self, config: DefuncConfig | None = None) -> None:
        validate_config(config, DefuncConfig)
        self.config = config
        self.matched_count = 0

    def _safe(self, node: torch.fx.Node, written: dict[str, torch.fx.Node], order: dict) -> bool:
        tensors = list(written.values())
        if len(set(tensors)) != len(tensors):
            return False
        others = [a for k, a in node.kwargs.items() if k not in written and isinstance(a, torch.fx.Node)]
        for tensor in tensors:
            storage = _aliases(tensor)
            root = next(a for a in storage if a.op != "call_function" or not _is_view(a))
            if root.op == "placeholder" and not any(is_call(u, aten.copy_.default) for u in root.users):
                return False  # a graph input the graph does not write back: its caller's value
            if any(a in storage for a in others):
                return False
            for alias in storage:
                for user in alias.users:
                    if user is node or order[user] < order[node]:
                        continue
                    if is_call(user, aten.copy_.default) and user.args[0] is alias:
                        continue
                    if user in storage:
                        continue
                    return False
        return True

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = 0
        order = {node: i for i, node in enumerate(graph.nodes)}
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in (_V1, _V2):
                continue
            op = node.args[0]
            names = None if self.config is None else self.config.ops
            if names is not None and getattr(op, "_name", None) not in names:
                continue
            written = _written(node)
            if written is None or any(u.target is not operator.getitem for u in node.users):
                continue
            if self.checks_readers and not self._safe(node, written, order):
                continue
            self._rewrite(graph, node, op, written)
            self.matched_count += 1

    def _rewrite(self, graph: torch.fx.Graph, node: torch.fx.Node, op: Any, written: dict) -> None:
        kwargs = {}
        for argument in op._schema.arguments:
            if argument.name in written:
                kwargs[argument.name] = written[argument.name]
            elif argument.name in node.kwargs:
                kwargs[argument.name] = node.kwargs[argument.name]
        with graph.inserting_before(node):
            call = graph.call_function(op, (), kwargs)
        n_out = max(1, len(op._schema.returns))  # an op returning () still fills index 0 (None)
        if node.target is _V1:
            new_values = [written[name] for name in _mutated(op)]
        else:
            new_values = list(node.kwargs["_all_bases"])
        for user in list(node.users):
            index = user.args[1]
            if index < n_out:
                if n_out == 1:
                    user.replace_all_uses_with(call)
                else:
                    with graph.inserting_before(user):
                        item = graph.call_function(operator.getitem, (call, index))
                    user.replace_all_uses_with(item)
            else:
                user.replace_all_uses_with(new_values[index - n_out])
            graph.erase_node(user)
        graph.erase_node(node)


class BlindDefunctionalization(Defunctionalization):
    """Bug kind: a defunctionalization that rewrites a call in place although a later node reads the
    operand's old value.

    :class:`Defunctionalization` without its check of later readers (vLLM's own pass calls its
    rotary-embedding rewrite blind): ``auto_functionalized(op, x=a)`` becomes ``op(a)`` in place
    wherever the mutated args are whole tensors. Where a node after the call reads ``a`` (a clone of
    the old value, a reader outside a planted instance), it now reads the new value. Shows on
    ``with_mutating_custom_ops(ops=...)`` cases with a reader of the old value: the semantics
    oracle (a write into a graph input not copied back shows as a changed input too).
    """

    checks_readers = False
