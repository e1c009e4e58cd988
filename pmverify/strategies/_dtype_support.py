"""Ops the strategies append to a case, chosen per dtype among those that run on it.

The strategies append ops of their own to a drawn case: a *reader* of a planted instance's output
(:func:`~pmverify.strategies.planted`'s consumer) or of an input a write-back wrote
(:mod:`._write_backs`), and the in-place ops of :func:`~pmverify.strategies.with_mutations`. A
float8 value has few kernels on CPU (no ``neg``, ``add_`` or ``mul_``), and a case whose graph
before the pass cannot run says nothing about the pass: each op is drawn only among those
:func:`pmverify._execution.runs_on` says run on the value's dtype (learned from the dispatcher
once per op, dtype and device), and a reader of a value no reader runs on reads its float32
upcast (``prims.convert_element_type``, as a post-grad graph writes ``.float()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .._execution import runs_on

__all__ = ["add_reader", "running_on", "UPCAST"]

aten = torch.ops.aten
#: The dtype a value no reader runs on is read in.
UPCAST = torch.float32


def add_reader(graph: torch.fx.Graph, node: torch.fx.Node, value: Any) -> torch.fx.Node:
    """Insert (at ``graph``'s insertion point) a node reading all of ``node``, whose value is
    ``value`` (its fake tensor, or None), and return it: ``logical_not`` of a bool tensor, ``neg``
    of one whose dtype ``neg`` runs on, else ``neg`` of its float32 upcast."""
    dtype = value.dtype if isinstance(value, torch.Tensor) else None
    if dtype == torch.bool:
        return graph.call_function(aten.logical_not.default, (node,))
    if dtype is not None and not runs_on(aten.neg.default, dtype):
        node = graph.call_function(torch.ops.prims.convert_element_type.default, (node, UPCAST))
    return graph.call_function(aten.neg.default, (node,))


def running_on(ops: Sequence[tuple[str, Any]], dtype: torch.dtype) -> tuple[str, ...]:
    """The names of ``ops`` (``(name, op overload)`` pairs, in order) that run on ``dtype``."""
    return tuple(name for name, op in ops if runs_on(op, dtype))
