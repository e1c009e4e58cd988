"""The structure oracle's "symbolic sizes lost": an output size that changes form (``12`` before,
``s1 - 1`` after) is lost only where the two differ somewhere in the symbol's range."""

import dataclasses

import pytest
import sympy
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import pmverify
from pmverify import GraphCase
from pmverify._shapes.symbolic import symbolize
from pmverify.oracles._specialisation import MAX_POINTS, _same_size

aten = torch.ops.aten
PRIMES = (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61)


def _case(rows: int, end: int) -> GraphCase:
    """x0 [rows] -> slice(x0, 0, 0, end) -> unsqueeze twice: output [rows' sliced, 1, 1]."""
    g = torch.fx.Graph()
    x = g.placeholder("x0")
    part = g.call_function(aten.slice.Tensor, (x, 0, 0, end))
    out = g.call_function(aten.unsqueeze.default, (g.call_function(aten.unsqueeze.default, (part, 1)), 2))
    g.output((out,))
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(rows),)], label="slice")


def _symbolic(rows: int, end: int, name: str = "s1", *, pinned: bool) -> GraphCase:
    """``_case`` traced with ``name`` for its rows; with ``pinned``, its range the one size ``rows``
    (a compile range of one size)."""
    case = symbolize(_case(rows, end), {name: rows})
    (symbol,) = case.symbols
    if pinned:
        symbol = dataclasses.replace(symbol, min=rows, max=rows, sizes=(rows,))
    return dataclasses.replace(case, symbols=(symbol,))


class SliceEndFlipped:
    """Writes each slice's end the other way round: an end ``e >= 0`` as ``e - n`` (counted from the
    end), a negative one as ``n + e``, ``n`` the sliced dim's size read as an int (a guard ``Eq(s1,
    n)``). Correct where the dim has the one size ``n``: on a range of one size; a specialisation on
    any wider range."""

    def __call__(self, graph):
        for node in graph.find_nodes(op="call_function", target=aten.slice.Tensor):
            x, dim, start, end = node.args
            n = int(x.meta["val"].shape[dim])
            node.args = (x, dim, start, end - n if end >= 0 else n + end)


def test_the_issue_shape_is_one_size_on_a_range_of_one_size():
    """``[12, 1, 1]`` before, ``[s1 - 1, 1, 1]`` after, s1's range [13, 13] (issue 28)."""
    result = pmverify.check_case(SliceEndFlipped(), _symbolic(13, 12, pinned=True))
    assert result.ok, result.violations
    assert str(result.pair.after.graph.find_nodes(op="call_function", target=aten.slice.Tensor)[0].args[3]) == "-1"
    reverse = pmverify.check_case(SliceEndFlipped(), _symbolic(13, -1, pinned=True))  # s1 - 1 before, 12 after
    assert reverse.ok, reverse.violations


def test_a_wider_range_is_still_a_loss():
    result = pmverify.check_case(SliceEndFlipped(), _symbolic(13, 12, pinned=False), oracles=["structure"])
    assert not result.ok and "Eq(s1, 13)" in result.violations[0].message
    reverse = pmverify.check_case(SliceEndFlipped(), _symbolic(13, -1, pinned=False), oracles=["structure"])
    messages = [v.message for v in reverse.violations]
    assert any("output 0 has sizes [s1 - 1, 1, 1] before the pass, [12, 1, 1] after" in m for m in messages), messages


def test_sizes_are_equal_as_expressions_or_at_every_point_of_a_small_range():
    s0, s1 = (sympy.Symbol(n, integer=True, positive=True) for n in ("s0", "s1"))
    case = _symbolic(13, 12, "s0", pinned=False)  # s0 in [12, 64]
    assert case.symbols[0].min == 12 and case.symbols[0].max == 64
    assert _same_size(2 * s0 - s0, s0, case)  # as expressions, whatever the range
    assert not _same_size(s0 - 1, sympy.Integer(12), case)  # 13 only
    assert not _same_size(s0, sympy.Integer(11), case)
    pinned = _symbolic(13, 12, "s0", pinned=True)
    assert _same_size(s0 - 1, sympy.Integer(12), pinned) and not _same_size(s0, sympy.Integer(12), pinned)
    assert not _same_size(s1, sympy.Integer(12), pinned)  # a symbol the case does not have
    from torch.utils._sympy.functions import FloorDiv

    assert _same_size(FloorDiv(s0, 2), sympy.Integer(6), pinned) and not _same_size(FloorDiv(s0, 2), s0 - 7, case)
    wide = dataclasses.replace(case, symbols=(dataclasses.replace(case.symbols[0], min=2, max=MAX_POINTS + 2),))
    from torch.utils._sympy.functions import Max

    assert _same_size(Max(s0, 2), s0, dataclasses.replace(case, symbols=(dataclasses.replace(case.symbols[0], min=2),)))
    assert not _same_size(Max(s0, 2), s0, wide)  # equal there too, but past MAX_POINTS: not shown equal


@st.composite
def _shapes(draw):
    """A prime row count, a slice end short of it (from the start or from the end) leaving at least 2
    rows (a symbolic size of 1 is specialised, as ``ShapeEnv`` does)."""
    rows = draw(st.sampled_from(PRIMES))
    cut = draw(st.integers(1, rows - 2))
    return rows, draw(st.sampled_from([rows - cut, -cut]))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, database=None)
@given(_shapes())
@example((13, 12))
@example((13, -1))
def test_quiet_on_a_correct_flip_over_300_cases_and_a_wide_range_caught(shape):
    rows, end = shape
    result = pmverify.check_case(SliceEndFlipped(), _symbolic(rows, end, pinned=True))
    assert result.ok, result.violations
    wrong = pmverify.check_case(SliceEndFlipped(), _symbolic(rows, end, pinned=False), oracles=["structure"])
    assert not wrong.ok
