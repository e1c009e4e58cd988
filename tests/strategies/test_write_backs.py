"""with_mutations' write-backs (``copy_`` of a value computed inside a planted instance into a graph
input): drawn, valid, with the ground truth Inductor's matcher gives them; the shipped pass stays
quiet on them; hand-written passes that leave a write-back reading a stale value are caught."""

from __future__ import annotations

import functools

import pytest
import torch
from _mutation_checks import base_cases, check_ground_truth, check_runs, first, spans
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pmverify
from pmverify.faults._hand import HandRMSNorm
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.fusions.qk_norm.testing.cases import build_case, make_layer
from pmverify.strategies._mutations import MUTATION_INSIDE, with_mutations
from pmverify.strategies._tp import tp_cases
from pmverify.strategies._write_backs import EXTRA_USER

aten = torch.ops.aten


def _write_backs(case):
    """The write-back ``copy_`` nodes of ``case``: a copy_ site reading a planted instance's node."""
    by_name = {node.name: node for node in case.gm.graph.nodes}
    members = {name for instance in case.planted for name in instance.nodes}
    found = []
    for site in case.mutations:
        node = by_name[site.node]
        if node.target is aten.copy_.default and node.args[1].name in members:
            found.append(node)
    return found


def _instance_of(case, node):
    return next(i for i, instance in enumerate(case.planted) if node.name in instance.nodes)


def _reads(case, index):
    """The nodes outside instance ``index`` that its nodes read."""
    by_name = {node.name: node for node in case.gm.graph.nodes}
    members = {by_name[name] for name in case.planted[index].nodes}
    return {arg for node in members for arg in node.all_input_nodes if arg not in members}


def _is_intermediate(case, index, node, backs):
    """Whether ``node`` of instance ``index`` is read only inside it (write-backs aside) and not returned."""
    members = set(case.planted[index].nodes)
    returned = {n.name for n in case.gm.graph.output_node().all_input_nodes}
    users = [user for user in node.users if user not in backs]
    return bool(users) and node.name not in returned and all(user.name in members for user in users)


def _check_write_backs(case):
    """Runs, ground truth holds; each write-back writes a placeholder of its value's shape and
    dtype (not one its value is a view of), after the value, read by nothing; a must-match
    instance has no intermediate a write-back reads, and an ``extra_user`` one made here has."""
    check_runs(case)
    check_ground_truth(case)
    assert case.form == "inplace"
    backs = _write_backs(case)
    order = {node: i for i, node in enumerate(case.gm.graph.nodes)}
    for node in backs:
        target, source = node.args
        assert target.op == "placeholder" and not node.users
        assert target.meta["val"].shape == source.meta["val"].shape
        assert target.meta["val"].dtype == source.meta["val"].dtype
        assert order[source] < order[node]
    for i, instance in enumerate(case.planted):
        read = [
            n for n in backs if _instance_of(case, n.args[1]) == i and _is_intermediate(case, i, n.args[1], set(backs))
        ]
        if instance.must_match is True:
            assert not read, (instance, case.gm.code)
        if instance.reason == EXTRA_USER and "written back" in (instance.detail or ""):
            assert read and instance.must_match is False, instance
    return backs


def _spans_write_back(case):
    """Whether a write-back lies strictly inside the span of the instance whose value it reads."""
    order = {node.name: i for i, node in enumerate(case.gm.graph.nodes)}
    for node in _write_backs(case):
        first_at, last_at = spans(case)[_instance_of(case, node.args[1])]
        if first_at < order[node.name] < last_at:
            return True
    return False


@functools.cache
def _plain_rms_case():
    """An RMS norm of a graph input x [2, 6] (float32): its result has x's shape and dtype."""
    config = QKNormConfig(q_size=6, kv_size=6, eps=1e-5, dtype=torch.float32, max_tokens=4)
    return build_case(config, [make_layer(config, "rms_norm", tokens=2)])


_FEATURES = {
    "into a new input": lambda c: any(n.args[0].name.startswith("mut_act") for n in _write_backs(c)),
    "into an existing input": lambda c: any(not n.args[0].name.startswith("mut_") for n in _write_backs(c)),
    "into an input the instance reads": lambda c: any(
        n.args[0] in _reads(c, _instance_of(c, n.args[1])) for n in _write_backs(c)
    ),
    "of an output, instance still must match": lambda c: any(
        p.must_match is True and n.args[1].name in p.nodes for n in _write_backs(c) for p in c.planted
    ),
    "of an intermediate: extra_user": lambda c: any(
        p.reason == EXTRA_USER and "written back" in (p.detail or "") for p in c.planted
    ),
    "inside the span: mutation_inside": lambda c: (
        _spans_write_back(c) and any(p.reason == MUTATION_INSIDE for p in c.planted)
    ),
    "the written input read again": lambda c: any(
        user.target is aten.neg.default
        for n in _write_backs(c)
        for user in n.args[0].users
        if user in c.gm.graph.output_node().all_input_nodes
    ),
}


@pytest.mark.parametrize("feature", sorted(_FEATURES))
def test_each_write_back_feature_is_drawn(feature):
    # base_cases' norms read computed values; a plain RMS norm reads a graph input of its result's shape
    cases = st.just(_plain_rms_case()) if feature == "into an input the instance reads" else base_cases()
    case = first(with_mutations(cases, min_mutations=1), _FEATURES[feature])
    assert _check_write_backs(case)
    # The ground truth is Inductor's: the shipped pass (a PatternMatcherPass) rewrites exactly the
    # must-match instances (not an instance whose intermediate is written back, nor one a copy_ splits).
    result = pmverify.check_case(QKNormFusionPass, case)
    assert result.ok, result.violations
    assert result.rewrite_count == case.expected_matches


def test_the_reader_sees_the_written_value():
    case = first(with_mutations(base_cases()), _FEATURES["the written input read again"])
    gm, inputs = case.gm, [v.clone() for v in case.inputs[0]]
    outputs = gm(*inputs)
    placeholders = gm.graph.find_nodes(op="placeholder")
    returned = list(gm.graph.output_node().args[0])
    (back, reader) = next(
        (n, user) for n in _write_backs(case) for user in n.args[0].users if user.target is aten.neg.default
    )
    written = inputs[placeholders.index(back.args[0])]  # its final value: what the copy_ wrote
    torch.testing.assert_close(outputs[returned.index(reader)], -written)


@settings(max_examples=4, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(with_mutations(qk_norm_cases(max_instances=2), max_mutations=2))
def test_shipped_pass_meets_the_ground_truth_with_write_backs(case):
    assume(_write_backs(case))
    _check_write_backs(case)
    result = pmverify.check_case(QKNormFusionPass, case)
    assert result.ok, result.violations
    assert result.rewrite_count == case.expected_matches


_FUSED = torch.ops.pmverify.rms_norm.default


class _WriteBackOfInput(HandRMSNorm):
    """Fuses as the correct hand matcher does, then points each write-back of a fused norm's result
    at the norm's input instead: the write-back copies a stale (un-normed) value."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        super().__call__(graph)
        for node in graph.find_nodes(op="call_function", target=aten.copy_.default):
            source = node.args[1]
            if source.op == "call_function" and source.target is _FUSED:
                node.args = (node.args[0], source.args[0])


def _rms_cases():
    return with_mutations(qk_norm_cases(forms=["rms_norm"], max_instances=2), max_mutations=3)


def _writes_back_fused_output(case):
    return any(p.must_match is True and n.args[1].name == p.nodes[-1] for n in _write_backs(case) for p in case.planted)


def test_a_write_back_of_a_stale_value_is_caught():
    fault, condition = _WriteBackOfInput, _writes_back_fused_output
    case = first(_rms_cases(), condition)
    _check_write_backs(case)
    assert pmverify.check_case(HandRMSNorm, case).ok  # the correct hand matcher is quiet
    result = pmverify.check_case(fault, case)
    assert not result.ok
    assert {v.oracle for v in result.violations} & {"semantics", "mutation_barriers"}, result.violations


@pytest.mark.slow
def test_a_symbolic_case_keeps_its_write_back_symbolic():
    # A write-back into a new input of the token-dim value: the new input's row dim is the symbol
    # too, and the shipped pass meets the ground truth at every size the case runs at.
    def condition(case):
        placeholders = case.gm.graph.find_nodes(op="placeholder")
        return case.dynamic and any(
            n.args[0].name.startswith("mut_act") and "s0" in str(case.input_dims[placeholders.index(n.args[0])])
            for n in _write_backs(case)
        )

    case = first(with_mutations(qk_norm_cases(dynamic="tokens")), condition)
    _check_write_backs(case)
    assert case.source is not None and not case.source.dynamic
    result = pmverify.check_case(QKNormFusionPass, case)
    assert result.ok, result.violations
    assert result.rewrite_count == case.expected_matches


def test_a_tensor_parallel_case_gets_a_replicated_new_input():
    small = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16, max_tokens=4)
    cases = with_mutations(tp_cases(qk_norm_cases(small), tp_world=st.just(2)))
    case = first(cases, lambda c: any(n.args[0].name.startswith("mut_act") for n in _write_backs(c)))
    _check_write_backs(case)  # runs on both ranks
    placeholders = case.gm.graph.find_nodes(op="placeholder")
    for node in _write_backs(case):
        if node.args[0].name.startswith("mut_act"):
            i = placeholders.index(node.args[0])
            assert type(case.placements[i]).__name__ == "Replicate"
            assert torch.equal(case.inputs[0][i], case.inputs[1][i])
    result = pmverify.check_case(QKNormFusionPass, case)
    assert result.ok, result.violations
