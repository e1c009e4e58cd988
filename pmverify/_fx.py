"""Small facts about FX nodes that the oracles and the strategies share, and tracing a pattern as
``register_replacement`` does (:func:`trace`: the strategies plant its traces, the gate search
re-traces a rewrite's search function on other inputs)."""

from __future__ import annotations

import collections
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._compat import FakeTensorMode, TracingContext, pytree, tracing

__all__ = [
    "is_view",
    "flat_nodes",
    "output_vals",
    "GRADIENT_OUTPUTS",
    "arg_key",
    "trace",
    "clear_trace_memo",
    "callable_placeholders",
]

#: Key of a case graph's output node ``meta``: the positions (in the flattened outputs) of the
#: gradients a planted joint forward-backward instance returns. Autograd gives no stride contract
#: for a gradient (``AccumulateGrad`` re-strides one that does not fit its parameter), so the
#: structure oracle does not compare their strides; their values are compared as any output's.
GRADIENT_OUTPUTS = "pmverify_gradient_outputs"


def is_view(target: Any) -> bool:
    """Whether a node with this target returns a view of its first input: ``getitem`` (of a
    ``split``...) or any aten overload whose schema aliases its input."""
    return target is operator.getitem or (isinstance(target, torch._ops.OpOverload) and target.is_view)


def _reshapes() -> frozenset:
    aten = torch.ops.aten
    return frozenset(
        {
            aten.view.default,
            aten.reshape.default,
            aten.flatten.using_ints,
            aten.unflatten.int,
            aten.unsqueeze.default,
            aten.squeeze.default,
            aten.squeeze.dim,
            aten.squeeze.dims,
            aten.alias.default,
        }
    )


def unreshaped(node: Any) -> Any:
    """``node`` with the views that only change its shape stripped (``view``, ``reshape``,
    ``flatten``, ``unflatten``, ``unsqueeze``, ``squeeze``, ``alias``): the same elements, in the
    same order and memory. Anything else is returned as it is."""
    reshapes = _reshapes()
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in reshapes and node.args:
        node = node.args[0]
    return node


def flat_nodes(value: Any) -> list[torch.fx.Node]:
    """The nodes in an FX argument (a node, or nested lists, tuples and dicts of them), in order:
    the leaves of ``value`` as :mod:`torch.utils._pytree` flattens it that are nodes."""
    found: list[torch.fx.Node] = []
    _collect_nodes(value, found)
    return found


#: Why: the oracles ask for the nodes of every argument of every node, several times a case, and
#: pytree's generic walk was a tenth of the mutation-barrier oracle's time. The containers FX args
#: are made of are walked here, in pytree's order; anything else goes to pytree.
_SEQUENCES = frozenset({list, tuple, torch.fx.immutable_collections.immutable_list})
_MAPPINGS = frozenset({dict, torch.fx.immutable_collections.immutable_dict})
_LEAVES = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format})


def _collect_nodes(value: Any, found: list[torch.fx.Node]) -> None:
    kind = type(value)
    if kind is torch.fx.Node:
        found.append(value)
    elif kind in _LEAVES:
        return
    elif kind in _SEQUENCES:
        for item in value:
            _collect_nodes(item, found)
    elif kind in _MAPPINGS:
        for item in value.values():
            _collect_nodes(item, found)
    else:
        found.extend(leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.fx.Node))


def output_vals(gm: torch.fx.GraphModule) -> list[Any]:
    """The ``meta["val"]`` of each output of ``gm`` (flattened; a constant output as it is)."""
    (output,) = gm.graph.find_nodes(op="output")
    return [
        getattr(arg, "meta", {}).get("val") if isinstance(arg, torch.fx.Node) else arg
        for arg in pytree.tree_leaves(output.args[0])
    ]


_TRACES: collections.OrderedDict[Any, torch.fx.GraphModule] = collections.OrderedDict()
_TRACE_CACHE_SIZE = 512


def arg_key(value: Any) -> Any:
    """What a trace depends on of one input: a tensor's shape, stride, dtype, device type and
    ``requires_grad`` (not its values); another value's type and repr. Hashable."""
    if isinstance(value, torch.Tensor):
        shape, stride = tuple(value.shape), tuple(value.stride())
        return ("tensor", shape, stride, value.dtype, value.device.type, value.requires_grad)
    return ("value", type(value).__name__, repr(value))


def trace(pattern: Callable[..., Any], args: Sequence[Any], trace_fn: Callable[..., Any] | None = None):
    """Trace ``pattern`` on ``args`` with ``trace_fn`` (default Inductor's ``fwd_only``, the tracer
    ``register_replacement`` uses) in one fake mode, so every node has ``meta["val"]``.

    Traces are memoised on the pattern, the tracer and the inputs' shapes, strides, dtypes and
    ``requires_grad`` (a joint trace differentiates the inputs that require it) (as
    ``register_replacement`` assumes, a pattern's trace does not depend on input values): shrinking
    re-draws the same shapes hundreds of times. Callers must not mutate the returned graph."""
    key = (pattern, trace_fn, tuple(arg_key(a) for a in args))
    try:
        gm = _TRACES.pop(key)
    except TypeError:  # an unhashable pattern or tracer: no memo
        key = None
    except KeyError:
        gm = None
    else:
        _TRACES[key] = gm
        return gm
    if trace_fn is None:
        from ._compat import fwd_only as trace_fn
    mode = FakeTensorMode(allow_fallback_kernels=True)
    with tracing(TracingContext(mode)):
        try:
            gm = trace_fn(pattern, list(args))
        except Exception as exc:
            # A collective's kernel (a project's all-reduce, vLLM's included) needs a started
            # process group; its fake kernel does not: the trace on fake copies is the same graph.
            # Inside the mode, so that a factory op of the pattern (vLLM's ``empty_like`` result
            # buffer) makes a fake tensor too, not a real one beside the fake inputs.
            if not any(isinstance(a, torch.Tensor) for a in args):
                raise
            fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
            try:
                with mode:
                    gm = trace_fn(pattern, fake)
            except Exception:
                raise exc from None
        gm = callable_placeholders(gm)  # joint_fwd_bwd's cross its inputs
    if key is not None:
        _TRACES[key] = gm
        while len(_TRACES) > _TRACE_CACHE_SIZE:
            _TRACES.popitem(last=False)
    return gm


def clear_trace_memo() -> None:
    """Forget every trace :func:`trace` memoised (a benchmark's rows each start as a fresh process)."""
    _TRACES.clear()


def callable_placeholders(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each placeholder's target set to its name, recompiled, when one differs.

    ``joint_fwd_bwd`` clones the joint graph, which renames its placeholders (``primals_2``,
    ``primals_4``... for targets ``primals_1``, ``primals_2``...); FX then generates
    ``def forward(self, primals_1, primals_2, ...): primals_2 = primals_1; primals_4 = primals_2``,
    so calling the module computes with its inputs crossed (an ``Interpreter``, which takes inputs
    by position, and Inductor's matcher are not affected)."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if any(node.target != node.name for node in placeholders):
        for node in placeholders:
            node.target = node.name
        gm.recompile()
    return gm
