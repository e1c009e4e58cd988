"""Tracing a pattern as ``register_replacement`` does, and deriving near misses from the trace.

A near miss is the traced pattern graph with one thing changed that Inductor's pattern matcher
compares literally (``register_replacement`` re-traces its search function on the matched inputs
and compares the literals exactly), so a pass registered for the pattern must not match it:

- ``"constant"``: a float scalar argument (eps, a multiplier) moved far enough that a pass which
  rewrites the near miss with its own literal computes visibly otherwise (:func:`moved_constant`:
  a multiplier doubled; an epsilon, a literal below ``1e-2`` in magnitude, set to ``0.5``), or an
  int ``exponent`` / ``other`` / ``alpha`` / ``value`` argument raised by one;
- ``"dim"``: the ``dim`` argument of a reduction or other op moved to another dimension;
- ``"split_sizes"``: one element moved across a boundary of a ``split_with_sizes`` (same total);
- ``"dtype"``: the pattern traced on its float inputs cast to another float dtype (one the pattern
  itself runs on eagerly: :func:`runs_eagerly`). Inductor's
  ``register_replacement`` matches it (its check re-traces the search function on the matched
  inputs), unless the pass's ``extra_check`` restricts dtypes; so either is correct
  (``must_match=None``), and the semantics oracle judges a pass that rewrites it;
- ``"extra_user"``: an intermediate (not an output, nor an ``empty`` buffer: uninitialised) of the
  instance given a user outside it (``fx_to_pattern`` records every pattern node's user count,
  outputs excepted);
- ``"unused"``: no output of the instance is used. Inductor matches dead instances (outputs are
  exempt from the user count), so a correct pass may rewrite it or not: ``must_match=None``;
- ``"optional_arg"``, ``"overload"``, ``"reduction_dim"``, ``"values"``: changes to what the trace
  does *not* pin (an optional argument the trace omits, another overload, every reduction dim
  moved, mask or bias values), made by :mod:`._argument_near_miss`, which says how their ground
  truth is found.

A changed graph is kept only when it still runs on the drawn inputs and stays finite where the
original was, so the strategy never draws an invalid case; a kind with no valid change for a
pattern is skipped.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from .._fx import flat_nodes, trace
from .._validation import FLOAT_DTYPES
from ._argument_near_miss import argument_kind_applies, argument_variant
from ._joint import cast_tangents
from ._traced import Traced, all_finite, runs, runs_eagerly, signature

__all__ = ["NEAR_MISS_KINDS", "kind_applies", "variants"]

#: Near-miss kinds, in the order shrinking prefers them (those of :mod:`._argument_near_miss` after
#: the literal edits: each changes something the pattern's trace does not pin).
NEAR_MISS_KINDS = (
    "constant",
    "dim",
    "split_sizes",
    "optional_arg",
    "overload",
    "reduction_dim",
    "values",
    "dtype",
    "extra_user",
    "unused",
)

_INT_CONSTANT_ARGS = ("exponent", "other", "alpha", "value", "scalar")


def _schema_names(node: torch.fx.Node) -> list[str]:
    schema = getattr(node.target, "_schema", None)
    return [a.name for a in schema.arguments] if schema is not None else []


def _rank(node: torch.fx.Node) -> int | None:
    first = node.args[0] if node.args else None
    val = first.meta.get("val") if isinstance(first, torch.fx.Node) else None
    return val.dim() if isinstance(val, torch.Tensor) else None


#: Below this magnitude a float literal is an epsilon: a guard added to a value far larger (a
#: variance, a norm, a denominator), where doubling it changes nothing a tolerance can see.
EPSILON_BELOW = 1e-2


def moved_constant(value: float) -> float:
    """The ``"constant"`` near miss of a float literal, tied to its role so that the change is
    visible in the values: 0 becomes 1.0; an epsilon (``0 < |value| < EPSILON_BELOW``: 1e-6 added to
    a variance of order 1e-4 to 1) becomes 0.5 with its sign, of the order of the values drawn (in
    [-2, 2]) and of their squares, so an rsqrt or division it guards moves by percents, visible in
    bfloat16 and float8 too; any other literal (a multiplier, a bound) is doubled."""
    if value == 0:
        return 1.0
    if abs(value) < EPSILON_BELOW:
        return math.copysign(0.5, value)
    return value * 2


def _edits(gm: torch.fx.GraphModule, kind: str) -> list[tuple[int, int | str, Any]]:
    """Candidate changes ``(node index, arg position or kwarg name, new value)`` of one kind."""
    edits = []
    for i, node in enumerate(gm.graph.nodes):
        if node.op != "call_function":
            continue
        names = _schema_names(node)
        slots = [(pos, value, names[pos] if pos < len(names) else "") for pos, value in enumerate(node.args)]
        slots += [(key, value, key) for key, value in node.kwargs.items()]
        for slot, value, name in slots:
            if isinstance(value, bool) or isinstance(value, torch.fx.Node):
                continue
            if kind == "constant":
                if isinstance(value, float):
                    edits.append((i, slot, moved_constant(value)))
                elif isinstance(value, int) and name in _INT_CONSTANT_ARGS:
                    edits.append((i, slot, value + 1))
            elif kind == "dim" and name == "dim":
                rank = _rank(node)
                if rank is None or rank < 2:
                    continue
                dims = list(value) if isinstance(value, (list, tuple)) else [value]
                if not all(isinstance(d, int) for d in dims):
                    continue
                used = {d % rank for d in dims}
                for other in range(rank):
                    if other not in used:
                        moved = [other, *dims[1:]]
                        edits.append((i, slot, moved if isinstance(value, (list, tuple)) else other))
                        break
            elif kind == "split_sizes" and name == "split_sizes" and isinstance(value, (list, tuple)):
                for j in range(len(value) - 1):
                    for step in (1, -1):
                        sizes = list(value)
                        sizes[j] += step
                        sizes[j + 1] -= step
                        if min(sizes) >= 1:
                            edits.append((i, slot, sizes))
    return edits


def _apply_edit(gm: torch.fx.GraphModule, edit: tuple[int, int | str, Any]) -> torch.fx.GraphModule:
    graph = copy.deepcopy(gm.graph)
    node = list(graph.nodes)[edit[0]]
    if isinstance(edit[1], int):
        args = list(node.args)
        args[edit[1]] = edit[2]
        node.args = tuple(args)
    else:
        node.kwargs = {**node.kwargs, edit[1]: edit[2]}
    return torch.fx.GraphModule(gm, graph)


def _describe_edit(gm: torch.fx.GraphModule, edit: tuple[int, int | str, Any]) -> str:
    """``edit`` in words: ``"aten.add.Tensor's other (argument 1): 1e-06 -> 2e-06"``."""
    node = list(gm.graph.nodes)[edit[0]]
    names = _schema_names(node)
    if isinstance(edit[1], int):
        old = node.args[edit[1]]
        name = names[edit[1]] if edit[1] < len(names) else None
        where = f"{name} (argument {edit[1]})" if name else f"argument {edit[1]}"
    else:
        old, where = node.kwargs[edit[1]], f"{edit[1]} (keyword)"
    return f"{node.target}'s {where}: {old!r} -> {edit[2]!r}"


def _edited(base: Traced, kind: str, pick: Callable[[int], int]) -> Traced | None:
    finite = all_finite(base.gm, base.args)
    edits = _edits(base.gm, kind)
    while edits:
        edit = edits.pop(pick(len(edits)))
        gm = _apply_edit(base.gm, edit)
        if runs(gm, base.args, finite):
            return Traced(gm, base.args, False, kind, detail=_describe_edit(base.gm, edit))
    return None


def _other_dtype(pattern: Callable[..., Any], base: Traced, trace_fn: Any, pick: Callable[[int], int]) -> Traced | None:
    floats = [a.dtype for a in base.args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if not floats:
        return None
    first = floats[0]
    others = [d for d in FLOAT_DTYPES if d != first]
    original = signature(base.gm)
    count = len(base.args) if base.primals is None else base.primals
    while others:
        dtype = others.pop(pick(len(others)))
        args = tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.dtype == first else a for a in base.args[:count])
        try:
            gm = trace(pattern, args, trace_fn)
        except Exception:
            continue
        tangents = cast_tangents(gm, count, base.args[count:])  # a joint trace's, re-cast; () for others
        if tangents is None:
            continue
        args = (*args, *tangents)
        if signature(gm) != original and runs(gm, args, True) and runs_eagerly(pattern, args[:count]):
            detail = f"its {first} inputs cast to {dtype}"
            return Traced(gm, args, None, "dtype", detail=detail, primals=base.primals)
    return None


#: Ops whose result holds uninitialised memory (a quantization pattern's ``empty`` result buffer):
#: an extra user reading one would read garbage, and a NaN there voids the case's semantics.
_UNINITIALISED = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty"})


def _intermediates(gm: torch.fx.GraphModule) -> list[str]:
    """The intermediates an ``extra_user`` near miss may read: tensors the instance computes, not
    returns, that hold initialised values."""
    output = next(iter(gm.graph.find_nodes(op="output")))
    outputs = set(flat_nodes(output.args[0]))
    return [
        node.name
        for node in gm.graph.nodes
        if node.op == "call_function"
        and node not in outputs
        and isinstance(node.meta.get("val"), torch.Tensor)
        and getattr(getattr(node.target, "_schema", None), "name", None) not in _UNINITIALISED
    ]


def kind_applies(base: Traced, kind: str) -> bool:
    """Whether the instance ``base`` has candidate near misses of ``kind`` at all, judged from its
    structure and inputs without tracing or running anything (a candidate may still fail to run:
    :func:`variants` then returns None)."""
    if kind in ("constant", "dim", "split_sizes"):
        return bool(_edits(base.gm, kind))
    if kind == "dtype":
        return any(isinstance(a, torch.Tensor) and a.is_floating_point() for a in base.args)
    if kind in ("optional_arg", "overload", "reduction_dim", "values"):
        return argument_kind_applies(base, kind)
    if kind == "extra_user":
        return bool(_intermediates(base.gm))
    if kind == "unused":
        return True
    raise ValueError(f"kind={kind!r} is not one of {NEAR_MISS_KINDS}")


def variants(
    pattern: Callable[..., Any], base: Traced, kind: str, trace_fn: Any, pick: Callable[[int], int]
) -> Traced | None:
    """The near miss of ``kind`` of the traced instance ``base``, or None when the pattern has no
    valid one. ``pick(n)`` chooses among ``n`` candidates (from a Hypothesis draw; 0 when shrunk).
    A variant keeps ``base.primals`` (which outputs of a joint trace are gradients)."""
    variant = _variant(pattern, base, kind, trace_fn, pick)
    if variant is None or variant.primals == base.primals:
        return variant
    return dataclasses.replace(variant, primals=base.primals)


def _variant(
    pattern: Callable[..., Any], base: Traced, kind: str, trace_fn: Any, pick: Callable[[int], int]
) -> Traced | None:
    if kind in ("constant", "dim", "split_sizes"):
        return _edited(base, kind, pick)
    if kind == "dtype":
        return _other_dtype(pattern, base, trace_fn, pick)
    if kind in ("optional_arg", "overload", "reduction_dim", "values"):
        return argument_variant(base, kind, pick)
    if kind == "extra_user":
        names = _intermediates(base.gm)
        if not names:
            return None
        name = names[pick(len(names))]
        detail = f"its intermediate {name} also used outside the instance"
        return dataclasses.replace(base, must_match=False, reason=kind, extra_user=name, detail=detail)
    if kind == "unused":
        return dataclasses.replace(base, must_match=None, reason=kind, unused=True, detail="its outputs unused")
    raise ValueError(f"kind={kind!r} is not one of {NEAR_MISS_KINDS}")
