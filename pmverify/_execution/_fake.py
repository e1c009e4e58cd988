"""Fake-tensor propagation through a case's graphs, in one ``FakeTensorMode`` (see
:mod:`pmverify._execution`)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from .._compat import FakeTensorMode, python_dispatcher
from .._fx import output_vals

__all__ = [
    "FakePropagation",
    "Repropagation",
    "node_signature",
    "propagate_fake",
    "propagate_recorded",
    "propagate_symbolic",
    "propagated_or_own",
    "quiet_fake_tensor_errors",
    "repropagate",
    "torch_level",
]


@dataclasses.dataclass(frozen=True)
class Repropagation:
    """Fake tensors re-propagated through the graph after the pass, in one fresh
    ``FakeTensorMode`` from rank 0's inputs: ``vals`` the ``meta["val"]`` each node gets, by name;
    ``outputs`` those of the graph's outputs, flattened (as :func:`pmverify._fx.output_vals`)."""

    vals: dict[str, Any]
    outputs: list[Any]


@dataclasses.dataclass(frozen=True)
class FakePropagation:
    """One :func:`propagate_fake` through a graph, kept so that a later propagation through the
    rewritten graph can reuse what the pass left unchanged: ``mode`` the ``FakeTensorMode``,
    ``vals`` each node's ``meta["val"]`` and ``signatures`` each node's call
    (:func:`node_signature`), by name; ``reusable`` whether the graph's values depend only on
    each node's call and inputs (no op that mutates, see :func:`propagate_recorded`)."""

    mode: FakeTensorMode
    vals: dict[str, Any]
    signatures: dict[str, tuple[str, Any, Any]]
    reusable: bool


def propagate_fake(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> None:
    """Set ``meta["val"]`` on every node of ``gm`` from one fresh ``FakeTensorMode``."""
    propagate_recorded(gm, inputs)


def node_signature(node: torch.fx.Node) -> tuple[str, Any, Any]:
    """What ``node`` computes from its inputs: its op, target and arguments (input nodes by name),
    compared with ``==`` (an argument unequal to itself, a NaN, only makes a node look changed)."""
    return node.op, node.target, torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.name)


def _pure(graph: torch.fx.Graph) -> bool:
    """Whether every call in ``graph`` is an ATen-style op that mutates nothing (or a ``getitem``):
    then a node's fake value depends only on its call and its inputs' values."""
    return all(
        node.target is operator.getitem
        or (isinstance(node.target, torch._ops.OpOverload) and not node.target._schema.is_mutable)
        for node in graph.nodes
        if node.op == "call_function"
    ) and not any(node.op == "call_module" for node in graph.nodes)


def _recorded(gm: torch.fx.GraphModule, mode: FakeTensorMode) -> FakePropagation:
    """The propagation just made through ``gm`` in ``mode``, as a :class:`FakePropagation`."""
    nodes = gm.graph.nodes
    return FakePropagation(
        mode,
        {node.name: node.meta.get("val") for node in nodes},
        {node.name: node_signature(node) for node in nodes},
        _pure(gm.graph),
    )


def propagate_recorded(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> FakePropagation:
    """:func:`propagate_fake`, returning the propagation (:class:`FakePropagation`)."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fake_inputs = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fake_inputs)
    return _recorded(gm, mode)


def propagate_symbolic(gm: torch.fx.GraphModule, case: Any, rank: int = 0) -> FakePropagation:
    """:func:`propagate_recorded` for a case with symbols: from fake inputs of symbolic sizes in a
    fresh ``FakeTensorMode`` and ``ShapeEnv`` (:func:`pmverify._shapes.sizes.symbolic_inputs`), so
    every ``meta["val"]`` has the case's ``SymInt`` sizes, as the graphs torch.compile hands a
    pass with ``dynamic=True``."""

    from .._shapes.sizes import symbolic_inputs

    mode, fake_inputs = symbolic_inputs(case, rank=rank)
    with python_dispatcher():  # as compile_fx: metas that take SymInts (baddbmm's expand)
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fake_inputs)
    return _recorded(gm, mode)


def _own_propagation(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> FakePropagation | None:
    """The fake values ``gm`` already carries, as a :class:`FakePropagation`, when they are what
    :func:`propagate_recorded` would give: every node but the output has a ``meta["val"]``, every
    fake tensor among them belongs to one ``FakeTensorMode`` without a ``ShapeEnv`` (static shapes,
    as pmverify's strategies and ``make_fx(tracing_mode="fake")`` leave them), and each
    placeholder's value has the shape, dtype, strides, device and ``requires_grad`` of its input (a
    fake value depends on nothing else). Else None. That mode is then made to allow non-fake inputs,
    as :func:`propagate_recorded`'s does (a pass may re-trace its replacement with real constants)."""
    from .._compat import FakeTensor

    nodes = list(gm.graph.nodes)
    placeholders = [node for node in nodes if node.op == "placeholder"]
    if len(placeholders) != len(inputs):
        return None
    modes: set[int] = set()
    mode = None
    for node in nodes:
        if node.op == "output":
            continue
        if "val" not in node.meta:
            return None
        for leaf in torch.utils._pytree.tree_leaves(node.meta["val"]):
            if isinstance(leaf, torch.Tensor):
                if not isinstance(leaf, FakeTensor):
                    return None
                modes.add(id(leaf.fake_mode))
                mode = leaf.fake_mode
    if len(modes) != 1 or mode.shape_env is not None:
        return None  # symbolic shapes (a ShapeEnv) are propagated anew
    for node, value in zip(placeholders, inputs, strict=True):
        val = node.meta["val"]
        if isinstance(value, torch.Tensor) != isinstance(val, torch.Tensor):
            return None
        if isinstance(value, torch.Tensor) and (
            val.shape != value.shape
            or val.dtype != value.dtype
            or val.stride() != value.stride()
            or val.device != value.device
            or val.requires_grad != value.requires_grad
        ):
            return None
    # as in propagate_recorded's mode: a pass may re-trace its replacement with real constants
    mode.allow_non_fake_inputs = True
    return FakePropagation(
        mode,
        {node.name: node.meta.get("val") for node in nodes},
        {node.name: node_signature(node) for node in nodes},
        _pure(gm.graph),
    )


def propagated_or_own(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> FakePropagation:
    """The fake values of ``gm`` on ``inputs`` in one ``FakeTensorMode``: those it carries when they
    are complete, of one mode and agree with ``inputs`` (see :func:`_own_propagation`: a graph
    drawn by pmverify's strategies, or traced by ``make_fx(tracing_mode="fake")``), else
    :func:`propagate_recorded` anew (a graph traced with real tensors carries values of several
    modes, which a pass that re-traces cannot mix)."""
    own = _own_propagation(gm, inputs)
    propagation = own if own is not None else propagate_recorded(gm, inputs)
    _add_tensor_meta(gm)
    _add_example_values(gm)
    return propagation


def _add_tensor_meta(gm: torch.fx.GraphModule) -> None:
    """Give each node holding a tensor ``meta["val"]`` its ``meta["tensor_meta"]`` where it has none,
    as ``make_fx`` does for the graphs Inductor's passes see (a handler reading an input's
    ``tensor_meta``, as quantization's weight prepacking does, would fail on a drawn graph)."""
    from .._compat import tensor_metadata

    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and "tensor_meta" not in node.meta:
            node.meta["tensor_meta"] = tensor_metadata(val)


def torch_level(graph: torch.fx.Graph) -> bool:
    """Whether ``graph`` calls torch functions (``torch.unbind``) or tensor methods, as dynamo's
    graphs, which Inductor's pre-grad passes see, do: not only ATen ops and ``operator`` builtins."""
    return any(
        node.op == "call_method"
        or (
            node.op == "call_function"
            and not isinstance(
                node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)
            )
            and getattr(node.target, "__module__", None) not in ("_operator", "operator")
        )
        for node in graph.nodes
    )


def _add_example_values(gm: torch.fx.GraphModule) -> None:
    """Give each node of a torch-level graph (:func:`torch_level`) its ``meta["example_value"]``
    where it has none, as dynamo does: pre-grad handlers read it (split_cat's ``construct_cat_args``
    failed with ``KeyError: 'example_value'`` on a reproducer's graph, which carries no meta)."""
    if not torch_level(gm.graph):
        return
    for node in gm.graph.nodes:
        if "val" in node.meta and "example_value" not in node.meta:
            node.meta["example_value"] = node.meta["val"]


class _Reusing(FakeTensorProp):
    """Fake propagation that takes a node's value from ``known`` when its call is the one
    ``known`` propagated and none of its inputs was propagated anew."""

    def __init__(self, gm: torch.fx.GraphModule, known: FakePropagation) -> None:
        super().__init__(gm, known.mode)
        self.known = known
        self.fresh: set[str] = set()

    def run_node(self, n: torch.fx.Node) -> Any:
        same = self.known.signatures.get(n.name) == node_signature(n) and n.name in self.known.vals
        if n.op == "placeholder":  # given its known value (repropagate): fresh only if it is another input
            if not same:
                self.fresh.add(n.name)
            return super().run_node(n)
        if same and n.op == "call_function" and not any(a.name in self.fresh for a in n.all_input_nodes):
            n.meta["val"] = self.known.vals[n.name]
            return n.meta["val"]
        self.fresh.add(n.name)
        return super().run_node(n)


def _own_inputs(gm: torch.fx.GraphModule) -> tuple[FakeTensorMode, list[Any]] | None:
    """The ``meta["val"]`` of ``gm``'s placeholders and their one ``FakeTensorMode``, when every
    placeholder has one (a tensor's fake, or a ``SymInt``) and the fakes share a mode; else None."""
    from .._compat import FakeTensor

    vals = [node.meta.get("val") for node in gm.graph.find_nodes(op="placeholder")]
    modes = {id(v.fake_mode): v.fake_mode for v in vals if isinstance(v, FakeTensor)}
    if any(v is None for v in vals) or len(modes) != 1:
        return None
    return next(iter(modes.values())), vals


def repropagate(
    gm: torch.fx.GraphModule,
    inputs: Sequence[Any],
    known: FakePropagation | None,
    case: Any = None,
    *,
    own: bool = False,
) -> Repropagation:
    """:func:`propagate_fake` through ``gm`` itself, its nodes' ``meta`` dicts restored afterwards
    (what a propagation through a deep copy gives, without copying the graph and its meta). With
    ``known`` (the propagation through the graph before the pass) and a graph where no op mutates,
    the nodes the pass left as they were, on inputs it left as they were, keep the values ``known``
    gave them: fake propagation is a function of a node's call and its inputs' values. With
    ``case`` (a case with symbols), a propagation anew is symbolic (:func:`propagate_symbolic`);
    with ``own`` too (a graph torch.compile traced, whose symbols are its own: ``dynamic=True``
    makes static dims symbolic as well), it starts from the placeholders' own values."""
    nodes = list(gm.graph.nodes)
    saved = [node.meta for node in nodes]
    for node in nodes:
        node.meta = dict(node.meta)
    try:
        placeholders = [node.name for node in nodes if node.op == "placeholder"]
        if known is not None and known.reusable and _pure(gm.graph) and all(n in known.vals for n in placeholders):
            _Reusing(gm, known).propagate_dont_convert_inputs(*(known.vals[n] for n in placeholders))
        elif case is not None and own and _own_inputs(gm) is not None:
            mode, fake_inputs = _own_inputs(gm)
            with python_dispatcher():
                FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fake_inputs)
        elif case is not None:
            propagate_symbolic(gm, case)
        else:
            propagate_fake(gm, inputs)
        return Repropagation({node.name: node.meta.get("val") for node in nodes}, output_vals(gm))
    finally:
        for node, meta in zip(nodes, saved, strict=True):
            node.meta = meta


@contextlib.contextmanager
def quiet_fake_tensor_errors() -> Iterator[None]:
    """Silence torch's ERROR log of a failed meta kernel while a pass runs.

    ``register_replacement`` re-traces every candidate match on its real shapes; on a near miss
    (say, other split sizes) that trace fails a broadcast in fake tensors, torch logs the traceback
    at ERROR level, and the matcher then rejects the match, as it should. The log is noise here.
    """
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        fake_log.setLevel(level)
