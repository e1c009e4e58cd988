"""Strategies that show the public call that made them: ``repr(fx_graphs(max_nodes=5))`` reads
``fx_graphs(max_nodes=5)``, not the private composite behind it.

A strategy's repr is what a user reads in Hypothesis' output and what keys pmverify's example
database (:func:`pmverify._engine.verify.database_key`), so it holds every argument that changes what is
drawn, printed as Hypothesis prints arguments (``hypothesis.vendor.pretty``: functions by name,
dataclasses field by field), and never a tensor's values (callers pass descriptions instead).

Why a class: Hypothesis' own public strategies get their repr from ``LazyStrategy`` (through
``hypothesis.strategies._internal``); :class:`PublicStrategy` does the same with the public
``SearchStrategy`` hooks: it draws from the strategy it wraps and validates it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.vendor.pretty import pretty

__all__ = ["PublicStrategy", "public_call", "Shown"]

Ex = TypeVar("Ex")


class Shown:
    """An argument shown by the given text in a call's repr (a recorded rewrite by its own repr, for
    example, where Hypothesis' printer would print its dataclass fields and tensors)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _argument(value: Any) -> str:
    return repr(value) if isinstance(value, st.SearchStrategy) else pretty(value)


class PublicStrategy(st.SearchStrategy[Ex]):
    """``strategy``, shown as the call ``name(*args, **kwargs)``: it draws what ``strategy`` draws
    (the same choices, so shrinking and saved examples are unchanged) and is empty when it is."""

    def __init__(self, name: str, strategy: st.SearchStrategy[Ex], args: tuple[Any, ...], kwargs: dict[str, Any]):
        super().__init__()
        self.wrapped = strategy
        self._name, self._args, self._kwargs = name, args, kwargs
        self._repr: str | None = None
        #: Applied to each drawn value (a move to a device: :mod:`._device`), inside this
        #: strategy's span, so that the choices and spans are those of the strategy without it.
        self.finish: Callable[[Ex], Ex] | None = None

    def __repr__(self) -> str:
        if self._repr is None:
            parts = [_argument(a) for a in self._args] + [f"{k}={_argument(v)}" for k, v in self._kwargs.items()]
            self._repr = f"{self._name}({', '.join(parts)})"
        return self._repr

    def do_validate(self) -> None:
        self.wrapped.validate()

    def calc_is_empty(self, recur: Callable[[st.SearchStrategy[Any]], bool]) -> bool:
        return recur(self.wrapped)

    def do_draw(self, data: Any) -> Ex:
        value = data.draw(self.wrapped)
        return value if self.finish is None else self.finish(value)


def public_call(
    function: Callable[..., Any], strategy: st.SearchStrategy[Ex], /, *args: Any, **kwargs: Any
) -> PublicStrategy[Ex]:
    """``strategy`` shown as the call ``function(*args, **kwargs)``, leaving out each keyword
    argument that is its parameter's default (``fx_graphs()``, not ``fx_graphs(min_nodes=1, ...)``).
    Pass the user's arguments as given (tensors replaced by descriptions of them)."""
    parameters = _parameters(function)
    shown = {k: v for k, v in kwargs.items() if k not in parameters or not _is_default(v, parameters[k].default)}
    return PublicStrategy(function.__name__, strategy, args, shown)


@functools.cache
def _parameters(function: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    return inspect.signature(function).parameters


def _is_default(value: Any, default: Any) -> bool:
    if value is default:
        return True
    try:
        return type(value) is type(default) and bool(value == default)
    except Exception:  # noqa: BLE001 - a value that does not compare: shown
        return False
