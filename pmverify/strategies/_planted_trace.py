"""Tracing ``planted``'s pattern on drawn inputs: checked (:func:`trace_checked`: it traces, to ops,
none in place), with a drawn wildcard value put back to its example where the pattern does not
run on it (:func:`traced`), and at a symbol's hint for a dynamic case (:func:`hinted`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import reject
from hypothesis.errors import InvalidArgument

from .._execution import error_summary
from .._fx import trace
from .._validation import short_repr
from ._planted_args import pattern_label
from ._traced import runs_eagerly

if TYPE_CHECKING:
    from ._planted_spec import PlantSpec

__all__ = ["hinted", "trace_checked", "traced"]


def traced(spec: PlantSpec, args: tuple[Any, ...]) -> tuple[torch.fx.GraphModule, tuple[Any, ...]]:
    """Trace the pattern on ``args``; with default inputs of a recorded rewrite, a drawn
    ``scalar_workaround`` value or number for a 0-d tensor it does not trace with or run with (e.g.
    a dropout probability above 1) is put back to its example value, not reported as the caller's
    error. The pattern itself must run eagerly on the inputs (:func:`runs_eagerly`: a program a model
    could hold); a draw on which it does not, even at those example values, is rejected."""
    numbers = spec.numbers
    examples = {
        **spec.scalar_examples,
        **(
            {}
            if numbers is None
            else {i: v for i, v in numbers.examples.items() if not isinstance(args[i], torch.Tensor)}
        ),
    }
    try:
        gm = trace_checked(spec.pattern, args, spec.trace_fn)
    except InvalidArgument:
        if all(args[i] is value for i, value in examples.items()):
            raise
    else:
        if runs_eagerly(spec.pattern, args):
            return gm, args
    fallback = tuple(examples.get(i, a) for i, a in enumerate(args))
    gm = trace_checked(spec.pattern, fallback, spec.trace_fn)
    if not runs_eagerly(spec.pattern, fallback):
        reject()
    return gm, fallback


def hinted(spec: PlantSpec, args: tuple[Any, ...]) -> tuple[torch.fx.GraphModule, tuple[Any, ...]] | None:
    """The pattern traced on ``args`` (its inputs with sizes set to hints), or None when it does not
    trace or run eagerly there (the caller keeps the drawn sizes)."""
    try:
        gm = trace_checked(spec.pattern, args, spec.trace_fn)
    except InvalidArgument:
        return None
    return (gm, args) if runs_eagerly(spec.pattern, args) else None


def trace_checked(pattern: Callable[..., Any], args: tuple[Any, ...], trace_fn: Any) -> torch.fx.GraphModule:
    """Trace ``pattern`` on ``args``; InvalidArgument when it does not trace, has no op, or holds an
    in-place op (a register_replacement pattern is functional; Inductor's matcher never matches
    across the mutation region an in-place op starts)."""
    from .._compat import is_mutation_op

    try:
        gm = trace(pattern, args, trace_fn)
    except Exception as exc:
        hint = ""
        if _is_joint(trace_fn) and not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            hint = " (a joint_fwd_bwd trace needs an input that requires grad: like() draws them as the example)"
        raise InvalidArgument(
            f"pattern={pattern_label(pattern)} does not trace on inputs {_describe(args)}{hint}: {error_summary(exc)}"
        ) from exc
    if not any(n.op == "call_function" for n in gm.graph.nodes):
        raise InvalidArgument(
            f"pattern={pattern_label(pattern)} traces to a graph without ops on inputs {_describe(args)}"
        )
    mutating = [n.format_node() for n in gm.graph.nodes if n.op == "call_function" and is_mutation_op(n)]
    if mutating:
        raise InvalidArgument(
            f"pattern={pattern_label(pattern)} traces to in-place ops ({'; '.join(mutating)}); planted instances must be "
            "functional, as register_replacement patterns are (use with_mutations for in-place graphs)"
        )
    return gm


def _is_joint(trace_fn: Any) -> bool:
    from .._compat import joint_fwd_bwd

    return trace_fn is joint_fwd_bwd


def _describe(args: Sequence[Any]) -> str:
    return short_repr(tuple(args))
