"""Near misses in what a pattern's trace does not pin: optional arguments, overloads, reduction
dims, and the values of mask and bias inputs.

A trace holds each call as the dispatcher records it: positional arguments up to the last one
that differs from its default, keyword-only ones only when they differ from theirs. So the trace
of ``x + y`` says nothing about ``alpha``, that of ``x.sum(-1)`` nothing about ``keepdim`` or
``dtype``. Inductor's matcher compares a node's positional arguments and the keyword arguments the
pattern holds, and *ignores the others* (``_TargetArgsExpr._match``): it rewrites
``add(x, y, alpha=0.5)`` for a pattern traced from ``x + y`` and the replacement drops ``alpha``.
The kinds, each a change to one traced instance:

- ``"optional_arg"``: an optional argument the trace omits (or gives its default) set to a valid
  non-default value of its type, from the node's schema: ``alpha=0.5`` / ``beta=2`` of
  add/sub/addmm/baddbmm/addcmul, ``dtype=`` of sum/mean/cumsum/_to_copy/full..., ``keepdim``, a
  reduction ``dim`` left out, ``correction``, ``approximate``, ``rounding_mode``, ``memory_format``,
  clamp's ``min``/``max``. Written as the dispatcher writes it (a keyword-only argument as a
  keyword, a positional one with the defaults before it);
- ``"overload"``: another overload of the same packet taking the same arguments
  (``aten.add.Tensor(x, 2.0)`` -> ``aten.add.Scalar(x, 2.0)``), or a Python number in a Tensor
  argument made a 0-d tensor input (float32 for a float, int64 for an int: Python's own promotion);
- ``"reduction_dim"``: every ``dim`` argument of the instance moved together to another dim, or
  two of its dims swapped (a softmax or a norm over another axis), written negative or not;
- ``"values"``: one tensor input given values the drawn ones lack, at every other element: a 0/1
  mask gets 2, -inf, -1 or 0.5, an additive 0/-inf mask 1 or -1e4, a float bias (an input that an
  add or sub adds, the input of addmm/baddbmm/addcmul/addcdiv, a branch of where) +-1e4 or -inf.

Ground truth: the first three are ``must_match=False`` here, and :func:`pmverify.strategies.planted`
asks Inductor's matcher for the pattern whether it rewrites the changed instance (then
``must_match=None``: the semantics oracle judges the rewrite, so a replacement that drops an
argument the pattern never mentions is a semantics finding). Inductor's matcher does not see values,
so a ``"values"`` instance is ``must_match=None``: the semantics oracle judges a rewrite of it (a
replacement that turns a 0/1 mask into a bool is a semantics finding). As for every near miss, a
change is kept only when the changed graph runs on the drawn inputs and stays finite where the
original was (so a ``-inf`` mask value is kept where a softmax absorbs it); a case whose float64
reference is non-finite anyway is void, not a finding.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch

from .._execution import inspectable
from ._traced import Traced, all_finite, runs

__all__ = ["ARGUMENT_KINDS", "argument_variant", "argument_kind_applies"]

#: The kinds this module makes, in the order shrinking prefers them.
ARGUMENT_KINDS = ("optional_arg", "overload", "reduction_dim", "values")

_Pick = Callable[[int], int]

#: Arguments whose value no CPU run can tell apart (or that need another device): never changed.
_NO_EFFECT = frozenset({"pin_memory", "non_blocking", "layout", "device", "copy", "generator", "out"})
#: str arguments with the values they take, by name.
_STR_VALUES = {
    "approximate": ("tanh", "none"),
    "rounding_mode": ("trunc", "floor"),
    "reduce": ("sum", "prod", "mean", "amax", "amin"),
}
_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
#: Ops that add (or select) an input at these argument positions (None: any): it is a bias there.
_BIAS_USERS = {
    "add": None,
    "sub": None,
    "where": (1, 2),
    **dict.fromkeys(("addmm", "baddbmm", "addcmul", "addcdiv"), (0,)),
}


def _schema(node: torch.fx.Node) -> Any:
    return _schema_of(node.target) if node.op == "call_function" else None


def _schema_of(op: Any) -> Any:
    """The schema of a functional op overload (``aten.add.Tensor``); None for an in-place or
    ``out=`` overload, a packet or a Python function."""
    schema = getattr(op, "_schema", None)
    if schema is None or not hasattr(op, "overloadpacket"):
        return None
    if schema.is_mutable or any(a.is_out for a in schema.arguments):
        return None
    return schema


def _type(arg: Any) -> tuple[str, bool]:
    """The argument's type as a string without ``Optional[...]``, and whether it was optional."""
    name = str(arg.real_type)
    if name.startswith("Optional[") and name.endswith("]"):
        return name[len("Optional[") : -1], True
    return name, False


def _bound(schema: Any, node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by name; an omitted one is absent."""
    values = {arg.name: value for arg, value in zip(schema.arguments, node.args, strict=False)}
    values.update(node.kwargs)
    return values


def _is_default(arg: Any, value: Any) -> bool:
    if not arg.has_default_value() or isinstance(value, torch.fx.Node):
        return False
    default = arg.default_value
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) == list(default)
    return type(value) is type(default) and value == default if value is not None else default is None


def _call(schema: Any, values: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """``values`` as the dispatcher records the call: positional arguments up to the last one not at
    its default, keyword-only ones not at their default; None when a required one is missing."""
    positional = [a for a in schema.arguments if not a.kwarg_only]
    last = -1
    for i, arg in enumerate(positional):
        if arg.name in values and not _is_default(arg, values[arg.name]):
            last = i
        elif arg.name not in values and not arg.has_default_value():
            if _type(arg)[1]:
                values = {**values, arg.name: None}
                last = i
            else:
                return None
    args = tuple(values[a.name] if a.name in values else a.default_value for a in positional[: last + 1])
    kwargs = {}
    for arg in schema.arguments:
        if not arg.kwarg_only:
            continue
        if arg.name in values:
            if not _is_default(arg, values[arg.name]):
                kwargs[arg.name] = values[arg.name]
        elif not arg.has_default_value():
            if not _type(arg)[1]:
                return None
            kwargs[arg.name] = None
    return args, kwargs


def _rank(node: torch.fx.Node) -> int | None:
    """The rank of the node's first tensor argument (the first of a list, for ``cat``)."""
    first = node.args[0] if node.args else None
    if isinstance(first, (list, tuple)) and first:
        first = first[0]
    val = first.meta.get("val") if isinstance(first, torch.fx.Node) else None
    return val.dim() if isinstance(val, torch.Tensor) else None


def _out_dtype(node: torch.fx.Node) -> torch.dtype | None:
    val = node.meta.get("val")
    return val.dtype if isinstance(val, torch.Tensor) else None


def _candidates(arg: Any, node: torch.fx.Node) -> list[Any]:
    """Valid non-default values of an optional argument, simplest first (a run decides validity)."""
    kind, optional = _type(arg)
    name = arg.name
    if name in _NO_EFFECT:
        return []
    default = arg.default_value if arg.has_default_value() else None
    if kind == "ScalarType":
        return [d for d in _DTYPES if d != _out_dtype(node)]
    if kind == "bool":
        return [] if optional else [not default]
    if kind == "number":
        return [v for v in ((0, 0.5, 2) if optional else (0.5, 2)) if v != default]
    if kind == "MemoryFormat":
        return [torch.contiguous_format, torch.channels_last]
    if kind == "str":
        return [v for v in _STR_VALUES.get(name, ()) if v != default]
    rank = _rank(node)
    if name == "dim" and kind == "int" and rank:
        return [d for d in (-1, 0) if d != default]
    if name == "dim" and kind == "List[int]" and rank:
        return [[-1], [0]]
    if kind == "int" and isinstance(default, int) and not isinstance(default, bool):
        return [default + 1]
    return []


def _optional_edits(gm: torch.fx.GraphModule) -> list[tuple[int, Any, tuple, dict, Any, str]]:
    edits = []
    for i, node in enumerate(gm.graph.nodes):
        schema = _schema(node)
        if schema is None:
            continue
        bound = _bound(schema, node)
        for position, arg in enumerate(schema.arguments):
            given = bound.get(arg.name)
            omitted = arg.name not in bound or _is_default(arg, given) or (given is None and _type(arg)[1])
            if not omitted or not (arg.has_default_value() or _type(arg)[1]):
                continue
            for value in _candidates(arg, node):
                call = _call(schema, {**bound, arg.name: value})
                if call is not None:
                    where = f"{arg.name} (keyword)" if arg.kwarg_only else f"{arg.name} (argument {position})"
                    old = f"{given!r}" if arg.name in bound else f"omitted (default {_default(arg)})"
                    edits.append((i, node.target, *call, None, f"{node.target}'s {where}: {old} -> {value!r}"))
    return edits


def _default(arg: Any) -> str:
    return repr(arg.default_value) if arg.has_default_value() else "None"


def _fits(arg: Any, value: Any) -> bool:
    """Whether ``value`` can go in ``arg`` (a loose check; a run decides)."""
    kind, optional = _type(arg)
    if value is None:
        return optional
    if isinstance(value, torch.fx.Node):
        return "Tensor" in kind
    if isinstance(value, bool):
        return kind in ("bool", "number")
    if isinstance(value, int):
        return kind in ("int", "float", "number", "Tensor")
    if isinstance(value, float):
        return kind in ("float", "number", "Tensor")
    if isinstance(value, (list, tuple)):
        return kind.startswith("List")
    return True


def _overload_edits(gm: torch.fx.GraphModule) -> list[tuple[int, Any, tuple, dict, Any, str]]:
    edits = []
    for i, node in enumerate(gm.graph.nodes):
        schema = _schema(node)
        if schema is None:
            continue
        bound = _bound(schema, node)
        packet = node.target.overloadpacket
        for name in packet.overloads():
            other = getattr(packet, name)
            other_schema = _schema_of(other)
            if other is node.target or other_schema is None:
                continue
            arguments = {a.name: a for a in other_schema.arguments}
            if set(bound) - set(arguments) or not all(_fits(arguments[k], v) for k, v in bound.items()):
                continue
            call = _call(other_schema, dict(bound))
            if call is not None:
                edits.append((i, other, *call, None, f"{node.target} -> {other}"))
        for position, (arg, value) in enumerate(zip(schema.arguments, node.args, strict=False)):
            if _type(arg)[0] == "Tensor" and isinstance(value, (int, float)) and not isinstance(value, bool):
                dtype = torch.float32 if isinstance(value, float) else torch.int64
                operand = torch.tensor(value, dtype=dtype)
                args = (*node.args[:position], _INPUT, *node.args[position + 1 :])
                what = f"a 0-d {str(dtype).removeprefix('torch.')} tensor input"
                detail = f"{node.target}'s {arg.name} (argument {position}): {value!r} -> {what}"
                edits.append((i, node.target, args, dict(node.kwargs), operand, detail))
    return edits


class _Input:
    """Stands for the new placeholder of an edit that adds an input."""

    def __repr__(self) -> str:
        return "<new input>"


_INPUT = _Input()


def _edited(base: Traced, edit: tuple[int, Any, tuple, dict, Any, str]) -> tuple[torch.fx.GraphModule, tuple]:
    """``base.gm`` with node ``edit[0]`` called as ``edit[1](*edit[2], **edit[3])`` (a new last
    input ``edit[4]`` standing for ``_INPUT``), and its arguments."""
    index, target, args, kwargs, extra, _ = edit
    graph = copy.deepcopy(base.gm.graph)
    nodes = list(graph.nodes)
    old = {n: nodes[j] for j, n in enumerate(base.gm.graph.nodes)}
    placeholder = None
    if extra is not None:
        last = [n for n in nodes if n.op == "placeholder"]
        with graph.inserting_after(last[-1]) if last else graph.inserting_before(nodes[0]):
            placeholder = graph.placeholder("operand")

    def new(value: Any) -> Any:
        if value is _INPUT:
            return placeholder
        if isinstance(value, torch.fx.Node):
            return old[value]
        if isinstance(value, (list, tuple)):
            return type(value)(new(v) for v in value)
        return value

    node = nodes[index]
    node.target = target
    node.args = tuple(new(a) for a in args)
    node.kwargs = {k: new(v) for k, v in kwargs.items()}
    return torch.fx.GraphModule(base.gm, graph), (*base.args, extra) if extra is not None else base.args


def _first_valid(base: Traced, edits: list, kind: str, pick: _Pick) -> Traced | None:
    finite = all_finite(base.gm, base.args)
    while edits:
        edit = edits.pop(pick(len(edits)))
        gm, args = _edited(base, edit)
        if runs(gm, args, finite):
            return Traced(gm, args, False, kind, detail=edit[-1])
    return None


def _dims(node: torch.fx.Node) -> tuple[int | str, Any, int] | None:
    """``(slot, value, rank)`` of the node's ``dim`` argument, when it holds ints and a rank is known."""
    schema = _schema(node)
    if schema is None:
        return None
    for position, arg in enumerate(schema.arguments):
        if arg.name != "dim":
            continue
        slot: int | str = position if position < len(node.args) else arg.name
        value = node.args[position] if isinstance(slot, int) else node.kwargs.get("dim")
        dims = _as_list(value)
        rank = _rank(node)
        if rank and dims and all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            return slot, value, rank
    return None


def _reduction_dim_edits(gm: torch.fx.GraphModule) -> list[tuple[int, int, bool]]:
    """Moves ``(a, b, negative)``: every dim ``a`` becomes ``b`` and ``b`` becomes ``a`` (dims
    counted from the end), written negative or not."""
    found = [d for d in map(_dims, gm.graph.nodes) if d is not None]
    if not found:
        return []
    used = _used(gm)
    low = min(rank for _, _, rank in found)
    moves = []
    for a in used:
        for b in range(-1, -low - 1, -1):
            if b != a and (b not in used or b < a):  # a swap of two used dims once
                moves += [(a, b, True), (a, b, False)]
    return moves


def _used(gm: torch.fx.GraphModule) -> list[int]:
    """The dims the instance's ``dim`` arguments name, counted from the end, -1 first."""
    found = [d for d in map(_dims, gm.graph.nodes) if d is not None]
    return sorted({_from_end(d, rank) for _, value, rank in found for d in _as_list(value)}, reverse=True)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _from_end(dim: int, rank: int) -> int:
    """``dim`` counted from the end (negative)."""
    return dim if dim < 0 else dim - rank


def _moved(value: Any, rank: int, move: tuple[int, int, bool]) -> Any:
    a, b, negative = move

    def one(d: int) -> int:
        d = _from_end(d, rank)
        d = b if d == a else a if d == b else d
        return d if negative else d + rank

    return [one(d) for d in value] if isinstance(value, (list, tuple)) else one(value)


def _reduction_dim(base: Traced, pick: _Pick) -> Traced | None:
    moves = _reduction_dim_edits(base.gm)
    finite = all_finite(base.gm, base.args)
    while moves:
        move = moves.pop(pick(len(moves)))
        graph = copy.deepcopy(base.gm.graph)
        changed = []
        for node in graph.nodes:
            found = _dims(node)
            if found is None:
                continue
            slot, value, rank = found
            new = _moved(value, rank, move)
            if isinstance(slot, int):
                node.args = (*node.args[:slot], new, *node.args[slot + 1 :])
            else:
                node.kwargs = {**node.kwargs, slot: new}
            changed.append(f"{node.target} {value!r} -> {new!r}")
        gm = torch.fx.GraphModule(base.gm, graph)
        if runs(gm, base.args, finite):
            how = "swapped with" if move[1] in _used(base.gm) else "moved to"
            detail = f"dim {move[0]} {how} {move[1]}: " + ", ".join(changed)
            return Traced(gm, base.args, False, "reduction_dim", detail=detail)
    return None


def _is_bias(ph: torch.fx.Node) -> bool:
    """Whether an add, sub, addmm, baddbmm, addcmul, addcdiv or where adds (or selects) ``ph``."""
    for user in ph.users:
        packet = getattr(user.target, "overloadpacket", None)
        name = getattr(packet, "__name__", "").removesuffix("_")
        if name in _BIAS_USERS:
            positions = _BIAS_USERS[name]
            if positions is None or any(p < len(user.args) and user.args[p] is ph for p in positions):
                return True
    return False


def _value_edits(base: Traced) -> list[tuple[int, Any, str]]:
    """``(input index, new value, role)`` candidates for the ``"values"`` kind."""
    edits = []
    placeholders = list(base.gm.graph.find_nodes(op="placeholder"))[: base.primals]  # not a joint trace's tangents
    for i, (ph, value) in enumerate(zip(placeholders, base.args, strict=False)):
        if not isinstance(value, torch.Tensor) or not ph.users or value.dtype == torch.bool or not value.numel():
            continue
        floating = value.is_floating_point()
        seen = set(torch.unique(inspectable(value)).tolist()) if value.numel() <= 1 << 16 else {math.nan}
        if seen <= {0, 1}:
            edits += [
                (i, v, "drawn with only 0s and 1s: a mask?")
                for v in ((2.0, -math.inf, -1.0, 0.5) if floating else (2, -1))
            ]
        elif floating and seen <= {0.0, -math.inf}:
            edits += [(i, v, "an additive 0/-inf mask") for v in (1.0, -1e4)]
        elif floating and _is_bias(ph):
            edits += [(i, v, "a bias") for v in (1e4, -1e4, -math.inf)]
    return edits


def _values(base: Traced, pick: _Pick) -> Traced | None:
    edits = _value_edits(base)
    finite = all_finite(base.gm, base.args)
    names = [ph.name for ph in base.gm.graph.find_nodes(op="placeholder")]
    while edits:
        index, value, role = edits.pop(pick(len(edits)))
        tensor = base.args[index].clone(memory_format=torch.contiguous_format)
        try:
            tensor.view(-1)[::2] = value
        except RuntimeError:  # a value the dtype cannot hold (-1 in uint8)
            continue
        args = (*base.args[:index], tensor, *base.args[index + 1 :])
        if runs(base.gm, args, finite):
            detail = f"input {names[index]} (argument {index}, {role}) given {value!r} at every other element"
            return Traced(base.gm, args, None, "values", detail=detail)
    return None


def argument_kind_applies(base: Traced, kind: str) -> bool:
    """Whether the instance ``base`` has candidate changes of ``kind`` at all (from its structure
    and its inputs, without running anything): a kind without any is never drawn for it."""
    if kind == "optional_arg":
        return bool(_optional_edits(base.gm))
    if kind == "overload":
        return bool(_overload_edits(base.gm))
    if kind == "reduction_dim":
        return bool(_reduction_dim_edits(base.gm))
    if kind == "values":
        return bool(_value_edits(base))
    raise ValueError(f"kind={kind!r} is not one of {ARGUMENT_KINDS}")


def argument_variant(base: Traced, kind: str, pick: _Pick) -> Traced | None:
    """The near miss of ``kind`` (one of :data:`ARGUMENT_KINDS`) of the traced instance ``base``,
    or None when it has no valid one. ``pick(n)`` chooses among ``n`` candidates."""
    if kind == "optional_arg":
        return _first_valid(base, _optional_edits(base.gm), kind, pick)
    if kind == "overload":
        return _first_valid(base, _overload_edits(base.gm), kind, pick)
    if kind == "reduction_dim":
        return _reduction_dim(base, pick)
    if kind == "values":
        return _values(base, pick)
    raise ValueError(f"kind={kind!r} is not one of {ARGUMENT_KINDS}")
