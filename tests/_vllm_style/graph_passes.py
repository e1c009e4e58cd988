"""Hand-written graph passes in vLLM's style (a loop over ``graph.nodes``, no pattern matcher).

- :class:`DefunctionalizationPass`: replaces an ``auto_functionalized`` (v1) node of an op named in
  ``config.defunctionalize`` by the in-place call of the op and rewires its ``getitem`` users to the
  arguments it wrote (or to the call's outputs), as vLLM's ``FixFunctionalizationPass`` does before
  code generation. It refuses a node where that would change a value: a mutated argument that
  shares storage with another tensor argument of the call, a graph input without a write-back
  ``copy_`` of the new value, or a node reading the mutated storage after the call (before that
  write-back), which would see the new value where it read the old one.
  Bug: :class:`BlindDefunctionalizationPass` (no check: vLLM's own comment calls it blind).
- :class:`NoOpEliminationPass`: drops ``slice`` over the whole dim, ``view`` / ``reshape`` /
  ``_unsafe_view`` to the same shape and strides, and ``slice_scatter`` whose ``src`` covers the
  whole base, reading optional arguments at their schema defaults when the graph leaves them out
  (``slice(x, 0)``, ``slice_scatter(x, src, 1)``). Bug: :class:`FiveArgsNoOpEliminationPass`
  (unpacks five arguments of ``slice_scatter``).
"""

from __future__ import annotations

import operator
from typing import Any, ClassVar

import torch
from torch._higher_order_ops.auto_functionalize import auto_functionalized

from .config import VStylePass

aten = torch.ops.aten


def _is_view(node: torch.fx.Node) -> bool:
    """A view op's node, or an element of one returning several views (``split_with_sizes``)."""
    if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        return _is_view(node.args[0])
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view


def _writes(node: torch.fx.Node) -> bool:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return any(arg.alias_info is not None and arg.alias_info.is_write for arg in target._schema.arguments)


def _root(node: torch.fx.Node) -> torch.fx.Node:
    while _is_view(node) and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def _family(root: torch.fx.Node) -> set[torch.fx.Node]:
    """``root`` and every view of it, through views of views."""
    seen, todo = {root}, [root]
    while todo:
        for user in todo.pop().users:
            if _is_view(user) and user not in seen:
                seen.add(user)
                todo.append(user)
    return seen


def _outputs(op: Any) -> int:
    """Elements of an ``auto_functionalized`` tuple before the mutated arguments' new values: the
    op's outputs, or one ``None`` for an op that returns nothing."""
    return max(len(op._schema.returns), 1)


class DefunctionalizationPass(VStylePass):
    uses: ClassVar[tuple[str, ...]] = ("defunctionalize",)

    def apply(self, graph: torch.fx.Graph) -> int:
        count = 0
        for node in list(graph.nodes):
            if node.target is not auto_functionalized or node.args[0]._schema.name not in self.config.defunctionalize:
                continue
            op = node.args[0]
            mutated = [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
            order = {n: i for i, n in enumerate(graph.nodes)}
            if not self.can_defunctionalize(node, mutated, order):
                continue
            self.defunctionalize(graph, node, op, mutated)
            count += 1
        return count

    def defunctionalize(self, graph: torch.fx.Graph, node: torch.fx.Node, op: Any, mutated: list[str]) -> None:
        outputs = _outputs(op)
        with graph.inserting_before(node):
            call = graph.call_function(op, kwargs=dict(node.kwargs))
        for user in list(node.users):
            index = user.args[1]
            if index >= outputs:
                replacement = node.kwargs[mutated[index - outputs]]
            elif outputs == 1:
                replacement = call
            else:
                with graph.inserting_after(call):
                    replacement = graph.call_function(operator.getitem, (call, index))
            user.replace_all_uses_with(replacement)
            graph.erase_node(user)
        graph.erase_node(node)

    def can_defunctionalize(self, node: torch.fx.Node, mutated: list[str], order: dict[torch.fx.Node, int]) -> bool:
        outputs = _outputs(node.args[0])
        element = {user.args[1]: user for user in node.users}
        tensors = [v for k, v in node.kwargs.items() if isinstance(v, torch.fx.Node)]
        for index, name in enumerate(mutated):
            arg = node.kwargs.get(name)
            if arg is None:
                continue
            if not isinstance(arg, torch.fx.Node):
                return False
            root = _root(arg)
            if any(other is not arg and _root(other) is root for other in tensors):
                return False  # in place, it would read what it writes
            new_value = element.get(outputs + index)
            write_back = next(
                (
                    u
                    for u in arg.users
                    if u.target is aten.copy_.default
                    and u.args[0] is arg
                    and new_value is not None
                    and u.args[1] is new_value
                ),
                None,
            )
            if root.op == "placeholder" and (arg is not root or write_back is None):
                return False  # the caller's tensor would change otherwise, or only in part
            for member in _family(root):
                for reader in member.users:
                    if reader is node or reader is write_back or _is_view(reader) or order[reader] < order[node]:
                        continue
                    if write_back is None or order[reader] < order[write_back] or _writes(reader):
                        return False
        return True


class BlindDefunctionalizationPass(DefunctionalizationPass):
    """Bug: defunctionalizes every node of its ops, whoever reads the old values."""

    def can_defunctionalize(self, node, mutated, order) -> bool:
        return True


def _arg(node: torch.fx.Node, index: int, name: str, default: Any) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _static(node: Any) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    if not all(isinstance(s, int) for s in (*val.shape, *val.stride())):
        return None
    return val


def _covers(size: int, start: Any, end: Any, step: Any) -> bool:
    """Whether ``[start:end:step]`` of a dim of ``size`` is the whole dim."""
    if step != 1 or not all(isinstance(v, int) or v is None for v in (start, end)):
        return False
    start = 0 if start is None else (start + size if start < 0 else start)
    end = size if end is None else (end + size if end < 0 else end)
    return max(start, 0) == 0 and min(end, size) == size


class NoOpEliminationPass(VStylePass):
    def apply(self, graph: torch.fx.Graph) -> int:
        count = 0
        for node in list(graph.nodes):
            if node.op != "call_function":
                continue
            replacement = self.replacement(node)
            if replacement is not None:
                node.replace_all_uses_with(replacement)
                graph.erase_node(node)
                count += 1
        return count

    def replacement(self, node: torch.fx.Node) -> torch.fx.Node | None:
        if node.target is aten.slice.Tensor:
            return self.noop_slice(node)
        if node.target in (aten.view.default, aten.reshape.default, aten._unsafe_view.default):
            return self.noop_view(node)
        if node.target is aten.slice_scatter.default:
            return self.noop_slice_scatter(node)
        return None

    def noop_slice(self, node: torch.fx.Node) -> torch.fx.Node | None:
        x, out = _static(node.args[0]), _static(node)
        if x is None or out is None or x.dim() == 0:
            return None
        dim = _arg(node, 1, "dim", 0) % x.dim()
        covers = _covers(
            x.shape[dim], _arg(node, 2, "start", None), _arg(node, 3, "end", None), _arg(node, 4, "step", 1)
        )
        return node.args[0] if covers else None

    def noop_view(self, node: torch.fx.Node) -> torch.fx.Node | None:
        x, out = _static(node.args[0]), _static(node)
        if x is None or out is None:
            return None
        same = x.shape == out.shape and x.stride() == out.stride() and x.dtype == out.dtype
        return node.args[0] if same else None

    def scatter_args(self, node: torch.fx.Node) -> tuple[Any, Any, Any, Any, Any, Any]:
        """``base, src, dim, start, end, step`` with the schema's defaults where the graph omits them."""
        return (
            node.args[0],
            node.args[1],
            _arg(node, 2, "dim", 0),
            _arg(node, 3, "start", None),
            _arg(node, 4, "end", None),
            _arg(node, 5, "step", 1),
        )

    def noop_slice_scatter(self, node: torch.fx.Node) -> torch.fx.Node | None:
        base, src, dim, start, end, step = self.scatter_args(node)
        base_val, src_val, out = _static(base), _static(src), _static(node)
        if base_val is None or src_val is None or out is None or base_val.dim() == 0:
            return None
        if src_val.shape != out.shape or src_val.dtype != out.dtype or src_val.stride() != out.stride():
            return None
        dim = dim % base_val.dim()
        return src if _covers(base_val.shape[dim], start, end, step) else None


class FiveArgsNoOpEliminationPass(NoOpEliminationPass):
    """Bug: unpacks five positional arguments of ``slice_scatter``, which post-grad graphs need not
    write (``x[1:].copy_(y)`` compiles to the four-argument form)."""

    def scatter_args(self, node: torch.fx.Node) -> tuple[Any, Any, Any, Any, Any, Any]:
        base, src, dim, start, end = node.args[:5]
        return base, src, dim, start, end, _arg(node, 5, "step", 1)
