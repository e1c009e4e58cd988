"""Tracing a pattern as ``register_replacement`` does, and deriving near misses from the trace.

A near miss is the traced pattern graph with one thing changed that Inductor's pattern matcher
compares literally (``register_replacement`` re-traces its search function on the matched inputs
and compares the literals exactly), so a pass registered for the pattern must not match it:

- ``"constant"``: a float scalar argument (eps, a multiplier) doubled, or an int ``exponent`` /
  ``other`` / ``alpha`` / ``value`` argument raised by one;
- ``"dim"``: the ``dim`` argument of a reduction or other op moved to another dimension;
- ``"split_sizes"``: one element moved across a boundary of a ``split_with_sizes`` (same total);
- ``"dtype"``: the pattern traced on its float inputs cast to another float dtype (one the pattern
  itself runs on eagerly: :func:`runs_eagerly`). Inductor's
  ``register_replacement`` matches it (its check re-traces the search function on the matched
  inputs), unless the pass's ``extra_check`` restricts dtypes; so either is correct
  (``must_match=None``), and the semantics oracle judges a pass that rewrites it;
- ``"extra_user"``: an intermediate (not an output) of the instance given a user outside it
  (``fx_to_pattern`` records every pattern node's user count, outputs excepted);
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

import collections
import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._guards import TracingContext, tracing
from torch._subclasses.fake_tensor import FakeTensorMode

from .._fx import flat_nodes
from .._validation import FLOAT_DTYPES
from ._joint import callable_placeholders, cast_tangents

__all__ = ["NEAR_MISS_KINDS", "Traced", "trace", "signature", "variants", "runs_eagerly"]

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


@dataclasses.dataclass(frozen=True)
class Traced:
    """One instance ready to splice: the (possibly changed) pattern graph and what it runs on.

    - ``gm``: the traced graph; its placeholders take ``args`` in order.
    - ``must_match`` / ``reason``: the ground truth (see :class:`pmverify.PlantedInstance`).
    - ``extra_user``: name of the intermediate of ``gm`` to give a user outside the instance.
    - ``unused``: whether the instance's outputs are left unused.
    - ``detail``: what a near miss changed, in words (``"aten.add.Tensor's other: 1e-06 -> 2e-06"``).
    - ``primals``: how many of ``args`` are the pattern's arguments (None: all); the others are the
      tangents of a joint trace (:mod:`._joint`), then any input a near miss added.
    """

    gm: torch.fx.GraphModule
    args: tuple[Any, ...]
    must_match: bool | None = True
    reason: str | None = None
    extra_user: str | None = None
    unused: bool = False
    detail: str | None = None
    primals: int | None = None


_TRACES: collections.OrderedDict[Any, torch.fx.GraphModule] = collections.OrderedDict()
_TRACE_CACHE_SIZE = 512


def _arg_key(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        shape, stride = tuple(value.shape), tuple(value.stride())
        return ("tensor", shape, stride, value.dtype, value.device.type, value.requires_grad)
    return ("value", type(value).__name__, repr(value))


def trace(pattern: Callable[..., Any], args: Sequence[Any], trace_fn: Callable[..., Any] | None = None):
    """Trace ``pattern`` on ``args`` with ``trace_fn`` (default Inductor's ``fwd_only``, the tracer
    ``register_replacement`` uses) in one fake mode, so every node has ``meta["val"]``.

    Traces are memoised on the pattern, the tracer and the inputs' shapes, strides, dtypes and
    ``requires_grad`` (a joint trace differentiates the inputs that require it) (as
    ``register_replacement`` assumes, a pattern's trace does not depend on input values): shrinking
    re-draws the same shapes hundreds of times. Callers must not mutate the returned graph."""
    key = (pattern, trace_fn, tuple(_arg_key(a) for a in args))
    try:
        gm = _TRACES.pop(key)
    except TypeError:  # an unhashable pattern or tracer: no memo
        key = None
    except KeyError:
        gm = None
    else:
        _TRACES[key] = gm
        return gm
    if trace_fn is None:
        from torch._inductor.pattern_matcher import fwd_only as trace_fn
    with tracing(TracingContext(FakeTensorMode(allow_fallback_kernels=True))):
        gm = callable_placeholders(trace_fn(pattern, list(args)))  # joint_fwd_bwd's cross its inputs
    if key is not None:
        _TRACES[key] = gm
        while len(_TRACES) > _TRACE_CACHE_SIZE:
            _TRACES.popitem(last=False)
    return gm


#: Literal types Inductor's first, structural match ignores (``gen_pattern_and_search_gm``); its
#: check then re-traces the search function on the matched inputs and compares them exactly.
_LOOSE_TYPES = (int, float, list, torch.device, torch.dtype)


def _normalise(value: Any, index: dict[torch.fx.Node, int], loose: bool) -> Any:
    if isinstance(value, torch.fx.Node):
        return ("node", index.get(value))
    if loose and type(value) in _LOOSE_TYPES and not (isinstance(value, list) and flat_nodes(value)):
        return "_"
    if isinstance(value, (list, tuple)):
        return tuple(_normalise(v, index, loose) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _normalise(v, index, loose)) for k, v in value.items()))
    return (type(value).__name__, repr(value))


def signature(gm: torch.fx.GraphModule, *, loose: bool = False) -> tuple[Any, ...]:
    """What Inductor's pattern matcher compares: op targets, wiring and literal arguments. With
    ``loose``, what its first, structural match compares: int, float, list, device and dtype
    literals ignored (sizes burnt into a trace do not count)."""
    index = {node: i for i, node in enumerate(gm.graph.nodes)}
    return tuple(
        (node.op, str(node.target), _normalise(node.args, index, loose), _normalise(node.kwargs, index, loose))
        for node in gm.graph.nodes
        if node.op != "placeholder"
    )


def _runs(gm: torch.fx.GraphModule, args: Sequence[Any], finite: bool) -> bool:
    """Whether ``gm`` runs on clones of ``args`` (and stays finite when ``finite``)."""
    try:
        with torch.no_grad():  # a training instance's primals require grad: its joint graph needs none
            out = pytree.tree_leaves(gm(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args]))
    except Exception:
        return False
    return not finite or all(
        bool(t.isfinite().all()) for t in out if isinstance(t, torch.Tensor) and t.is_floating_point()
    )


def runs_eagerly(pattern: Callable[..., Any], args: Sequence[Any]) -> bool:
    """Whether ``pattern`` itself (eager PyTorch, not its decomposed trace) runs on clones of
    ``args``: a program a model could hold. A decomposition may be laxer than the op it decomposes
    (``torch.lerp`` and ``torch.mv`` refuse mixed float dtypes, their decompositions promote), so a
    trace that runs does not make the inputs valid. Run without grad, on a forked CPU RNG (a random
    op in the pattern leaves the global generator as it was)."""
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            pattern(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    except Exception:  # noqa: BLE001 - whatever the pattern raises: not a program a model holds
        return False
    return True


def _all_finite(gm: torch.fx.GraphModule, args: Sequence[Any]) -> bool:
    return _runs(gm, args, True)


def _schema_names(node: torch.fx.Node) -> list[str]:
    schema = getattr(node.target, "_schema", None)
    return [a.name for a in schema.arguments] if schema is not None else []


def _rank(node: torch.fx.Node) -> int | None:
    first = node.args[0] if node.args else None
    val = first.meta.get("val") if isinstance(first, torch.fx.Node) else None
    return val.dim() if isinstance(val, torch.Tensor) else None


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
                    edits.append((i, slot, value * 2 if value != 0 else 1.0))
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
    finite = _all_finite(base.gm, base.args)
    edits = _edits(base.gm, kind)
    while edits:
        edit = edits.pop(pick(len(edits)))
        gm = _apply_edit(base.gm, edit)
        if _runs(gm, base.args, finite):
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
        if signature(gm) != original and _runs(gm, args, True) and runs_eagerly(pattern, args[:count]):
            detail = f"its {first} inputs cast to {dtype}"
            return Traced(gm, args, None, "dtype", detail=detail, primals=base.primals)
    return None


def _intermediates(gm: torch.fx.GraphModule) -> list[str]:
    output = next(iter(gm.graph.find_nodes(op="output")))
    outputs = set(flat_nodes(output.args[0]))
    return [
        node.name
        for node in gm.graph.nodes
        if node.op == "call_function" and node not in outputs and isinstance(node.meta.get("val"), torch.Tensor)
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
        from ._argument_near_miss import argument_kind_applies

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
        from ._argument_near_miss import argument_variant

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
