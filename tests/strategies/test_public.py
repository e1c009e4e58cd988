"""Public strategies show the public call that made them (``_public``): the repr a user reads in
Hypothesis' output, and what keys the example database."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import find

from pmverify import strategies as S


def scale_pattern(x, w):
    return torch.tanh(x) * w


EXAMPLE = (torch.empty(4, 8), torch.empty(8))


#: One call of each public strategy, with arguments that must show in its repr.
def _relu_pattern():
    from torch._inductor import pattern_matcher as pm

    return pm.CallFunction(torch.ops.aten.relu.default, pm.KeywordArg("x"))


CALLS = {
    "dtypes": (lambda: S.dtypes(allowed=[torch.bfloat16]), ["allowed=[torch.bfloat16]"]),
    "shapes": (lambda: S.shapes(max_dims=2), ["max_dims=2"]),
    "tensors": (
        lambda: S.tensors(torch.float16, (2, 3), max_magnitude=2.0),
        ["torch.float16", "(2, 3)", "max_magnitude=2.0"],
    ),
    "tp_sizes": (lambda: S.tp_sizes(max_size=4), ["max_size=4"]),
    "fx_graphs": (lambda: S.fx_graphs(max_nodes=5, ops=["neg", "add"]), ["max_nodes=5", "ops=['neg', 'add']"]),
    "like": (
        lambda: S.like(EXAMPLE, vary={S.Dim("tokens", max=8): [(0, 0)]}),
        ["TensorLike(shape=(4, 8), dtype=torch.float32", "vary={Dim(name='tokens', min=None, max=8)"],
    ),
    "planted": (
        lambda: S.planted(scale_pattern, S.like(EXAMPLE), max_instances=1, near_misses=["dim"]),
        ["planted(scale_pattern, like(", "max_instances=1", "near_misses=['dim']"],
    ),
    "with_mutations": (
        lambda: S.with_mutations(S.fx_graphs(), max_mutations=1),
        ["with_mutations(fx_graphs()", "max_mutations=1"],
    ),
    "with_mutating_custom_ops": (
        lambda: S.with_mutating_custom_ops(S.fx_graphs(), versions=[2]),
        ["with_mutating_custom_ops(fx_graphs()", "versions=[2]"],
    ),
    "expr_cases": (
        lambda: S.expr_cases(_relu_pattern(), near_miss="optional_arg"),
        ["expr_cases(CallFunction(aten.relu.default, KeywordArg('x'))", "near_miss='optional_arg'"],
    ),
    "tp_cases": (
        lambda: S.tp_cases(S.fx_graphs(), placements=[S.Replicate()], tp_world=S.tp_sizes(min_size=2)),
        ["placements=[Replicate()]", "tp_world=tp_sizes(min_size=2)"],
    ),
}

#: A call of a private name: ``_cases(``, ``_graphs(``, ``_TensorLike(``...
PRIVATE_CALL = re.compile(r"(?<![\w.])_\w+\(")


def test_every_generic_public_strategy_is_covered():
    functions = {
        name for name in S.__all__ if callable(getattr(S, name)) and name[0].islower() and "qk_norm" not in name
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
    for function in (S.dtypes, S.shapes, S.tp_sizes, S.fx_graphs):
        assert repr(function()) == f"{function.__name__}()"
    for function in (S.with_mutations, S.with_mutating_custom_ops, S.tp_cases):
        assert repr(function(S.fx_graphs())) == f"{function.__name__}(fx_graphs())"
    assert repr(S.planted(scale_pattern, S.like(EXAMPLE))) == f"planted(scale_pattern, {S.like(EXAMPLE)!r})"
    assert repr(S.tensors(torch.float32, (2,))) == "tensors(torch.float32, (2,))"


def test_arguments_tell_strategies_apart():
    """The repr keys the example database: different calls, different reprs."""
    assert repr(S.fx_graphs(max_nodes=5)) != repr(S.fx_graphs(max_nodes=6))
    assert repr(S.like(EXAMPLE)) != repr(S.like((torch.empty(4, 8), torch.empty(8, dtype=torch.float16))))
    assert repr(S.planted(scale_pattern, S.like(EXAMPLE))) != repr(
        S.planted(scale_pattern, S.like(EXAMPLE), max_instances=1)
    )


def test_public_strategy_draws_what_it_wraps():
    assert find(S.tp_sizes(min_size=2), lambda n: True) == 2
    assert find(S.shapes(min_dims=2), lambda s: True) == (1, 1)
    assert not S.fx_graphs().is_empty
