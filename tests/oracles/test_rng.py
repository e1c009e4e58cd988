"""Graphs that draw random numbers: runs start from one generator state, so a replacement drawing
the same numbers in the same order is compared as usual (and a wrong one caught); one drawing them
otherwise is not comparable, never a finding, and check_rewrite says so."""

import pytest
import torch
from _random_graphs import drawing_graph
from torch._inductor import pattern_matcher as pm
from torch.fx.experimental.proxy_tensor import make_fx

from pmverify import GraphCase, RewriteNotComparable, VerifySummary, check_case, check_rewrite, record_patterns
from pmverify.oracles._rng import draws

aten = torch.ops.aten


def two_draws(x, y):
    """Draws for x (4, 8), then for y (2, 8)."""
    return (x * torch.rand_like(x)).sum(0) + (y * torch.rand_like(y)).sum(0)


def two_draws_swapped(x, y):
    return (y * torch.rand_like(y)).sum(0) + (x * torch.rand_like(x)).sum(0)


def _case():
    x, y = torch.randn(4, 8), torch.randn(2, 8)
    return GraphCase(make_fx(two_draws)(x, y), [(x, y)])


def _on_adds(target):
    def rewrite(graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            if node.target == aten.add.Tensor:
                node.target, node.args = target, (node.args[1], node.args[0])

    return rewrite


def _draw_y_first(graph: torch.fx.Graph) -> None:
    x_draw, y_draw = graph.find_nodes(op="call_function", target=aten.rand_like.default)
    x_draw.prepend(y_draw)


def test_the_same_draws_are_compared_and_a_wrong_replacement_is_caught():
    case = _case()
    same = check_case(_on_adds(aten.add.Tensor), case)  # the two terms added the other way round
    assert same.ok and same.void_reason is None and "semantics" in same.judged
    results = same.pair.results(0)  # the float64 reference drew what the graph did
    torch.testing.assert_close(results.reference[0][0], results.before[0][0].double())
    wrong = check_case(_on_adds(aten.sub.Tensor), case)
    assert [v.oracle for v in wrong.violations] == ["semantics"] and "far off" in wrong.violations[0].message


def test_draws_in_another_order_are_not_comparable():
    result = check_case(_draw_y_first, _case())
    assert result.ok and "semantics" not in result.judged
    assert result.not_comparable == result.void_reason and result.void_reason.startswith("rng: ")
    assert "float32[4, 8]; aten.rand_like.default -> float32[2, 8]" in result.void_reason
    summary = VerifySummary.of(result)
    assert summary.not_comparable_cases == summary.void_cases == 1 and "1 not comparable" in summary.describe()


def test_check_rewrite_says_not_comparable():
    with record_patterns() as rewrites:
        example = [torch.empty(4, 8), torch.empty(2, 8)]
        pm.register_replacement(
            two_draws,
            two_draws_swapped,
            example,
            pm.fwd_only,
            pm.PatternMatcherPass(),
            # refusing keywords the pattern does not hold (a sum(..., dtype=) near miss), as README advises
            extra_check=lambda match: (
                not any(node.kwargs for node in match.nodes if node.target == aten.sum.dim_IntList)
            ),
        )
    with pytest.raises(RewriteNotComparable) as info:
        check_rewrite(rewrites[0], max_examples=4, seed=0)
    assert info.value.reason.startswith("rng: ") and info.value.result.rewritten_cases > 0


def test_calls_that_draw_nothing():
    graph = torch.fx.Graph()
    q = graph.placeholder("q")
    sdpa = aten._scaled_dot_product_flash_attention_for_cpu.default
    calls = [
        graph.call_function(sdpa, (q, q, q, 0.0)),
        graph.call_function(sdpa, (q, q, q), {"dropout_p": 0.1}),
        graph.call_function(aten.native_dropout.default, (q, 0.5, False)),
        graph.call_function(aten.native_dropout.default, (q, 0.5, True)),
        graph.call_function(aten.randperm.default, (4,)),
        graph.call_function(aten.mul.Tensor, (q, q)),
    ]
    assert [draws(node) for node in calls] == [False, True, False, True, True, False]


def _permuted_rows(x, y):
    """Two like draws: a permutation of x's rows, then one of y's."""
    return x[torch.randperm(4)] + y[torch.randperm(4)]


def _remade_in_other_order(graph: torch.fx.Graph) -> None:
    """Each randperm made anew, the second use's first: the same sequence drawn, each use given
    the other's permutation (as two rewritten randperm patterns whose replacements land in the
    other order)."""
    first, second = graph.find_nodes(op="call_function", target=aten.randperm.default)
    with graph.inserting_before(first):
        for old in (second, first):
            new = graph.call_function(aten.randperm.default, old.args, old.kwargs)
            new.meta = dict(old.meta)
            old.replace_all_uses_with(new)
            graph.erase_node(old)


def test_like_draws_made_anew_are_not_comparable():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    result = check_case(_remade_in_other_order, GraphCase(make_fx(_permuted_rows)(x, y), [(x, y)]))
    assert result.ok and result.not_comparable.startswith("rng: the graph draws 2 times")


def _mul_to_div(graph: torch.fx.Graph) -> None:
    """Wrong: ``x * rand`` becomes ``x / rand``; every draw kept as it was."""
    for node in graph.find_nodes(op="call_function", target=aten.mul.Tensor):
        node.target = aten.div.Tensor


def test_draws_of_a_graph_without_fake_values_are_compared():
    """The graph before the pass has no ``meta["val"]`` (a reproducer's, a hand-made case's), the
    graph after it has: both list their draws from the same fake values, so a replacement keeping
    every draw is compared (and a wrong one found), not called not comparable."""
    case = GraphCase(drawing_graph(), [(torch.rand(4, 8),)])
    assert not any("val" in node.meta for node in case.gm.graph.nodes)
    kept = check_case(_on_adds(aten.add.Tensor), case)
    assert kept.ok and kept.void_reason is None and "semantics" in kept.judged
    wrong = check_case(_mul_to_div, case)
    assert wrong.void_reason is None and [v.oracle for v in wrong.violations] == ["semantics"]
