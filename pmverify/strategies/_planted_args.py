"""``planted``'s view of the pattern's arguments: their names and arity, example inputs in full
form, and the ``scalar_workaround`` arguments Inductor holds as wildcards, drawn around their
example values (:func:`scalar_values`, :func:`with_scalars`)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._validation import short_repr
from ._like import TensorLike

__all__ = [
    "SearchCall",
    "argument_names",
    "check_wildcards",
    "full_example",
    "pattern_label",
    "scalar_values",
    "with_scalars",
]


def pattern_label(pattern: Any) -> str:
    """How an error message names ``pattern``: its qualified name, else its repr."""
    return getattr(pattern, "__qualname__", None) or repr(pattern)


def scalar_values(example: Any) -> st.SearchStrategy[Any]:
    """Values of a ``scalar_workaround`` argument, ``example`` first (the simplest: shrinks to it).

    Inductor's pattern holds such an argument as a wildcard (a ``KeywordArg``) and matches it at any
    value, so a replacement must be checked at other values than the example: a replacement that
    hard-codes the example value is wrong everywhere else. A float draws values of its sign around
    and far from it (1e-2, 0.5, 1, 10x and 0.1x it, and a range from 0.1x to max(1, 10x)); an int
    a small range of its sign around it; a bool both values; anything else only the example."""
    if isinstance(example, bool):
        return st.sampled_from([example, not example])
    if isinstance(example, int):
        low, high = (max(0, example - 4), example + 4) if example >= 0 else (example - 4, min(-1, example + 4))
        return st.just(example) | st.integers(low, high)
    if not isinstance(example, float) or not math.isfinite(example):
        return st.just(example)
    sign = -1.0 if math.copysign(1.0, example) < 0 else 1.0
    size = abs(example)
    far = [1e-2, 0.5, 1.0, *([10 * size, 0.1 * size] if size else [])]
    others = [v for v in dict.fromkeys(sign * v for v in far) if v != example]
    low, high = (0.1 * size, max(1.0, 10 * size)) if size else (0.0, 1.0)
    low, high = (low, high) if sign > 0 else (-high, -low)
    return st.just(example) | st.sampled_from(others) | st.floats(low, high, allow_nan=False, allow_infinity=False)


@st.composite
def with_scalars(
    draw: Any,
    inputs: st.SearchStrategy[Sequence[Any]],
    count: int,
    scalars: tuple[tuple[int, st.SearchStrategy[Any]], ...],
) -> tuple[Any, ...]:
    """The ``count`` arguments of a pattern: a tuple from ``inputs`` with each ``(position,
    strategy)`` of ``scalars`` drawn in place. ``inputs`` may draw every argument (the drawn value
    at a scalar's position is replaced) or only the others, as ``register_replacement``'s
    ``example_inputs`` hold them (the scalars are then put at their positions)."""
    args = draw(inputs)
    if not isinstance(args, (tuple, list)):
        raise InvalidArgument(f"inputs drew {short_repr(args)}; it must draw tuples of pattern inputs")
    args = list(args)
    if len(args) == count - len(scalars):
        for position, _ in sorted(scalars, key=lambda pair: pair[0]):
            args.insert(position, None)
    elif len(args) != count:
        raise InvalidArgument(
            f"inputs drew {len(args)} values; the pattern takes {count} arguments, {len(scalars)} of them "
            "scalar_workaround ones: draw all of them, or all but those"
        )
    for position, values in scalars:
        args[position] = draw(values)
    return tuple(args)


def argument_names(pattern: Callable[..., Any]) -> list[str]:
    """The parameter names of ``pattern``, in order (InvalidArgument when it has no signature)."""
    try:
        return list(inspect.signature(pattern).parameters)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"pattern={pattern_label(pattern)} has no signature to read its argument names from: {exc}"
        ) from exc


def check_wildcards(
    pattern: Callable[..., Any], scalar_workaround: Any, exclusive_arg_names: Any
) -> tuple[dict[int, Any], tuple[str, ...]]:
    """Validate ``scalar_workaround`` / ``exclusive_arg_names`` as ``register_replacement`` takes
    them; return the workaround values by argument position, and the exclusive names."""
    if scalar_workaround is None and not exclusive_arg_names:
        return {}, ()
    names = argument_names(pattern)
    workaround = {} if scalar_workaround is None else scalar_workaround
    if not isinstance(workaround, Mapping):
        raise InvalidArgument(f"scalar_workaround={workaround!r} must be a mapping of argument names to numbers")
    for key, value in workaround.items():
        if key not in names:
            raise InvalidArgument(
                f"scalar_workaround={dict(workaround)!r} names {key!r}, not an argument of pattern={pattern_label(pattern)} "
                f"(its arguments: {names})"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidArgument(f"scalar_workaround[{key!r}]={value!r} must be a finite int or float")
    if len(set(workaround.values())) != len(workaround):
        raise InvalidArgument(
            f"scalar_workaround={dict(workaround)!r} gives two arguments the same value: Inductor tells them apart "
            "by value"
        )
    if isinstance(exclusive_arg_names, str) or not isinstance(exclusive_arg_names, Sequence):
        raise InvalidArgument(f"exclusive_arg_names={exclusive_arg_names!r} must be a sequence of argument names")
    if len(set(exclusive_arg_names)) != len(exclusive_arg_names):
        raise InvalidArgument(f"exclusive_arg_names={tuple(exclusive_arg_names)!r} names an argument twice")
    for key in exclusive_arg_names:
        if key not in names:
            raise InvalidArgument(
                f"exclusive_arg_names={tuple(exclusive_arg_names)!r} names {key!r}, not an argument of "
                f"pattern={pattern_label(pattern)} (its arguments: {names})"
            )
    positions = {i: workaround[name] for i, name in enumerate(names) if name in workaround}
    return positions, tuple(exclusive_arg_names)


def _arity(pattern: Callable[..., Any]) -> tuple[int, int] | None:
    """How many arguments ``pattern`` takes at least and at most, when they are positional ones."""
    try:
        parameters = inspect.signature(pattern).parameters.values()
    except (TypeError, ValueError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not all(p.kind in positional for p in parameters):
        return None
    return sum(p.default is inspect.Parameter.empty for p in parameters), len(parameters)


def full_example(pattern: Callable[..., Any], example: Sequence[Any], positions: dict[int, Any]) -> tuple[Any, ...]:
    """``example`` as the pattern's arguments: given without the ``scalar_workaround`` ones
    (``register_replacement``'s form), their example values are put at their positions.
    InvalidArgument when its length fits neither form, or it holds a tensor where a
    ``scalar_workaround`` argument goes."""
    arity = _arity(pattern)
    example = list(example)
    if arity is None:
        return tuple(example)
    low, count = arity
    if positions and len(example) == count - len(positions):
        for position in sorted(positions):
            example.insert(position, positions[position])
    elif not low <= len(example) <= count or (positions and len(example) != count):
        takes = f"{count}" if low == count or positions else f"{low} to {count}"
        scalars = f" ({len(positions)} of them scalar_workaround ones)" if positions else ""
        raise InvalidArgument(
            f"example_inputs={short_repr(tuple(example))} holds {len(example)} values; pattern={pattern_label(pattern)} "
            f"takes {takes} arguments{scalars}"
        )
    names = argument_names(pattern)
    for position in positions:
        if isinstance(example[position], (torch.Tensor, TensorLike)):
            raise InvalidArgument(
                f"scalar_workaround names {names[position]!r}, but example_inputs[{position}] is the tensor "
                f"{short_repr(example[position])}: a scalar_workaround argument is a Python number"
            )
    return tuple(example)


class SearchCall:
    """The search function called on a :func:`like` tuple (the ``scalar_workaround`` arguments at
    their example values where the tuple leaves them out); shown by the function's name."""

    #: ``planted`` reports a pattern that does not trace itself ("does not trace"); ``like`` draws
    #: no broadcast form for it rather than raising first.
    pmverify_from_planted = True

    def __init__(self, pattern: Callable[..., Any], positions: dict[int, Any]) -> None:
        self.pattern, self.positions = pattern, positions

    def __call__(self, *args: Any) -> Any:
        return self.pattern(*full_example(self.pattern, args, self.positions))

    def __repr__(self) -> str:
        return pattern_label(self.pattern)
