"""Elementwise ops of the op table: unary, scalar and tensor operands, masks (casts: :mod:`._ops_casts`).

Each op is emitted in the argument forms post-grad graphs hold (make_fx's convention: positional
arguments positionally, trailing defaults omitted, keyword-only arguments as keywords), simplest
first: ``aten.add.Tensor(x, 2.0)`` before ``aten.add.Scalar(x, 2.0)`` and a 0-d tensor operand;
``alpha`` omitted before given; ``clamp(x, lo, hi)`` before ``clamp(x, None, hi)``, ``clamp_min``...
Operands of other dtypes follow torch's type promotion (an int tensor times a float scalar is
float32; a bool mask times a float tensor keeps the float dtype); every result's dtype is one of the
case's dtypes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from ._ops_casts import convert, to_copy
from ._ops_core import (
    ANY,
    CPU,
    EVERY_LEVEL,
    FLOAT,
    IDENTITY_SHARE,
    INT_IDENTITY_SHARE,
    NUMERIC,
    PRE_GRAD,
    Builder,
    GraphOp,
    Val,
    at_level,
    bound_cap,
    broadcast,
    broadcastable,
    dtype_limits,
    fits,
    fresh_bound,
    identity_drawn,
    kind_of,
    kwargs_of,
    of_kinds,
    optional,
    promoted,
    provisional,
)
from ._tensors import DEFAULT_BOUND

__all__ = ["ELEMENTWISE_OPS", "second"]

aten = torch.ops.aten
prims = torch.ops.prims


def second(
    b: Builder,
    x: Val,
    bound: Callable[[float, float], float],
    *,
    kinds: Sequence[str] = ANY,
    same_shape: bool = False,
) -> Val:
    """A second operand ``y`` that broadcasts with ``x`` (to ``x``'s shape with ``same_shape``): of
    a kind in ``kinds``, with ``bound(x.bound, y.bound)`` under the cap of the promoted dtype, which
    must be one of the case's dtypes. ``x`` itself first, then recent values, then a new input of
    ``x``'s dtype (simplest) or another that fits."""

    def accepts(v: Val) -> bool:
        if v.kind not in kinds:
            return False
        shape = broadcast(x.shape, v.shape)
        if not fits(shape) or (same_shape and shape != x.shape):
            return False
        dtype = promoted(x, v)
        return b.allows(dtype) and bound(x.bound, v.bound) <= bound_cap(dtype)

    dtypes = [d for d in [x.dtype, *b.of_kinds(kinds)] if accepts(provisional(x.shape, d))]
    return b.operand(accepts, broadcastable(x.shape), list(dict.fromkeys(dtypes)))


def _second_fits(b: Builder, x: Val, bound: Callable[[float, float], float], kinds: Sequence[str] = ANY) -> bool:
    """Whether a new input of ``x``'s dtype would do as :func:`second` operand (the contract)."""
    return x.kind in kinds and bound(x.bound, fresh_bound(x.dtype)) <= bound_cap(x.dtype)


def _promotes_ints(op: GraphOp, dtypes: Sequence[torch.dtype]) -> tuple[torch.dtype, ...]:
    """First-operand dtypes of an op that turns ints into float32 (torch's int-to-float promotion)."""
    return tuple(d for d in dtypes if kind_of(d) in op.kinds and (d.is_floating_point or torch.float32 in dtypes))


def _share(x: Val) -> int:
    """How rarely a number operand of ``x`` is an identity (1 in this): more often on int values."""
    return INT_IDENTITY_SHARE if x.kind == "int" else IDENTITY_SHARE


def _result(x: Val, promotes: bool) -> torch.dtype:
    return torch.float32 if promotes and x.kind != "float" else x.dtype


# ------------------------------------------------------------------------------------------ unary


def _unary(
    name: str,
    target: Any,
    bound: Callable[[float], float] = lambda b: b,
    *,
    limit: float = math.inf,
    kinds: tuple[str, ...] = FLOAT,
    promotes: bool = False,
    nonneg: Callable[[Val], bool] = lambda x: False,
) -> GraphOp:
    def accepts(b: Builder, x: Val) -> bool:
        dtype = _result(x, promotes)
        return x.bound <= limit and b.allows(dtype) and bound(x.bound) <= bound_cap(dtype)

    def emit(b: Builder, x: Val) -> None:
        b.call(target, (x.node,), bound=bound(x.bound), nonneg=nonneg(x))

    dtypes = _promotes_ints if promotes else of_kinds
    return GraphOp(name, 1, emit, accepts, kinds=kinds, empty_ok=True, operand_dtypes=dtypes)


def _log(b: Builder, x: Val) -> None:
    """``log(|x| + 1)``: finite everywhere."""
    one = 1.0 if x.kind == "float" else 1
    shifted = b.call(aten.add.Tensor, (b.call(aten.abs.default, (x.node,)), one))
    b.call(aten.log.default, (shifted,), bound=math.log1p(x.bound), nonneg=True)


def _gelu(b: Builder, x: Val) -> None:
    approximate = optional(b.draw, ("none", "tanh"))
    b.call(aten.gelu.default, (x.node,), kwargs_of(approximate=approximate), bound=x.bound)


_EXPONENTS = (2, 2.0, 3)
#: Identity and absorbing exponents, drawn for a share of ``pow`` nodes (:func:`identity_drawn`).
_IDENTITY_EXPONENTS = (1, 1.0, 0, 0.0)


def _powers(b: Builder, x: Val, exponents: Sequence[Any] = _EXPONENTS) -> list[Any]:
    return [e for e in exponents if b.allows(d := promoted(x, e)) and max(x.bound, x.bound**e) <= bound_cap(d)]


def _pow(b: Builder, x: Val) -> None:
    identities = _powers(b, x, _IDENTITY_EXPONENTS) if identity_drawn(b.draw, _share(x)) else []
    e = b.draw(st.sampled_from(identities or _powers(b, x)))
    nonneg = e in (2, 0) or x.nonneg  # 2.0 == 2, 0.0 == 0
    b.call(aten.pow.Tensor_Scalar, (x.node, e), bound=max(x.bound, x.bound**e, 1), nonneg=nonneg)


# ---------------------------------------------------------------------------- scalar operands

#: Forms of a scalar operand, simplest first: a Python number to the ``.Tensor`` overload (as
#: post-grad graphs write it), to the ``.Scalar`` overload, or a 0-d tensor.
_SCALAR_FORMS = ("Tensor", "Scalar", "0-d")
#: The levels whose graphs hold each form (``reverse``: ``rsub``, which Inductor writes as
#: ``sub.Tensor(c, x)``).
_SCALAR_LEVELS = {"Tensor": EVERY_LEVEL, "Scalar": EVERY_LEVEL, "0-d": EVERY_LEVEL, "reverse": PRE_GRAD}


def _scalar_op(
    name: str,
    tensor: Any,
    scalar: Any,
    floats: tuple[float, ...],
    ints: tuple[int, ...],
    bound: Callable[[float, float], float],
    *,
    identities: tuple[Any, ...] = (),
    zero_dim: bool = True,
    reverse: Any = None,
    true_division: bool = False,
) -> GraphOp:
    """``tensor(x, c)`` / ``scalar(x, c)`` (/ ``reverse(x, c)``, e.g. ``rsub``) with a number ``c``,
    or ``tensor(x, t)`` with a 0-d tensor ``t``. Int values take int constants (or float ones,
    promoting to float32). A share of constants (:func:`identity_drawn`) comes from ``identities``,
    the op's identity and absorbing constants, int and float ones for every value (``x * 1.0`` of
    an int ``x`` is float32)."""

    def result(x: Val, c: Any) -> torch.dtype:
        dtype = promoted(x, c)
        return torch.float32 if true_division and not dtype.is_floating_point else dtype

    def constants(b: Builder, x: Val, pool: tuple[Any, ...] | None = None) -> list[Any]:
        if pool is None:
            pool = floats if x.kind == "float" else ints + floats
        return [c for c in pool if b.allows(d := result(x, c)) and bound(x.bound, abs(c)) <= bound_cap(d)]

    def zero_dim_ok(b: Builder, x: Val) -> Callable[[Val], bool]:
        def accepts(v: Val) -> bool:
            d = promoted(x, v)
            return v.rank == 0 and v.kind == x.kind and b.allows(d) and bound(x.bound, v.bound) <= bound_cap(d)

        return accepts

    def accepts(b: Builder, x: Val) -> bool:
        return bool(constants(b, x))

    def emit(b: Builder, x: Val) -> None:
        forms = [*_SCALAR_FORMS[: 3 if zero_dim else 2], *(["reverse"] if reverse is not None else [])]
        forms = [f for f in forms if b.level in _SCALAR_LEVELS[f]]
        if zero_dim and not zero_dim_ok(b, x)(provisional((), x.dtype)):
            forms.remove("0-d")
        form = b.draw(st.sampled_from(forms))
        if form == "0-d":
            t = b.operand(zero_dim_ok(b, x), st.just(()), [x.dtype])
            b.call(tensor, (x.node, t.node), bound=bound(x.bound, t.bound))
            return
        pool = constants(b, x, identities) if identities and identity_drawn(b.draw, _share(x)) else []
        c = b.draw(st.sampled_from(pool or constants(b, x)))
        target = {"Tensor": tensor, "Scalar": scalar, "reverse": reverse}[form]
        b.call(target, (x.node, c), bound=bound(x.bound, abs(c)))

    dtypes = _promotes_ints if true_division else of_kinds
    return GraphOp(name, 1, emit, accepts, kinds=NUMERIC, empty_ok=True, operand_dtypes=dtypes)


# ---------------------------------------------------------------------------- tensor operands


def _alphas(dtype: torch.dtype) -> tuple[Any, ...]:
    """``alpha`` choices (omitted first): ints for an integer result, none for bool."""
    if dtype == torch.bool:
        return ()
    return (2, 0.5, -1) if dtype.is_floating_point else (2, -1)


def _binary(
    name: str,
    target: Any,
    bound: Callable[[float, float], float],
    *,
    kinds: tuple[str, ...] = ANY,
    alpha: bool = False,
    nonneg: Callable[[Val, Val], bool] = lambda x, y: False,
) -> GraphOp:
    """``target(x, y)`` with a broadcasting ``y`` of any dtype that promotes to one of the case's
    dtypes; with ``alpha``, ``target(x, y, alpha=a)`` too (``bound`` is then ``bx + by``, scaled)."""
    top = 2.0 if alpha else 1.0  # largest |alpha|

    def scaled(bx: float, by: float) -> float:
        return bound(bx, top * by)

    def accepts(b: Builder, x: Val) -> bool:
        return _second_fits(b, x, scaled, kinds)

    def emit(b: Builder, x: Val) -> None:
        y = second(b, x, scaled, kinds=kinds)
        kwargs = {}
        if alpha:
            a = optional(b.draw, _alphas(promoted(x, y)))
            if a is not None:
                kwargs["alpha"] = a
        factor = abs(kwargs.get("alpha", 1))
        positive = kwargs.get("alpha", 1) > 0
        b.call(
            target, (x.node, y.node), kwargs, bound=bound(x.bound, factor * y.bound), nonneg=positive and nonneg(x, y)
        )

    return GraphOp(name, 1, emit, accepts, kinds=kinds, empty_ok=True)


#: How ``div`` rounds, simplest first: true division, then ``rounding_mode`` trunc and floor.
ROUNDING_MODES = (None, "trunc", "floor")


def _div(b: Builder, x: Val) -> None:
    """``x / (|y| + 1)``: never divides by zero."""
    y = second(b, x, lambda bx, by: bx + 1, kinds=NUMERIC)
    one = 1.0 if y.kind == "float" else 1
    divisor = b.call(aten.add.Tensor, (b.call(aten.abs.default, (y.node,)), one))
    dtype = promoted(x, y)
    modes = [m for m in ROUNDING_MODES if m is not None or dtype.is_floating_point or b.allows(torch.float32)]
    mode = b.draw(st.sampled_from(modes))
    if mode is None:
        b.call(aten.div.Tensor, (x.node, divisor), bound=x.bound)
    else:
        b.call(aten.div.Tensor_mode, (x.node, divisor), {"rounding_mode": mode}, bound=x.bound + 1)


def _div_accepts(b: Builder, x: Val) -> bool:
    return x.bound + 1 <= bound_cap(x.dtype)


# ------------------------------------------------------------------------------------ masks


#: Forms of ``where``, simplest first, with their levels: post-grad graphs write a number branch
#: as a 0-d ``full`` and ``where.self``.
WHERE_FORMS = (("self", EVERY_LEVEL), ("ScalarOther", PRE_GRAD), ("ScalarSelf", PRE_GRAD))


def _where(b: Builder, x: Val) -> None:
    """``where(x > 0, x, y)``; ``y`` a tensor, or a number (``where.ScalarOther`` /
    ``where.ScalarSelf``)."""
    mask = b.call(aten.gt.Scalar, (x.node, 0))
    form = b.draw(st.sampled_from(at_level(b, WHERE_FORMS)))
    if form == "self":
        y = second(b, x, max)
        b.call(aten.where.self, (mask, x.node, y.node), bound=max(x.bound, y.bound), nonneg=x.nonneg and y.nonneg)
        return
    c = _fill_value(b, x)
    args = (mask, x.node, c) if form == "ScalarOther" else (mask, c, x.node)
    target = aten.where.ScalarOther if form == "ScalarOther" else aten.where.ScalarSelf
    b.call(target, args, bound=max(x.bound, abs(c)))


def _fill_value(b: Builder, x: Val) -> Any:
    """A number of ``x``'s kind that keeps ``x``'s dtype."""
    if x.kind == "bool":
        return b.draw(st.sampled_from((False, True)))
    if x.kind == "int":
        return b.draw(st.sampled_from((0, -1, 3)))
    return b.draw(st.sampled_from((0.0, -1.0, 0.5)))


def _where_scalar(b: Builder, x: Val) -> None:
    """``where(x > 0, x, scalar_tensor(c))``, as make_fx writes ``torch.where(m, x, c)``."""
    mask = b.call(aten.gt.Scalar, (x.node, 0))
    c = _fill_value(b, x)
    kwargs = {"dtype": x.dtype, "layout": torch.strided, "device": CPU}
    value = b.call(aten.scalar_tensor.default, (c,), kwargs)
    b.call(aten.where.self, (mask, x.node, value), bound=max(x.bound, abs(c)))


def _mask(b: Builder, x: Val) -> Val:
    """A bool value that broadcasts to ``x``'s shape (a recent one, or a new bool input)."""

    def accepts(v: Val) -> bool:
        return v.kind == "bool" and broadcast(x.shape, v.shape) == x.shape

    return b.operand(accepts, broadcastable(x.shape), [torch.bool])


def _where_mask(b: Builder, x: Val) -> None:
    """``where(mask, x, y)`` with a bool value ``mask`` (an attention mask, a comparison)."""
    mask = _mask(b, x)
    y = second(b, x, max, same_shape=True)
    b.call(aten.where.self, (mask.node, x.node, y.node), bound=max(x.bound, y.bound), nonneg=x.nonneg and y.nonneg)


def _masked_fill(b: Builder, x: Val) -> None:
    """``masked_fill.Scalar(x, mask, c)`` or ``masked_fill.Tensor(x, mask, t)`` with a 0-d ``t``."""
    mask = _mask(b, x)
    if b.draw(st.booleans()):

        def accepts(v: Val) -> bool:
            return v.rank == 0 and v.dtype == x.dtype and v.bound <= bound_cap(x.dtype)

        t = b.operand(accepts, st.just(()), [x.dtype])
        b.call(aten.masked_fill.Tensor, (x.node, mask.node, t.node), bound=max(x.bound, t.bound))
        return
    c = _fill_value(b, x) if x.kind != "float" or x.bound > 1000 else b.draw(st.sampled_from((0.0, -1.0, -1000.0)))
    b.call(aten.masked_fill.Scalar, (x.node, mask.node, c), bound=max(x.bound, abs(c)))


def _needs_bool(op: GraphOp, dtypes: Sequence[torch.dtype]) -> tuple[torch.dtype, ...]:
    return tuple(d for d in dtypes if kind_of(d) in op.kinds) if torch.bool in dtypes else ()


#: Comparisons, simplest first.
COMPARISONS = ("gt", "lt", "ge", "le", "eq", "ne")


def _compare(b: Builder, x: Val) -> None:
    """``gt.Scalar(x, c)`` ... or ``gt.Tensor(x, y)``: a bool result."""
    op = getattr(aten, b.draw(st.sampled_from(COMPARISONS)))
    if b.draw(st.booleans()):
        y = second(b, x, lambda bx, by: 1.0, kinds=NUMERIC if x.kind != "bool" else ANY)
        b.call(op.Tensor, (x.node, y.node), bound=1, nonneg=True)
        return
    c = b.draw(st.sampled_from((0.0, 0.5, -1.0) if x.kind == "float" else (0, 2)))
    b.call(op.Scalar, (x.node, c), bound=1, nonneg=True)


def _logical_and(b: Builder, x: Val) -> None:
    """Of two bool values (on other dtypes, its fake tensor's strides differ from eager's)."""
    y = second(b, x, lambda bx, by: 1.0, kinds=("bool",))
    b.call(aten.logical_and.default, (x.node, y.node), bound=1, nonneg=True)


# ------------------------------------------------------------------------------------ clamp


#: Forms of ``clamp``, simplest first, with the levels whose graphs hold them: Inductor decomposes
#: ``clamp(x, lo, hi)`` into ``clamp_min`` and ``clamp_max``.
CLAMP_FORMS = (
    ("both", PRE_GRAD),
    ("max_only", PRE_GRAD),
    ("min_only", PRE_GRAD),
    ("clamp_min", EVERY_LEVEL),
    ("clamp_max", EVERY_LEVEL),
)


def _clamp(b: Builder, x: Val) -> None:
    """``clamp(x, lo, hi)``, ``clamp(x, None, hi)``, ``clamp(x, lo)``, ``clamp_min(x, lo)`` or
    ``clamp_max(x, hi)``; for a share of nodes (:func:`identity_drawn`) at the limits of ``x``'s
    dtype (:func:`dtype_limits`: ``finfo.min`` or ``-inf`` below, ``finfo.max`` or ``inf`` above),
    an identity."""
    limits = dtype_limits(x.dtype)
    if limits and identity_drawn(b.draw):
        low = b.draw(st.sampled_from(limits[: len(limits) // 2][::-1]))
        high = b.draw(st.sampled_from(limits[len(limits) // 2 :]))
        bound_low = bound_high = bound_both = x.bound
    else:
        pairs = ((-1.0, 1.0), (0.0, 1.0), (-0.5, 0.5)) if x.kind == "float" else ((0, 3), (-2, 2))
        low, high = b.draw(st.sampled_from(pairs))
        bound_low, bound_high = max(x.bound, abs(low)), max(x.bound, abs(high))
        bound_both = min(x.bound, max(abs(low), abs(high)))
    form = b.draw(st.sampled_from(at_level(b, CLAMP_FORMS)))
    if form == "both":
        b.call(aten.clamp.default, (x.node, low, high), bound=bound_both, nonneg=low >= 0)
    elif form in ("max_only", "clamp_max"):
        target, args = (
            (aten.clamp.default, (x.node, None, high))
            if form == "max_only"
            else (aten.clamp_max.default, (x.node, high))
        )
        b.call(target, args, bound=bound_high)
    else:
        target = aten.clamp.default if form == "min_only" else aten.clamp_min.default
        b.call(target, (x.node, low), bound=bound_low, nonneg=low >= 0)


def _clamp_accepts(b: Builder, x: Val) -> bool:
    return max(x.bound, 1.0) <= bound_cap(x.dtype)


# ---------------------------------------------------------------------------------- addcmul


def _addcmul(b: Builder, x: Val) -> None:
    """``addcmul(x, t1, t2)`` (``value`` omitted, 0.5, 2 or -1): t1, t2 broadcast to ``x``."""
    cap = bound_cap(x.dtype)

    def operand(limit: Callable[[float], bool]) -> Val:
        def accepts(v: Val) -> bool:
            return v.dtype == x.dtype and broadcast(x.shape, v.shape) == x.shape and limit(v.bound)

        return b.operand(accepts, broadcastable(x.shape), [x.dtype])

    t1 = operand(lambda by: x.bound + 2 * by * DEFAULT_BOUND <= cap)
    t2 = operand(lambda by: x.bound + 2 * t1.bound * by <= cap)
    value = optional(b.draw, (0.5, 2.0, -1.0))
    kwargs = kwargs_of(value=value)
    bound = x.bound + abs(1.0 if value is None else value) * t1.bound * t2.bound
    b.call(aten.addcmul.default, (x.node, t1.node, t2.node), kwargs, bound=bound)


def _addcmul_accepts(b: Builder, x: Val) -> bool:
    return x.bound + 2 * DEFAULT_BOUND * DEFAULT_BOUND <= bound_cap(x.dtype)


# ------------------------------------------------------------------------------------ table


def _plus(bx: float, by: float) -> float:
    return bx + by


def _times(bx: float, by: float) -> float:
    return bx * by


#: The elementwise ops, simplest first.
ELEMENTWISE_OPS: tuple[GraphOp, ...] = (
    _unary("neg", aten.neg.default, kinds=NUMERIC),
    _unary("abs", aten.abs.default, kinds=NUMERIC, nonneg=lambda x: True),
    _unary("relu", aten.relu.default, kinds=NUMERIC, nonneg=lambda x: True),
    _unary("tanh", aten.tanh.default, lambda b: min(b, 1.0), kinds=NUMERIC, promotes=True),
    _unary("sigmoid", aten.sigmoid.default, lambda b: 1.0, kinds=NUMERIC, promotes=True, nonneg=lambda x: True),
    _unary("sin", aten.sin.default, lambda b: min(b, 1.0), kinds=NUMERIC, promotes=True),
    _unary("cos", aten.cos.default, lambda b: 1.0, kinds=NUMERIC, promotes=True),
    _unary("exp", aten.exp.default, math.exp, limit=4.0, nonneg=lambda x: True),
    GraphOp(
        "log",
        3,
        _log,
        lambda b, x: b.allows(_result(x, True)),
        kinds=NUMERIC,
        empty_ok=True,
        operand_dtypes=_promotes_ints,
    ),
    GraphOp("pow", 1, _pow, lambda b, x: bool(_powers(b, x)), kinds=NUMERIC, empty_ok=True),
    _scalar_op("add_scalar", aten.add.Tensor, aten.add.Scalar, (1.0, -0.5, 2.0), (1, 2), _plus, identities=(0.0, 0)),
    _scalar_op(
        "mul_scalar",
        aten.mul.Tensor,
        aten.mul.Scalar,
        (2.0, 0.5, -1.5),
        (2, -1),
        _times,
        identities=(1.0, 1, 0.0, 0, -1.0),  # -1 is among the int constants
    ),
    _scalar_op(
        "sub_scalar",
        aten.sub.Tensor,
        aten.sub.Scalar,
        (1.0, 0.5),
        (1, 3),
        _plus,
        identities=(0.0, 0),
        reverse=aten.rsub.Scalar,
    ),
    _scalar_op(
        "div_scalar",
        aten.div.Tensor,
        aten.div.Scalar,
        (2.0, 0.5, -4.0),
        (2, 3),
        lambda bx, c: bx / min(abs(c), 1.0),
        identities=(1.0, 1, -1.0, -1),
        zero_dim=False,
        true_division=True,
    ),
    GraphOp("clamp", 1, _clamp, _clamp_accepts, kinds=NUMERIC, empty_ok=True),
    GraphOp("convert_element_type", 1, convert, kinds=ANY, empty_ok=True),
    GraphOp("to_copy", 1, to_copy, kinds=ANY, empty_ok=True),
    GraphOp("gelu", 1, _gelu, empty_ok=True),
    _binary("add", aten.add.Tensor, _plus, alpha=True, nonneg=lambda x, y: x.nonneg and y.nonneg),
    _binary("sub", aten.sub.Tensor, _plus, kinds=NUMERIC, alpha=True),
    _binary("mul", aten.mul.Tensor, _times, nonneg=lambda x, y: x.nonneg and y.nonneg),
    _binary("maximum", aten.maximum.default, max, nonneg=lambda x, y: x.nonneg or y.nonneg),
    _binary("minimum", aten.minimum.default, max, nonneg=lambda x, y: x.nonneg and y.nonneg),
    GraphOp("div", 3, _div, _div_accepts, kinds=NUMERIC, empty_ok=True),
    GraphOp("where", 2, _where, lambda b, x: _second_fits(b, x, max), kinds=ANY, empty_ok=True),
    GraphOp("where_scalar", 3, _where_scalar, kinds=ANY, empty_ok=True),
    GraphOp(
        "where_mask",
        1,
        _where_mask,
        lambda b, x: _second_fits(b, x, max),
        kinds=NUMERIC,
        empty_ok=True,
        operand_dtypes=_needs_bool,
    ),
    GraphOp("masked_fill", 1, _masked_fill, kinds=NUMERIC, empty_ok=True, operand_dtypes=_needs_bool),
    GraphOp("compare", 1, _compare, kinds=ANY, empty_ok=True, operand_dtypes=_needs_bool),
    GraphOp(
        "logical_not",
        1,
        lambda b, x: b.call(aten.logical_not.default, (x.node,), bound=1, nonneg=True),
        kinds=ANY,
        empty_ok=True,
        operand_dtypes=_needs_bool,
    ),
    GraphOp("logical_and", 1, _logical_and, kinds=("bool",), empty_ok=True, operand_dtypes=_needs_bool),
    GraphOp("addcmul", 1, _addcmul, _addcmul_accepts, empty_ok=True),
)
