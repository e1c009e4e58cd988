"""``like(..., dynamic=)``: which of the varying dims are drawn at a symbol's hint
(:func:`dynamic_spec` validates the argument, :func:`hinted_symbols` draws them), and the static
sizes a symbolic trace keeps (:func:`not_at_hints`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._shapes.symbolic import HINTS
from ._dynamic import validate_dynamic

if TYPE_CHECKING:
    from ._like import Symbol

__all__ = ["LikeDynamic", "dynamic_spec", "hinted_symbols", "not_at_hints"]


@dataclasses.dataclass(frozen=True)
class LikeDynamic:
    """Canonical ``dynamic=`` of :func:`like`: the symbols that may be drawn at a hint, in order;
    ``named`` when they always are (the caller named them), else each is drawn (``True``)."""

    candidates: tuple[str, ...]
    named: bool


def not_at_hints(low: int, high: int) -> list[int]:
    """The sizes in [low, high] no hint divides (0 included): a static size a symbolic trace keeps."""
    return [n for n in range(low, high + 1) if n == 0 or all(n % hint for hint in HINTS)]


def dynamic_spec(
    example: tuple[Any, ...], symbols: tuple[Symbol, ...], dynamic: Any, fixed: bool
) -> LikeDynamic | None:
    """Validate ``dynamic`` against ``symbols`` (``fixed``: they are ``vary=None``'s duck groups,
    kept at the example's sizes when static)."""
    names = tuple(symbol.name for symbol in symbols)
    canonical = validate_dynamic("dynamic", dynamic, names)
    if canonical is False:
        return None
    by_name = {symbol.name: symbol for symbol in symbols}
    fits = {name for name in names if fixed or by_name[name].low <= min(HINTS) and max(HINTS) <= by_name[name].high}
    if canonical is True:
        candidates = tuple(name for name in names if name in fits)
    else:
        candidates = tuple(sorted(canonical, key=lambda name: name != "tokens"))  # tokens first: s0
        if len(candidates) > len(HINTS):
            raise InvalidArgument(f"dynamic={dynamic!r} names {len(candidates)} symbols; at most {len(HINTS)} can be")
        for name in candidates:
            if name not in fits:
                symbol = by_name[name]
                raise InvalidArgument(
                    f"dynamic={dynamic!r}: {name}'s sizes {symbol.low}..{symbol.high} do not hold the hints {HINTS}"
                )
    varying = set() if fixed else {position for symbol in symbols for position in symbol.positions}
    for i, item in enumerate(example):
        for d, size in enumerate(item.shape if isinstance(item, torch.Tensor) else ()):
            if (i, d) not in varying and size and any(size % hint == 0 for hint in HINTS):
                raise InvalidArgument(
                    f"dynamic={dynamic!r}: example_inputs[{i}] has the static size {size} along dim {d}, a multiple"
                    f" of a hint {HINTS} (the case strategy would take it for a symbolic size)"
                )
    for symbol in symbols:
        if not fixed and symbol.name not in candidates and not not_at_hints(symbol.low, symbol.high):
            raise InvalidArgument(f"dynamic={dynamic!r}: {symbol.name}'s sizes are all multiples of a hint {HINTS}")
    return LikeDynamic(candidates, canonical is not True)


def hinted_symbols(draw: Any, dynamic: LikeDynamic | None) -> dict[str, int]:
    """Which symbols are drawn at which hint: the named ones always, in order; with ``True`` each
    candidate while hints are left, drawn (static first)."""
    if dynamic is None:
        return {}
    if dynamic.named:
        return dict(zip(dynamic.candidates, HINTS, strict=False))
    hinted: dict[str, int] = {}
    for name in dynamic.candidates:
        if len(hinted) < len(HINTS) and draw(st.booleans()):
            hinted[name] = HINTS[len(hinted)]
    return hinted
