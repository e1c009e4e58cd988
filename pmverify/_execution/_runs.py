"""Running one graph on a case's inputs: on clones, under deterministic fill, and its float64
reference (see :mod:`pmverify._execution`)."""

from __future__ import annotations

import contextlib
import copy
import functools
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from .._compat import pytree
from ._random import random_calls, run_recording, run_replaying, seeded

__all__ = [
    "Results",
    "clone_inputs",
    "deterministic_fill",
    "float64_module",
    "float64_reference",
    "run_float64",
    "run_graph",
]

#: What one run of a graph gives: (flat outputs, the inputs' values after the run).
Results = tuple[list[Any], list[Any]]


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    """``inputs`` with every tensor cloned (a graph run may write its inputs), each in its own
    layout: a padded or expanded tensor, which ``clone`` makes contiguous, keeps its strides (its
    storage is cloned), as the pass saw them."""
    return [_clone_strided(x) if isinstance(x, torch.Tensor) else x for x in inputs]


def _clone_strided(x: torch.Tensor) -> torch.Tensor:
    clone = x.clone()
    if clone.stride() == x.stride() or x.layout != torch.strided:
        return clone
    copied = torch.empty(0, dtype=x.dtype, device=x.device)
    copied.set_(x.untyped_storage().clone(), x.storage_offset(), x.shape, x.stride())
    return copied.requires_grad_(x.requires_grad)


@contextlib.contextmanager
def deterministic_fill() -> Iterator[None]:
    """Run the block with deterministic algorithms on (warnings only) and uninitialised memory
    filled (NaN for floats, the largest value for integers); restore the previous settings."""
    import torch.utils.deterministic

    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def run_graph(
    gm: torch.fx.GraphModule, inputs: Sequence[Any], *, fill: bool = True, drawn: dict[str, Any] | None = None
) -> Results:
    """Run ``gm`` on clones of ``inputs`` (under :func:`deterministic_fill` unless ``fill`` is
    False: the caller has set it, as for the threads of a tensor-parallel world, which share those
    global settings); return (flat outputs, inputs after the run). A graph that draws random
    numbers starts from :data:`RNG_SEED` (the generator's state is restored afterwards), and what
    it drew is put in ``drawn`` when given (for :func:`float64_reference`)."""
    args = clone_inputs(inputs)
    with torch.no_grad(), deterministic_fill() if fill else contextlib.nullcontext():
        if drawn is not None and random_calls(gm):
            out, record = run_recording(gm, args)
            drawn.update(record)
        else:
            with seeded(gm, args):
                out = gm(*args)
    return pytree.tree_leaves(out), args


def _to64(value: Any) -> Any:
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return torch.float64
    if isinstance(value, (list, tuple)):
        return type(value)(_to64(v) for v in value)
    if isinstance(value, dict):
        return {k: _to64(v) for k, v in value.items()}
    return value


def _float64_graph(gm: torch.fx.GraphModule) -> torch.fx.Graph:
    """A copy of ``gm``'s graph (its nodes' ``meta`` shallow-copied) with every floating dtype in
    its nodes' arguments turned into float64."""
    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        if node.op == "call_function":
            node.args = _to64(node.args)
            node.kwargs = _to64(node.kwargs)
    return graph


def float64_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` with every floating dtype in its nodes' arguments, and every floating tensor
    its ``get_attr`` nodes read (frozen parameters, constants), turned into float64."""
    ref = copy.deepcopy(gm)
    ref.graph = _float64_graph(gm)  # recompiles
    for node in ref.graph.nodes:
        if node.op == "get_attr":
            *path, name = str(node.target).split(".")
            owner = functools.reduce(getattr, path, ref)
            value = getattr(owner, name, None)
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64:
                widened = value.detach().double()
                if name in owner._buffers:
                    owner._buffers[name] = widened
                elif name in owner._parameters:
                    owner._parameters[name] = torch.nn.Parameter(widened, requires_grad=value.requires_grad)
                else:
                    setattr(owner, name, widened)
    return ref


class _Float64Run(torch.fx.Interpreter):
    """Runs ``gm`` as its float64 twin (:func:`float64_module`) without copying it or generating
    code: every floating dtype in a call's arguments is turned into float64 as the call is made
    (the arguments :func:`float64_module` rewrites; ``gm`` holds no attribute the graph reads)."""

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        return super().call_function(target, _to64(args), _to64(kwargs))

    def __call__(self, *args: Any) -> Any:
        return self.run(*args)


def run_float64(ref: Any, inputs: Sequence[Any], fill: bool = True, drawn: Any = None) -> Results | None:
    """Run ``ref`` (a float64 module, or a :class:`_Float64Run`) on ``inputs`` widened to float64."""
    args = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    try:
        if drawn:
            module = ref if isinstance(ref, torch.fx.GraphModule) else float64_module(ref.module)
            with torch.no_grad(), deterministic_fill() if fill else contextlib.nullcontext():
                return pytree.tree_leaves(run_replaying(module, args, drawn)), args
        return run_graph(ref, tuple(args), fill=fill)
    except Exception:  # noqa: BLE001 - the graph does not run in float64; fall back
        return None


def float64_reference(
    gm: torch.fx.GraphModule, inputs: Sequence[Any], drawn: dict[str, Any] | None = None
) -> Results | None:
    """Run ``gm`` with every floating dtype turned into float64 (:func:`float64_module`); None when
    the graph does not allow it (an op without float64 support, a custom op that checks dtypes...).
    ``drawn``: what a run of ``gm`` drew (:func:`run_graph`), for a graph that draws random numbers:
    the reference draws the same (see :func:`run_replaying`)."""
    if any(node.op in ("get_attr", "call_module") for node in gm.graph.nodes):
        return run_float64(float64_module(gm), inputs, drawn=drawn)  # a copy of its attributes too
    return run_float64(_Float64Run(gm), inputs, drawn=drawn)
