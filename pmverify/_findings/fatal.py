"""Naming the case a process dies in: a pass that aborts, segfaults or exits ends the process
before ``verify`` can report anything, so each case is named before the pass runs on it.

- :func:`call_named` runs the check from a frame whose name is the case's label: the Python stack
  ``faulthandler`` prints on a fatal signal (pytest enables it by default, ``pmverify fuzz`` workers
  and reproducers do, :func:`fatal_stacks` does for a ``verify`` call when nothing did) then names
  the case. Silent while nothing dies.
- With ``$PMVERIFY_ANNOUNCE=1``, :func:`announce` also writes the label to stderr, flushed, before
  the pass runs: for a pass that ends its process without a signal (``os._exit``); under pytest
  give ``-s`` too, as pytest's capture of stderr dies with the process. Torch-free.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["announce", "call_named", "case_label", "fatal_stacks"]


def case_label(number: int, case: Any, seed: int | None, limit: int = 240) -> str:
    """``pmverify: checking case N (seed S): GraphCase(...)``, the case's repr cut to ``limit``."""
    text = repr(case)
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"pmverify: checking case {number}{f' (seed {seed})' if seed is not None else ''}: {text}"


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    return fn(*args, **kwargs)


def call_named(label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, called from a frame named ``label`` (what faulthandler prints as the
    function's name)."""
    code = _call.__code__.replace(co_name=label)
    if hasattr(code, "co_qualname"):  # Python >= 3.11
        code = code.replace(co_qualname=label)
    return types.FunctionType(code, _call.__globals__)(fn, args, kwargs)


def announce(label: str) -> None:
    """Write ``label`` to stderr, flushed, when ``$PMVERIFY_ANNOUNCE`` is set (not empty nor 0)."""
    if os.environ.get("PMVERIFY_ANNOUNCE", "").strip() not in ("", "0"):
        print(label, file=sys.stderr, flush=True)


@contextlib.contextmanager
def fatal_stacks() -> Iterator[None]:
    """``faulthandler`` enabled on stderr within (as it was after), when nothing enabled it and
    stderr is a file descriptor: a fatal signal then prints the stack that names the case."""
    if faulthandler.is_enabled():
        yield
        return
    try:
        faulthandler.enable(file=sys.stderr)
    except (AttributeError, ValueError, OSError):  # a stderr without a file descriptor (a notebook)
        yield
        return
    try:
        yield
    finally:
        faulthandler.disable()
