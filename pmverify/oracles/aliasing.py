"""Aliasing oracle: after the pass, no call reads what it writes unless its schema allows it.

A call of an op that writes an argument (``alias_info.is_write`` in its schema: ``Tensor(a!)``,
``out=`` overloads, in-place ``*_`` ops and methods) must not read, through another argument, the
storage it writes: ``reverse_into(x, out=x)`` reads rows it has already overwritten. Functionalization
guarantees it (``y = x.clone(); op(x, out=y)`` becomes ``auto_functionalized(op, x=x, out=clone)``); a
reinplacing pass that drops the clone (``op(x, out=x)``) breaks it for every op that does not read
each element exactly once before writing it, and the result depends on what the op computes and
how its kernel orders its loads and stores. This oracle finds it from the graph alone, whatever the
op computes.

**The rule.** For each call in the graph after the pass that writes an argument ``w`` and reads an
argument ``r`` (another tensor argument, or an element of a tensor list; a second written argument
counts too, being read and written), a finding when ``w`` and ``r`` live in the same storage
(the same graph input or allocation, through views and in-place results: every op whose schema
returns an alias of an argument, ``Tensor(a)``, lists of views included) and cover a common
element (by offset, sizes and strides replayed through the views from the fake value of the
storage's input or allocation, see ``_layout``: two views whose address ranges do not meet, or, up
to 2**20 elements, whose element addresses differ, are disjoint, as
vLLM's rotary embedding writes ``query`` and ``key``, two slices of one ``qkv``; where a value is
unknown or symbolic the whole storage counts), unless

- the schema puts ``w`` and ``r`` in one alias set (``Tensor(a!) w, Tensor(a) r``): the op declares
  it may read what it writes; or
- the op is an ATen/prims elementwise op (tagged ``pointwise``, and ``copy_``) and ``r`` is the very
  tensor ``w`` (the same node, up to in-place results and views that only change its shape, or the
  same view of it): element ``i`` then
  reads element ``i`` before writing it, the *full overlap* TensorIterator allows
  (``assert_no_partial_overlap`` in ATen's ``MemoryOverlap.cpp`` rejects only partial overlap). So
  ``add_(x, x)`` holds and ``add_(x[1:], x[:-1])`` does not.

Two different graph inputs are taken not to alias (Inductor's post-grad graphs guarantee it). An
``auto_functionalized`` / ``_v2`` node that Inductor's reinplacing marked (``meta
["only_clone_these_tensors"]``) is judged as the call ``decompose_auto_functionalized`` makes of
it: the arguments it does not clone are written in place, and its new values alias them.

**Only what the pass introduced**: the same rule on the graph before the pass; a finding there
(same op, same two arguments, same storage) is the original program's and is not reported (where
the pass rebuilt the storage's allocating node, under a new name: as many as the graph before the
pass had of that op and those arguments).
"""

from __future__ import annotations

import collections
import operator
from collections.abc import Iterator
from typing import Any

import torch

from .._execution import RunPair
from .._fx import unreshaped
from . import _layout
from ._violation import Violation

__all__ = ["applies", "check", "aliased_calls", "writes_in_place"]

_V1 = torch.ops.higher_order.auto_functionalized
_V2 = torch.ops.higher_order.auto_functionalized_v2

#: Methods that return a view of ``self`` (FX ``call_method`` nodes).
_VIEW_METHODS = frozenset(
    ("view", "view_as", "reshape", "transpose", "t", "permute", "expand", "expand_as", "select", "narrow",
     "unsqueeze", "squeeze", "flatten", "unflatten", "as_strided", "__getitem__", "unbind", "split", "chunk",
     "diagonal", "movedim", "contiguous")
)  # fmt: skip


def _bind(node: torch.fx.Node, schema: Any) -> Iterator[tuple[Any, Any]]:
    """``(schema argument, value)`` for each argument of ``node``'s call."""
    for i, argument in enumerate(schema.arguments):
        if i < len(node.args) and not argument.kwarg_only:
            yield argument, node.args[i]
        elif argument.name in node.kwargs:
            yield argument, node.kwargs[argument.name]


def _tensors(value: Any) -> list[torch.fx.Node]:
    if isinstance(value, torch.fx.Node):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.fx.Node)]
    return []


def _alias_sets(argument: Any) -> frozenset[str]:
    info = argument.alias_info
    return frozenset(info.before_set) if info is not None else frozenset()


def _mutable_op(af: torch.fx.Node) -> Any:
    return af.args[0] if af.args else af.kwargs.get("_mutable_op")


def _in_place_af(af: torch.fx.Node) -> dict[str, torch.fx.Node] | None:
    """For an auto_functionalized node Inductor's reinplacing marked: each mutable arg it does not
    clone (so writes in place) → the tensor written (v1: the arg; v2: its base); None if unmarked."""
    marked = af.meta.get("only_clone_these_tensors")
    op = _mutable_op(af)
    if marked is None or not isinstance(op, torch._ops.OpOverload):
        return None
    from .._compat import get_mutable_args

    names, _ = get_mutable_args(op)
    written = {}
    for name in names:
        if af.target is _V1:
            value = af.kwargs.get(name)
            if name not in marked and isinstance(value, torch.fx.Node):
                written[name] = value
        else:
            index = af.kwargs.get(f"_{name}_base_index")
            bases = af.kwargs.get("_all_bases") or []
            if isinstance(index, int) and index not in marked and isinstance(bases[index], torch.fx.Node):
                written[name] = bases[index]
    return written


def _af_element(af: torch.fx.Node, index: int) -> torch.fx.Node | None:
    """The tensor an element of a marked auto_functionalized node's tuple aliases (a mutable arg
    written in place), or None (an op output or a clone)."""
    written = _in_place_af(af)
    if not written:
        return None
    op = _mutable_op(af)
    from .._compat import get_mutable_args

    names, _ = get_mutable_args(op)
    if af.target is _V2 and torch._library.utils.is_out(op):
        position = index
    else:
        position = index - max(1, len(op._schema.returns))
    if af.target is _V2 and not torch._library.utils.is_out(op):
        bases = af.kwargs.get("_all_bases") or []
        base = bases[position] if 0 <= position < len(bases) else None
        return base if base is not None and base in written.values() else None
    if 0 <= position < len(names):
        return written.get(names[position])
    return None


class _Storage:
    """Which storage a node's tensor lives in, and which exact tensor it is (up to in-place results
    and equal views), for one graph."""

    def __init__(self) -> None:
        self._roots: dict[torch.fx.Node, torch.fx.Node] = {}

    def _parent(self, node: torch.fx.Node, *, views: bool) -> Any:
        """The node ``node`` aliases: through in-place results always, through views when ``views``."""
        target = node.target
        if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
            schema = target._schema
            returns = schema.returns
            if returns and returns[0].alias_info is not None:
                sets = _alias_sets(returns[0])
                if not sets and views and isinstance(returns[0].type, torch.ListType):
                    sets = frozenset(("a",))  # a list of views (split, unbind: ``Tensor(a)[]``)
                for argument, value in _bind(node, schema):
                    if argument.alias_info is not None and sets & _alias_sets(argument):
                        if returns[0].alias_info.is_write or views:
                            return value if isinstance(value, torch.fx.Node) else None
                        return None
        elif node.op == "call_function" and target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            source = node.args[0]
            if source.op == "call_function" and source.target in (_V1, _V2):
                return _af_element(source, node.args[1]) if isinstance(node.args[1], int) else None
            if views and self._parent(source, views=True) is not None:
                return source  # an element of a list of views (split, unbind...)
        elif node.op == "call_method" and node.args and isinstance(node.args[0], torch.fx.Node):
            name = str(target)
            if (name.endswith("_") and not name.startswith("_")) or (views and name in _VIEW_METHODS):
                return node.args[0]
        return None

    def root(self, node: torch.fx.Node) -> torch.fx.Node:
        """The graph input or allocating node whose storage ``node`` lives in."""
        if node not in self._roots:
            parent = self._parent(node, views=True)
            self._roots[node] = node if parent is None else self.root(parent)
        return self._roots[node]

    def exact(self, node: torch.fx.Node) -> Any:
        """A key equal for two nodes that are the same tensor (same storage, offset, sizes, strides)."""
        parent = self._parent(node, views=False)
        if parent is not None:
            return self.exact(parent)
        if unreshaped(node) is not node:  # another shape of the same elements, in the same order
            return self.exact(unreshaped(node))
        if self._parent(node, views=True) is not None:  # a view: equal views of the same tensor
            rest = torch.fx.node.map_arg((node.args[1:], node.kwargs), lambda n: self.exact(n))
            return ("view", node.target, self.exact(node.args[0]), repr(rest))
        return node


def _disjoint(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    """Whether ``a`` and ``b``, two views of one storage, cover no common element (by their fake
    values; False unknown: the whole storage is taken)."""
    return _layout.disjoint(_layout.layout(a), _layout.layout(b))


def _elementwise(target: Any) -> bool:
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace in ("aten", "prims") and (
            torch.Tag.pointwise in target.tags or target.overloadpacket is torch.ops.aten.copy_
        )
    if isinstance(target, str):  # a method: the ATen op of that name
        packet = getattr(torch.ops.aten, target, None)
        return packet is not None and any(
            torch.Tag.pointwise in getattr(packet, name).tags for name in packet.overloads()
        )
    return False


def _calls(graph: torch.fx.Graph) -> Iterator[tuple[torch.fx.Node, str, list, list, bool, Any]]:
    """``(node, op name, written [(arg, node, sets)], read [(arg, node, sets)], elementwise, schema)``
    for each call that writes an argument."""
    for node in graph.nodes:
        target = node.target
        if node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            writes, reads = [], []
            for argument, value in _bind(node, target._schema):
                info = argument.alias_info
                is_write = info is not None and info.is_write
                for i, tensor in enumerate(_tensors(value)):
                    name = argument.name if isinstance(value, torch.fx.Node) else f"{argument.name}[{i}]"
                    (writes if is_write else reads).append((name, tensor, _alias_sets(argument)))
            yield node, str(target), writes, reads, _elementwise(target), target._schema
        elif node.op == "call_function" and target in (_V1, _V2):
            written = _in_place_af(node)
            op = _mutable_op(node)
            if not written:
                continue
            writes = [(name, tensor, frozenset()) for name, tensor in written.items()]
            mutable = {argument.name for argument in op._schema.arguments if argument.alias_info is not None}
            reads = []
            for argument in op._schema.arguments:
                if argument.name in mutable or argument.name not in node.kwargs:
                    continue
                value = node.kwargs[argument.name]
                for i, tensor in enumerate(_tensors(value)):
                    name = argument.name if isinstance(value, torch.fx.Node) else f"{argument.name}[{i}]"
                    reads.append((name, tensor, frozenset()))
            label = (
                f"{target.__name__}({op}) with only_clone_these_tensors={list(node.meta['only_clone_these_tensors'])}"
            )
            yield node, label, writes, reads, False, None
        elif (
            node.op == "call_method"
            and str(target).endswith("_")
            and not str(target).startswith("_")
            and node.args
            and isinstance(node.args[0], torch.fx.Node)
        ):
            reads = [
                (f"argument {i}", a, frozenset())
                for i, a in enumerate(node.args[1:], 1)
                if isinstance(a, torch.fx.Node)
            ]
            reads += [(key, a, frozenset()) for key, a in node.kwargs.items() if isinstance(a, torch.fx.Node)]
            yield node, f"Tensor.{target}", [("self", node.args[0], frozenset())], reads, _elementwise(target), None


def writes_in_place(graph: torch.fx.Graph) -> bool:
    """Whether ``graph`` holds a call this oracle judges (one that writes an argument in place)."""
    return next(_calls(graph), None) is not None


def aliased_calls(graph: torch.fx.Graph) -> list[tuple[torch.fx.Node, str, str, str, str, str, str]]:
    """Each call of ``graph`` that reads what it writes, against the rule of the module docstring:
    ``(node, op, written arg, its node's name, read arg, its node's name, name of the storage's
    graph input or allocating node)``."""
    storage = _Storage()
    found = []
    for node, op, writes, reads, elementwise, _ in _calls(graph):
        for i, (w_name, w, w_sets) in enumerate(writes):
            others = [*writes[i + 1 :], *reads]
            for r_name, r, r_sets in others:
                if storage.root(w) is not storage.root(r) or _disjoint(w, r):
                    continue
                if w_sets & r_sets:
                    continue  # the schema says the op may read what it writes
                if elementwise and storage.exact(w) == storage.exact(r):
                    continue  # an elementwise op reading each element it writes: full overlap
                found.append((node, op, w_name, w.name, r_name, r.name, storage.root(w).name))
    return found


def applies(pair: RunPair) -> bool:
    """Whether this oracle has something to judge on ``pair`` (whose pass ran): the graph after the
    pass writes an argument in place."""
    return writes_in_place(pair.after.graph)


def check(pair: RunPair) -> list[Violation]:
    """Return the aliasing violations of ``pair`` (a ``RunPair``): each call in the graph after the
    pass that reads, through one argument, the storage it writes through another, where neither the
    op's schema nor elementwise full overlap allows it and the graph before the pass had no such
    call (see the module docstring). Returns [] when the pass raised; never raises on a finding."""
    if pair.after is None:
        return []
    found_before = aliased_calls(pair.before.graph)
    before = {(op, w_name, r_name, root) for _, op, w_name, _, r_name, _, root in found_before}
    # A call whose storage the pass rebuilt (a new allocating node) is matched by op and arguments.
    unmatched = collections.Counter((op, w_name, r_name) for _, op, w_name, _, r_name, _, _ in found_before)
    names = {node.name for node in pair.before.graph.nodes}
    violations = []
    for node, op, w_name, w, r_name, r, root in aliased_calls(pair.after.graph):
        if (op, w_name, r_name, root) in before or (root not in names and unmatched[(op, w_name, r_name)] > 0):
            unmatched[(op, w_name, r_name)] -= 1
            continue  # the original program already made this call on aliased arguments
        violations.append(
            Violation(
                "aliasing",
                f"`{node.name}` ({op}) writes argument `{w_name}` (`{w}`) and reads argument `{r_name}` (`{r}`), "
                f"which shares its storage (that of `{root}`): the call reads what it writes, which its schema "
                "does not allow (a reinplacing that dropped a clone?)",
                tuple(dict.fromkeys((node.name, w, r))),
            )
        )
    return violations
