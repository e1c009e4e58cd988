"""Public strategies show the public call that made them (``_public``): the repr a user reads in
Hypothesis' output, and what keys the example database."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import find

import pmverify.strategies as strategies
from pmverify.strategies import (
    Dim,
    Replicate,
    dtypes,
    fx_graphs,
    like,
    planted,
    shapes,
    tensors,
    tp_cases,
    tp_sizes,
    with_mutating_custom_ops,
    with_mutations,
)


def scale_pattern(x, w):
    return torch.tanh(x) * w


EXAMPLE = (torch.empty(4, 8), torch.empty(8))

#: One call of each public strategy, with arguments that must show in its repr.
CALLS = {
    "dtypes": (lambda: dtypes(allowed=[torch.bfloat16]), ["allowed=[torch.bfloat16]"]),
    "shapes": (lambda: shapes(max_dims=2), ["max_dims=2"]),
    "tensors": (
        lambda: tensors(torch.float16, (2, 3), max_magnitude=2.0),
        ["torch.float16", "(2, 3)", "max_magnitude=2.0"],
    ),
    "tp_sizes": (lambda: tp_sizes(max_size=4), ["max_size=4"]),
    "fx_graphs": (lambda: fx_graphs(max_nodes=5, ops=["neg", "add"]), ["max_nodes=5", "ops=['neg', 'add']"]),
    "like": (
        lambda: like(EXAMPLE, vary={Dim("tokens", max=8): [(0, 0)]}),
        ["TensorLike(shape=(4, 8), dtype=torch.float32", "vary={Dim(name='tokens', min=None, max=8)"],
    ),
    "planted": (
        lambda: planted(scale_pattern, like(EXAMPLE), max_instances=1, near_misses=["dim"]),
        ["planted(scale_pattern, like(", "max_instances=1", "near_misses=['dim']"],
    ),
    "with_mutations": (
        lambda: with_mutations(fx_graphs(), max_mutations=1),
        ["with_mutations(fx_graphs()", "max_mutations=1"],
    ),
    "with_mutating_custom_ops": (
        lambda: with_mutating_custom_ops(fx_graphs(), versions=[2]),
        ["with_mutating_custom_ops(fx_graphs()", "versions=[2]"],
    ),
    "tp_cases": (
        lambda: tp_cases(fx_graphs(), placements=[Replicate()], tp_world=tp_sizes(min_size=2)),
        ["placements=[Replicate()]", "tp_world=tp_sizes(min_size=2)"],
    ),
}

#: A call of a private name: ``_cases(``, ``_graphs(``, ``_TensorLike(``...
PRIVATE_CALL = re.compile(r"(?<![\w.])_\w+\(")


def test_every_generic_public_strategy_is_covered():
    functions = {
        name
        for name in strategies.__all__
        if callable(getattr(strategies, name)) and name[0].islower() and "qk_norm" not in name
    }
    assert functions == set(CALLS)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_repr_is_the_public_call(name):
    build, shown = CALLS[name]
    text = repr(build())
    assert text.startswith(f"{name}("), text
    assert not PRIVATE_CALL.search(text), text
    for part in shown:
        assert part in text, (part, text)


def test_arguments_left_at_their_default_are_left_out():
    for function in (dtypes, shapes, tp_sizes, fx_graphs):
        assert repr(function()) == f"{function.__name__}()"
    for function in (with_mutations, with_mutating_custom_ops, tp_cases):
        assert repr(function(fx_graphs())) == f"{function.__name__}(fx_graphs())"
    assert repr(planted(scale_pattern, like(EXAMPLE))) == f"planted(scale_pattern, {like(EXAMPLE)!r})"
    assert repr(tensors(torch.float32, (2,))) == "tensors(torch.float32, (2,))"


def test_arguments_tell_strategies_apart():
    """The repr keys the example database: different calls, different reprs."""
    assert repr(fx_graphs(max_nodes=5)) != repr(fx_graphs(max_nodes=6))
    assert repr(like(EXAMPLE)) != repr(like((torch.empty(4, 8), torch.empty(8, dtype=torch.float16))))
    assert repr(planted(scale_pattern, like(EXAMPLE))) != repr(planted(scale_pattern, like(EXAMPLE), max_instances=1))


def test_public_strategy_draws_what_it_wraps():
    assert find(tp_sizes(min_size=2), lambda n: True) == 2
    assert find(shapes(min_dims=2), lambda s: True) == (1, 1)
    assert not fx_graphs().is_empty
