"""The op table of :func:`~pmverify.strategies.fx_graphs`: what each op applies to and what it emits.

Every entry (a :class:`GraphOp`) says which values it applies to (``accepts``: rank, sizes, dtype,
contiguity, value bound), which fresh input shapes it applies to (``fresh``: a graph can always grow
by any op, on a new input if no value fits), how many op nodes it adds (``cost``) and how it emits
them (``emit``: draws its parameters and other operands, then adds ``call_function`` nodes on
``torch.ops.aten`` / ``torch.ops.prims`` overloads, as in Inductor's post-grad graphs).

Values stay finite by construction: every value carries a ``bound`` on its magnitude over all the
inputs :func:`~pmverify.strategies.tensors` draws by default (|x| <= 2), each op computes the bound
of its result, and an op applies only where that bound stays under :data:`BOUND_CAP` (far below
float16's 65504). Ops with a partial domain are emitted with a guard: ``log(|x| + 1)``,
``x / (|y| + 1)``; ``exp`` applies only to values bounded by 4. Values have rank 1..4 and at most
:data:`MAX_NUMEL` elements.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st

from ._tensors import DEFAULT_BOUND, shapes
from ._validation import FLOAT_DTYPES

if TYPE_CHECKING:
    from ._graphs import _Builder

__all__ = ["GRAPH_OPS", "GraphOp", "OPS", "Val", "BOUND_CAP", "MAX_NUMEL", "MAX_RANK", "MAX_SIDE"]

aten = torch.ops.aten
prims = torch.ops.prims

#: Largest magnitude any value may reach (inputs: :data:`DEFAULT_BOUND`).
BOUND_CAP = 1024.0
#: Largest number of elements of any value; fresh inputs have at most 8**3 = 512.
MAX_NUMEL = 1024
MAX_RANK = 4
#: Largest side of a fresh input or a drawn size, in elements.
MAX_SIDE = 8
_FRESH = shapes(min_dims=1, max_dims=3, max_side=MAX_SIDE)


@dataclasses.dataclass
class Val:
    """A float value of the graph under construction: its node (``meta["val"]`` set) and a bound
    on its magnitude."""

    node: torch.fx.Node
    bound: float

    @property
    def fake(self) -> torch.Tensor:
        return self.node.meta["val"]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.fake.shape)

    @property
    def dtype(self) -> torch.dtype:
        return self.fake.dtype

    @property
    def rank(self) -> int:
        return self.fake.dim()

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class GraphOp:
    """One entry of the op table.

    - ``name``: the name ``fx_graphs(ops=...)`` takes.
    - ``cost``: op nodes it adds (``operator.getitem`` nodes are not counted).
    - ``emit``: ``emit(builder, x)`` adds the op on first operand ``x``; draws everything else.
    - ``accepts``: whether a value can be the first operand.
    - ``fresh``: shapes of a new input that ``accepts`` (float dtype, bound :data:`DEFAULT_BOUND`).
    """

    name: str
    cost: int
    emit: Callable[[_Builder, Val], None]
    accepts: Callable[[Val], bool]
    fresh: st.SearchStrategy[tuple[int, ...]] = _FRESH


def _fits(shape: tuple[int, ...] | None) -> bool:
    return shape is not None and len(shape) <= MAX_RANK and math.prod(shape) <= MAX_NUMEL


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast shape of ``a`` and ``b``, or None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(reversed(out))


@st.composite
def _broadcastable(draw: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``shape``: leading dims dropped, some sizes set to 1. Shrinks to
    ``shape`` itself."""
    drop = draw(st.integers(0, len(shape) - 1))
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
def _refactored(draw: Any, numel: int) -> tuple[int, ...]:
    """A shape of rank 1..4 with ``numel`` elements. Shrinks to ``(numel,)``."""
    sides = [1] * draw(st.integers(1, MAX_RANK))
    for p in _prime_factors(numel):
        sides[draw(st.integers(0, len(sides) - 1))] *= p
    return tuple(sides)


def _always(x: Val) -> bool:
    return True


# ---------------------------------------------------------------------------------- elementwise


def _unary(name: str, target: Any, bound: Callable[[float], float] = lambda b: b, limit: float = BOUND_CAP) -> GraphOp:
    def emit(b: _Builder, x: Val) -> None:
        b.call(target, (x.node,), bound=bound(x.bound))

    return GraphOp(name, 1, emit, lambda x: x.bound <= limit and bound(x.bound) <= BOUND_CAP)


def _with_constant(name: str, target: Any, constants: tuple[float, ...], bound: Callable[[float, float], float]):
    """``target(x, c)`` with a Python float ``c`` (``aten.add.Tensor(x, 1.0)``, as post-grad graphs
    write scalar arithmetic)."""

    def emit(b: _Builder, x: Val) -> None:
        c = b.draw(st.sampled_from(constants))
        b.call(target, (x.node, c), bound=bound(x.bound, c))

    return GraphOp(name, 1, emit, lambda x: all(bound(x.bound, c) <= BOUND_CAP for c in constants))


def _log(b: _Builder, x: Val) -> None:
    shifted = b.call(aten.add.Tensor, (b.call(aten.abs.default, (x.node,)), 1.0))
    b.call(aten.log.default, (shifted,), bound=math.log1p(x.bound))


def _square(b: _Builder, x: Val) -> None:
    b.call(aten.pow.Tensor_Scalar, (x.node, 2), bound=x.bound * x.bound)


def _clamp(b: _Builder, x: Val) -> None:
    low, high = b.draw(st.sampled_from(((-1.0, 1.0), (0.0, 1.0), (-0.5, 0.5))))
    b.call(aten.clamp.default, (x.node, low, high), bound=min(x.bound, 1.0))


def _cast(b: _Builder, x: Val) -> None:
    dtype = b.draw(st.sampled_from([d for d in FLOAT_DTYPES if d != x.dtype]))
    b.call(prims.convert_element_type.default, (x.node, dtype), bound=x.bound)


def _second(b: _Builder, x: Val, bound: Callable[[float, float], float]) -> Val:
    """A same-dtype operand that broadcasts with ``x`` (``x`` itself first, then recent values,
    then a new input)."""

    def accepts(v: Val) -> bool:
        return v.dtype == x.dtype and _fits(_broadcast(x.shape, v.shape)) and bound(x.bound, v.bound) <= BOUND_CAP

    return b.operand(accepts, _broadcastable(x.shape), dtype=x.dtype)


def _binary(name: str, target: Any, bound: Callable[[float, float], float]) -> GraphOp:
    def emit(b: _Builder, x: Val) -> None:
        y = _second(b, x, bound)
        b.call(target, (x.node, y.node), bound=bound(x.bound, y.bound))

    return GraphOp(name, 1, emit, lambda x: bound(x.bound, DEFAULT_BOUND) <= BOUND_CAP)


def _div(b: _Builder, x: Val) -> None:
    y = _second(b, x, lambda bx, by: bx)
    divisor = b.call(aten.add.Tensor, (b.call(aten.abs.default, (y.node,)), 1.0))
    b.call(aten.div.Tensor, (x.node, divisor), bound=x.bound)


def _where(b: _Builder, x: Val) -> None:
    y = _second(b, x, max)
    mask = b.call(aten.gt.Scalar, (x.node, 0.0))
    b.call(aten.where.self, (mask, x.node, y.node), bound=max(x.bound, y.bound))


# ----------------------------------------------------------------------------------- reductions


def _reduction(name: str, target: Any, sums: bool) -> GraphOp:
    """``target(x, [dim], keepdim)``; a sum multiplies the bound by the reduced size."""

    def dims(x: Val) -> list[int]:  # last dim first
        return [d for d in reversed(range(x.rank)) if x.bound * (x.shape[d] if sums else 1) <= BOUND_CAP]

    def emit(b: _Builder, x: Val) -> None:
        dim = b.draw(st.sampled_from(dims(x)))
        keepdim = True if x.rank == 1 else b.draw(st.booleans())  # values keep rank >= 1
        b.call(target, (x.node, [dim], keepdim), bound=x.bound * (x.shape[dim] if sums else 1))

    return GraphOp(name, 1, emit, lambda x: bool(dims(x)))


# ---------------------------------------------------------------------------------------- views


def _view(b: _Builder, x: Val) -> None:
    b.call(aten.view.default, (x.node, list(b.draw(_refactored(x.numel)))), bound=x.bound)


def _reshape(b: _Builder, x: Val) -> None:
    """The decomposed form of ``reshape`` on a tensor that cannot be viewed."""
    copy = b.call(aten.clone.default, (x.node,), {"memory_format": torch.contiguous_format})
    b.call(aten._unsafe_view.default, (copy, list(b.draw(_refactored(x.numel)))), bound=x.bound)


def _permute(b: _Builder, x: Val) -> None:
    b.call(aten.permute.default, (x.node, b.draw(st.permutations(range(x.rank)))), bound=x.bound)


def _transpose(b: _Builder, x: Val) -> None:
    d0 = b.draw(st.integers(0, x.rank - 2))
    d1 = b.draw(st.integers(d0 + 1, x.rank - 1))
    b.call(aten.transpose.int, (x.node, d0, d1), bound=x.bound)


def _unsqueeze(b: _Builder, x: Val) -> None:
    b.call(aten.unsqueeze.default, (x.node, b.draw(st.integers(0, x.rank))), bound=x.bound)


def _expand(b: _Builder, x: Val) -> None:
    """Size-1 dims grow, and maybe a leading dim is added; at most :data:`MAX_NUMEL` elements."""
    room = MAX_NUMEL // x.numel
    sizes = []
    if x.rank < MAX_RANK and b.draw(st.booleans()):
        sizes.append(b.draw(st.integers(1, min(4, room))))
        room //= sizes[0]
    for side in x.shape:
        if side == 1:
            side = b.draw(st.integers(1, max(1, min(MAX_SIDE, room))))
            room //= side
        sizes.append(side)
    b.call(aten.expand.default, (x.node, sizes), bound=x.bound)


def _slice(b: _Builder, x: Val) -> None:
    dim = b.draw(st.integers(0, x.rank - 1))
    start = b.draw(st.integers(0, x.shape[dim] - 1))
    end = b.draw(st.integers(start + 1, x.shape[dim]))
    step = b.draw(st.integers(1, 2))
    b.call(aten.slice.Tensor, (x.node, dim, start, end, step), bound=x.bound)


def _split_dims(x: Val) -> list[int]:
    return [d for d in reversed(range(x.rank)) if x.shape[d] >= 2]


def _split(b: _Builder, x: Val) -> None:
    """``split_with_sizes`` into 2..4 pieces, and a ``getitem`` per piece."""
    dim = b.draw(st.sampled_from(_split_dims(x)))
    side = x.shape[dim]
    cuts = sorted(b.draw(st.sets(st.integers(1, side - 1), min_size=1, max_size=min(3, side - 1))))
    sizes = [high - low for low, high in zip([0, *cuts], [*cuts, side], strict=True)]
    pieces = b.call(aten.split_with_sizes.default, (x.node, sizes, dim))
    for i in range(len(sizes)):
        b.call(operator.getitem, (pieces, i), bound=x.bound)


def _cat(b: _Builder, x: Val) -> None:
    dim = b.draw(st.integers(0, x.rank - 1))
    per_row = x.numel // x.shape[dim]  # elements per index along dim
    room = min(MAX_SIDE, (MAX_NUMEL - x.numel) // per_row)

    def accepts(v: Val) -> bool:
        same = v.rank == x.rank and all(v.shape[d] == x.shape[d] for d in range(x.rank) if d != dim)
        return same and v.dtype == x.dtype and v.shape[dim] <= room

    fresh = st.integers(1, room).map(lambda n: x.shape[:dim] + (n,) + x.shape[dim + 1 :])
    y = b.operand(accepts, fresh, dtype=x.dtype)
    b.call(aten.cat.default, ([x.node, y.node], dim), bound=max(x.bound, y.bound))


# ----------------------------------------------------------------------------------- contraction


def _rhs(b: _Builder, x: Val, batch: tuple[int, ...], rows: int, limit: float) -> Val:
    """The right operand ``[*batch, K, N]`` of a product with ``x[..., M, K]`` (K = ``x.shape[-1]``),
    with ``M * N`` elements at most :data:`MAX_NUMEL` and bound at most ``limit``."""
    k = x.shape[-1]
    widest = max(1, min(MAX_SIDE, MAX_NUMEL // (rows * math.prod(batch))))

    def accepts(v: Val) -> bool:
        return v.dtype == x.dtype and v.shape[:-1] == (*batch, k) and v.shape[-1] <= widest and v.bound <= limit

    return b.operand(accepts, st.integers(1, widest).map(lambda n: (*batch, k, n)), dtype=x.dtype)


def _product_bound(x: Val, y_bound: float) -> float:
    return x.shape[-1] * x.bound * y_bound


def _product_accepts(rank: int, bias: float = 0.0, contiguous: bool = False) -> Callable[[Val], bool]:
    def accepts(x: Val) -> bool:
        if x.rank != rank or (contiguous and not x.fake.is_contiguous()):
            return False
        return bias + _product_bound(x, DEFAULT_BOUND) <= BOUND_CAP

    return accepts


def _limit(x: Val, bias: float = 0.0) -> float:
    """Largest bound of a right operand that keeps ``x @ y`` (+ bias) under :data:`BOUND_CAP`."""
    return (BOUND_CAP - bias) / (x.shape[-1] * x.bound) if x.bound else math.inf


def _mm(b: _Builder, x: Val) -> None:
    y = _rhs(b, x, (), x.shape[0], _limit(x))
    b.call(aten.mm.default, (x.node, y.node), bound=_product_bound(x, y.bound))


def _bmm(b: _Builder, x: Val) -> None:
    y = _rhs(b, x, x.shape[:1], x.shape[1], _limit(x))
    b.call(aten.bmm.default, (x.node, y.node), bound=_product_bound(x, y.bound))


def _matmul(b: _Builder, x: Val) -> None:
    """The decomposed form of ``torch.matmul`` of ``x[B, M, K]`` and ``y[K, N]``: view to 2-D, mm,
    view back."""
    batch, rows, k = x.shape
    y = _rhs(b, x, (), batch * rows, _limit(x))
    flat = b.call(aten.view.default, (x.node, [batch * rows, k]))
    product = b.call(aten.mm.default, (flat, y.node))
    b.call(aten._unsafe_view.default, (product, [batch, rows, y.shape[-1]]), bound=_product_bound(x, y.bound))


def _addmm(b: _Builder, x: Val) -> None:
    """``addmm(bias, x, y)``: a bias that broadcasts to ``[M, N]``, bound at most 2."""
    y = _rhs(b, x, (), x.shape[0], _limit(x, DEFAULT_BOUND))
    out = (x.shape[0], y.shape[-1])

    def accepts(v: Val) -> bool:
        return v.dtype == x.dtype and v.rank <= 2 and _broadcast(v.shape, out) == out and v.bound <= DEFAULT_BOUND

    bias = b.operand(accepts, st.sampled_from([out[1:], out, (out[0], 1)]), dtype=x.dtype)
    bound = bias.bound + _product_bound(x, y.bound)
    b.call(aten.addmm.default, (bias.node, x.node, y.node), bound=bound)


# ------------------------------------------------------------------------------------------ table

_RANK2 = shapes(min_dims=2, max_dims=2, max_side=MAX_SIDE)
_RANK3 = shapes(min_dims=3, max_dims=3, max_side=MAX_SIDE)


#: The op table, simplest first.
OPS: tuple[GraphOp, ...] = (
    _unary("neg", aten.neg.default),
    _unary("abs", aten.abs.default),
    _unary("relu", aten.relu.default),
    _unary("tanh", aten.tanh.default, lambda b: min(b, 1.0)),
    _unary("sigmoid", aten.sigmoid.default, lambda b: 1.0),
    _unary("sin", aten.sin.default, lambda b: min(b, 1.0)),
    _unary("cos", aten.cos.default, lambda b: 1.0),
    _unary("exp", aten.exp.default, math.exp, limit=4.0),
    GraphOp("log", 3, _log, _always),
    GraphOp("pow", 1, _square, lambda x: x.bound * x.bound <= BOUND_CAP),
    _with_constant("add_scalar", aten.add.Tensor, (1.0, -0.5, 2.0), lambda bx, c: bx + abs(c)),
    _with_constant("mul_scalar", aten.mul.Tensor, (2.0, 0.5, -1.5), lambda bx, c: bx * abs(c)),
    GraphOp("clamp", 1, _clamp, _always),
    GraphOp("convert_element_type", 1, _cast, _always),
    _binary("add", aten.add.Tensor, operator.add),
    _binary("sub", aten.sub.Tensor, operator.add),
    _binary("mul", aten.mul.Tensor, operator.mul),
    _binary("maximum", aten.maximum.default, max),
    _binary("minimum", aten.minimum.default, max),
    GraphOp("div", 3, _div, _always),
    GraphOp("where", 2, _where, _always),
    _reduction("sum", aten.sum.dim_IntList, sums=True),
    _reduction("mean", aten.mean.dim, sums=False),
    _reduction("amax", aten.amax.default, sums=False),
    _reduction("amin", aten.amin.default, sums=False),
    GraphOp("view", 1, _view, lambda x: x.fake.is_contiguous()),
    GraphOp("reshape", 2, _reshape, _always),
    GraphOp("permute", 1, _permute, lambda x: x.rank >= 2, shapes(min_dims=2, max_dims=3, max_side=MAX_SIDE)),
    GraphOp("transpose", 1, _transpose, lambda x: x.rank >= 2, shapes(min_dims=2, max_dims=3, max_side=MAX_SIDE)),
    GraphOp("unsqueeze", 1, _unsqueeze, lambda x: x.rank < MAX_RANK),
    GraphOp("expand", 1, _expand, lambda x: x.rank < MAX_RANK or 1 in x.shape),
    GraphOp("slice", 1, _slice, _always),
    GraphOp("split", 1, _split, lambda x: bool(_split_dims(x)), shapes(min_side=2, max_side=MAX_SIDE)),
    GraphOp("cat", 1, _cat, lambda x: 2 * x.numel <= MAX_NUMEL),
    GraphOp("mm", 1, _mm, _product_accepts(2), _RANK2),
    GraphOp("bmm", 1, _bmm, _product_accepts(3), _RANK3),
    GraphOp("matmul", 3, _matmul, _product_accepts(3, contiguous=True), _RANK3),
    GraphOp("addmm", 1, _addmm, _product_accepts(2, bias=DEFAULT_BOUND), _RANK2),
)

#: Names of the ops :func:`~pmverify.strategies.fx_graphs` draws, simplest first.
GRAPH_OPS: tuple[str, ...] = tuple(op.name for op in OPS)
