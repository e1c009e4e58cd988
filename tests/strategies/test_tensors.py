"""dtypes, shapes, tensors, tp_sizes: drawn values respect their bounds; minimal examples are the
simplest; bad arguments raise InvalidArgument naming the argument."""

import contextlib
import math
import re

import pytest
import torch
from _minimal import minimal
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pmverify._validation import FLOAT_DTYPES
from pmverify.strategies._tensors import TENSOR_DTYPES, dtypes, max_magnitude_of, shapes, tensors, tp_sizes

INT_DTYPES = [d for d in TENSOR_DTYPES if not d.is_floating_point and d != torch.bool]


def test_minimal_examples_are_the_simplest():
    assert minimal(dtypes()) == torch.float32
    assert minimal(dtypes(allowed=[torch.bfloat16, torch.float16])) == torch.bfloat16
    assert minimal(shapes()) == (1,)
    assert minimal(shapes(min_dims=2, min_side=3)) == (3, 3)
    assert minimal(tp_sizes()) == 1
    assert minimal(tp_sizes(min_size=3)) == 4
    assert torch.equal(minimal(tensors(torch.float32, (2, 3))), torch.zeros(2, 3))
    assert torch.equal(minimal(tensors(torch.float32, (40,), elements=st.floats(-1, 1))), torch.zeros(40))


def test_minimal_nonzero_tensor_is_a_constant():
    x = minimal(tensors(torch.float16, (2, 2)), lambda t: bool(t.any()))
    assert torch.equal(x, torch.ones(2, 2, dtype=torch.float16))


@given(shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
def test_shapes_respect_bounds(shape):
    assert isinstance(shape, tuple) and len(shape) <= 4
    assert all(isinstance(side, int) and 0 <= side <= 5 for side in shape)


@given(st.data(), st.sampled_from(FLOAT_DTYPES + (torch.float64,)), shapes(min_dims=0, max_dims=4))
def test_float_tensors_are_finite_and_bounded(data, dtype, shape):
    x = data.draw(tensors(dtype, shape))
    assert x.dtype == dtype and tuple(x.shape) == shape and x.device.type == "cpu" and x.is_contiguous()
    assert torch.isfinite(x).all() and (x.abs() <= max_magnitude_of(dtype)).all()
    assert max_magnitude_of(torch.float16) == 2**8 and max_magnitude_of(dtype) <= 2**17


@given(st.data(), st.sampled_from([0.0, 1e-30, 0.5, 3, 1e6]), shapes(max_dims=2))
def test_max_magnitude_caps_values(data, cap, shape):
    x = data.draw(tensors(torch.float32, shape, max_magnitude=cap))
    assert (x.abs() <= cap).all()
    i = data.draw(tensors(torch.int32, shape, max_magnitude=cap))
    assert ((i >= 0) & (i <= cap)).all()


def _rows(x):
    return x.reshape(-1, x.shape[-1])


#: What the default floating values must show over a hundred draws of a [4, 8] tensor: scales from
#: 2**-24 to 2**16, row kinds (zero, all-equal, tiny next to plain rows, outliers, negative zeros).
_VALUE_KINDS = {
    "tiny (below 2**-20)": lambda x: 0 < x.abs().max() < 2**-20,
    "large (above 2**14)": lambda x: x.abs().max() > 2**14,
    "unit scale": lambda x: 1 < x.abs().max() <= 2,
    "a zero row among others": lambda x: (_rows(x) == 0).all(1).any() and x.any(),
    "an all-equal row": lambda x: (_rows(x) == _rows(x)[:, :1]).all(1).any() and x.unique().numel() > 2,
    "a row far below eps next to a plain one": lambda x: (r := _rows(x).pow(2).mean(1)).min() < 1e-8 < 1e-2 < r.max(),
    "outliers": lambda x: x.abs().max() > 16 * x.abs().median() > 0,
    "negative zeros": lambda x: bool(((x == 0) & torch.signbit(x)).any()),
    "all zeros": lambda x: not x.any(),
    "one constant": lambda x: x.unique().numel() == 1 and x.any(),
}


class _AllSeen(Exception):
    pass


def test_values_show_every_scale_and_row_kind():
    """Draws (deterministically, no shrinking) until every kind was seen, at most 300."""
    seen = set()

    @settings(max_examples=300, derandomize=True, database=None, phases=[Phase.generate])
    @given(tensors(torch.float32, (4, 8)))
    def draw(x):
        seen.update(name for name, holds in _VALUE_KINDS.items() if holds(x))
        if seen == set(_VALUE_KINDS):
            raise _AllSeen

    with contextlib.suppress(_AllSeen):
        draw()
    assert seen == set(_VALUE_KINDS), sorted(set(_VALUE_KINDS) - seen)


def test_nonfinite_values_only_when_asked():
    x = minimal(tensors(torch.float32, (4, 8), allow_nan=True, allow_infinity=True), lambda t: t.isnan().any())
    assert x.isnan().any()
    y = minimal(tensors(torch.bfloat16, (16,), allow_infinity=True), lambda t: t.isinf().any())
    assert not y.isnan().any() and y.isinf().any()


@given(st.data(), st.sampled_from(INT_DTYPES + [torch.bool]), shapes())
def test_int_and_bool_tensors_are_small_indices(data, dtype, shape):
    x = data.draw(tensors(dtype, shape))
    assert x.dtype == dtype and tuple(x.shape) == shape
    if dtype != torch.bool:
        assert ((x >= 0) & (x < 8)).all()


@given(st.data(), st.sampled_from([(3,), (2, 2), (5, 7), (64,)]))
def test_elements_fill_the_tensor(data, shape):
    x = data.draw(tensors(torch.bfloat16, shape, elements=st.floats(-0.5, 0.5, width=16)))
    assert x.dtype == torch.bfloat16 and tuple(x.shape) == shape and (x.abs() <= 0.5).all()
    i = data.draw(tensors(torch.int64, shape, elements=st.integers(10, 12)))
    assert ((i >= 10) & (i <= 12)).all()


@given(tp_sizes(min_size=2, max_size=16))
def test_tp_sizes_are_powers_of_two_in_bounds(size):
    assert 2 <= size <= 16 and size & (size - 1) == 0


def test_tensors_draw_varied_values():
    x = minimal(tensors(torch.float32, (16,)), lambda t: bool((t > 1).any() and (t < -1).any()))
    assert x.unique().numel() > 2


# Explicit edge cases: scalars, empty tensors, torch.Size shapes, big tensors with ``elements``.
@pytest.mark.parametrize(
    ("dtype", "shape", "elements"),
    [
        (torch.float32, (), None),
        (torch.bfloat16, (0,), None),
        (torch.float16, (3, 0, 2), st.floats(-1, 1)),
        (torch.float32, torch.Size([2, 2]), None),
        (torch.int64, (), st.integers(0, 3)),
        (torch.bool, (0, 4), st.booleans()),
        (torch.float32, (32, 32), st.just(1.5)),
    ],
)
def test_tensors_examples(dtype, shape, elements):
    @settings(max_examples=5)
    @given(tensors(dtype, shape, elements=elements))
    def check(x):
        assert x.dtype == dtype and tuple(x.shape) == tuple(shape) and x.numel() == math.prod(shape)

    check()


# Explicit edge cases of the value options: a cap below every scale, an int cap below 1, NaN asked
# of a bool tensor (ignored), non-finite values in float16, a cap of 0.
@pytest.mark.parametrize(
    ("dtype", "kwargs", "holds"),
    [
        (torch.float16, {"max_magnitude": 1e-30}, lambda x: not x.any()),  # below float16's subnormals
        (torch.int8, {"max_magnitude": 0.5}, lambda x: not x.any()),
        (torch.bool, {"allow_nan": True}, lambda x: x.dtype == torch.bool),
        (
            torch.float16,
            {"allow_nan": True, "allow_infinity": True},
            lambda x: (x[torch.isfinite(x)].abs() <= 2**8).all(),
        ),
        (torch.bfloat16, {"max_magnitude": 0}, lambda x: not x.any()),
    ],
)
def test_value_options_examples(dtype, kwargs, holds):
    @settings(max_examples=10)
    @given(tensors(dtype, (3, 5), **kwargs))
    def check(x):
        assert x.dtype == dtype and tuple(x.shape) == (3, 5) and holds(x)

    check()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: dtypes(allowed=[]), "allowed=[] is empty"),
        (lambda: dtypes(allowed=torch.float32), "allowed=torch.float32"),
        (lambda: dtypes(allowed=[torch.int64]), "torch.int64"),
        (lambda: shapes(min_dims=-1), "min_dims=-1 must be at least 0"),
        (lambda: shapes(max_dims=2.0), "max_dims=2.0 must be an int"),
        (lambda: shapes(min_dims=5, max_dims=2), "min_dims=5 is larger than max_dims=2"),
        (lambda: shapes(min_side=4, max_side=3), "min_side=4 is larger than max_side=3"),
        (lambda: shapes(max_side=True), "max_side=True must be an int"),
        (lambda: tensors("float32", (2,)), "dtype='float32' must be a torch.dtype"),
        (lambda: tensors(torch.complex64, (2,)), "dtype=torch.complex64 is not supported"),
        (lambda: tensors(torch.float32, [2, 3]), "shape=[2, 3] must be a tuple"),
        (lambda: tensors(torch.float32, (2, -1)), "shape=(2, -1) holds the negative size -1"),
        (lambda: tensors(torch.float32, (2.0,)), "shape=(2.0,) holds 2.0, not an int"),
        (lambda: tensors(torch.float32, (2,), elements=1.0), "elements=1.0 must be a Hypothesis strategy"),
        (lambda: tensors(torch.float32, (2,), max_magnitude=-1.0), "max_magnitude=-1.0 must be finite and at least 0"),
        (lambda: tensors(torch.float32, (2,), max_magnitude=math.inf), "max_magnitude=inf must be finite"),
        (lambda: tensors(torch.float32, (2,), max_magnitude="2"), "max_magnitude='2' must be a number"),
        (lambda: tensors(torch.float32, (2,), max_magnitude=True), "max_magnitude=True must be a number"),
        (lambda: tensors(torch.float32, (2,), allow_nan=1), "allow_nan=1 must be a bool"),
        (lambda: tensors(torch.float32, (2,), allow_infinity=None), "allow_infinity=None must be a bool"),
        (
            lambda: tensors(torch.float32, (2,), elements=st.just(1.0), max_magnitude=1.0),
            "draws the values itself: drop max_magnitude=1.0",
        ),
        (lambda: tp_sizes(max_size=0), "max_size=0 must be at least 1"),
        (lambda: tp_sizes(max_size=4.0), "max_size=4.0 must be an int"),
        (lambda: tp_sizes(min_size=4, max_size=2), "min_size=4 is larger than max_size=2"),
        (lambda: tp_sizes(min_size=5, max_size=7), "min_size=5 and max_size=7 hold no power of two"),
    ],
)
def test_bad_arguments(build, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        build()
