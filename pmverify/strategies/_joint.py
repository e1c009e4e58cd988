"""Joint forward-backward traces: what a training rewrite (``trace_fn=joint_fwd_bwd``) needs.

Inductor's ``joint_fwd_bwd`` (``torch/_inductor/pattern_matcher.py``, read at torch 2.13) traces a
function with ``aot_function`` and keeps the joint graph its partitioner is given: placeholders
``primals_1..n`` (one per argument of the function, Python numbers included, in order) then
``tangents_1..k`` (one per forward output that needs a gradient), and as outputs the forward
outputs followed by the gradient of each primal (``None`` for one that does not require grad). It
traces a backward only for arguments that require grad, so the example inputs' ``requires_grad``
is part of the trace: ``register_replacement`` records it and re-traces every match with it.

A planted instance of such a trace runs on the primals followed by tangents drawn like the forward
outputs (shape and dtype from the placeholder's ``meta["val"]``, values from
:func:`~pmverify.strategies.tensors`, at the scales of every other input); the case graph is the
joint graph, so the oracles compare forward outputs and gradients alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._fx import flat_nodes
from ._tensors import tensors

__all__ = [
    "gradient_outputs",
    "tangent_placeholders",
    "tangents",
    "cast_tangents",
    "requires_grad_flags",
    "with_requires_grad",
    "detached",
]

_TANGENT_PREFIX = "tangents"


def tangent_placeholders(gm: torch.fx.GraphModule, primals: int) -> list[torch.fx.Node]:
    """The placeholders of ``gm`` after its first ``primals`` ones: the tangents of a joint trace
    (none for a forward trace). InvalidArgument when one is not named ``tangents_*`` as
    ``joint_fwd_bwd`` names them, or holds no tensor ``meta["val"]`` to draw it like."""
    extra = list(gm.graph.find_nodes(op="placeholder"))[primals:]
    for node in extra:
        if not str(node.target).startswith(_TANGENT_PREFIX) or not isinstance(node.meta.get("val"), torch.Tensor):
            raise InvalidArgument(
                f"the trace has placeholder {node.target!r} beyond the pattern's {primals} arguments: only the "
                f"{_TANGENT_PREFIX}_* placeholders of a joint_fwd_bwd trace (with a tensor meta['val']) can be drawn"
            )
    return extra


def gradient_outputs(gm: torch.fx.GraphModule, primals: int) -> set[torch.fx.Node]:
    """The nodes of the joint trace ``gm`` that only its gradient outputs return (its last
    ``primals`` outputs; a node also returned as a forward output is not one); empty for a
    trace without ``tangents_*`` placeholders."""
    if not any(str(n.target).startswith(_TANGENT_PREFIX) for n in gm.graph.find_nodes(op="placeholder")):
        return set()
    (output,) = gm.graph.find_nodes(op="output")
    returned = list(output.args[0])
    forward = set(flat_nodes(returned[: len(returned) - primals]))
    return set(flat_nodes(returned[len(returned) - primals :])) - forward


def tangents(gm: torch.fx.GraphModule, primals: int) -> st.SearchStrategy[tuple[torch.Tensor, ...]]:
    """Return a strategy for the tangents of the joint trace ``gm`` whose first ``primals``
    placeholders are the pattern's arguments: one tensor per ``tangents_*`` placeholder, of its
    ``meta["val"]``'s shape and dtype (contiguous, CPU), values from :func:`tensors`; the empty
    tuple for a forward trace. Raises InvalidArgument as :func:`tangent_placeholders`."""
    specs = [(n.meta["val"].dtype, tuple(n.meta["val"].shape)) for n in tangent_placeholders(gm, primals)]
    return st.tuples(*(tensors(dtype, shape) for dtype, shape in specs))


def cast_tangents(gm: torch.fx.GraphModule, primals: int, old: Sequence[Any]) -> tuple[torch.Tensor, ...] | None:
    """The tangents ``old`` of an instance made the tangents of ``gm`` (a re-trace of the pattern on
    its primals cast to another dtype): each cast to its placeholder's dtype; None when their count
    or shapes differ."""
    nodes = tangent_placeholders(gm, primals)
    if len(nodes) != len(old):
        return None
    vals = [n.meta["val"] for n in nodes]
    if any(not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(v.shape) for t, v in zip(old, vals, strict=True)):
        return None
    return tuple(t.to(v.dtype) for t, v in zip(old, vals, strict=True))


def requires_grad_flags(example: Sequence[Any]) -> tuple[bool, ...] | None:
    """Per item of ``example`` (tensors, or :func:`like`'s descriptions of them), whether it
    requires grad; None when none does (a forward-only example)."""
    flags = tuple(bool(getattr(x, "requires_grad", False)) for x in example)
    return flags if any(flags) else None


def with_requires_grad(args: Sequence[Any], flags: Sequence[bool] | None) -> tuple[Any, ...]:
    """``args`` with each floating tensor at a position ``flags`` marks made a leaf that requires
    grad (one that requires grad already is kept); ``args`` unchanged when ``flags`` is None or of
    another length (a strategy that draws another tuple is the caller's to check)."""
    if flags is None or len(flags) != len(args):
        return tuple(args)
    return tuple(
        arg.detach().requires_grad_(True)
        if wants and isinstance(arg, torch.Tensor) and arg.is_floating_point() and not arg.requires_grad
        else arg
        for arg, wants in zip(args, flags, strict=True)
    )


def detached(value: Any) -> Any:
    """A tensor that requires grad detached (the case graph is the joint graph: it computes
    gradients itself, its inputs need none); any other value as it is."""
    return value.detach() if isinstance(value, torch.Tensor) and value.requires_grad else value
