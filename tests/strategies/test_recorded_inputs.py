"""What planted(recorded) draws by default: capped sizes keep ranks, equal and distinct sizes,
divisibility and layouts; a 0-d example tensor the pattern reads as a number is drawn as a Python
number; every drawn instance runs eagerly (near misses too)."""

import math

import pytest
import torch
from _minimal import minimal
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._inductor import pattern_matcher as pm

from pmverify._registry.record import record_patterns
from pmverify.strategies import planted
from pmverify.strategies._planted_splice import keeping_layout as _keeping_layout
from pmverify.strategies._recorded_inputs import MAX_NUMEL, MAX_SIDE, capped_sizes, number_positions, recorded_example

SIZES = st.one_of(st.integers(0, 12).map(lambda k: 2**k), st.integers(0, 3000), st.sampled_from([96, 384, 1000, 4096]))


@given(st.lists(st.lists(SIZES, min_size=1, max_size=4), min_size=1, max_size=4))
def test_capped_sizes_keep_equalities_distinctness_and_divisibility(shapes):
    sizes = capped_sizes(shapes)
    new = {n: sizes.get(n, n) for shape in shapes for n in shape}
    for n, m in new.items():
        assert (m == n) if n <= 1 else (1 < m <= n)
    assert len(set(new.values())) == len(new)  # distinct sizes stay distinct
    for a in new:
        for b in new:
            if a > 1 and b % a == 0:
                assert new[b] % new[a] == 0, (a, b, sizes)


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        ([(1024, 128, 128)] * 3, {1024: 64, 128: 8}),  # Inductor's attention pattern 13
        ([(2, 1024, 1024)], {1024: 32}),  # a size 2 stays 2: only 1024's exponent of 2 shrinks
        ([(4, 100)], {100: 20}),  # a side above 64: the 5s shrink (the 2s would change 4 too)
        ([(2, 4, 8, 16), (1, 1, 8, 8), ()], {}),  # within the caps
        ([(7919, 7919)], {}),  # a prime: nothing keeps it above 1 and smaller
    ],
)
def test_capped_sizes_examples(shapes, expected):
    assert capped_sizes(shapes) == expected
    capped = [math.prod(expected.get(n, n) for n in shape) for shape in shapes]
    assert not expected or max(capped) <= MAX_NUMEL and max(max(expected.values()), 0) <= MAX_SIDE


def _recorded(search_fn, example, extra_check=None):
    kwargs = {"extra_check": extra_check} if extra_check else {}
    with record_patterns(register=False) as rewrites:
        pm.register_replacement(search_fn, search_fn, list(example), pm.fwd_only, [], **kwargs)
    return rewrites[0]


def attention_like(q, k, v):
    return (q @ k.transpose(-2, -1)).softmax(-1) @ v


def test_large_strided_examples_are_capped_in_their_layout():
    """q/k/v [256, 32, 32], k transposed: drawn [64, 8, 8], k still transposed; labelled."""
    example = (torch.empty(256, 32, 32), torch.empty(256, 32, 32).transpose(1, 2), torch.empty(256, 32, 32))
    rewrite = _recorded(attention_like, example)
    assert recorded_example(rewrite).capped_sizes == {256: 64, 32: 8}
    case = minimal(planted(rewrite, context=st.nothing(), min_instances=1, max_instances=1, near_misses=False))
    q, k, _ = case.inputs[0]
    assert q.shape == k.shape == (64, 8, 8) and k.stride() == (64, 1, 8)
    assert "sizes capped 32->8, 256->64" in case.label


def test_late_producers_keep_an_input_layout():
    """A late producer replaces a placeholder: a view of a flat input is contiguous, a clone keeps a
    permuted layout only; where they would change the input's layout, the input is used directly."""
    plain, permuted, expanded = torch.zeros(4, 8), torch.zeros(8, 4).t(), torch.zeros(8).expand(4, 8)
    assert [_keeping_layout("view", t) for t in (plain, permuted, expanded)] == ["view", None, None]
    assert [_keeping_layout("clone", t) for t in (plain, permuted, expanded)] == ["clone", "clone", None]


def scaled(x, inv_scale):
    return x.div(inv_scale).softmax(-1)


def scaled_by_a_tensor(x, inv_scale):
    return x * inv_scale.exp()


def _inv_scale(case):
    """The divisor of the instance's first ``div``: a number (literal) or a placeholder's 0-d tensor."""
    other = case.gm.graph.find_nodes(op="call_function", target=torch.ops.aten.div.Tensor)[0].args[1]
    return other.meta["val"] if isinstance(other, torch.fx.Node) else other


def test_a_0d_tensor_read_as_a_number_is_drawn_as_one():
    """inv_scale given as ``torch.tensor(2.0)``, a number in a model: drawn as numbers around and far
    from 2.0 (2.0 the simplest), which Inductor's matcher matches, and sometimes as the 0-d tensor."""
    args = (torch.zeros(4, 8), torch.tensor(2.0))
    assert number_positions(scaled, args, None)[0] == {1: 2.0}
    # a fake example tensor is re-created holding zeros: no scale to draw around, 1 instead
    assert number_positions(scaled, (args[0], torch.tensor(0.0)), None)[0] == {1: 1.0}
    assert number_positions(scaled_by_a_tensor, args, None) == ({}, None)  # .exp() needs a tensor
    rewrite = _recorded(scaled, args)
    strategy = planted(rewrite, context=st.nothing(), min_instances=1, max_instances=1, near_misses=False)
    assert _inv_scale(minimal(strategy)) == 2.0
    seen = set()

    @settings(max_examples=15, database=None, deadline=None)
    @given(strategy)
    def check(case):
        inv_scale = _inv_scale(case)
        seen.add("0-d tensor" if isinstance(inv_scale, torch.Tensor) else "2.0" if inv_scale == 2.0 else "other number")
        assert case.planted[0].must_match is True  # no extra_check: Inductor matches either form

    check()
    assert {"2.0", "other number"} <= seen
    tensor_form = minimal(strategy, lambda c: isinstance(_inv_scale(c), torch.Tensor))
    assert tensor_form.planted[0].must_match is True


def lerp_half(a, b):
    """Runs eagerly only for a float16 ``a`` (lerp refuses mixed dtypes); its decomposition, which
    Inductor traces, promotes any."""
    return torch.lerp(a, b.half(), 0.5)


def test_inputs_eager_pytorch_refuses_are_never_drawn():
    """A dtype near miss casting ``a`` to float32 or bfloat16 traces, but no program can hold it; nor
    a plain instance on such inputs (rejected)."""
    inputs = st.tuples(st.sampled_from([torch.float16, torch.float32]), st.just(torch.ones(8))).map(
        lambda p: (torch.ones(8, dtype=p[0]), p[1])
    )
    example = (torch.empty(8, dtype=torch.float16), torch.empty(8))
    cases = planted(lerp_half, inputs, example_inputs=example, context=st.nothing(), min_instances=1, max_instances=1)

    @settings(max_examples=25, database=None, deadline=None)
    @given(cases)
    def check(case):
        assert all(p.reason != "dtype" for p in case.planted)
        a = next(n for n in case.gm.graph.nodes if n.op == "placeholder").meta["val"]
        assert a.dtype == torch.float16

    check()
