"""``fx_graphs``: random aten-level DAGs, valid by construction, as Inductor's post-grad passes see them
(or make_fx's graphs, or every form: ``level=``).

A graph grows one op at a time, in topological order: draw an op among those that fit the node
budget (:data:`~pmverify.strategies._graph_ops.GRAPH_OPS`, simplest first), draw its first operand
among the recent values it applies to (the most recent first, so failures shrink to a chain) or a new
input, let the op draw its parameters and other operands, and emit its ``call_function`` nodes.
Shapes, dtypes and strides come from running each op on fake tensors in the case's one
``FakeTensorMode`` as it is emitted (that is also every node's ``meta["val"]``); each op applies only
where its shape rules, and a bound on the magnitude of values (see :mod:`._graph_ops`), hold.

Nothing is filtered: measured with Hypothesis' statistics (``hypothesis.statistics.collector``, what
``pytest --hypothesis-show-statistics`` prints) over 1000 generated ``fx_graphs()`` cases (the 54 ops of level "post_grad",
every argument form and dtype), the filter/``assume`` rejection rate is 0% (0 cases of status
"invalid"; ``tests/strategies/test_graphs.py`` checks it stays under 1%); 0 of 1000 at each
``level`` (``"post_grad"``, ``"pre_grad"``, ``"any"``; measured with ``tests/strategies/_minimal.py``'s
``rejections``). The ~300 "overrun"
attempts that the statistics also count as invalid are not rejections: the engine cuts its early
test cases at 5 times the length of the minimal one, as for any strategy of varying size
(``st.lists(st.tuples(st.integers(), st.floats()))`` shows ~15 per 100).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._case import GraphCase
from .._validation import validate_choices, validate_dtypes, validate_int, validate_optional_int, validate_order
from ._device import cases_on, validated
from ._dynamic import Dynamic, symbolize_drawn, validate_dynamic
from ._graph_ops import GRAPH_DTYPES, GRAPH_OPS, LEVELS, OPS, GraphOp
from ._ops_core import Builder
from ._public import public_call

__all__ = ["fx_graphs", "GRAPH_OPS", "GRAPH_DTYPES", "GRAPH_DTYPES_WITHOUT_FLOAT64", "LEVELS"]

_DEFAULT_MAX_NODES = 8
#: Dtypes of ``fx_graphs()``, simplest first: float32, then the other floating dtypes real
#: post-grad graphs compute in, int64 (indices, argmax), int32 and bool (masks). float64 is left
#: out: the semantics oracle's reference computes in float64, so a float64 graph is its own reference.
GRAPH_DTYPES_WITHOUT_FLOAT64 = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool)
#: The old name of :data:`GRAPH_DTYPES_WITHOUT_FLOAT64` (``fx_graphs``' default ``dtypes``).
DEFAULT_GRAPH_DTYPES = GRAPH_DTYPES_WITHOUT_FLOAT64
_BY_NAME = {op.name: op for op in OPS}


@dataclasses.dataclass(frozen=True)
class _Spec:
    """Canonical arguments of :func:`fx_graphs`; ``completable[n]``: a graph of ``n`` op nodes can
    still end with between ``min_nodes`` and ``max_nodes`` of them."""

    min_nodes: int
    max_nodes: int
    op_names: tuple[str, ...]  # names, not GraphOps: the spec's repr shows in Hypothesis' notes
    dtypes: tuple[torch.dtype, ...]
    completable: tuple[bool, ...]
    level: str = "post_grad"

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
def _graphs(draw: Any, spec: _Spec, dynamic: Dynamic = False) -> GraphCase:
    builder = Builder(draw, spec.dtypes, spec.level)
    while True:
        op = draw(st.sampled_from(spec.fitting(builder.op_nodes)))
        x = None
        if not op.nullary:
            try:
                x = builder.operand(
                    lambda v, op=op: op.takes(builder, v), op.fresh, op.dtypes(spec.dtypes), dynamic=dynamic
                )
            except AssertionError as error:
                raise AssertionError(f"{op.name}: {error}") from None
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
    case = symbolize_drawn(draw, builder.finish("fx_graphs"), dynamic)
    if spec.level == "post_grad" and case.symbols:
        _reshapes_as_post_grad(case.gm)
    return case


#: What the symbolic re-trace (make_fx) writes for ``reshape.default`` and what post-grad graphs hold
#: instead (Inductor's ``view_to_reshape`` runs before the post-grad passes; ``_unsafe_view``
#: decomposes to a view).
_RETRACED_RESHAPES = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default}


def _reshapes_as_post_grad(gm: torch.fx.GraphModule) -> None:
    """Write the views the symbolic re-trace made of ``reshape`` as post-grad graphs do: ``reshape``."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _RETRACED_RESHAPES:
            node.target, changed = torch.ops.aten.reshape.default, True
    if changed:
        gm.recompile()


def fx_graphs(
    *,
    min_nodes: int = 1,
    max_nodes: int | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    ops: Sequence[str] | None = None,
    dynamic: bool | str | Sequence[str] = False,
    level: str = "post_grad",
    device: str | torch.device | None = None,
) -> st.SearchStrategy[GraphCase]:
    """Return a strategy for :class:`~pmverify.GraphCase` graphs of random aten ops, each drawn
    with the arguments it really takes.

    Each case's ``gm`` is a DAG of ``call_function`` nodes on ``torch.ops.aten`` (and
    ``torch.ops.prims.convert_element_type``) overloads, as Inductor's post-grad graphs and make_fx
    traces hold them: one placeholder per input (``x0``, ``x1``, ... first), ops in topological
    order, and an output that returns the tuple of every sink (no node is dead). Arguments follow
    make_fx's convention: positional arguments positionally, trailing defaults omitted or spelled
    out, keyword-only arguments (``alpha``, ``dtype``, ``memory_format``...) as keywords. Every node
    carries ``meta["val"]``, a fake tensor from one ``FakeTensorMode`` per case. ``inputs`` is a
    list of one tuple per rank (here one: ``[(x0, x1, ...)]``) of real CPU tensors drawn by :func:`~pmverify.strategies.tensors` (floats at scales
    2**-24 .. 2**16 with zero, all-equal, tiny and outlier rows; ints in [0, 8), index tensors in
    range); ``tp_world=1``, ``form="functional"``, ``planted=()``, ``label="fx_graphs"``. Every value
    is finite on its inputs (and on any no larger in magnitude); values have rank 0..4, at most 1024
    elements, and a dtype among ``dtypes`` (bool masks ``where`` builds for itself aside).

    The ops are :data:`GRAPH_OPS` (simplest first; :mod:`._graph_ops` holds every form): elementwise,
    reductions and scans, views, slicing and indexing, contractions and creation. A share of number
    operands, clamps, casts and views take the op's identity or absorbing constant (``x * 1``, an int
    ``x * 1.0``, ``x + 0``, ``x * 0``, a clamp at the dtype's limits, a same-dtype cast, a same-shape
    view). A binary op's other operand is a recent value whose shape fits or a new input shaped to
    fit; empty values flow on only into ops that take them. Every op, constant and level form:
    the documentation's "The strategies" page (docs/strategies.md), "The op catalogue of fx_graphs".

    - ``min_nodes`` / ``max_nodes``: bounds on the number of op nodes (``call_function`` nodes
      other than ``operator.getitem``; an op emitted with guards counts every node it adds: ``log``,
      ``div``, ``matmul`` and ``where_scalar`` 3, ``where``, ``reshape`` and ``empty_fill`` 2).
      Default 1..8 (``max_nodes=None``: 8, or ``min_nodes`` if larger). Past ``min_nodes`` the graph
      grows by one more op with probability k / (k + 1), k = max(1, (max_nodes - min_nodes) // 2).
    - ``dtypes``: the dtypes of inputs and values, simplest first, from :data:`GRAPH_DTYPES`
      (float32, float16, bfloat16, float64, int64, int32, bool); default
      :data:`GRAPH_DTYPES_WITHOUT_FLOAT64`: all but float64 (the semantics oracle's float64 reference would
      be the graph itself), so that int index tensors and bool masks show up by default while
      float32 stays the simplest. An op applies to the dtypes it supports (``exp`` to floats,
      ``argmax`` where int64 is allowed...), and only where its result's dtype is allowed.
    - ``ops``: names from :data:`GRAPH_OPS` to draw from, simplest first in the caller's order
      (default all); those that apply to none of ``dtypes`` are left out. Any single op can make a
      graph: an op that fits no value gets a new input.
    - ``dynamic``: symbolic sizes, as torch.compile's ``dynamic=True`` gives a pass its graph
      (see :func:`pmverify.symbolize`). ``False`` (default): static, drawn exactly as without
      it. ``True``: each dim of a new input (an op's first operand, not one shaped to fit another
      value) is drawn static (the simplest), at 11 (symbol ``s0``) or at 13 (``s1``); ``"tokens"``
      (or ``["tokens"]``): the leading dim of every new input is the token count ``s0`` (11). Inputs
      shaped to fit a value share its symbols (duck sizing). The drawn case is then traced again
      in a ``ShapeEnv``: ``Sym`` placeholders ``s0`` / ``s1`` first, ``SymInt`` size arguments
      (``view(x, [s0, 4])``), symbolic ``meta["val"]``, and :attr:`~pmverify.GraphCase.symbols`
      with the range the graph's guards allow and the sizes the oracles run at (hint, range ends,
      one drawn). A case can come out static: no dim drawn at a hint, an op that does not accept
      the hinted shape, or a symbol the graph specialises (a ``cat`` of 8 and 3 rows added to an
      11-row input).

    - ``level``: which graphs' forms to draw, one of :data:`LEVELS`: ``"post_grad"`` (default: what
      torch.compile hands a post-grad pass), ``"pre_grad"`` (the forms make_fx writes) or ``"any"``
      (every form, also those no traced graph holds: for robustness runs). Ops of ``ops`` not at the
      level are left out.
    - ``device``: the device of the cases (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a
      ``torch.device``; default None: CPU). A case is drawn on CPU exactly as without it, then
      moved whole (:func:`pmverify.device.on_device`: inputs with their strides and aliasing, the
      graph's ``device=`` arguments and fake values).

    Shrinks toward one op on one input with default arguments: ``x0 -> neg -> output``, x0 a
    float32 ``[1]`` of zeros; each op toward its simplest form (``slice.Tensor(x, 0, 0, 1)``,
    ``sum.dim_IntList(x, [0])``, ``add.Tensor(x, 1.0)``).

    Raises ``hypothesis.errors.InvalidArgument`` for bounds that are not ints or are below 1,
    ``min_nodes > max_nodes``, a bound no sum of the ops' node counts can meet, ``dtypes`` empty or
    holding another dtype, ``ops`` empty, a string, holding an unknown name, or none of which
    applies to ``dtypes`` at ``level``, ``dynamic`` not a bool, ``"tokens"`` or a non-empty list
    of it, ``level`` not one of :data:`LEVELS`, and a ``device`` that is not a CPU or CUDA device;
    :class:`pmverify.DeviceUnavailable` when drawing on a device this machine lacks.

    Example::

        @given(fx_graphs(max_nodes=12, dtypes=[torch.bfloat16, torch.int64, torch.bool]))
        def test_my_pass(case):
            result = pmverify.check_case(MyPass(), case)
            assert result.ok, result.violations
    """
    given_max, given_dtypes, given_ops, given_dynamic = max_nodes, dtypes, ops, dynamic
    dynamic = validate_dynamic("dynamic", dynamic)
    if not isinstance(level, str) or level not in LEVELS:
        raise InvalidArgument(f"level={level!r} must be one of {', '.join(map(repr, LEVELS))}")
    validate_int("min_nodes", min_nodes, minimum=1)
    validate_optional_int("max_nodes", max_nodes, minimum=1)
    if max_nodes is None:
        max_nodes = max(_DEFAULT_MAX_NODES, min_nodes)
    validate_order("min_nodes", min_nodes, "max_nodes", max_nodes)
    dtypes = GRAPH_DTYPES_WITHOUT_FLOAT64 if dtypes is None else validate_dtypes("dtypes", dtypes, GRAPH_DTYPES)
    given = GRAPH_OPS if ops is None else validate_choices("ops", ops, GRAPH_OPS)
    names = tuple(name for name in given if _BY_NAME[name].dtypes(dtypes) and level in _BY_NAME[name].levels)
    if not names:
        raise InvalidArgument(f"none of ops={list(given)!r} applies to dtypes={list(dtypes)!r} at level={level!r}")
    chosen = tuple(_BY_NAME[name] for name in names)
    completable = _completable(min_nodes, max_nodes, {op.cost for op in chosen})
    if not completable[0]:
        costs = {op.name: op.cost for op in chosen}
        raise InvalidArgument(
            f"no graph of ops={list(names)!r} (op nodes each: {costs}) has between min_nodes={min_nodes} "
            f"and max_nodes={max_nodes} op nodes"
        )
    target = validated(device)
    drawn = _graphs(_Spec(min_nodes, max_nodes, tuple(names), dtypes, completable, level), dynamic)
    public = public_call(
        fx_graphs,
        drawn,
        min_nodes=min_nodes,
        max_nodes=given_max,
        dtypes=given_dtypes,
        ops=given_ops,
        dynamic=given_dynamic,
        level=level,
        device=device,
    )
    return cases_on(public, target)
