"""The mutation-barrier oracle judges a read by the version of its storage it sees: a correct
reinplacing (a functional op and its write-back ``copy_`` replaced by one in-place op) is quiet, one
that writes before another reader of the old value is caught."""

from __future__ import annotations

import torch

from pmverify import GraphCase, check_case

aten = torch.ops.aten


def _case():
    """``a = x + 1; y = x * 2; x.copy_(a); return y``: a functional add written back at the end."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.add.Tensor, (x, 1.0))
    y = g.call_function(aten.mul.Tensor, (x, 2.0))
    g.call_function(aten.copy_.default, (x, a))
    g.output((y,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    return GraphCase(gm, [(torch.randn(5),)], form="inplace")


def _reinplace(at_copy: bool):
    """Replace the ``add`` and its ``copy_`` by ``x.add_(1)`` placed at the ``copy_`` (correct) or at
    the ``add`` (before ``mul`` reads the old ``x``: wrong)."""

    def pass_(graph):
        add = next(n for n in graph.nodes if n.target is aten.add.Tensor)
        copy = next(n for n in graph.nodes if n.target is aten.copy_.default)
        with graph.inserting_before(copy if at_copy else add):
            graph.call_function(aten.add_.Tensor, add.args)
        graph.erase_node(copy)
        graph.erase_node(add)

    return pass_


def test_a_correct_reinplacing_is_quiet():
    result = check_case(_reinplace(True), _case(), oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations


def test_a_reinplacing_that_writes_before_a_reader_of_the_old_value_is_caught():
    result = check_case(_reinplace(False), _case(), oracles=["mutation_barriers"])
    messages = [v.message for v in result.violations]
    assert messages and all(v.oracle == "mutation_barriers" for v in result.violations)
    assert any("the kept node `mul" in m and "standing for copy_" in m for m in messages), messages


def test_a_write_back_moved_after_the_last_reader_is_quiet():
    """The ``copy_`` moved up to just after ``mul`` (the last reader of the old ``x``)."""

    def move_copy(graph):
        mul = next(n for n in graph.nodes if n.target is aten.mul.Tensor)
        copy = next(n for n in graph.nodes if n.target is aten.copy_.default)
        mul.append(copy)

    result = check_case(move_copy, _case(), oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations
