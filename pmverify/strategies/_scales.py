"""Quantization scales among a pattern's inputs, drawn positive and finite.

A static quantization pattern reads a scale tensor (``(x / scale).clamp(-448, 448).to(fp8)``, or a
custom op's ``scale`` argument); a scale of 0 divides by zero and makes the float64 reference NaN,
so a third of the cases of vLLM's static fp8 fusions said nothing (void) while a real scale is
positive and finite. An example input is a scale when:

- the pattern's signature names it ``scale`` or ``*_scale``; or an op reads it through an
  argument so named (a custom op's ``scale=``, as ``auto_functionalized`` passes it); or
- it is read (through views, casts and ``reciprocal``), broadcast to a larger result, by a
  division as its divisor whose result reaches a cast from a floating dtype to a narrower one, or
  by a multiplication whose result reaches a cast to a one-byte dtype (float8, int8), through
  steps that keep the values' meaning (``clamp``, ``round``, views and casts): quantization. A norm's
  weight multiplies values that are cast to bfloat16, or divided by a scale after it: not a scale.

:func:`scale_tensors` draws such a tensor: all one power of two ``2**k``, k in -8..4 (1 first, the
simplest), or each element log-uniform in [2**-8, 2**4].
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from .._fx import trace

__all__ = ["SCALE_EXPONENTS", "is_scale_name", "scale_positions", "scale_tensors"]

#: Exponents of the power-of-two scales drawn, simplest (0: a scale of 1) first.
SCALE_EXPONENTS = (0, -1, 1, -2, 2, -3, 3, -4, 4, -5, -6, -7, -8)
_LOW, _HIGH = min(SCALE_EXPONENTS), max(SCALE_EXPONENTS)

aten = torch.ops.aten
prims = torch.ops.prims
#: Ops a scale passes through unchanged in meaning on its way to the division or multiplication.
_CARRIERS = {
    aten.view.default,
    aten.reshape.default,
    aten.expand.default,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.clone.default,
    aten._to_copy.default,
    prims.convert_element_type.default,
    aten.reciprocal.default,
}
_CASTS = {aten._to_copy.default, prims.convert_element_type.default, aten.to.dtype}
#: Steps between the division (or multiplication) and the cast: they clamp or round the values.
_STEPS = _CARRIERS - {aten.reciprocal.default} | {
    aten.clamp.default,
    aten.clamp.Tensor,
    aten.clamp_min.default,
    aten.clamp_max.default,
    aten.round.default,
    aten.minimum.default,
    aten.maximum.default,
}


def is_scale_name(name: str) -> bool:
    """Whether an argument named ``name`` holds a scale: ``scale`` or ``*_scale``."""
    return name == "scale" or name.endswith("_scale")


def _names(pattern: Callable[..., Any]) -> list[str]:
    try:
        return list(inspect.signature(pattern).parameters)
    except (TypeError, ValueError):
        return []


def _dtype(node: Any) -> torch.dtype | None:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None


def _narrowing_cast(node: torch.fx.Node, one_byte: bool) -> bool:
    """Whether ``node`` casts a floating tensor to a narrower dtype (with ``one_byte``, of one byte)."""
    if node.op != "call_function" or node.target not in _CASTS or not node.args:
        return False
    before, after = _dtype(node.args[0]), _dtype(node)
    if before is None or after is None or not before.is_floating_point:
        return False
    return after.itemsize == 1 if one_byte else after.itemsize < before.itemsize


def _reaches_cast(node: torch.fx.Node, one_byte: bool) -> bool:
    """Whether ``node``'s value reaches a narrowing cast through :data:`_STEPS` only."""
    pending, seen = [node], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for user in current.users:
            if _narrowing_cast(user, one_byte):
                return True
            if user.op == "call_function" and user.target in _STEPS and user.args and user.args[0] is current:
                pending.append(user)
    return False


def _broadcast(node: torch.fx.Node, user: torch.fx.Node) -> bool:
    """Whether ``node``'s value has fewer elements than ``user``'s result, or one."""
    value, result = node.meta.get("val"), user.meta.get("val")
    if not isinstance(value, torch.Tensor) or not isinstance(result, torch.Tensor):
        return False
    return value.numel() == 1 or value.numel() < result.numel()


def _named_read(user: torch.fx.Node, node: torch.fx.Node) -> bool:
    """Whether ``user`` reads ``node`` through an argument named as a scale."""
    if any(value is node and is_scale_name(key) for key, value in user.kwargs.items()):
        return True
    schema = getattr(user.target, "_schema", None)
    if schema is None:
        return False
    return any(
        i < len(user.args) and user.args[i] is node and is_scale_name(argument.name)
        for i, argument in enumerate(schema.arguments)
    )


def _read_as_scale(placeholder: torch.fx.Node) -> bool:
    """Whether the graph reads ``placeholder`` as a scale (see the module docstring)."""
    pending, seen = [placeholder], set()
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        for user in node.users:
            if user.op != "call_function":
                continue
            if _named_read(user, node):
                return True
            divisor = user.target == aten.div.Tensor and len(user.args) > 1 and user.args[1] is node
            factor = user.target == aten.mul.Tensor and node in user.args[:2]
            if (divisor or factor) and _broadcast(node, user) and _reaches_cast(user, one_byte=factor):
                return True
            if user.target in _CARRIERS and user.args and user.args[0] is node:
                pending.append(user)
    return False


def scale_positions(pattern: Callable[..., Any], args: Sequence[Any], trace_fn: Any = None) -> tuple[int, ...]:
    """The positions of ``args`` (the pattern's arguments, e.g. zeros like its example inputs)
    holding a floating tensor that is a scale (see the module docstring), in order; the pattern is
    traced on ``args`` with ``trace_fn`` (default Inductor's ``fwd_only``). Names alone decide
    where it does not trace."""
    floating = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    names = _names(pattern)
    found = {i for i in floating if i < len(names) and is_scale_name(names[i])}
    try:
        gm = trace(pattern, args, trace_fn)
    except Exception:  # noqa: BLE001 - not traceable here: names alone
        return tuple(sorted(found))
    placeholders = list(gm.graph.find_nodes(op="placeholder"))[: len(args)]
    found |= {i for i in floating if i < len(placeholders) and _read_as_scale(placeholders[i])}
    return tuple(sorted(found))


@st.composite
def scale_tensors(draw: Any, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """Return a strategy for scale tensors of ``dtype`` and ``shape``: one power of two ``2**k``
    everywhere (k from :data:`SCALE_EXPONENTS`, 1 first: the simplest), or each element
    log-uniform in [2**-8, 2**4] (from a seeded generator). Positive and finite in every floating
    dtype."""
    if draw(st.booleans()):
        seed = draw(st.integers(0, 2**32 - 1))
        exponents = torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        return torch.exp2(exponents * (_HIGH - _LOW) + _LOW).to(dtype)
    return torch.full(shape, 2.0 ** draw(st.sampled_from(SCALE_EXPONENTS)), dtype=dtype)
