"""The core of the op table of :func:`~pmverify.strategies.fx_graphs`: values, ops, bounds, shapes.

A :class:`Builder` is the graph under construction that the ops emit into; a :class:`Val` is one
of its values (its node, fake tensor, a bound on its magnitude, and whether it is known
non-negative); a :class:`GraphOp` is one entry of the table. The
families of ops live in ``_ops_elementwise``, ``_ops_reductions``, ``_ops_views``, ``_ops_slicing``,
``_ops_creation`` and ``_ops_contraction``; ``_graph_ops`` assembles them in order.

Values stay finite by construction: each op computes the bound of its result from its operands'
bounds, and applies only where that bound stays under the cap of the result's dtype
(:func:`bound_cap`: 1024 in float16, 64 times below its 65504, 2**40 in the wide floating dtypes,
2**24 in int32...). The 64-fold room absorbs what :func:`~pmverify.strategies.with_mutations` adds to
a value (at most 2 per in-place op).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import snapshot_fake

from .._case import GraphCase
from .._compat import FakeTensorMode
from ._dynamic import Dynamic, hinted_shape
from ._tensors import DEFAULT_BOUND, max_magnitude_of, shapes, tensors

__all__ = [
    "Builder",
    "Val",
    "GraphOp",
    "BOUND_CAP",
    "MAX_NUMEL",
    "MAX_RANK",
    "MAX_SIDE",
    "INT64_MAX",
    "bound_cap",
    "kind_of",
    "promoted",
    "fits",
    "broadcast",
    "broadcastable",
    "refactored",
    "FLOAT",
    "NUMERIC",
    "ANY",
    "CPU",
    "of_kinds",
    "with_inferred",
    "signed_dim",
    "optional",
    "kwargs_of",
    "FRESH",
    "fresh_bound",
    "provisional",
    "LEVELS",
    "EVERY_LEVEL",
    "POST_GRAD",
    "PRE_GRAD",
    "ANY_ONLY",
    "at_level",
    "IDENTITY_SHARE",
    "INT_IDENTITY_SHARE",
    "identity_drawn",
    "dtype_limits",
]

aten = torch.ops.aten

#: Largest magnitude of a float16 value (64 times below its 65504); see :func:`bound_cap`.
BOUND_CAP = 1024.0
_CAPS = {torch.float16: BOUND_CAP, torch.int32: 2.0**24, torch.bool: math.inf}
_WIDE_CAP = 2.0**40
#: Largest number of elements of any value; fresh inputs have at most 8**3 = 512.
MAX_NUMEL = 1024
MAX_RANK = 4
#: Largest side of a fresh input or a drawn size, in elements.
MAX_SIDE = 8
#: What dynamo and make_fx write for an omitted slice end (``x[a:]``): ``sys.maxsize``.
INT64_MAX = 9223372036854775807
CPU = torch.device("cpu")
FRESH = shapes(min_dims=1, max_dims=3, max_side=MAX_SIDE)

#: The levels of :func:`~pmverify.strategies.fx_graphs` (``level=``): what torch.compile hands a
#: post-grad pass, what make_fx / pre-grad aten IR (before Inductor's decompositions) holds, or
#: every form the table knows (robustness runs).
LEVELS = ("post_grad", "pre_grad", "any")
#: Tags of an op or an argument form: the levels whose graphs hold it ("any" holds every form).
EVERY_LEVEL = frozenset(LEVELS)
POST_GRAD = frozenset({"post_grad", "any"})
PRE_GRAD = frozenset({"pre_grad", "any"})
#: Forms no traced graph holds (only a hand-written aten call does): drawn at level "any" only.
ANY_ONLY = frozenset({"any"})

#: Dtype kinds an op applies to.
FLOAT = ("float",)
NUMERIC = ("float", "int")
ANY = ("float", "int", "bool")


def bound_cap(dtype: torch.dtype) -> float:
    """The largest bound a value of ``dtype`` may have: 1024 in float16, 2**24 in int32, 2**40 in
    float32, bfloat16, float64 and int64; none for bool (a bool result's bound is 1)."""
    return _CAPS.get(dtype, _WIDE_CAP)


def kind_of(dtype: torch.dtype) -> str:
    """ "float", "int" or "bool"."""
    if dtype == torch.bool:
        return "bool"
    return "float" if dtype.is_floating_point else "int"


def _key(operand: Any) -> tuple[Any, bool]:
    """What type promotion reads of an operand: its dtype (a Python type for a number) and whether
    it is a dimensionless (0-d or Python number) operand."""
    if isinstance(operand, Val):
        return operand.dtype, operand.rank == 0
    return type(operand), True


@functools.lru_cache(maxsize=1024)
def _promoted(keys: tuple[tuple[Any, bool], ...]) -> torch.dtype:
    def meta(key: tuple[Any, bool]) -> Any:
        kind, zero_dim = key
        if isinstance(kind, torch.dtype):
            return torch.empty(() if zero_dim else (1,), dtype=kind, device="meta")
        return kind(1)

    result = meta(keys[0])
    if not isinstance(result, torch.Tensor):
        result = torch.tensor(result, device="meta")
    for key in keys[1:]:
        other = meta(key)
        dtype = torch.result_type(result, other)
        zero_dim = result.dim() == 0 and (not isinstance(other, torch.Tensor) or other.dim() == 0)
        result = torch.empty(() if zero_dim else (1,), dtype=dtype, device="meta")
    return result.dtype


def promoted(*operands: Any) -> torch.dtype:
    """The dtype torch's type promotion gives ``operands`` (:class:`Val` or Python numbers); a 0-d
    value counts as a 0-d tensor, as in torch."""
    return _promoted(tuple(_key(op) for op in operands))


@dataclasses.dataclass
class Val:
    """A value of the graph under construction: its node (None for a provisional value that only
    asks whether an op would accept a fresh input), its fake tensor, a bound on its magnitude over
    the case's inputs, and whether it is known to be >= 0."""

    node: torch.fx.Node | None
    bound: float
    fake: torch.Tensor
    nonneg: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.fake.shape)

    @property
    def dtype(self) -> torch.dtype:
        return self.fake.dtype

    @property
    def kind(self) -> str:
        return kind_of(self.fake.dtype)

    @property
    def rank(self) -> int:
        return self.fake.dim()

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def of_kinds(op: GraphOp, dtypes: Sequence[torch.dtype]) -> tuple[torch.dtype, ...]:
    """The default ``operand_dtypes``: the dtypes of a kind the op applies to."""
    return tuple(d for d in dtypes if kind_of(d) in op.kinds)


@dataclasses.dataclass(frozen=True)
class GraphOp:
    """One entry of the op table.

    - ``name``: the name ``fx_graphs(ops=...)`` takes.
    - ``cost``: op nodes it adds (``operator.getitem`` nodes are not counted).
    - ``emit``: ``emit(builder, x)`` adds the op on first operand ``x`` (None for a ``nullary``
      op); draws everything else.
    - ``accepts``: ``accepts(builder, x)``: whether a value of a kind in ``kinds``, of rank >=
      ``min_rank`` and non-empty unless ``empty_ok``, can be the first operand.
    - ``fresh``: shapes of a new first operand; every one is accepted at bound 2 in every dtype
      ``operand_dtypes`` gives.
    - ``kinds``: dtype kinds of the first operand ("float", "int", "bool").
    - ``operand_dtypes``: ``operand_dtypes(dtypes)``: the dtypes among the case's ``dtypes`` a
      fresh first operand may take (for a nullary op: those it may create); none: the op does not
      apply to these dtypes. Default: those of a kind in ``kinds``.
    - ``levels``: the levels whose graphs hold the op's node forms (see :data:`LEVELS`); its
      argument forms carry their own tags (:func:`at_level`).
    """

    name: str
    cost: int
    emit: Callable[[Builder, Val | None], None]
    accepts: Callable[[Builder, Val], bool] = lambda b, x: True
    fresh: st.SearchStrategy[tuple[int, ...]] = FRESH
    kinds: tuple[str, ...] = FLOAT
    min_rank: int = 1
    empty_ok: bool = False
    nullary: bool = False
    operand_dtypes: Callable[[GraphOp, Sequence[torch.dtype]], tuple[torch.dtype, ...]] = of_kinds
    levels: frozenset[str] = EVERY_LEVEL

    def takes(self, b: Builder, x: Val) -> bool:
        """Whether ``x`` can be the first operand."""
        return (
            x.kind in self.kinds and x.rank >= self.min_rank and (self.empty_ok or x.numel > 0) and self.accepts(b, x)
        )

    def dtypes(self, dtypes: Sequence[torch.dtype]) -> tuple[torch.dtype, ...]:
        return self.operand_dtypes(self, dtypes)


def at_level(b: Builder, forms: Sequence[tuple[Any, frozenset[str]]]) -> list[Any]:
    """The forms of a table of ``(form, levels)`` pairs (simplest first) that the graphs of the
    builder's level hold."""
    return [form for form, levels in forms if b.level in levels]


def fresh_bound(dtype: torch.dtype) -> float:
    """The bound a new input of ``dtype`` has at least: 2 for floats (see ``Builder.new_input``),
    7 for integers (values in [0, 8)), 1 for bool."""
    return DEFAULT_BOUND if dtype.is_floating_point else max_magnitude_of(dtype)


def provisional(shape: tuple[int, ...], dtype: torch.dtype) -> Val:
    """A value standing for a new input of ``shape`` and ``dtype`` at its smallest bound: what the
    builder asks an op's ``accepts`` before drawing the input."""
    fake = torch.empty(shape, dtype=dtype, device="meta")
    return Val(None, fresh_bound(dtype), fake, not dtype.is_floating_point)


def fits(shape: tuple[int, ...] | None) -> bool:
    return shape is not None and len(shape) <= MAX_RANK and math.prod(shape) <= MAX_NUMEL


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast shape of ``a`` and ``b``, or None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


@st.composite
def broadcastable(draw: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``shape``: leading dims dropped, some sizes set to 1. Shrinks to
    ``shape`` itself."""
    drop = draw(st.integers(0, max(0, len(shape) - 1)))
    return tuple(1 if draw(st.booleans()) else side for side in shape[drop:])


def _prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors + ([n] if n > 1 else [])


@st.composite
def refactored(draw: Any, numel: int, max_rank: int = MAX_RANK) -> tuple[int, ...]:
    """A shape of rank 1..``max_rank`` with ``numel`` elements (one side 0 when ``numel`` is 0).
    Shrinks to ``(numel,)``."""
    sides = [1] * draw(st.integers(1, max_rank))
    if numel == 0:
        sides[draw(st.integers(0, len(sides) - 1))] = 0
        return tuple(sides)
    for p in _prime_factors(numel):
        sides[draw(st.integers(0, len(sides) - 1))] *= p
    return tuple(sides)


def with_inferred(draw: Any, sizes: Sequence[int]) -> list[int]:
    """``sizes`` as a view's size list, maybe with one (non-zero) size written -1, as dynamo writes
    ``x.view(-1, n)``; shrinks to no -1."""
    sizes = list(sizes)
    candidates = [i for i, side in enumerate(sizes) if side > 0]
    if candidates and draw(st.booleans()):
        sizes[draw(st.sampled_from(candidates))] = -1
    return sizes


def signed_dim(draw: Any, dim: int, rank: int) -> int:
    """``dim`` as written in a graph: itself, or counted from the end (``dim - rank``); shrinks to
    itself."""
    return dim - rank if rank > 0 and draw(st.booleans()) else dim


def optional(draw: Any, choices: Sequence[Any]) -> Any:
    """``None`` (omitted, the simplest) or one of ``choices``."""
    return draw(st.sampled_from([None, *choices]))


#: The share of scalar constants, cast dtypes and view sizes drawn as an identity or absorbing one
#: (``x * 1``, ``x + 0``, ``x * 0``, a cast to ``x``'s own dtype, a view to ``x``'s own shape, a
#: clamp at the dtype's limits): 1 in ``IDENTITY_SHARE``, so that a peephole pass meets what it folds.
IDENTITY_SHARE = 5
#: The share for a number operand of an int value (1 in ``INT_IDENTITY_SHARE``): there an identity
#: may be none, by type promotion (``x * 1.0`` of an int ``x`` is float32), so it is drawn more often.
INT_IDENTITY_SHARE = 3


def identity_drawn(draw: Any, share: int = IDENTITY_SHARE) -> bool:
    """Whether this constant is an identity (or absorbing) one, 1 in ``share``; shrinks to not."""
    return draw(st.integers(0, share - 1)) == share - 1


def dtype_limits(dtype: torch.dtype) -> tuple[Any, ...]:
    """The limits of ``dtype``, lowest first: ``-inf, finfo.min`` and ``finfo.max, inf`` for a
    floating dtype, ``iinfo.min`` and ``iinfo.max`` for an int one, none for bool."""
    if dtype == torch.bool:
        return ()
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        return (-math.inf, float(info.min), float(info.max), math.inf)
    info = torch.iinfo(dtype)
    return (int(info.min), int(info.max))


def kwargs_of(**given: Any) -> dict[str, Any]:
    """The keyword arguments that were given (not None)."""
    return {name: value for name, value in given.items() if value is not None}


#: How many of the most recent fitting values an operand is drawn from (besides a new input).
_WINDOW = 4


class Builder:
    """A graph under construction (what every op of the table emits into): its nodes, fake mode,
    values and real inputs."""

    def __init__(self, draw: Any, dtypes: Sequence[torch.dtype], level: str = "post_grad") -> None:
        self.draw = draw
        self.dtypes = tuple(dtypes)
        self.level = level
        self.graph = torch.fx.Graph()
        self.mode = FakeTensorMode()
        self.values: list[Val] = []
        self.inputs: list[torch.Tensor] = []
        self.op_nodes = 0
        self._last_input: torch.fx.Node | None = None

    def allows(self, dtype: torch.dtype) -> bool:
        """Whether values of ``dtype`` may appear (``dtype`` is one of the case's dtypes)."""
        return dtype in self.dtypes

    def of_kinds(self, kinds: Sequence[str]) -> list[torch.dtype]:
        return [d for d in self.dtypes if kind_of(d) in kinds]

    def new_input(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        *,
        max_magnitude: float | None = None,
        elements: st.SearchStrategy | None = None,
    ) -> Val:
        """A new placeholder (after the others) holding a tensor drawn by :func:`tensors`. Its bound
        is its real magnitude, at least 2 for a floating input (room for what ``with_mutations`` and
        ``tp_cases`` may give it)."""
        if elements is not None:
            real = self.draw(tensors(dtype, shape, elements=elements))
        else:
            real = self.draw(tensors(dtype, shape, max_magnitude=max_magnitude))
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
        if dtype == torch.bool:
            magnitude, nonneg = 1.0, True
        elif dtype.is_floating_point:  # with_mutations may make it negative
            magnitude, nonneg = max(float(real.abs().max()) if real.numel() else 0.0, DEFAULT_BOUND), False
        else:  # never written: exact
            magnitude = float(real.abs().max()) if real.numel() else 0.0
            nonneg = not real.numel() or bool(real.min() >= 0)
        value = Val(node, magnitude, node.meta["val"], nonneg)
        self.values.append(value)
        return value

    def _largest_accepted(self, accepts: Callable[[Val], bool], shape: tuple[int, ...], dtype: torch.dtype) -> float:
        """The largest magnitude (a power of two from the dtype's default down to 2) at which
        ``accepts`` takes a new input of ``shape`` and ``dtype``."""
        meta = torch.empty(shape, dtype=dtype, device="meta")
        if not dtype.is_floating_point:
            return max_magnitude_of(dtype)
        magnitude = max_magnitude_of(dtype)
        while magnitude > DEFAULT_BOUND and not accepts(Val(None, magnitude, meta)):
            magnitude /= 2
        return magnitude

    def operand(
        self,
        accepts: Callable[[Val], bool],
        fresh: st.SearchStrategy[tuple[int, ...]],
        dtypes: Sequence[torch.dtype],
        *,
        elements: st.SearchStrategy | None = None,
        dynamic: Dynamic = False,
    ) -> Val:
        """One of the ``_WINDOW`` most recent values that ``accepts`` (the most recent first), or a
        new input of one of ``dtypes`` whose shape ``fresh`` draws (and that ``accepts`` by the op
        table's contract), with values from ``elements`` if given (index tensors). With ``dynamic``
        (not for index tensors), the new input's symbolic dims are drawn at their hints where
        ``accepts`` takes that shape (:func:`~._dynamic.hinted_shape`)."""
        candidates = list(itertools.islice((value for value in reversed(self.values) if accepts(value)), _WINDOW))
        if candidates:
            i = self.draw(st.integers(0, len(candidates)))
            if i < len(candidates):
                return candidates[i]
        shape = self.draw(fresh)
        if dynamic and elements is None:
            shape = hinted_shape(
                self.draw, shape, dynamic, accepted=lambda s: any(accepts(provisional(s, d)) for d in dtypes)
            )
        fitting = list(dtypes) if elements is not None else [d for d in dtypes if accepts(provisional(shape, d))]
        if not fitting:
            raise AssertionError(f"the op table's fresh input of shape {shape} is accepted in none of {list(dtypes)}")
        dtype = self.draw(st.sampled_from(fitting))
        if elements is not None:
            value = self.new_input(shape, dtype, elements=elements)
        else:
            value = self.new_input(shape, dtype, max_magnitude=self._largest_accepted(accepts, shape, dtype))
        if not accepts(value):
            raise AssertionError(f"the op table's fresh {dtype} input of shape {value.shape} is not accepted")
        return value

    def call(
        self,
        target: Any,
        args: tuple,
        kwargs: dict | None = None,
        *,
        bound: float | None = None,
        nonneg: bool = False,
    ) -> torch.fx.Node:
        """Emit ``target(*args, **kwargs)``; with ``bound``, its result becomes a value (of one of the
        case's dtypes, with that bound on its magnitude)."""
        kwargs = kwargs or {}
        if isinstance(target, torch._ops.OpOverload):
            positional = {a.name for a in target._schema.arguments if not a.kwarg_only}
            if positional & set(kwargs):  # make_fx's convention: positional arguments positionally
                raise AssertionError(f"{target} given positional arguments {positional & set(kwargs)} as keywords")
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
            if node.meta["val"].dtype == torch.bool:
                bound, nonneg = 1.0, True
            value = Val(node, float(bound), node.meta["val"], nonneg)
            if not self.allows(value.dtype):
                raise AssertionError(f"{target} made a {value.dtype} value; the case's dtypes are {self.dtypes}")
            self.values.append(value)
        return node

    def finish(self, label: str) -> GraphCase:
        """The case: its output returns every sink (value without users), in graph order."""
        sinks = [value.node for value in self.values if not value.node.users]
        output = self.graph.output(tuple(sinks))
        output.meta["val"] = tuple(node.meta["val"] for node in sinks)
        gm = torch.fx.GraphModule(torch.nn.Module(), self.graph)
        return GraphCase(gm=gm, inputs=[tuple(self.inputs)], tp_world=1, form="functional", label=label)
