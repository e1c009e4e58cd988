"""with_mutations: drawn cases run, lint and re-propagate; the ground truth agrees with Inductor's
mutation regions and the shipped pass; every op, placement and target kind is drawn; the minimal
case has no mutation (one with ``min_mutations=1``); bad arguments."""

from __future__ import annotations

import copy
import operator

import pytest
import torch
from _minimal import minimal
from _mutation_checks import base_cases, check_ground_truth, check_runs, first, placements_of
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify._engine.apply import propagate_fake
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.strategies import fx_graphs
from pmverify.strategies._mutations import INPLACE_OPS, MUTATION_INSIDE, mark_mutations_inside, with_mutations
from pmverify.strategies._tp import tp_cases

aten = torch.ops.aten
_TARGETS = {
    "add_.Scalar": "aten.add_.Scalar",
    "add_.Tensor": "aten.add_.Tensor",
    "mul_.Scalar": "aten.mul_.Scalar",
    "mul_.Tensor": "aten.mul_.Tensor",
    "copy_": "aten.copy_.default",
    "index_put_": "aten.index_put_.default",
}
_VIEWS = {"slice": aten.slice.Tensor, "select": aten.select.int, "flatten": aten.view.default}


def _site_nodes(case):
    by_name = {node.name: node for node in case.gm.graph.nodes}
    return [by_name[site.node] for site in case.mutations]


def _check_inplace(case):
    """Runs, ground truth holds, each site is an in-place aten op nobody reads (later readers use
    the written node itself) writing its input or buffer, directly or through a fresh view."""
    check_runs(case)
    check_ground_truth(case)
    if not case.mutations:  # none drawn (min_mutations=0): the drawn case as it was
        assert case.form == "functional" and "@" not in case.label
        return
    assert case.form == "inplace"
    order = {node: i for i, node in enumerate(case.gm.graph.nodes)}
    for site, node in zip(case.mutations, _site_nodes(case), strict=True):
        assert str(node.target) == site.target and node.target._schema.is_mutable
        assert not node.users
        written = node.args[0]
        base = written.args[0] if written.target in _VIEWS.values() and written.name != site.mutated else written
        assert base.name == site.mutated
        assert base.op == "placeholder" or any(order[user] > order[node] for user in base.users), (
            "a written buffer is read later or returned"
        )


@given(with_mutations(qk_norm_cases()))
def test_drawn_cases_are_valid(case):
    _check_inplace(case)
    assert 0 <= len(case.mutations) <= 2


_SMALL = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16, max_tokens=4)

#: Past regressions and rare draws, each checked as the property test checks drawn cases.
_EXAMPLES = {
    # tensor-parallel case: new inputs are replicated and extend ``placements`` (regression: the
    # placements attribute shadowed the slot method).
    "tensor_parallel": (
        lambda: with_mutations(tp_cases(qk_norm_cases(_SMALL), tp_world=st.just(2))),
        lambda c: any(n.op == "placeholder" and n.name.startswith("mut_") for n in c.gm.graph.nodes),
    ),
    "three_mutations": (lambda: with_mutations(qk_norm_cases(), max_mutations=3), lambda c: len(c.mutations) == 3),
    # fx_graphs contexts of every dtype: writes only floating inputs and buffers, never an
    # ``empty`` buffer (uninitialised), and the graph still runs finite (regression: new ops/dtypes).
    "fx_graphs_of_every_dtype": (
        lambda: with_mutations(
            fx_graphs(
                ops=["empty_fill", "full", "arange", "compare", "add", "mul_scalar", "to_copy"],
                min_nodes=4,
                level="pre_grad",
            )
        ),
        lambda c: (
            {torch.int64, torch.bool}
            <= {v.dtype for n in c.gm.graph.nodes if isinstance(v := n.meta.get("val"), torch.Tensor)}
            and any(n.target is aten.empty.memory_format for n in c.gm.graph.nodes)
        ),
    ),
    "buffer_inside_chained_layers": (
        lambda: with_mutations(qk_norm_cases(min_instances=2), min_mutations=2),
        lambda c: any(
            n.op == "call_function" and placements_of(c, [s.node]) & {"inside"}
            for s in c.mutations
            for n in c.gm.graph.nodes
            if n.name == s.mutated
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(_EXAMPLES))
def test_drawn_cases_are_valid_examples(name):
    strategy, condition = _EXAMPLES[name]
    case = first(strategy(), condition)
    _check_inplace(case)
    gm = copy.deepcopy(case.gm)
    propagate_fake(gm, case.inputs[0])
    by_name = {node.name: node for node in gm.graph.nodes}
    for site in case.mutations:  # floating inputs and buffers only, never uninitialised memory
        base = by_name[site.mutated]
        assert base.meta["val"].is_floating_point() and base.target is not aten.empty.memory_format
    if case.placements is not None:
        assert case.tp_world == 2
        added = [i for i, n in enumerate(case.gm.graph.find_nodes(op="placeholder")) if n.name.startswith("mut_")]
        assert all(torch.equal(case.inputs[0][i], case.inputs[1][i]) for i in added)


def _has_op(name):
    return lambda c: any(s.target == _TARGETS[name] for s in c.mutations)


def _has_kind(kind):
    def condition(case):
        for node in _site_nodes(case):
            written = node.args[0]
            if kind in _VIEWS and written.target is _VIEWS[kind]:
                return True
            if kind == "input" and written.op == "placeholder":
                return True
            if kind == "buffer" and written.op == "call_function" and written.target not in _VIEWS.values():
                return True
        return False

    return condition


_FEATURES = {
    **{f"op {name}": _has_op(name) for name in INPLACE_OPS},
    **{
        f"{p} an instance": lambda c, p=p: p in placements_of(c, [s.node for s in c.mutations])
        for p in ("before", "inside", "after")
    },
    **{f"writes {kind}": _has_kind(kind) for kind in ("input", "buffer", *_VIEWS)},
    "copy_ from an existing tensor": lambda c: any(
        n.target is aten.copy_.default and not n.args[1].name.startswith("mut_") for n in _site_nodes(c)
    ),
    "must-match instance turned mutation_inside": lambda c: any(p.reason == MUTATION_INSIDE for p in c.planted),
}


@pytest.mark.parametrize("feature", sorted(_FEATURES))
def test_each_feature_is_drawn(feature):
    _check_inplace(first(with_mutations(base_cases(), min_mutations=1), _FEATURES[feature]))


@given(with_mutations(qk_norm_cases(max_instances=3), max_mutations=3))
def test_shipped_pass_meets_the_ground_truth(case):
    # PatternMatcherPass discards matches across mutation regions: exactly the expected matches.
    result = pmverify.check_case(QKNormFusionPass, case)
    assert result.ok, result.violations
    assert result.rewrite_count == case.expected_matches


def test_minimal_case_has_no_mutation():
    case = minimal(with_mutations(qk_norm_cases()))
    assert case.mutations == () and case.form == "functional"
    assert case.expected_matches == len(case.planted) == 1


def test_min_mutations_is_kept():
    assert len(minimal(with_mutations(qk_norm_cases(), min_mutations=2, max_mutations=3)).mutations) == 2
    assert len(first(with_mutations(qk_norm_cases(), min_mutations=2), lambda c: True).mutations) == 2


def test_minimal_case_has_exactly_one_mutation():
    case = minimal(with_mutations(qk_norm_cases(), min_mutations=1))
    assert len(case.mutations) == 1
    (site,) = case.mutations
    assert site.target == "aten.add_.Scalar"
    node = _site_nodes(case)[0]
    assert node.args[0].op == "placeholder"  # a graph input, written directly
    assert placements_of(case, [site.node]) == {"before"}
    assert case.expected_matches == len(case.planted) == 1


def test_mark_mutations_inside_reads_is_mutation_op():
    case = minimal(with_mutations(qk_norm_cases()))
    graph = case.gm.graph
    (instance,) = case.planted
    by_name = {node.name: node for node in graph.nodes}
    inside = by_name[instance.nodes[1]]
    # A getitem and an out-of-place op inside the span change nothing; an in-place op does.
    with graph.inserting_before(inside):
        graph.call_function(operator.getitem, ((by_name[instance.nodes[0]],), 0))
        graph.call_function(aten.neg.default, (graph.find_nodes(op="placeholder")[0],))
    assert mark_mutations_inside(graph, case.planted) == case.planted
    with graph.inserting_before(inside):
        graph.call_function(aten.mul_.Scalar, (graph.find_nodes(op="placeholder")[0], 2.0))
    (marked,) = mark_mutations_inside(graph, case.planted)
    assert (marked.must_match, marked.reason) == (False, MUTATION_INSIDE)
    assert "mutation_region_id" not in next(iter(graph.nodes)).meta  # nothing stale for the pass


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cases": None}, "cases=None"),
        ({"cases": qk_norm_cases}, "cases="),
        ({"max_mutations": 0}, "max_mutations=0"),
        ({"min_mutations": -1}, "min_mutations=-1"),
        ({"min_mutations": 1.0}, "min_mutations=1.0"),
        ({"min_mutations": 3}, "min_mutations=3 is larger than max_mutations=2"),
        ({"max_mutations": -1}, "max_mutations=-1"),
        ({"max_mutations": True}, "max_mutations=True"),
        ({"max_mutations": 1.5}, "max_mutations=1.5"),
        ({"max_mutations": "2"}, "max_mutations='2'"),
    ],
)
def test_bad_arguments(kwargs, message):
    args = {"cases": qk_norm_cases(), **kwargs}
    cases = args.pop("cases")
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(")):
        with_mutations(cases, **args)


def test_examples_drawn_values_are_checked():
    with pytest.raises(InvalidArgument, match="cases drew 1"):
        minimal(with_mutations(st.just(1)))


# ---------------------------------------------------------------------------------------- shrinking
# Issue 30: a shrunk case held mutations (and extra instances) that played no part in its failure.


def _rms(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def _recipe_cases(**kwargs):
    """README's recipe: ``with_mutations(planted(pattern, like(example, vary=...), min_instances=1))``."""
    from pmverify.strategies import like, planted

    inputs = like((torch.empty(8, 16), torch.empty(16)), vary={"t": [(0, 0)], "h": [(0, 1), (1, 0)]})
    return with_mutations(planted(_rms, inputs, min_instances=1), **kwargs)


def _plain_instance_of_tokens(case, tokens):
    by_name = {node.name: node for node in case.gm.graph.nodes}
    return any(p.reason is None and by_name[p.nodes[0]].meta["val"].shape[0] >= tokens for p in case.planted if p.nodes)


def test_a_failure_unrelated_to_mutations_shrinks_to_none():
    # as a semantics bug that shows at 3 tokens or more, whatever the mutations
    case = minimal(_recipe_cases(max_mutations=3), lambda c: _plain_instance_of_tokens(c, 3))
    assert case.mutations == () and case.form == "functional"
    assert len(case.planted) == 1 and case.planted[0].reason is None


def test_a_failure_needing_a_mutation_inside_shrinks_to_it_alone():
    # as a hand matcher blind to mutation regions: it needs one mutation inside an instance
    case = minimal(_recipe_cases(max_mutations=3), lambda c: any(p.reason == MUTATION_INSIDE for p in c.planted))
    assert len(case.mutations) == 1 and placements_of(case, [case.mutations[0].node]) == {"inside"}
    assert len(case.planted) == 1
