"""The canonical arguments of ``planted`` (:class:`PlantSpec`), built by one function
(:func:`canonical_spec`) that validates the caller's arguments, raising
``hypothesis.errors.InvalidArgument``, and puts them in one form: a recorded rewrite unpacked
into its search function, tracer, example inputs and wildcards; default inputs and context drawn;
``scalar_workaround`` arguments drawn around their example values."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._case import GraphCase
from .._registry.record import RecordedRewrite
from .._validation import short_repr, validate_choices, validate_int, validate_order, validate_strategy
from ._dynamic import DYNAMIC_DIMS, Dynamic, validate_dynamic
from ._like import TensorLike, like
from ._near_miss import NEAR_MISS_KINDS
from ._planted_args import (
    SearchCall,
    argument_names,
    check_wildcards,
    full_example,
    pattern_label,
    scalar_values,
    with_scalars,
)
from ._planted_trace import trace_checked
from ._planted_truth import Wildcards
from ._recorded_inputs import NumberForms, RecordedExample, recorded_example
from ._traced import signature

__all__ = ["PlantSpec", "canonical_spec"]


@dataclasses.dataclass(frozen=True, eq=False)
class PlantSpec:
    """Canonical arguments of :func:`~pmverify.strategies.planted` (from :func:`canonical_spec`).

    - ``pattern`` / ``trace_fn``: the search function and its tracer (None: ``fwd_only``);
    - ``inputs``: draws every argument of ``pattern``, ``scalar_workaround`` ones included;
    - ``context``: draws the context cases; None: never a context;
    - ``kinds``: the near-miss kinds drawn, in :data:`NEAR_MISS_KINDS` order; ``near_miss``: the
      one every instance is made, or None;
    - ``name``: the pattern's name in ground truth and node names (an identifier);
    - ``example_inputs``: the registered example inputs (shapes and dtypes only:
      :class:`TensorLike`), or None;
    - ``rewrite``: the recorded rewrite, or None; then ``wildcards`` (a plain pattern's matcher);
    - ``scalar_examples``: the ``scalar_workaround`` example values by argument position;
    - ``numbers``: a recorded rewrite's 0-d tensors drawn as numbers, or None; ``cap``: how its
      default inputs were capped, in words, or None;
    - ``dynamic``: ``False``, ``True`` or a tuple of dim names.
    """

    pattern: Callable[..., Any]
    inputs: st.SearchStrategy[Sequence[Any]]
    context: st.SearchStrategy[GraphCase] | None
    min_instances: int
    max_instances: int
    kinds: tuple[str, ...]
    trace_fn: Callable[..., Any] | None
    pass_config: Any
    name: str
    example_inputs: tuple[Any, ...] | None
    rewrite: RecordedRewrite | None = None
    wildcards: Wildcards | None = None
    scalar_examples: dict[int, Any] = dataclasses.field(default_factory=dict)
    near_miss: str | None = None
    dynamic: Dynamic = False
    numbers: NumberForms | None = None
    cap: str | None = None

    @functools.cached_property
    def reference(self) -> tuple[Any, ...] | None:
        """The structure (loose signature) of the pattern traced on the example inputs, or None."""
        if self.example_inputs is None:
            return None
        example = tuple(x.zeros() if isinstance(x, TensorLike) else x for x in self.example_inputs)
        return signature(trace_checked(self.pattern, example, self.trace_fn), loose=True)

    def same_structure(self, structure: tuple[Any, ...]) -> bool:
        """Whether ``structure`` (a loose signature) is the pattern's traced on the example inputs,
        or traced with numbers for the 0-d tensors that stand for them (or there are no example
        inputs)."""
        reference, numbers = self.reference, self.numbers
        return reference in (None, structure) or (numbers is not None and numbers.reference == structure)


@dataclasses.dataclass(frozen=True)
class _Unpacked:
    """A recorded rewrite's arguments for :func:`planted`, as a plain pattern's are given."""

    pattern: Callable[..., Any]
    inputs: st.SearchStrategy[Sequence[Any]] | None
    trace_fn: Callable[..., Any] | None
    example_inputs: Sequence[Any] | None
    name: str | None
    scalar_workaround: Mapping[str, float | int] | None
    exclusive_arg_names: Sequence[str]
    recorded: RecordedExample | None = None


def _unpacked(
    rewrite: RecordedRewrite,
    inputs: st.SearchStrategy[Sequence[Any]] | None,
    name: str | None,
    given: Mapping[str, Any],
) -> _Unpacked:
    """What ``rewrite`` gives (``given``: the arguments it gives, as the caller set them, which must
    be unset): its search function, tracer, example inputs (default ``inputs``: ``like`` them at
    capped sizes), the ``scalar_workaround`` / ``exclusive_arg_names`` that name its arguments, and
    its name."""
    for arg, value in given.items():
        if value is not None:
            raise InvalidArgument(
                f"{arg}={short_repr(value)} is given by the recorded rewrite {rewrite!r}; leave it unset"
            )
    try:
        recorded = recorded_example(rewrite) if inputs is None else None
        example_inputs = rewrite.search_args if recorded is None else recorded.args
    except ValueError as exc:
        raise InvalidArgument(f"pattern={rewrite!r}: {exc}") from exc
    pattern = rewrite.search_fn
    # as Inductor uses them: names that are no argument of the search function draw nothing
    names = argument_names(pattern)
    workaround = {k: v for k, v in (rewrite.scalar_workaround or {}).items() if k in names}
    if inputs is None:  # (no broadcast forms: the audit's cases stay as they were)
        inputs = like(example_inputs, scales=recorded.scales, broadcast=False)
    return _Unpacked(
        pattern,
        inputs,
        rewrite.trace_fn,
        example_inputs,
        rewrite.pattern_name if name is None else name,
        workaround or None,
        tuple(k for k in rewrite.exclusive_arg_names if k in names),
        recorded,
    )


def _identifier(name: str) -> str:
    """``name`` made a Python identifier (it prefixes node names): a lambda is ``lambda``."""
    name = re.sub(r"\W+", "_", name).strip("_") or "pattern"
    return f"p{name}" if name[0].isdigit() else name


def _pattern_name(pattern: Callable[..., Any]) -> str:
    """The function's name without a ``_pattern`` suffix, as an identifier."""
    name = getattr(pattern, "__name__", type(pattern).__name__)
    return _identifier(name.removesuffix("_pattern") if name != "_pattern" else name)


def _context(
    context: st.SearchStrategy[GraphCase] | None, min_instances: int, dynamic: Dynamic
) -> st.SearchStrategy[GraphCase] | None:
    """The context strategy: the one given, ``fx_graphs`` by default, None for ``st.nothing()``."""
    if context is not None and context.is_empty:
        if min_instances < 1:
            raise InvalidArgument(
                f"min_instances={min_instances!r} must be at least 1 with context={context!r} (no context)"
            )
        return None
    if context is None:
        from ._graphs import fx_graphs

        return fx_graphs(dynamic=dynamic) if dynamic else fx_graphs()
    return context


def _kinds(near_misses: bool | Sequence[str], near_miss: str | None) -> tuple[str, ...]:
    """The near-miss kinds drawn, in :data:`NEAR_MISS_KINDS` order."""
    if isinstance(near_misses, bool):
        kinds = NEAR_MISS_KINDS if near_misses else ()
    else:
        kinds = validate_choices("near_misses", near_misses, NEAR_MISS_KINDS)
    if near_miss is not None and near_miss not in kinds:
        raise InvalidArgument(f"near_miss={near_miss!r} is not one of the kinds drawn (near_misses={near_misses!r})")
    return tuple(k for k in NEAR_MISS_KINDS if k in kinds)


def _numbers(recorded: RecordedExample) -> NumberForms | None:
    """A recorded rewrite's 0-d example tensors drawn as numbers, or None when it has none."""
    if not recorded.numbers:
        return None
    return NumberForms(
        {i: scalar_values(v) for i, v in recorded.numbers.items()}, recorded.number_reference, recorded.numbers
    )


def _validate(
    pattern: Any,
    inputs: st.SearchStrategy[Sequence[Any]] | None,
    context: st.SearchStrategy[GraphCase] | None,
    min_instances: int,
    max_instances: int,
) -> None:
    """InvalidArgument for a pattern that is not callable, missing or bad strategies, bad bounds."""
    if not callable(pattern):
        raise InvalidArgument(f"pattern={pattern_label(pattern)} must be a function, as given to register_replacement")
    if inputs is None:
        raise InvalidArgument(
            f"inputs=None: give a strategy of input tuples for pattern={pattern_label(pattern)} (only a recorded "
            "rewrite has default inputs)"
        )
    validate_strategy("inputs", inputs)
    if context is not None:
        validate_strategy("context", context)
    validate_int("min_instances", min_instances, 0)
    validate_int("max_instances", max_instances, 0)
    validate_order("min_instances", min_instances, "max_instances", max_instances)


def _with_wildcards(
    pattern: Callable[..., Any],
    inputs: st.SearchStrategy[Sequence[Any]],
    example_inputs: Sequence[Any] | None,
    scalar_workaround: Mapping[str, float | int] | None,
    exclusive_arg_names: Sequence[str],
    dynamic: Dynamic,
) -> tuple[st.SearchStrategy[Sequence[Any]], tuple[Any, ...] | None, dict[int, Any], tuple[str, ...]]:
    """The inputs strategy (drawing broadcast forms where ``like`` can, and the ``scalar_workaround``
    arguments around their example values), the example inputs in full form (default: a ``like``
    strategy's), the ``scalar_workaround`` example values by position and the exclusive names."""
    if example_inputs is None:
        example_inputs = getattr(inputs, "pmverify_example_inputs", None)
    elif isinstance(example_inputs, torch.Tensor) or not isinstance(example_inputs, (tuple, list)):
        raise InvalidArgument(f"example_inputs={short_repr(example_inputs)} must be a tuple or list")
    positions, exclusive = check_wildcards(pattern, scalar_workaround, exclusive_arg_names)
    if example_inputs is not None:  # (its length checked now, not when drawing)
        example_inputs = full_example(pattern, example_inputs, positions)
    rebuild = getattr(inputs, "pmverify_with_pattern", None)
    if rebuild is not None and not dynamic:  # like() draws broadcast forms where the pattern runs on them
        inputs = rebuild(SearchCall(pattern, positions))
    if positions:  # drawn around their example values, as Inductor matches them at any value
        count = len(argument_names(pattern))
        inputs = with_scalars(inputs, count, tuple((i, scalar_values(v)) for i, v in positions.items()))
    return inputs, example_inputs, positions, exclusive


def canonical_spec(
    pattern: Callable[..., Any] | RecordedRewrite,
    inputs: st.SearchStrategy[Sequence[Any]] | None,
    *,
    context: st.SearchStrategy[GraphCase] | None,
    min_instances: int,
    max_instances: int,
    near_misses: bool | Sequence[str],
    near_miss: str | None,
    trace_fn: Callable[..., Any] | None,
    example_inputs: Sequence[Any] | None,
    pass_config: Any,
    name: str | None,
    scalar_workaround: Mapping[str, float | int] | None,
    exclusive_arg_names: Sequence[str],
    dynamic: bool | str | Sequence[str],
) -> PlantSpec:
    """The :class:`PlantSpec` of :func:`~pmverify.strategies.planted`'s arguments; raises
    ``InvalidArgument`` for a bad one (as ``planted`` documents)."""
    dynamic = validate_dynamic("dynamic", dynamic, DYNAMIC_DIMS)
    rewrite = pattern if isinstance(pattern, RecordedRewrite) else None
    recorded = None
    if rewrite is not None:
        given = {
            "trace_fn": trace_fn,
            "example_inputs": example_inputs,
            "scalar_workaround": scalar_workaround,
            "exclusive_arg_names": exclusive_arg_names or None,
        }
        unpacked = _unpacked(rewrite, inputs, name, given)
        pattern, inputs, trace_fn, recorded = unpacked.pattern, unpacked.inputs, unpacked.trace_fn, unpacked.recorded
        example_inputs, name = unpacked.example_inputs, unpacked.name
        scalar_workaround, exclusive_arg_names = unpacked.scalar_workaround, unpacked.exclusive_arg_names
    _validate(pattern, inputs, context, min_instances, max_instances)
    context = _context(context, min_instances, dynamic)
    kinds = _kinds(near_misses, near_miss)
    if trace_fn is not None and not callable(trace_fn):
        raise InvalidArgument(f"trace_fn={trace_fn!r} must be callable")
    if name is not None and not isinstance(name, str):
        raise InvalidArgument(f"name={name!r} must be a str")
    inputs, example_inputs, positions, exclusive = _with_wildcards(
        pattern, inputs, example_inputs, scalar_workaround, exclusive_arg_names, dynamic
    )
    # shapes and dtypes only
    example = None if example_inputs is None else tuple(map(TensorLike.of, example_inputs))
    return PlantSpec(
        pattern=pattern,
        inputs=inputs,
        context=context,
        min_instances=min_instances,
        max_instances=max_instances,
        kinds=kinds,
        trace_fn=trace_fn,
        pass_config=pass_config,
        name=_pattern_name(pattern) if name is None else _identifier(name),
        example_inputs=example,
        rewrite=rewrite,
        # Inductor's matcher for a plain pattern (the ground truth of some near misses)
        wildcards=None if rewrite is not None else Wildcards(pattern, trace_fn, example, positions, exclusive),
        scalar_examples=positions,
        near_miss=near_miss,
        dynamic=dynamic,
        numbers=None if recorded is None else _numbers(recorded),
        cap=None if recorded is None else recorded.describe_cap(),
    )
