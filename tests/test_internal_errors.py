"""An exception inside pmverify's own judging (an oracle's bookkeeping, the noise floor, a user
oracle) is an internal error of pmverify, with its traceback, never a finding of the pass, and the
search goes on; an exception of the rewritten graph itself is still the pass's finding."""

from __future__ import annotations

import logging

import pytest
import torch
from hypothesis import strategies as st

import pmverify
from pmverify import GraphCase, InternalError, PmverifyInternalError, VerifySummary, check_case, verify
from pmverify.oracles import functionalization, semantics

aten = torch.ops.aten


def _case(seed: int = 0) -> GraphCase:
    """``(x * 2).sin()``, and ``x`` written with ``x * 3`` (a final input value to compare)."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    doubled = g.call_function(aten.mul.Tensor, (x, 2.0))
    g.call_function(aten.copy_.default, (x, g.call_function(aten.mul.Tensor, (x, 3.0))))
    g.output((g.call_function(aten.sin.default, (doubled,)),))
    gen = torch.Generator().manual_seed(seed)
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(4, 3, generator=gen),)])


def _scale(factor: float):
    """A pass that multiplies the first ``mul``'s scalar by ``factor`` (1: correct, else wrong)."""

    def scale(graph: torch.fx.Graph) -> None:
        mul = next(iter(graph.find_nodes(op="call_function", target=aten.mul.Tensor)))
        mul.args = (mul.args[0], mul.args[1] * factor)

    return scale


def _double_as_add(graph: torch.fx.Graph) -> None:
    """A correct pass: the first ``x * 2`` becomes ``x + x`` (exact)."""
    mul = next(iter(graph.find_nodes(op="call_function", target=aten.mul.Tensor)))
    with graph.inserting_before(mul):
        add = graph.call_function(aten.add.Tensor, (mul.args[0], mul.args[0]))
    mul.replace_all_uses_with(add)
    graph.erase_node(mul)


def _breaks_shapes(graph: torch.fx.Graph) -> None:
    """A pass whose inserted op fails when the graph runs: ``sin`` now reads a (4, 3) @ (4, 3)."""
    sin = next(iter(graph.find_nodes(op="call_function", target=aten.sin.default)))
    with graph.inserting_before(sin):
        bad = graph.call_function(aten.mm.default, (sin.args[0], sin.args[0]))
    sin.args = (bad,)


def _raising_oracle(pair):
    raise IndexError("list index out of range")


def test_an_oracle_helper_that_raises_is_an_internal_error_not_a_finding(monkeypatch, caplog):
    def broken(pair):
        return [][0]  # an IndexError in the oracle's bookkeeping

    monkeypatch.setattr(semantics, "region_results", lambda pair, rank: broken(pair))
    caplog.set_level(logging.ERROR, logger="pmverify._engine.check")
    result = check_case(_scale(1.25), _case(), oracles=["semantics"])  # wrong: flagged, then the region asked for
    assert result.violations == []
    assert [error.oracle for error in result.internal_errors] == ["semantics"]
    error = result.internal_errors[0]
    assert isinstance(error, InternalError) and error.error == "IndexError('list index out of range')"
    assert "Traceback" in error.traceback and "in broken" in error.traceback
    assert "semantics" not in result.judged
    assert "pmverify internal error in semantics" in caplog.text and "in broken" in caplog.text


def test_a_raising_user_oracle_is_an_internal_error_and_the_search_goes_on():
    summary = verify(
        _double_as_add,
        st.integers(0, 100).map(_case),
        oracles=["semantics", _raising_oracle],
        max_examples=5,
    )
    assert summary.cases >= 5 and summary.failing_cases == 0
    assert summary.internal_errors == summary.cases
    assert summary.first_internal_error.startswith("pmverify internal error in _raising_oracle: IndexError(")
    assert summary.judged_counts == {"semantics": summary.cases}
    assert f"{summary.cases} pmverify internal errors (first: pmverify internal error in _raising_oracle" in (
        summary.describe()
    )


def test_a_correct_oracle_on_a_wrong_pass_still_finds_it_next_to_an_internal_error():
    result = check_case(_scale(1.25), _case(), oracles=["semantics", _raising_oracle])
    assert [v.oracle for v in result.violations] == ["semantics"]
    assert [e.oracle for e in result.internal_errors] == ["_raising_oracle"]


def test_a_rewritten_graph_that_raises_is_still_a_finding():
    result = check_case(_breaks_shapes, _case(), oracles=["semantics", _raising_oracle])
    assert result.internal_errors == []
    messages = {v.oracle: v.message for v in result.violations}
    assert messages["semantics"].startswith("graph after the pass raised RuntimeError(")
    assert messages["_raising_oracle"].startswith(
        "could not check the rewritten graph, which does not propagate fake tensors: "
    ) or messages["_raising_oracle"].startswith("could not check the rewritten graph, which raises RuntimeError(")


def test_pmverify_internal_error_is_internal_even_when_the_graph_fails():
    def says_so(pair):
        raise PmverifyInternalError("my bookkeeping")

    result = check_case(_breaks_shapes, _case(), oracles=[says_so])
    assert result.violations == [] and [e.oracle for e in result.internal_errors] == ["says_so"]


def test_a_built_in_oracle_crash_on_a_correct_pass_is_internal(monkeypatch):
    """The issue's shape: an IndexError inside a built-in oracle on a correct pass."""
    monkeypatch.setattr(functionalization, "af_nodes", lambda graph: [][0])
    result = check_case(_double_as_add, _case(), oracles=["functionalization", "semantics"])
    assert result.ok and [e.oracle for e in result.internal_errors] == ["functionalization"]
    assert result.judged == ("semantics",)


def test_public_names():
    assert pmverify.InternalError is InternalError and issubclass(PmverifyInternalError, Exception)


@pytest.mark.parametrize("summary", [VerifySummary(), VerifySummary(internal_errors=0)])
def test_a_summary_without_internal_errors_does_not_mention_them(summary):
    assert "internal" not in summary.describe()
