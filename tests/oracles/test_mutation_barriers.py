"""The mutation-barrier oracle: rewrites through Inductor's entries and by hand, across and within
mutation regions; dead code is not judged."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from torch.fx.experimental.proxy_tensor import make_fx

from pmverify import GraphCase, check_case
from pmverify.faults import HandRMSNormIgnoresMutations
from pmverify.fusions.qk_norm import QKNormFusionPass
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.oracles.mutation_barriers import mutation_regions
from pmverify.strategies import fx_graphs, with_mutating_custom_ops, with_mutations

aten = torch.ops.aten


def _inplace_case():
    def fn(x, w):
        a = x * w  # region 0
        x.add_(1.0)  # the barrier: region 1 starts here
        b = a + 3.0  # region 1
        return b * 2.0

    x, w = torch.randn(4, 3), torch.randn(3)
    gm = make_fx(fn)(x.clone(), w)
    return GraphCase(gm, [(x, w)], form="inplace")


def _node(graph, target):
    return next(n for n in graph.nodes if n.target is target)


def _fuse_mul_add(graph):
    """Replace ``(x * w) + 3`` by one ``addcmul``-like node placed at the add: the mul reads x before
    ``add_``, the fused node after it."""
    mul, add = _node(graph, aten.mul.Tensor), _node(graph, aten.add.Tensor)
    with graph.inserting_before(add):
        fused = graph.call_function(aten.add.Tensor, (graph.call_function(aten.mul.Tensor, mul.args), 3.0))
    add.replace_all_uses_with(fused)
    graph.erase_node(add)
    graph.erase_node(mul)


def _rewrite_add_only(graph):
    add = _node(graph, aten.add.Tensor)
    with graph.inserting_before(add):
        new = graph.call_function(aten.sub.Tensor, (add.args[0], -3.0))
    add.replace_all_uses_with(new)
    graph.erase_node(add)


def test_regions_are_numbered_like_inductor():
    regions, mutators = mutation_regions(_inplace_case().gm.graph)
    assert [m.target for m in mutators] == [aten.add_.Tensor]
    assert regions[_node(_inplace_case().gm.graph, aten.mul.Tensor).name] == 0


def test_hand_rewrite_across_a_mutation_is_reported():
    result = check_case(_fuse_mul_add, _inplace_case(), oracles=["mutation_barriers"])
    (violation,) = result.violations
    assert violation.oracle == "mutation_barriers"
    assert "moved the read of `x_1` across add_ (add_.Tensor writes x_1)" in violation.message  # not w_1
    assert "replaced node(s) read it (mul before any write)" in violation.message
    assert "inserted node(s) (mul_tensor after add_)" in violation.message
    assert violation.nodes == ("mul", "mul_tensor")


def test_hand_rewrite_within_a_region_holds():
    result = check_case(_rewrite_add_only, _inplace_case(), oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations


def test_rewrites_each_in_its_region_hold():
    """Each ``neg`` rewritten in place, on both sides of an ``add_``: connected rewrites, none of
    which moves a read across the mutation (a past false positive)."""

    def neg_to_mul(graph):
        for node in list(graph.nodes):
            if node.target is aten.neg.default:
                with graph.inserting_before(node):
                    new = graph.call_function(aten.mul.Tensor, (node.args[0], -1))
                node.replace_all_uses_with(new)
                graph.erase_node(node)

    def fn(x):
        a = -x
        x.add_(1.0)
        return -a, x * 2.0

    x = torch.randn(3)
    case = GraphCase(make_fx(fn)(x.clone()), [(x,)], form="inplace")
    result = check_case(neg_to_mul, case, oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations


def test_dead_code_removed_across_a_mutation_is_not_a_rewrite():
    def fn(x):
        a = x * 2.0
        x.add_(1.0)
        _dead = a + x  # noqa: F841 - removed by the pass
        return x * 3.0

    x = torch.randn(3)
    gm = make_fx(fn)(x.clone())
    case = GraphCase(gm, [(x,)], form="inplace")

    def dce(graph):
        graph.eliminate_dead_code()

    assert check_case(dce, case, oracles=["mutation_barriers"]).ok


def test_stale_region_ids_let_inductor_match_across_a_mutation():
    """A pass that runs a PatternMatcherPass on a graph whose first node carries a stale
    ``mutation_region_id`` (Inductor then does not recompute the regions): the recorded match spans
    the barrier."""
    from torch._inductor import pattern_matcher as pm

    patterns = pm.PatternMatcherPass()

    def search(x, w):
        return (x * w) + 3.0

    def replace(x, w):
        return torch.addcmul(torch.full_like(x, 3.0), x, w)

    pm.register_replacement(search, replace, [torch.empty(2, 3), torch.empty(3)], pm.fwd_only, patterns)

    def stale(graph):
        for node in graph.nodes:
            node.meta["mutation_region_id"] = 0
        patterns.apply(graph)

    def honest(graph):
        patterns.apply(graph)

    case = _inplace_case()
    result = check_case(stale, case, oracles=["mutation_barriers"])
    assert len(result.pair.match_records) == 1
    assert [v.oracle for v in result.violations] == ["mutation_barriers"]
    assert "match (ReplacementPatternEntry" in result.violations[0].message
    honest_result = check_case(honest, case, oracles=["mutation_barriers"])
    assert honest_result.ok and not honest_result.pair.match_records  # Inductor discards the match itself


def test_hand_matcher_fault_is_caught_by_this_oracle():
    """The fault fuses an RMS-norm chain whose input is written between its first and last node:
    the fused op reads the new ``x`` where ``pow`` read the old one."""

    def fn(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    x, w = torch.randn(4, 8), torch.randn(8)
    gm = make_fx(fn)(x, w)
    x_node, mean = next(iter(gm.graph.nodes)), _node(gm.graph, aten.mean.dim)
    with gm.graph.inserting_after(mean):  # inside the chain, on its own input, as with_mutations plants it
        gm.graph.call_function(aten.add_.Tensor, (x_node, 1.0))
    gm.recompile()
    case = GraphCase(gm, [(x, w)], form="inplace")
    result = check_case(HandRMSNormIgnoresMutations(), case, oracles=["mutation_barriers", "semantics"])
    assert result.rewrite_count == 1
    barriers = [v.message for v in result.violations if v.oracle == "mutation_barriers"]
    assert barriers and "moved the read of `x_1` across add__tensor (add_.Tensor writes x_1)" in barriers[0]
    assert "read it (pow_1 before any write; mul after add__tensor)" in barriers[0]
    assert any(v.oracle == "semantics" for v in result.violations)  # the stale read is real


@settings(max_examples=10)
@given(with_mutations(qk_norm_cases(), min_mutations=1) | with_mutating_custom_ops(qk_norm_cases()))
def test_shipped_pass_never_crosses(case):
    result = check_case(QKNormFusionPass, case, oracles=["mutation_barriers"])
    assert result.ok, result.violations


def _rebuild_every_node(graph):
    """A correct pass: every call rebuilt in place under a new name, in-place ops included."""
    for node in list(graph.nodes):
        if node.op == "call_function":
            with graph.inserting_before(node):
                new = graph.call_function(node.target, node.args, node.kwargs)
            new.meta.update(node.meta)
            node.replace_all_uses_with(new)
            graph.erase_node(node)


@settings(max_examples=10)
@given(with_mutations(fx_graphs(), min_mutations=1))
def test_rebuilding_nodes_in_place_holds(case):
    result = check_case(_rebuild_every_node, case, oracles=["mutation_barriers", "semantics", "structure"])
    assert result.ok, result.violations


def test_a_read_moved_across_a_write_of_another_tensor_holds():
    """``neg(a)`` rewritten just before its first user, past an ``add_`` on another input: the
    value read is the same on both sides (a past false positive)."""

    def sink_neg(graph):
        neg = _node(graph, aten.neg.default)
        (user,) = neg.users
        with graph.inserting_before(user):
            new = graph.call_function(aten.mul.Tensor, (neg.args[0], -1))
        neg.replace_all_uses_with(new)
        graph.erase_node(neg)

    def fn(x, y):
        n = -x.exp()
        y.add_(1.0)
        return n * 2.0

    x, y = torch.randn(3), torch.randn(3)
    case = GraphCase(make_fx(fn)(x, y.clone()), [(x, y)], form="inplace")
    assert check_case(sink_neg, case, oracles=["mutation_barriers", "semantics"]).ok

    def fn_view(x):  # the same move, past a write into a view of the value read: a finding
        n = -x
        x[0:2].add_(1.0)
        return n * 2.0

    case = GraphCase(make_fx(fn_view)(x.clone()), [(x,)], form="inplace")
    result = check_case(sink_neg, case, oracles=["mutation_barriers"])
    assert [v.oracle for v in result.violations] == ["mutation_barriers"]
    assert "moved the read of `x_1`" in result.violations[0].message
