"""like: dtypes and ranks of the example are kept, declared relations hold, undeclared dims and
non-tensor items are kept, sizes stay in bounds and shrink to the smallest; bad arguments."""

import re

import pytest
import torch
from _minimal import minimal
from hypothesis import given, settings
from hypothesis.errors import InvalidArgument, NoSuchExample

from pmverify.strategies._broadcast import broadcast_kind
from pmverify.strategies._like import Dim, layout_strides, like
from pmverify.strategies._tensors import max_magnitude_of

EPS = 1e-6
#: An RMS-norm pattern's example inputs: x[tokens, hidden], weight[hidden], eps.
NORM = (torch.empty(8, 16, dtype=torch.bfloat16), torch.empty(16), EPS)
NORM_VARY = {"tokens": [(0, 0)], Dim("hidden", min=4, max=40): [(0, -1), (1, 0)]}


@given(like(NORM, vary=NORM_VARY))
def test_relations_dtypes_and_scalars_are_kept(inputs):
    x, weight, eps = inputs
    assert x.dtype == torch.bfloat16 and weight.dtype == torch.float32
    assert x.dim() == 2 and weight.dim() == 1
    assert x.shape[1] == weight.shape[0] and 4 <= weight.shape[0] <= 40
    assert 1 <= x.shape[0] <= 16
    assert eps is EPS
    assert torch.isfinite(x).all() and (x.abs() <= max_magnitude_of(torch.bfloat16)).all()


# Explicit examples: a qkv split pattern whose relations are not equalities (only tokens vary),
# int64 index inputs, a dim tied within one tensor, zero-size bounds.
_EXAMPLES = {
    "qkv_tokens_only": (
        (torch.empty(4, 24, dtype=torch.float16), torch.empty(8), torch.empty(8), 8, 1e-5),
        {"tokens": [(0, 0)]},
        lambda i: i[0].shape[1:] == (24,) and i[1].shape == i[2].shape == (8,) and i[3:] == (8, 1e-5),
    ),
    "int64_indices": (
        (torch.zeros(5, dtype=torch.int64), torch.empty(5, 3)),
        {"n": [(0, 0), (1, 0)]},
        lambda i: i[0].dtype == torch.int64 and i[0].shape[0] == i[1].shape[0] and ((i[0] >= 0) & (i[0] < 8)).all(),
    ),
    "square_matrix": (
        (torch.empty(6, 6), torch.empty(6)),
        {"n": [(0, 0), (0, 1), (1, 0)]},
        lambda i: i[0].shape[0] == i[0].shape[1] == i[1].shape[0],
    ),
    "zero_sizes": (
        (torch.empty(3, 2),),
        {Dim("rows", min=0, max=2): [(0, 0)]},
        lambda i: i[0].shape[0] <= 2 and i[0].shape[1] == 2,
    ),
}


@pytest.mark.parametrize("name", sorted(_EXAMPLES))
def test_relations_dtypes_and_scalars_are_kept_examples(name):
    example, vary, holds = _EXAMPLES[name]

    @settings(max_examples=10)
    @given(like(example, vary=vary))
    def check(inputs):
        assert len(inputs) == len(example)
        for got, want in zip(inputs, example, strict=True):
            if isinstance(want, torch.Tensor):
                assert got.dtype == want.dtype and got.dim() == want.dim()
        assert holds(inputs)

    check()


@given(like(NORM))
def test_nothing_varies_by_default(inputs):
    assert [tuple(t.shape) for t in inputs[:2]] == [(8, 16), (16,)] and inputs[2] is EPS


@given(like((torch.empty(4, 8, 1), torch.empty(8), torch.empty(4, 8)), vary="duck"))
def test_duck_sizing_ties_equal_sizes(inputs):
    x, w, y = inputs
    assert x.shape[2] == 1  # sizes 1 stay
    assert x.shape[1] == w.shape[0] == y.shape[1] and x.shape[0] == y.shape[0]


def test_minimal_draw_has_the_smallest_sizes_and_zeros():
    x, weight, eps = minimal(like(NORM, vary=NORM_VARY))
    assert tuple(x.shape) == (1, 4) and tuple(weight.shape) == (4,) and eps is EPS
    assert not x.any() and not weight.any()


def test_values_reach_rows_far_below_eps():
    """like draws through tensors(): a norm's input rows have mean squares far below a typical eps."""
    x, _, _ = minimal(like(NORM), lambda i: 0 < float(i[0].float().pow(2).mean(-1).max()) < 1e-8)
    assert x.dtype == torch.bfloat16 and x.any()


def test_sizes_vary():
    x, _, _ = minimal(like(NORM, vary=NORM_VARY), lambda i: i[0].shape[0] > 8 and i[1].shape[0] > 20)
    assert tuple(x.shape) == (9, 21)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: like(torch.empty(2)), "example_inputs=tensor"),
        (lambda: like([1, 2]), "example_inputs=[1, 2] holds no tensor"),
        (lambda: like(()), "example_inputs=() holds no tensor"),
        (lambda: like((torch.empty(2, dtype=torch.complex64),)), "example_inputs[0] has dtype torch.complex64"),
        (lambda: like(NORM, vary="all"), "vary='all' must be None, 'duck', or a mapping"),
        (lambda: like(NORM, vary=[(0, 0)]), "vary=[(0, 0)] must be None"),
        (lambda: like(NORM, vary={"t": [(3, 0)]}), "vary['t']=[(3, 0)]: input index=3 must be at most 2"),
        (lambda: like(NORM, vary={"t": [(-1, 0)]}), "input index=-1 must be at least 0"),
        (lambda: like(NORM, vary={"t": [(2, 0)]}), "example_inputs[2]=1e-06 is not a tensor"),
        (lambda: like(NORM, vary={"t": [(0, 2)]}), "vary['t']=[(0, 2)]: dim=2 must be at most 1"),
        (lambda: like(NORM, vary={"t": [(0, -3)]}), "dim=-3 must be at least -2"),
        (lambda: like(NORM, vary={"t": [(0, 0.5)]}), "dim=0.5 must be an int"),
        (lambda: like(NORM, vary={"t": [0]}), "vary['t']=[0] holds 0, not an (input index, dim) pair"),
        (lambda: like(NORM, vary={"t": []}), "vary['t']=[] must be a non-empty list"),
        (lambda: like(NORM, vary={"t": [(0, 0), (0, 1)]}), "ties dims of different sizes [8, 16]"),
        (lambda: like(NORM, vary={"a": [(0, 1)], "b": [(0, -1)]}), "position (0, 1) is in both 'a' and 'b'"),
        (lambda: like(NORM, vary={"t": [(0, 0)], Dim("t"): [(1, 0)]}), "vary names 't' twice"),
        (lambda: like(NORM, vary={3: [(0, 0)]}), "vary key 3 must be a str or a Dim"),
        (lambda: like(NORM, vary={Dim("t", min=20): [(0, 0)]}), "t min=20 is larger than t max=16"),
        (lambda: like(NORM, min_side=-1), "min_side=-1 must be at least 0"),
        (lambda: like(NORM, min_side=5, max_side=4), "min_side=5 is larger than max_side=4"),
        (lambda: like(NORM, max_side=2.0), "max_side=2.0 must be an int"),
        (lambda: like(NORM, broadcast=True), "broadcast=True must be None, False, or a sequence"),
        (lambda: like(NORM, broadcast="w"), "broadcast='w' must be None, False, or a sequence"),
        (lambda: like(NORM, broadcast=[(1,)]), "broadcast=[(1,)] holds (1,), not an (input index, dim) pair"),
        (lambda: like(NORM, broadcast=[(3, 0)]), "broadcast=[(3, 0)]: input index=3 must be at most 2"),
        (lambda: like(NORM, broadcast=[(2, 0)]), "example_inputs[2]=1e-06 is not a tensor of rank >= 1"),
        (lambda: like(NORM, broadcast=[(1, 1)]), "broadcast=[(1, 1)]: dim=1 must be at most 0"),
        (lambda: like(NORM, broadcast=[(1, 0)], dynamic=True), "broadcast forms are drawn static only"),
        (lambda: like(NORM, pattern=3), "pattern=3 must be callable"),
        (lambda: like(NORM, dtypes=[]), "dtypes=[] must be a non-empty list of floating dtypes"),
        (lambda: like(NORM, dtypes=torch.bfloat16), "dtypes=torch.bfloat16 must be a non-empty list"),
        (lambda: like(NORM, dtypes=[torch.int32]), "dtypes=[torch.int32] holds torch.int32, not a floating dtype"),
        (lambda: Dim(""), "Dim name='' must be a non-empty str"),
        (lambda: Dim("t", min=-1), "Dim('t').min=-1 must be at least 0"),
        (lambda: Dim("t", min=4, max=2), "Dim('t').min=4 is larger than Dim('t').max=2"),
    ],
)
def test_bad_arguments(build, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        build()


def test_examples_repr_holds_no_tensor_values():
    """The strategy's repr keys the example database: ``torch.empty`` garbage must not enter it, or a
    saved failure is never replayed."""
    first = like((torch.empty(4, 8), torch.empty(8)), vary={"tokens": [(0, 0)]})
    second = like((torch.full((4, 8), 7.0), torch.full((8,), 7.0)), vary={"tokens": [(0, 0)]})
    assert repr(first) == repr(second)
    assert "shape=(4, 8), dtype=torch.float32" in repr(first)


def test_examples_duck_sizes_start_at_two():
    symbols = like((torch.empty(4, 8), torch.empty(8)), vary="duck")
    assert minimal(symbols)[0].shape == (2, 2)


#: Example tensors of three layout families: padded and permuted (``empty_strided``, as Inductor's
#: attention pattern 28 registers its q/k/v), transposed, and expanded (a bias broadcast over rows).
STRIDED = (
    torch.empty_strided((2, 6, 16, 8), (2304, 128, 1, 16)),
    torch.empty(3, 5).t(),
    torch.empty(4).expand(3, 4),
    torch.empty(4, 8),
)


def _order(t):
    """The dims of size > 1 and stride > 0, innermost first."""
    return sorted((d for d in range(t.dim()) if t.shape[d] > 1 and t.stride(d)), key=lambda d: (t.stride(d), -d))


@settings(max_examples=10)
@given(like(STRIDED, vary="duck"))
def test_strided_examples_keep_their_layout_family(inputs):
    padded, transposed, expanded, plain = inputs
    assert padded.stride() == layout_strides(STRIDED[0].shape, STRIDED[0].stride(), padded.shape)
    assert _order(padded) == [2, 3, 1, 0] and padded.stride(0) == 3 * padded.shape[1] * padded.stride(1)
    assert _order(transposed) == [0, 1] and transposed.stride(0) == 1
    assert expanded.stride(0) == 0 and bool((expanded == expanded[0]).all())
    assert plain.is_contiguous()


def test_strided_examples_at_their_own_sizes_have_their_strides():
    drawn = minimal(like(STRIDED))
    assert [t.stride() for t in drawn] == [t.stride() for t in STRIDED]
    assert "stride=(2304, 128, 1, 16)" in repr(like(STRIDED))  # the layout keys the example database


# ------------------------------------------------------------------------------- broadcast forms


def _norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w).to(x.dtype)


def _forms(x, w):
    """The broadcast forms of a norm draw: w 0-d, w[1] at H > 1, w or x expanded (stride 0)."""
    forms = set()
    if w.dim() == 0:
        forms.add("w_drop")
    elif w.shape[0] == 1 and x.shape[1] > 1:
        forms.add("w_one")
    if any(st == 0 and n > 1 for t in (x, w) for n, st in zip(t.shape, t.stride(), strict=True)):
        forms.add("expand")
    return forms


@settings(max_examples=60)
@given(like(NORM, vary=NORM_VARY, pattern=_norm))
def test_broadcast_forms_keep_the_patterns_output_shapes(inputs):
    # only forms the pattern broadcasts: x keeps its rank and sizes, so the output is x's shape
    x, w, eps = inputs
    assert x.dim() == 2 and x.shape[1] >= 4 and (w.dim() == 0 or w.shape[0] in (1, x.shape[1]))
    assert _norm(x, w, eps).shape == x.shape


@pytest.mark.parametrize("form", ["w_drop", "w_one", "expand"])
def test_broadcast_forms_are_drawn_examples(form):
    # each form of the norm is drawn; its minimal draw keeps the other input plain
    x, w, _ = minimal(like(NORM, vary=NORM_VARY, pattern=_norm), lambda i: form in _forms(i[0], i[1]))
    assert _forms(x, w) == {form}


def test_broadcast_forms_the_pattern_rejects_are_never_drawn():
    # a pattern that needs one shape (a flat add) allows only the expanded forms
    def flat_add(x, y):
        return x.reshape(-1) + y.reshape(-1)

    example = (torch.empty(3, 4), torch.empty(3, 4))
    found = []

    @settings(max_examples=80, database=None)
    @given(like(example, vary="duck", pattern=flat_add))
    def draws(inputs):
        x, y = inputs
        assert x.shape == y.shape
        found.append(any(0 in t.stride() for t in (x, y)))

    draws()
    assert any(found) and not all(found)


def test_broadcast_forms_need_a_pattern_or_named_positions():
    # without the search function like draws as before; named positions are drawn without one
    with pytest.raises(NoSuchExample):
        minimal(like(NORM, vary=NORM_VARY), lambda i: bool(_forms(i[0], i[1])))
    x, w, _ = minimal(like(NORM, broadcast=[(1, 0)]), lambda i: i[1].dim() == 0)
    assert x.shape == (8, 16)
    with pytest.raises(NoSuchExample):
        minimal(like(NORM, vary=NORM_VARY, broadcast=False, pattern=_norm), lambda i: bool(_forms(i[0], i[1])))


def test_no_broadcast_form_a_view_pattern_passes_on():
    # x.t() of an expanded x is a stride-0 output: a layout passed on, not a broadcast (a clone of
    # it is contiguous); forms of other sizes change the output's shape
    with pytest.raises(NoSuchExample):
        minimal(like((torch.empty(4, 6),), vary="duck", pattern=lambda x: x.t()), lambda i: 0 in i[0].stride())


def test_dtypes_draws_each_floating_dtype_and_keeps_int_inputs():
    example = (torch.empty(4, 8), torch.empty(8, dtype=torch.int64))
    strategy = like(example, dtypes=[torch.float32, torch.bfloat16])
    assert minimal(strategy)[0].dtype == torch.float32  # the first shrinks simplest
    drawn = minimal(strategy, lambda xs: xs[0].dtype == torch.bfloat16)
    assert drawn[1].dtype == torch.int64


def test_dtypes_keeps_the_hook_planted_gives_its_pattern_to():
    """``st.one_of(like(...), like(...))`` loses it: no broadcast form is drawn through it."""
    strategy = like((torch.empty(4, 8), torch.empty(8)), vary="duck", dtypes=[torch.float32, torch.float16])
    assert strategy.pmverify_example_inputs[0].dtype == torch.float32
    rebuilt = strategy.pmverify_with_pattern(lambda x, w: x * w)
    drawn = minimal(rebuilt, lambda xs: xs[0].dtype == torch.float16 and broadcast_kind(xs) is not None)
    assert drawn[0].dtype == drawn[1].dtype == torch.float16  # a broadcast form, in the other dtype


def test_a_pattern_that_raises_on_the_example_is_an_invalid_argument():
    def rms(x, w, eps):
        return x * w * eps

    with pytest.raises(InvalidArgument, match=re.escape("raises on example_inputs (TypeError")):
        minimal(like(NORM[:2], pattern=rms))
