"""Strategies for the leaves of a case: dtypes, shapes, real CPU tensors and tensor-parallel sizes.

Tensors are drawn as a *fill kind*, a *scale* and *row kind* (one choice), and a seed, not element
by element: a ``torch.Generator`` seeded from the draw makes the values, so a tensor costs at most
four choices whatever its size (making the values of a 4x4 tensor takes 20-90 µs, of a
32K-element one 0.15-0.55 ms, by fill and row kind; Hypothesis' own overhead per case is larger)
and shrinks to all zeros. Floating values are base values in [-2, 2] times a scale of 2**e per
tensor, e in -24..16 (-24..7 in float16, whose range ends at 65504, and float8), so that a norm meets rows whose
mean square is far below a typical eps (1e-6) as well as large ones; a row kind then makes some
rows zero or all-equal, scales some rows down by up to 2**-24, keeps a few outliers among small
values, or writes negative zeros. With ``elements`` given, values come from that strategy: one fill
value plus a few drawn positions, as ``hypothesis.extra.numpy.arrays`` does, without needing numpy.

Nothing is filtered: 0 % of draws are rejected (0 of 1000 ``tensors(float32, (4, 8))`` draws in
Hypothesis' statistics; tests/strategies/test_rejections.py).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._validation import FLOAT_DTYPES, validate_bool, validate_dtypes, validate_int, validate_order, validate_strategy
from ._device import tensor_strategy_on, validated
from ._public import public_call

__all__ = [
    "dtypes",
    "shapes",
    "tensors",
    "tp_sizes",
    "TENSOR_DTYPES",
    "DEFAULT_BOUND",
    "MIN_SCALE_EXPONENT",
    "max_magnitude_of",
]

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
#: The float8 dtypes :func:`tensors` draws (quantized values; few ops run on them, see
#: :func:`pmverify._execution.runs_on`).
FLOAT8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
#: Dtypes :func:`tensors` draws: floating (also float64 and float8), integer (index tensors) and bool.
TENSOR_DTYPES = (*FLOAT_DTYPES, torch.float64, *FLOAT8_DTYPES, *_INT_DTYPES, torch.bool)
#: Base floating values lie in [-DEFAULT_BOUND, DEFAULT_BOUND], before the tensor's scale.
DEFAULT_BOUND = 2.0
#: Smallest scale exponent: 2**-24 (float16's smallest subnormal; squares far below any eps).
MIN_SCALE_EXPONENT = -24
#: Largest scale exponent per dtype (default 16): values up to 2**17; float16 stops at 2**8 so
#: that squares and small sums of its values stay finite (its range ends at 65504); so do the
#: float8 types (float8_e4m3fn's range ends at 448).
_MAX_SCALE_EXPONENT = {torch.float16: 7, torch.float8_e4m3fn: 7, torch.float8_e5m2: 7}
_DEFAULT_MAX_SCALE_EXPONENT = 16
#: Integer values are drawn in [0, _INT_HIGH) unless ``elements`` is given.
_INT_HIGH = 8
#: Fill kinds, simplest first; "uniform" is listed 13 times so that most draws are random (an
#: all-zero or constant input hides many bugs: 1 in 16 draws each).
_KINDS = ("zeros", "constant", "specials") + ("uniform",) * 13
_FLOAT_CONSTANTS = (1.0, -1.0, 0.5, 2.0, -2.0)
_INT_CONSTANTS = (1, 2, _INT_HIGH - 1)
#: Values that "specials" writes over about a quarter of the positions of a uniform tensor.
_FLOAT_SPECIALS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)
#: What a random floating tensor does to some of its rows (along the last dim), simplest first;
#: "plain" is listed 5 times so that half of the draws are plain.
ROW_KINDS = ("plain",) * 5 + ("zero_rows", "equal_rows", "scaled_rows", "outliers", "negative_zeros")
#: Outliers: the other values are scaled down by this factor (2**-6), the outliers keep the scale.
_OUTLIER_DAMPING = 2.0**-6
#: With ``elements``: up to this many elements are drawn one by one; bigger tensors get a fill
#: value and a list of (position, value) overrides.
_DENSE_LIMIT = 16


def max_magnitude_of(dtype: torch.dtype) -> float:
    """The largest magnitude a default :func:`tensors` draw of ``dtype`` reaches: 2**17 for
    float32, bfloat16 and float64, 2**8 for float16 and the float8 types, 7 for integer dtypes, 1
    for bool."""
    if dtype == torch.bool:
        return 1.0
    if not dtype.is_floating_point:
        return float(_INT_HIGH - 1)
    return DEFAULT_BOUND * 2.0 ** _MAX_SCALE_EXPONENT.get(dtype, _DEFAULT_MAX_SCALE_EXPONENT)


def dtypes(*, allowed: Sequence[torch.dtype] | None = None) -> st.SearchStrategy[torch.dtype]:
    """Return a strategy for floating torch dtypes, simplest first: float32, float16, bfloat16.

    - ``allowed``: the dtypes to draw from, in the caller's order (shrinks toward the first);
      default :data:`FLOAT_DTYPES`.

    Raises ``hypothesis.errors.InvalidArgument`` when ``allowed`` is empty, not a sequence, or holds
    anything else than those three dtypes.

    Example: ``dtypes(allowed=[torch.bfloat16, torch.float16])`` draws bfloat16 or float16.
    """
    return public_call(dtypes, st.sampled_from(validate_dtypes("allowed", allowed)), allowed=allowed)


def shapes(
    *, min_dims: int = 1, max_dims: int = 3, min_side: int = 1, max_side: int = 8
) -> st.SearchStrategy[tuple[int, ...]]:
    """Return a strategy for tensor shapes: tuples of ``min_dims`` .. ``max_dims`` sizes.

    - ``min_dims`` / ``max_dims``: bounds on the rank (dimensions), default 1..3.
    - ``min_side`` / ``max_side``: bounds on every size (elements along a dimension), default 1..8;
      0 is allowed (empty tensors).

    Shrinks toward ``min_dims`` dimensions of ``min_side`` elements (``(1,)`` by default).

    Raises ``hypothesis.errors.InvalidArgument`` for a bound that is not an int or is negative,
    and for ``min_dims > max_dims`` or ``min_side > max_side``.

    Example: ``shapes(min_dims=2, max_dims=2, max_side=4)`` draws ``(1, 1)``, ``(3, 4)``, ...
    """
    for name, value in (("min_dims", min_dims), ("max_dims", max_dims), ("min_side", min_side), ("max_side", max_side)):
        validate_int(name, value, minimum=0)
    validate_order("min_dims", min_dims, "max_dims", max_dims)
    validate_order("min_side", min_side, "max_side", max_side)
    drawn = st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims).map(tuple)
    return public_call(shapes, drawn, min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def _check_dtype(dtype: Any) -> None:
    if not isinstance(dtype, torch.dtype):
        raise InvalidArgument(f"dtype={dtype!r} must be a torch.dtype")
    if dtype not in TENSOR_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in TENSOR_DTYPES)
        raise InvalidArgument(f"dtype={dtype!r} is not supported; use one of {names}")


def _check_shape(name: str, shape: Any) -> tuple[int, ...]:
    """``shape`` must be a tuple (or ``torch.Size``) of non-negative ints; returns it as a tuple."""
    if not isinstance(shape, tuple):
        raise InvalidArgument(f"{name}={shape!r} must be a tuple of ints")
    for size in shape:
        if not isinstance(size, int) or isinstance(size, bool):
            raise InvalidArgument(f"{name}={shape!r} holds {size!r}, not an int")
        if size < 0:
            raise InvalidArgument(f"{name}={shape!r} holds the negative size {size}")
    return tuple(shape)


def _constants(dtype: torch.dtype) -> tuple[Any, ...]:
    if dtype == torch.bool:
        return (True,)
    return _FLOAT_CONSTANTS if dtype.is_floating_point else _INT_CONSTANTS


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _some(count: int, generator: torch.Generator) -> torch.Tensor:
    """A mask of about a quarter of ``count`` positions, at least one."""
    pick = torch.rand(count, generator=generator) < 0.25
    pick[torch.randint(0, count, (1,), generator=generator)] = True
    return pick


def _with_rows(
    values: torch.Tensor, rows: str, generator: torch.Generator, nonfinite: tuple[float, ...]
) -> torch.Tensor:
    """``values`` (base values in [-2, 2]) with the row kind applied to some rows along the last dim."""
    if rows == "plain" or values.numel() == 0:
        return values
    flat = values.reshape(-1, values.shape[-1] if values.dim() else 1).clone()
    count, width = flat.shape
    if rows == "zero_rows":
        flat[_some(count, generator)] = 0.0
    elif rows == "equal_rows":
        pick = _some(count, generator)
        flat[pick] = flat[pick][:, :1].expand(-1, width)
    elif rows == "scaled_rows":
        exponents = torch.randint(4, -MIN_SCALE_EXPONENT + 1, (count, 1), generator=generator).to(flat.dtype)
        flat = flat * torch.where(_some(count, generator)[:, None], torch.exp2(-exponents), 1.0)
    elif rows == "outliers":
        positions = torch.randint(0, flat.numel(), (1 + flat.numel() // 64,), generator=generator)
        signs = torch.randint(0, 2, positions.shape, generator=generator).to(flat.dtype) * 2 - 1
        flat = flat * _OUTLIER_DAMPING
        flat.view(-1)[positions] = signs * DEFAULT_BOUND * (1 - torch.rand(positions.shape, generator=generator) / 2)
    elif rows == "negative_zeros":
        flat.view(-1)[_some(flat.numel(), generator)] = -0.0
    else:  # "nonfinite": a few positions
        positions = torch.randint(0, flat.numel(), (1 + flat.numel() // 64,), generator=generator)
        picks = torch.randint(0, len(nonfinite), positions.shape, generator=generator)
        flat.view(-1)[positions] = torch.tensor(nonfinite, dtype=flat.dtype)[picks]
    return flat.reshape(values.shape)


def _floating(
    dtype: torch.dtype,
    shape: tuple[int, ...],
    kind: str,
    constant: Any,
    seed: int,
    scale: float,
    rows: str,
    nonfinite: tuple[float, ...],
) -> torch.Tensor:
    """The floating tensor of one fill kind, scale and row kind."""
    if kind == "zeros":
        return torch.zeros(shape, dtype=dtype)
    if kind == "constant":
        return torch.full(shape, constant * scale, dtype=dtype)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    generator = _gen(seed)
    values = (torch.rand(shape, generator=generator, dtype=work) * 2 - 1) * DEFAULT_BOUND
    if kind == "specials":
        specials = torch.tensor(_FLOAT_SPECIALS, dtype=work)
        index = torch.randint(0, len(_FLOAT_SPECIALS), (values.numel(),), generator=generator)
        picks = specials.index_select(0, index).reshape(shape)  # 80x faster than specials[index] here
        values = torch.where(torch.rand(shape, generator=generator) < 0.25, picks, values)
        if nonfinite:
            values = _with_rows(values, "nonfinite", generator, nonfinite)
    values = _with_rows(values, rows, generator, nonfinite)
    return (values if scale == 1.0 else values * scale).to(dtype)


def _generated(
    dtype: torch.dtype, shape: tuple[int, ...], kind: str, constant: Any, seed: int, high: int
) -> torch.Tensor:
    """The integer or bool tensor of one fill kind: zeros, a constant, or seeded random values."""
    if kind == "zeros":
        return torch.zeros(shape, dtype=dtype)
    if kind == "constant":
        return torch.full(shape, constant, dtype=dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=_gen(seed)) < 0.5
    return torch.randint(0, high, shape, generator=_gen(seed), dtype=dtype)


@functools.cache
def _variants(highest: int, with_rows: bool, nonfinite: bool) -> st.SearchStrategy[tuple[int, str]]:
    """(scale exponent, row kind) pairs: (0, "plain") first, the simplest, then the others in a fixed
    shuffled order (Hypothesis draws low indices of a long list more often; shuffled, that favours
    no scale or row kind). Half of them have scale 1 (exponent 0), the others an exponent in
    -24..``highest``; half of the row kinds are "plain". One strategy object per argument set:
    ``sampled_from`` checks its elements when built."""
    others = [e for e in range(MIN_SCALE_EXPONENT, highest + 1) if e != 0]
    exponents = [0] * len(others) + others
    rows = (ROW_KINDS + (("nonfinite",) if nonfinite else ())) if with_rows else ("plain",)
    pairs = [(e, r) for e in exponents for r in rows]
    rest = pairs[1:]
    random.Random(0).shuffle(rest)
    return st.sampled_from((pairs[0], *rest))


@st.composite
def _seeded(
    draw: Any, dtype: torch.dtype, shape: tuple[int, ...], max_magnitude: float | None, nonfinite: tuple[float, ...]
) -> torch.Tensor:
    kind = draw(st.sampled_from(_KINDS))
    if not dtype.is_floating_point:
        high = _INT_HIGH if max_magnitude is None else max(1, min(_INT_HIGH, math.floor(max_magnitude) + 1))
        constants = [c for c in _constants(dtype) if c < high] or [0]
        constant = draw(st.sampled_from(constants)) if kind == "constant" else None
        seed = draw(st.integers(0, 2**32 - 1)) if kind == "uniform" or kind == "specials" else 0
        return _generated(dtype, shape, kind, constant, seed, high)
    constant = draw(st.sampled_from(_FLOAT_CONSTANTS)) if kind == "constant" else None
    highest = _MAX_SCALE_EXPONENT.get(dtype, _DEFAULT_MAX_SCALE_EXPONENT)
    exponent, rows = 0, "plain"
    if kind != "zeros":  # one choice for both, so that shrinking a tensor costs few attempts
        exponent, rows = draw(_variants(highest, kind == "uniform", bool(nonfinite)))
    seed = draw(st.integers(0, 2**32 - 1)) if kind in ("uniform", "specials") else 0
    scale = 2.0**exponent
    if max_magnitude is not None:
        scale = min(scale, max_magnitude / DEFAULT_BOUND)
    return _floating(dtype, shape, kind, constant, seed, scale, rows, nonfinite)


def _from_values(values: list[Any], dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    work = torch.bool if dtype == torch.bool else torch.float64 if dtype.is_floating_point else torch.int64
    for value in values:
        if isinstance(value, str) or not isinstance(value, (bool, int, float)):
            raise InvalidArgument(f"elements drew {value!r}; it must draw Python numbers for a {dtype} tensor")
    return torch.tensor(values, dtype=work).to(dtype).reshape(shape)


@st.composite
def _from_elements(draw: Any, dtype: torch.dtype, shape: tuple[int, ...], elements: st.SearchStrategy) -> torch.Tensor:
    numel = math.prod(shape)
    if numel <= _DENSE_LIMIT:
        return _from_values(draw(st.lists(elements, min_size=numel, max_size=numel)), dtype, shape)
    fill = draw(elements)
    values = [fill] * numel
    for position, value in draw(st.lists(st.tuples(st.integers(0, numel - 1), elements), max_size=numel)):
        values[position] = value
    return _from_values(values, dtype, shape)


def _check_magnitude(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"max_magnitude={value!r} must be a number")
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"max_magnitude={value!r} must be finite and at least 0")


def tensors(
    dtype: torch.dtype,
    shape: tuple[int, ...],
    *,
    elements: st.SearchStrategy[Any] | None = None,
    max_magnitude: float | None = None,
    allow_nan: bool = False,
    allow_infinity: bool = False,
    device: str | torch.device | None = None,
) -> st.SearchStrategy[torch.Tensor]:
    """Return a strategy for real, contiguous CPU tensors of ``dtype`` and ``shape`` (or on
    ``device``).

    - ``dtype``: a torch dtype from :data:`TENSOR_DTYPES`: float32, float16, bfloat16, float64,
      float8_e4m3fn, float8_e5m2, int64, int32, int16, int8, uint8 or bool. A float8 tensor's
      values are drawn in float32 and rounded to it.
    - ``shape``: a tuple (or ``torch.Size``) of sizes in elements.
    - ``elements``: a strategy for the Python values (floats, ints or bools) to fill the tensor
      with, rounded to ``dtype``; values it draws that ``dtype`` cannot hold overflow as torch's
      casts do. Up to 16 elements are drawn one by one; a bigger tensor gets a fill value and a few
      drawn positions (as ``hypothesis.extra.numpy.arrays`` does).
    - ``max_magnitude``: a cap on ``|value|`` of the default values (a number >= 0; default None:
      :func:`max_magnitude_of` ``dtype``, 2**17, 2**8 in float16); it lowers scales, never widens
      them. Integers are then drawn in [0, min(8, floor(max_magnitude) + 1)).
    - ``allow_nan`` / ``allow_infinity``: whether default floating values may hold NaN / ±inf
      (default False: every value is finite): a few positions of some draws, as "specials" do.
      Ignored for integer and bool dtypes, which hold no such values, so that one call serves a
      drawn dtype (``dtypes(...).flatmap(lambda d: tensors(d, shape, allow_nan=True))``).
    - ``device``: where the tensor lives (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a
      ``torch.device``; default None: CPU). Values are drawn on CPU, the same for every device,
      then copied there (:func:`pmverify.device.tensor_on`).

    Default floating values: base values times a scale ``2**e`` per tensor (e = 0 for about half of
    the draws, else drawn in -24..16; -24..7 in float16 and float8). Base values are all zeros, one constant
    (±1, ±0.5, ±2), uniform random in [-2, 2], or uniform with about a quarter of the positions set
    to 0, ±0.5, ±1 or ±2; half of the uniform draws also have a row kind (rows: slices along the
    last dim, about a quarter of them, at least one): zero rows, all-equal rows, rows scaled down by
    2**-4 .. 2**-24, a few outliers (the other values scaled down by 2**-6), or negative zeros. So
    ``|value| <= 2**17`` (2**8 in float16 and float8), and rows' mean squares range from 0 and far
    below 1e-6 to 2**34. Integer values lie in [0, 8) (indices into a side of 8; pass ``elements``
    for other index ranges); bools are all False, all True or random. Everything comes from a ``torch.Generator``
    seeded from the draw. Shrinks toward all zeros, then scale 1 and plain rows.

    Raises ``hypothesis.errors.InvalidArgument`` when ``dtype`` is not a supported torch dtype,
    ``shape`` is not a tuple of non-negative ints, ``elements`` is not a strategy, ``max_magnitude``
    is not a finite number >= 0, ``allow_nan`` / ``allow_infinity`` are not bools, or ``elements`` is
    given with any of those three (it draws the values itself), or a ``device`` that is not a CPU
    or CUDA device; :class:`pmverify.DeviceUnavailable` when drawing on a device this machine lacks.

    Example: ``tensors(torch.bfloat16, (4, 8))``; ``tensors(torch.float32, (4, 8), max_magnitude=2.0)``
    for values in [-2, 2]; ``tensors(torch.int64, (3,), elements=st.integers(0, 15))`` for indices into
    a side of 16.

    Why: pattern replacements go wrong at the edges of the value range (an eps hard-coded to a
    nearby value shows only on rows whose mean square is near or below it; fp16 overflows past
    65504), so one scale per tensor and row kinds reach those edges at the cost of a few choices.
    """
    _check_dtype(dtype)
    shape = _check_shape("shape", shape)
    _check_magnitude(max_magnitude)
    validate_bool("allow_nan", allow_nan)
    validate_bool("allow_infinity", allow_infinity)
    target = validated(device)
    if elements is None:
        nonfinite = ((math.nan,) if allow_nan else ()) + ((math.inf, -math.inf) if allow_infinity else ())
        drawn = _seeded(dtype, shape, max_magnitude, nonfinite if dtype.is_floating_point else ())
        public = public_call(
            tensors,
            drawn,
            dtype,
            shape,
            max_magnitude=max_magnitude,
            allow_nan=allow_nan,
            allow_infinity=allow_infinity,
            device=device,
        )
        return tensor_strategy_on(public, target)
    validate_strategy("elements", elements)
    if max_magnitude is not None or allow_nan or allow_infinity:
        raise InvalidArgument(
            f"elements={elements!r} draws the values itself: drop max_magnitude={max_magnitude!r}, "
            f"allow_nan={allow_nan!r} and allow_infinity={allow_infinity!r}"
        )
    public = public_call(
        tensors, _from_elements(dtype, shape, elements), dtype, shape, elements=elements, device=device
    )
    return tensor_strategy_on(public, target)


def tp_sizes(*, min_size: int = 1, max_size: int = 8) -> st.SearchStrategy[int]:
    """Return a strategy for tensor-parallel world sizes: the powers of two in
    [``min_size``, ``max_size``], simplest (smallest) first.

    - ``min_size`` / ``max_size``: bounds on the number of ranks, default 1..8.

    Raises ``hypothesis.errors.InvalidArgument`` for a bound that is not an int or is below 1,
    ``min_size > max_size``, or bounds that hold no power of two.

    Example: ``tp_sizes(max_size=4)`` draws 1, 2 or 4.
    """
    validate_int("min_size", min_size, minimum=1)
    validate_int("max_size", max_size, minimum=1)
    validate_order("min_size", min_size, "max_size", max_size)
    sizes = [1 << k for k in range(max_size.bit_length()) if min_size <= 1 << k <= max_size]
    if not sizes:
        raise InvalidArgument(f"min_size={min_size} and max_size={max_size} hold no power of two")
    return public_call(tp_sizes, st.sampled_from(sizes), min_size=min_size, max_size=max_size)
