"""``dynamic=``, shared by the case strategies: which dims are drawn at a symbol's hint, and the
drawn case made symbolic as torch.compile traces it with ``dynamic=True``.

A symbolic case is drawn as torch.compile gets its graphs: the case is first drawn with concrete
sizes, its symbolic dims *at the hint* of their symbol (:data:`~pmverify._shapes.symbolic.HINTS`: ``s0``
11, ``s1`` 13, primes above every static size an input has), then
:func:`~pmverify._shapes.symbolic.symbolize` traces it again in a ``ShapeEnv``: every input dim at a hint
becomes that symbol (duck sizing, as ``ShapeEnv`` does: dims at the same hint share a symbol) and
every size argument holding it becomes its expression. :func:`symbolize_drawn` also draws one more
size per symbol in its range (:attr:`~pmverify.Symbol.sizes`: hint, range ends, that one).

The canonical ``dynamic`` value (:func:`validate_dynamic`) is ``False`` (static, draws exactly as
without the argument), ``True`` (any dim of a new input may be drawn at a hint) or a tuple of dim
names (``("tokens",)``: the leading dim of every new input is the token count, always symbolic).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._case import GraphCase
from .._shapes.sizes import inputs_at, size_points
from .._shapes.symbolic import HINTS, static_source, symbolize, symbolize_like

logger = logging.getLogger(__name__)

__all__ = [
    "DYNAMIC_DIMS",
    "Dynamic",
    "validate_dynamic",
    "hinted_shape",
    "symbolize_drawn",
    "resymbolize",
    "TOKENS_HINT",
]

#: The dim names every case strategy's ``dynamic=`` takes: ``"tokens"``, the leading (row) dim of
#: the inputs, as vLLM's ``num_tokens``.
DYNAMIC_DIMS = ("tokens",)
#: The hint the token count is drawn at (the symbol ``s0``).
TOKENS_HINT = HINTS[0]
_MAX_NUMEL = 1024
#: A dim of a new input with ``dynamic=True``: static (0, the simplest: the drawn size), ``s0``'s
#: hint (half the draws) or ``s1``'s.
_SIDES = st.sampled_from((0, HINTS[0], HINTS[1], HINTS[0]))

#: A canonical ``dynamic=`` value: False, True, or a tuple of dim names.
Dynamic = bool | tuple[str, ...]


def validate_dynamic(
    name: str, value: Any, names: Sequence[str] = DYNAMIC_DIMS, *, follow: bool = False
) -> Dynamic | None:
    """The canonical form of a strategy's ``dynamic=`` argument: ``False``, ``True``, or a tuple of
    names from ``names`` (a str is one name; repeats dropped, the caller's order kept). With
    ``follow``, ``None`` (follow the base case) is allowed and returned as it is. Raises
    ``hypothesis.errors.InvalidArgument`` naming ``name`` and the value for anything else (another
    type, an empty sequence, an unknown name)."""
    if value is None and follow:
        return None
    if isinstance(value, bool):
        return value
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        choices = "None, " if follow else ""
        raise InvalidArgument(f"{name}={value!r} must be {choices}a bool, a dim name or a non-empty list of names")
    for item in items:
        if not isinstance(item, str) or item not in names:
            raise InvalidArgument(f"{name}={value!r} holds {item!r}, not a dim name of {tuple(names)}")
    return tuple(dict.fromkeys(items))


def hinted_shape(
    draw: Any,
    shape: tuple[int, ...],
    dynamic: Dynamic,
    *,
    accepted: Callable[[tuple[int, ...]], bool] = lambda shape: True,
    max_numel: int = _MAX_NUMEL,
) -> tuple[int, ...]:
    """``shape`` (a new input's, drawn static) with its symbolic dims at their hints: none when
    ``dynamic`` is False (and nothing is drawn); with ``"tokens"``, the leading dim at
    :data:`TOKENS_HINT`; with ``True``, each dim drawn: static (the simplest; a quarter of the
    draws), ``s0``'s hint 11 (half) or ``s1``'s 13. ``shape`` itself when the hinted one has more than ``max_numel`` elements or is not
    ``accepted`` (an op's rule for its operand)."""
    if dynamic is False or not shape:
        return shape
    sides = list(shape)
    if dynamic is True:
        for d in range(len(sides)):
            sides[d] = draw(_SIDES) or sides[d]
    elif "tokens" in dynamic:
        sides[0] = TOKENS_HINT
    hinted = tuple(sides)
    if hinted == shape or math.prod(hinted) > max_numel or not accepted(hinted):
        return shape
    return hinted


def _holds(case: GraphCase, hint: int) -> bool:
    """Whether some input size of ``case`` is a multiple of ``hint``."""
    return any(side and side % hint == 0 for v in case.inputs[0] if isinstance(v, torch.Tensor) for side in v.shape)


def _hints_in(case: GraphCase) -> dict[str, int]:
    """The symbols (``s0``, ``s1``... in hint order) whose hints divide some input size of ``case``."""
    return {f"s{i}": hint for i, hint in enumerate(hint for hint in HINTS if _holds(case, hint))}


def _with_drawn_sizes(draw: Any, case: GraphCase) -> GraphCase:
    symbols = []
    for symbol in case.symbols:
        extra = draw(st.integers(symbol.min, symbol.max))
        symbols.append(dataclasses.replace(symbol, sizes=tuple(dict.fromkeys((*symbol.sizes, extra)))))
    return dataclasses.replace(case, symbols=tuple(symbols))


def symbolize_drawn(draw: Any, case: GraphCase, dynamic: Dynamic | None) -> GraphCase:
    """``case`` (drawn with concrete sizes, its symbolic dims at their hints by :func:`hinted_shape`)
    made symbolic by :func:`~pmverify._shapes.symbolic.symbolize`, with one more size drawn per symbol in
    its range (shrinking toward the range's low end); ``case`` itself when ``dynamic`` is False or
    None, or when no input has a size at a hint (nothing is drawn then). With ``True`` every hint
    present is a symbol, named ``s0``, ``s1`` in hint order among them; with dim names
    (``"tokens"``) only :data:`TOKENS_HINT`, as ``s0``. A symbol the trace specialises is dropped, as
    :func:`~pmverify._shapes.symbolic.symbolize` says."""
    if not dynamic or case.symbols:
        return case
    hints = _hints_in(case) if dynamic is True else {"s0": TOKENS_HINT} if _holds(case, TOKENS_HINT) else {}
    if not hints:
        return case
    return _checked(_with_drawn_sizes(draw, symbolize(case, hints)))


def _checked(case: GraphCase) -> GraphCase:
    """``case``, or its static source when its graph fails to run at one of its size points: a
    constraint among sizes that an op's meta does not check, so the trace recorded no guard for it
    (as ``slice_scatter``'s and ``as_strided``'s did, which :func:`~pmverify._shapes.symbolic.symbolize`
    now guards itself). A safety net: valid cases by construction, whatever op table it meets.
    Cases of several ranks are returned as they are (their collectives need a world to run)."""
    if case.tp_world > 1:
        return case
    for sizes in size_points(case)[1:]:
        try:
            inputs = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs_at(case, sizes)]
            with torch.no_grad():
                case.gm(*inputs)
        except Exception:  # noqa: BLE001 - any failure: the graph is not valid at these sizes
            logger.debug("%r fails at %r; drawn static", case, sizes)
            return static_source(case)
    return case


def resymbolize(draw: Any, rewritten: GraphCase, base: GraphCase, dynamic: Dynamic | None) -> GraphCase:
    """What a wrapping strategy returns after rewriting ``static_source(base)`` into ``rewritten``
    (concrete sizes): with ``dynamic`` None (follow the base), ``rewritten`` symbolized with
    ``base``'s symbols (:func:`~pmverify._shapes.symbolic.symbolize_like`, its drawn sizes kept where they
    still lie in the new ranges), static
    when ``base`` is; with ``dynamic`` False, ``rewritten`` as it is (static); with True or names,
    ``rewritten`` symbolized in every hint its inputs hold (:func:`symbolize_drawn`), sizes drawn
    afresh."""
    if dynamic is None:
        if not base.symbols:
            return rewritten
        return _checked(symbolize_like(rewritten, base))
    return symbolize_drawn(draw, rewritten, dynamic)
