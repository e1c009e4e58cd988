"""``fx_graphs``: random aten-level DAGs, valid by construction, as Inductor's post-grad passes see them.

A graph grows one op at a time, in topological order: draw an op among those that fit the node
budget (:data:`~pmverify.strategies._graph_ops.GRAPH_OPS`, simplest first), draw its first operand
among the recent values it applies to (the most recent first, so failures shrink to a chain) or a new
input, let the op draw its parameters and other operands, and emit its ``call_function`` nodes.
Shapes, dtypes and strides come from running each op on fake tensors in the case's one
``FakeTensorMode`` as it is emitted (that is also every node's ``meta["val"]``); each op applies only
where its shape rules, and a bound on the magnitude of values (see :mod:`._graph_ops`), hold.

Nothing is filtered: measured with Hypothesis' statistics (``hypothesis.statistics.collector``, what
``pytest --hypothesis-show-statistics`` prints) over 1000 generated ``fx_graphs()`` cases, the
filter/``assume`` rejection rate is 0% (0 cases of status "invalid"; ``tests/strategies/
test_graphs.py`` checks it stays under 1%). The ~250 "overrun" attempts that the statistics also
count as invalid are not rejections: the engine cuts its early test cases at 5 times the length of
the minimal one, as for any strategy of varying size (``st.lists(st.tuples(st.integers(),
st.floats()))`` shows ~15 per 100).
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import snapshot_fake

from .._case import GraphCase
from ._graph_ops import GRAPH_OPS, OPS, GraphOp, Val
from ._tensors import DEFAULT_BOUND, tensors
from ._validation import check_choices, check_dtypes, check_int, check_optional_int, check_order

__all__ = ["fx_graphs", "GRAPH_OPS"]

_DEFAULT_MAX_NODES = 8
#: How many of the most recent fitting values an operand is drawn from (besides a new input).
_WINDOW = 4
_BY_NAME = {op.name: op for op in OPS}


class _Builder:
    """A graph under construction: its nodes, fake mode, float values and real inputs."""

    def __init__(self, draw: Any, dtypes: Sequence[torch.dtype]) -> None:
        self.draw = draw
        self.dtypes = dtypes
        self.graph = torch.fx.Graph()
        self.mode = FakeTensorMode()
        self.values: list[Val] = []
        self.inputs: list[torch.Tensor] = []
        self.op_nodes = 0
        self._last_input: torch.fx.Node | None = None

    def new_input(self, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> Val:
        """A new placeholder (after the others) holding a drawn tensor; ``dtype`` drawn if None."""
        if dtype is None:
            dtype = self.draw(st.sampled_from(self.dtypes))
        real = self.draw(tensors(dtype, shape))
        if self._last_input is not None:
            where = self.graph.inserting_after(self._last_input)
        elif len(self.graph.nodes):
            where = self.graph.inserting_before(next(iter(self.graph.nodes)))
        else:
            where = contextlib.nullcontext()
        with where:
            node = self.graph.placeholder(f"x{len(self.inputs)}")
        node.meta["val"] = self.mode.from_tensor(real)
        self._last_input = node
        self.inputs.append(real)
        value = Val(node, DEFAULT_BOUND)
        self.values.append(value)
        return value

    def operand(self, accepts: Any, fresh: st.SearchStrategy[tuple[int, ...]], dtype: torch.dtype | None = None) -> Val:
        """One of the ``_WINDOW`` most recent values that ``accepts`` (the most recent first), or a
        new input whose shape ``fresh`` draws (and that ``accepts`` by the op table's contract)."""
        candidates = [value for value in reversed(self.values) if accepts(value)][:_WINDOW]
        if candidates:
            i = self.draw(st.integers(0, len(candidates)))
            if i < len(candidates):
                return candidates[i]
        value = self.new_input(self.draw(fresh), dtype)
        if not accepts(value):
            raise AssertionError(f"the op table's fresh shape {value.shape} is not accepted")
        return value

    def call(
        self, target: Any, args: tuple, kwargs: dict | None = None, *, bound: float | None = None
    ) -> torch.fx.Node:
        """Emit ``target(*args, **kwargs)``; with ``bound``, its result becomes a float value."""
        kwargs = kwargs or {}
        name = "getitem" if target is operator.getitem else target._opname
        node = self.graph.create_node("call_function", target, args, kwargs, name=name)
        fake_args, fake_kwargs = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        with self.mode:
            result = target(*fake_args, **fake_kwargs)
        node.meta["val"] = (
            [snapshot_fake(r) for r in result] if isinstance(result, (list, tuple)) else snapshot_fake(result)
        )
        if target is not operator.getitem:
            self.op_nodes += 1
        if bound is not None:
            self.values.append(Val(node, bound))
        return node

    def finish(self, label: str) -> GraphCase:
        """The case: its output returns every sink (value without users), in graph order."""
        sinks = [value.node for value in self.values if not value.node.users]
        output = self.graph.output(tuple(sinks))
        output.meta["val"] = tuple(node.meta["val"] for node in sinks)
        gm = torch.fx.GraphModule(torch.nn.Module(), self.graph)
        return GraphCase(gm=gm, inputs=[tuple(self.inputs)], tp_world=1, form="functional", label=label)


@dataclasses.dataclass(frozen=True)
class _Spec:
    """Canonical arguments of :func:`fx_graphs`; ``completable[n]``: a graph of ``n`` op nodes can
    still end with between ``min_nodes`` and ``max_nodes`` of them."""

    min_nodes: int
    max_nodes: int
    op_names: tuple[str, ...]  # names, not GraphOps: the spec's repr shows in Hypothesis' notes
    dtypes: tuple[torch.dtype, ...]
    completable: tuple[bool, ...]

    @property
    def ops(self) -> tuple[GraphOp, ...]:
        return tuple(_BY_NAME[name] for name in self.op_names)

    @property
    def patience(self) -> int:
        return max(1, (self.max_nodes - self.min_nodes) // 2)

    def fitting(self, op_nodes: int) -> list[GraphOp]:
        """The ops that a graph of ``op_nodes`` op nodes can add and still end within bounds."""
        return [op for op in self.ops if op_nodes + op.cost <= self.max_nodes and self.completable[op_nodes + op.cost]]


def _completable(min_nodes: int, max_nodes: int, costs: set[int]) -> tuple[bool, ...]:
    done = [False] * (max_nodes + 1)
    for n in range(max_nodes, -1, -1):
        done[n] = n >= min_nodes or any(n + c <= max_nodes and done[n + c] for c in costs)
    return tuple(done)


@st.composite
def _graphs(draw: Any, spec: _Spec) -> GraphCase:
    builder = _Builder(draw, spec.dtypes)
    while True:
        op = draw(st.sampled_from(spec.fitting(builder.op_nodes)))
        x = builder.operand(op.accepts, op.fresh)
        before = builder.op_nodes
        op.emit(builder, x)
        if builder.op_nodes - before != op.cost:
            raise AssertionError(f"{op.name} emitted {builder.op_nodes - before} op nodes; its cost is {op.cost}")
        # Past min_nodes, go on with probability k / (k + 1) (k: half the span of node counts) while
        # some op fits; shrinks to stopping (0).
        if builder.op_nodes >= spec.min_nodes and not (
            spec.fitting(builder.op_nodes) and draw(st.integers(0, spec.patience)) > 0
        ):
            break
    return builder.finish("fx_graphs")


def fx_graphs(
    *,
    min_nodes: int = 1,
    max_nodes: int | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    ops: Sequence[str] | None = None,
) -> st.SearchStrategy[GraphCase]:
    """Return a strategy for :class:`~pmverify.GraphCase` graphs of random aten ops.

    Each case's ``gm`` is a DAG of ``call_function`` nodes on ``torch.ops.aten`` (and
    ``torch.ops.prims.convert_element_type``) overloads, as Inductor's post-grad graphs hold: one
    placeholder per input (``x0``, ``x1``, ... first), ops in topological order, and an output that
    returns the tuple of every sink (no node is dead). Every node carries ``meta["val"]``, a fake
    tensor from one ``FakeTensorMode`` per case. ``inputs`` holds one tuple of real CPU tensors
    drawn by :func:`~pmverify.strategies.tensors` (finite, in [-2, 2]); ``tp_world=1``,
    ``form="functional"``, ``planted=()``, ``label="fx_graphs"``. Every value is finite on every such
    input, in every dtype; values have rank 1..4, at most 1024 elements and magnitude at most 1024.

    The ops (:data:`GRAPH_OPS`, simplest first): unary ``neg abs relu tanh sigmoid sin cos exp``
    (on values bounded by 4), ``log`` (emitted as ``log(|x| + 1)``: abs, add, log), ``pow`` (square),
    ``add_scalar`` / ``mul_scalar`` (``aten.add.Tensor(x, 1.0)``), ``clamp``,
    ``convert_element_type`` (``prims.convert_element_type`` to another of float32, float16,
    bfloat16); binary, broadcasting ``add sub mul maximum minimum``, ``div`` (emitted as
    ``x / (|y| + 1)``), ``where`` (``where(x > 0, x, y)``: gt, where); reductions over one dim with
    or without keepdim ``sum mean amax amin``; views ``view`` (of contiguous values), ``reshape``
    (emitted decomposed: ``clone`` + ``_unsafe_view``), ``permute transpose unsqueeze expand slice``,
    ``split`` (``split_with_sizes`` and a ``getitem`` per piece), ``cat``; contractions ``mm bmm
    addmm`` and ``matmul`` (emitted decomposed, as post-grad graphs hold it: ``view`` to 2-D, ``mm``,
    ``_unsafe_view`` back). A binary op's other operand is a recent value of the same dtype whose
    shape fits (broadcasts, same size along the contracted dim...) or a new input shaped to fit.

    - ``min_nodes`` / ``max_nodes``: bounds on the number of op nodes (``call_function`` nodes
      other than ``operator.getitem``; an op emitted with guards counts every node it adds: ``log``
      and ``div`` 3, ``matmul`` 3, ``where`` and ``reshape`` 2). Default 1..8 (``max_nodes=None``:
      8, or ``min_nodes`` if larger). Past ``min_nodes`` the graph grows by one more op with
      probability k / (k + 1), k = max(1, (max_nodes - min_nodes) // 2).
    - ``dtypes``: the dtypes inputs are drawn in, simplest first (default float32, float16,
      bfloat16). ``convert_element_type`` may still cast to any of the three, and a binary op on a
      cast value that takes a new input takes it in the cast's dtype (no mixed-dtype ops).
    - ``ops``: names from :data:`GRAPH_OPS` to draw from, simplest first in the caller's order
      (default all). Any single op can make a graph: an op that fits no value gets a new input.

    Shrinks toward one op on one input: ``x0 -> neg -> output``, x0 a float32 ``[1]`` of zeros.

    Raises ``hypothesis.errors.InvalidArgument`` for bounds that are not ints or are below 1,
    ``min_nodes > max_nodes``, a bound no sum of the ops' node counts can meet, ``dtypes`` empty or
    holding another dtype, ``ops`` empty, a string, or holding an unknown name.

    Example::

        @given(fx_graphs(max_nodes=12, dtypes=[torch.bfloat16]))
        def test_my_pass(case):
            result = pmverify.check_case(MyPass(), case)
            assert result.ok, result.violations
    """
    check_int("min_nodes", min_nodes, minimum=1)
    check_optional_int("max_nodes", max_nodes, minimum=1)
    if max_nodes is None:
        max_nodes = max(_DEFAULT_MAX_NODES, min_nodes)
    check_order("min_nodes", min_nodes, "max_nodes", max_nodes)
    dtypes = check_dtypes("dtypes", dtypes)
    names = GRAPH_OPS if ops is None else check_choices("ops", ops, GRAPH_OPS)
    chosen = tuple(_BY_NAME[name] for name in names)
    completable = _completable(min_nodes, max_nodes, {op.cost for op in chosen})
    if not completable[0]:
        costs = {op.name: op.cost for op in chosen}
        raise InvalidArgument(
            f"no graph of ops={list(names)!r} (op nodes each: {costs}) has between min_nodes={min_nodes} "
            f"and max_nodes={max_nodes} op nodes"
        )
    return _graphs(_Spec(min_nodes, max_nodes, tuple(names), dtypes, completable))
