"""Strategies for the leaves of a case: dtypes, shapes, real CPU tensors and tensor-parallel sizes.

Tensors are drawn as a *fill kind* and a seed, not element by element: a ``torch.Generator`` seeded
from the draw makes the values, so a tensor costs at most three choices whatever its size (making a
4x4 tensor takes ~30 µs, a 32K-element one ~1 ms; Hypothesis' own overhead per case is larger) and
shrinks to all zeros. With ``elements`` given, values come from that strategy: one fill value plus a
few drawn positions, as ``hypothesis.extra.numpy.arrays`` does, without needing numpy.

Nothing is filtered: 0 % of draws are rejected (tests/strategies/test_rejections.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from ._validation import FLOAT_DTYPES, check_dtypes, check_int, check_order, check_strategy

__all__ = ["dtypes", "shapes", "tensors", "tp_sizes", "TENSOR_DTYPES", "DEFAULT_BOUND"]

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
#: Dtypes :func:`tensors` draws: floating (also float64), integer (index tensors) and bool.
TENSOR_DTYPES = (*FLOAT_DTYPES, torch.float64, *_INT_DTYPES, torch.bool)
#: Floating values are drawn in [-DEFAULT_BOUND, DEFAULT_BOUND] unless ``elements`` is given.
DEFAULT_BOUND = 2.0
#: Integer values are drawn in [0, _INT_HIGH) unless ``elements`` is given.
_INT_HIGH = 8
#: Fill kinds, simplest first; "uniform" is listed 13 times so that most draws are random (an
#: all-zero or constant input hides many bugs: 1 in 16 draws each).
_KINDS = ("zeros", "constant", "specials") + ("uniform",) * 13
_FLOAT_CONSTANTS = (1.0, -1.0, 0.5, 2.0, -2.0)
_INT_CONSTANTS = (1, 2, _INT_HIGH - 1)
#: Values that "specials" writes over about a quarter of the positions of a uniform tensor.
_FLOAT_SPECIALS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)
#: With ``elements``: up to this many elements are drawn one by one; bigger tensors get a fill
#: value and a list of (position, value) overrides.
_DENSE_LIMIT = 16


def dtypes(*, allowed: Sequence[torch.dtype] | None = None) -> st.SearchStrategy[torch.dtype]:
    """Return a strategy for floating torch dtypes, simplest first: float32, float16, bfloat16.

    - ``allowed``: the dtypes to draw from, in the caller's order (shrinks toward the first);
      default :data:`FLOAT_DTYPES`.

    Raises ``hypothesis.errors.InvalidArgument`` when ``allowed`` is empty, not a sequence, or holds
    anything else than those three dtypes.

    Example: ``dtypes(allowed=[torch.bfloat16, torch.float16])`` draws bfloat16 or float16.
    """
    return st.sampled_from(check_dtypes("allowed", allowed))


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
        check_int(name, value, minimum=0)
    check_order("min_dims", min_dims, "max_dims", max_dims)
    check_order("min_side", min_side, "max_side", max_side)
    return st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


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


def _generated(dtype: torch.dtype, shape: tuple[int, ...], kind: str, constant: Any, seed: int) -> torch.Tensor:
    """The tensor of one fill kind: zeros, a constant, or seeded random values (with specials)."""
    if kind == "zeros":
        return torch.zeros(shape, dtype=dtype)
    if kind == "constant":
        return torch.full(shape, constant, dtype=dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=_gen(seed)) < 0.5
    if not dtype.is_floating_point:
        return torch.randint(0, _INT_HIGH, shape, generator=_gen(seed), dtype=dtype)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    generator = _gen(seed)
    values = (torch.rand(shape, generator=generator, dtype=work) * 2 - 1) * DEFAULT_BOUND
    if kind == "specials":
        specials = torch.tensor(_FLOAT_SPECIALS, dtype=work)
        index = torch.randint(0, len(_FLOAT_SPECIALS), (values.numel(),), generator=generator)
        picks = specials.index_select(0, index).reshape(shape)  # 80x faster than specials[index] here
        values = torch.where(torch.rand(shape, generator=generator) < 0.25, picks, values)
    return values.to(dtype)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@st.composite
def _seeded(draw: Any, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    kind = draw(st.sampled_from(_KINDS))
    constant = draw(st.sampled_from(_constants(dtype))) if kind == "constant" else None
    seed = draw(st.integers(0, 2**32 - 1)) if kind in ("uniform", "specials") else 0
    return _generated(dtype, shape, kind, constant, seed)


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


def tensors(
    dtype: torch.dtype, shape: tuple[int, ...], *, elements: st.SearchStrategy[Any] | None = None
) -> st.SearchStrategy[torch.Tensor]:
    """Return a strategy for real, contiguous CPU tensors of ``dtype`` and ``shape``.

    - ``dtype``: a torch dtype from :data:`TENSOR_DTYPES`: float32, float16, bfloat16, float64,
      int64, int32, int16, int8, uint8 or bool.
    - ``shape``: a tuple (or ``torch.Size``) of sizes in elements.
    - ``elements``: a strategy for the Python values (floats, ints or bools) to fill the tensor
      with, rounded to ``dtype``; values it draws that ``dtype`` cannot hold overflow as torch's
      casts do. Up to 16 elements are drawn one by one; a bigger tensor gets a fill value and a few
      drawn positions (as ``hypothesis.extra.numpy.arrays`` does).

    By default floating values are finite and lie in [-2, 2] (:data:`DEFAULT_BOUND`), and integer
    values in [0, 8) (indices into a side of 8; pass ``elements`` for other index ranges). A default
    tensor is all zeros, one constant (±1, ±0.5, ±2; 1, 2 or 7; True), uniform random values,
    or uniform values with about a quarter of the positions set to 0, ±0.5, ±1 or ±2, made by a
    ``torch.Generator`` from a drawn seed. Shrinks toward all zeros.

    Raises ``hypothesis.errors.InvalidArgument`` when ``dtype`` is not a supported torch dtype,
    ``shape`` is not a tuple of non-negative ints, or ``elements`` is not a strategy.

    Example: ``tensors(torch.bfloat16, (4, 8))``;
    ``tensors(torch.int64, (3,), elements=st.integers(0, 15))`` for indices into a side of 16.
    """
    _check_dtype(dtype)
    shape = _check_shape("shape", shape)
    if elements is None:
        return _seeded(dtype, shape)
    check_strategy("elements", elements)
    return _from_elements(dtype, shape, elements)


def tp_sizes(*, min_size: int = 1, max_size: int = 8) -> st.SearchStrategy[int]:
    """Return a strategy for tensor-parallel world sizes: the powers of two in
    [``min_size``, ``max_size``], simplest (smallest) first.

    - ``min_size`` / ``max_size``: bounds on the number of ranks, default 1..8.

    Raises ``hypothesis.errors.InvalidArgument`` for a bound that is not an int or is below 1,
    ``min_size > max_size``, or bounds that hold no power of two.

    Example: ``tp_sizes(max_size=4)`` draws 1, 2 or 4.
    """
    check_int("min_size", min_size, minimum=1)
    check_int("max_size", max_size, minimum=1)
    check_order("min_size", min_size, "max_size", max_size)
    sizes = [1 << k for k in range(max_size.bit_length()) if min_size <= 1 << k <= max_size]
    if not sizes:
        raise InvalidArgument(f"min_size={min_size} and max_size={max_size} hold no power of two")
    return st.sampled_from(sizes)
