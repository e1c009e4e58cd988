"""Inductor's own post-grad passes as targets: ``remove_noop_ops``, ``reinplace_inplaceable_ops`` and
``decompose_auto_functionalized`` (unmodified, from the installed torch), chained as
``post_grad_passes`` chains them, on graphs with mutating custom ops in Inductor's functional form.
Reinplacing turns ``auto_functionalized`` + its write-back ``copy_`` into the in-place op: a
correct rewrite that every oracle must leave quiet (it drew a mutation_barriers false alarm).
The default run searches a few dozen cases; ``-m slow`` searches 300.

Only graphs whose write-backs end the graph are searched (``write_backs="end"``): AOT
functionalization writes each mutated input back once, in the graph's epilogue, and
``reinplace_inplaceable_ops`` relies on it (it takes
the first ``copy_`` into an input for that epilogue and ignores uses after it). On a write-back
drawn right after its op, or with aten in-place ops between an ``auto_functionalized`` node and
its write-back (``with_mutations`` on top), the chain changes values, as the semantics oracle and
this one report: graphs outside what Inductor is given, not an Inductor bug."""

from __future__ import annotations

import pytest
import torch

import pmverify
from pmverify.strategies import fx_graphs, with_mutating_custom_ops

PASS_SOURCE = """
from torch._guards import detect_fake_mode
from torch._inductor.fx_passes.post_grad import decompose_auto_functionalized, remove_noop_ops
from torch._inductor.fx_passes.reinplace import reinplace_inplaceable_ops
from torch._inductor.fx_utils import FakeTensorUpdater
from torch._inductor.virtualized import V


def PASS(graph):
    fake_mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes])  # a graph may have no input
    with V.set_fake_mode(fake_mode):
        remove_noop_ops(graph)
        reinplace_inplaceable_ops(FakeTensorUpdater(graph.owning_module), graph)
        decompose_auto_functionalized(graph)
"""


def _post_grad_chain():
    """The three passes as ``post_grad_passes`` runs them (in its order, under the graph's fake
    mode, as ``compile_fx`` installs it in ``V``)."""
    namespace: dict = {}
    exec(PASS_SOURCE, namespace)  # noqa: S102 - the reproducer's own definition, run as it will be
    return namespace["PASS"]


def _is_copy(node) -> bool:
    from pmverify.oracles.mutation_barriers import _is_copy as is_copy

    return node.op == "call_function" and is_copy(node)


def _mutates_a_clone_of_an_input(case) -> bool:
    """Whether an ``auto_functionalized`` node mutates a ``clone`` (or a view of one): the chain
    drops the clone (``remove_noop_ops``) and reinplaces the op on the cloned value itself. Where the
    op also reads that value it is an Inductor bug (``test_finds_inductors_noop_clone_removal_
    before_reinplacing`` in tests/oracles/test_aliasing.py, with the eager program torch.compile gets
    wrong). Where it does not, the rewrite is correct and every oracle is quiet on it (tests/oracles/
    test_mutation_barriers_versions.py), but the draw cannot tell the two apart."""
    from pmverify._fx import is_view

    v1, v2 = torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2
    for node in case.gm.graph.find_nodes(op="call_function", target=v1) + case.gm.graph.find_nodes(
        op="call_function", target=v2
    ):
        for value in node.all_input_nodes:
            while value.op == "call_function" and is_view(value.target) and value.args:
                value = value.args[0]
            # a clone of any value, not only of an input: with_mutating_custom_ops also draws
            # y = x.clone(); op(x, out=y), where remove_noop_ops drops the clone (same layout) and
            # reinplacing then writes x itself (found by the aliasing oracle; tests/oracles/test_aliasing.py)
            if _is_copy(value):  # a clone, or a cast to its source's own dtype (also dropped as a no-op)
                return True
            # the other way round: the op mutates a value whose clone is read (y = x.clone(); op_(x);
            # return y[:, -1]); remove_noop_ops drops the clone, its readers then read x, and
            # reinplacing writes x under them (found on a 300-case run; the same Inductor class)
            if any(_is_copy(user) for user in value.users):
                return True
    return False


def _unsafe_view_of_a_same_layout_clone(case) -> bool:
    """Whether an ``_unsafe_view`` reads a ``clone`` with its source's layout: ``reshape``'s
    decomposed form (``clone`` + ``_unsafe_view``) on a value that could be viewed, which AOT never
    gives (it views). ``remove_noop_ops`` drops the clone, and ``_unsafe_view``'s hidden alias then
    lets reinplacing write the value that the view still returns (found by semantics)."""
    for node in case.gm.graph.find_nodes(op="call_function", target=torch.ops.aten._unsafe_view.default):
        source = node.args[0]
        if source.target is torch.ops.aten.clone.default:
            old, new = source.args[0].meta.get("val"), source.meta.get("val")
            if old is not None and new is not None and old.stride() == new.stride():
                return True
    return False


def _cases(dynamic=None):
    return (
        with_mutating_custom_ops(fx_graphs(), dynamic=dynamic, write_backs="end")
        .filter(lambda case: not _mutates_a_clone_of_an_input(case))
        .filter(lambda case: not _unsafe_view_of_a_same_layout_clone(case))
    )


def _search(cases, max_examples, tmp_path):
    results = []
    summary = pmverify.verify(
        _post_grad_chain(),
        cases,
        max_examples=max_examples,
        seed=0,
        repro_dir=tmp_path,
        pass_source=PASS_SOURCE,
        on_result=results.append,
    )
    assert summary.rewritten_cases > 0, summary.describe()
    # the chain reinplaced or decomposed every auto_functionalized node it was given
    after = [r.pair.after.graph for r in results if r.pair is not None and r.pair.after is not None]
    v1, v2 = torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2
    assert after and not any(n.target in (v1, v2) for g in after for n in g.nodes)
    return results


def test_inductor_reinplacing_chain_is_quiet(tmp_path):
    _search(_cases(), 25, tmp_path)


def test_inductor_reinplacing_chain_is_quiet_on_symbolic_sizes(tmp_path):
    _search(_cases(dynamic=True), 10, tmp_path)


@pytest.mark.slow
def test_inductor_reinplacing_chain_is_quiet_on_300_cases(tmp_path):
    results = _search(_cases(), 300, tmp_path)
    assert len(results) >= 300
