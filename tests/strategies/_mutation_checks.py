"""Checks shared by the tests of ``with_mutations`` and ``with_mutating_custom_ops``: a case runs,
lints and re-propagates; its ground truth agrees with Inductor's ``is_mutation_op``; the first
drawn case with a feature (generate only, derandomized: the same case every run)."""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy
from torch._inductor.pattern_matcher import is_mutation_op

from pmverify import GraphCase
from pmverify._engine.apply import propagate_fake
from pmverify.fusions.qk_norm import QKNormConfig
from pmverify.fusions.qk_norm.testing.cases import build_case, make_layer
from pmverify.fusions.qk_norm.testing.layers import Source
from pmverify.oracles.semantics import run_graph

_FIRST = settings(
    database=None,
    deadline=None,
    derandomize=True,
    max_examples=1000,  # rare features (2-4 in 100 cases) fall past 300 as draw orders change
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@functools.cache
def _base_cases() -> tuple[GraphCase, ...]:
    f32 = QKNormConfig(q_size=6, kv_size=6, eps=1e-5, dtype=torch.float32, max_tokens=4)
    bf16 = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16, max_tokens=4)
    rms = make_layer(bf16, "rms_norm", tokens=3)
    chained = make_layer(bf16, "qk_norm", tokens=2)
    return (
        build_case(f32, [make_layer(f32, "qk_norm", tokens=2)]),
        build_case(
            bf16,
            [
                dataclasses.replace(
                    rms, sources=(Source(pre=("tanh",)), Source(pre=("neg", "abs"))), post=(("sigmoid",), ())
                )
            ],
        ),
        build_case(
            bf16,
            [
                make_layer(bf16, "qk_norm_split3", "eps", tokens=2),
                dataclasses.replace(
                    chained, sources=(Source(chain=True, pre=("mul:2.0",)),), post=(("neg",), (), ("tanh",))
                ),
            ],
        ),
    )


def base_cases() -> SearchStrategy[GraphCase]:
    """A few fixed QK-norm cases (float32 and bfloat16, every form, a near miss, context buffers):
    cheap to draw, for the tests that look for a feature of what is added to them."""
    return st.sampled_from(_base_cases())


def first(strategy: SearchStrategy, condition: Callable[[Any], Any]) -> Any:
    """The first drawn example for which ``condition`` holds (no shrinking)."""
    return find(strategy, condition, settings=_FIRST)


def check_runs(case: GraphCase) -> None:
    """Lints, runs eagerly on every rank (finite outputs and final inputs), re-propagates under
    FakeTensorProp, and every placeholder has a value on every rank."""
    assert isinstance(case, GraphCase)
    case.gm.graph.lint()
    placeholders = case.gm.graph.find_nodes(op="placeholder")
    for inputs in case.inputs:
        assert len(inputs) == len(placeholders)
        outputs, final_inputs = run_graph(case.gm, inputs)
        for value in [*outputs, *final_inputs]:
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                assert torch.isfinite(value).all(), case
    propagate_fake(copy.deepcopy(case.gm), case.inputs[0])
    if case.placements is not None:
        assert len(case.placements) == len(placeholders)


def barriers(case: GraphCase) -> list[int]:
    """Graph positions of the nodes Inductor's pattern matcher treats as mutations."""
    return [i for i, node in enumerate(case.gm.graph.nodes) if is_mutation_op(node)]


def spans(case: GraphCase) -> list[tuple[int, int] | None]:
    """(first, last) graph position of each planted instance."""
    order = {node.name: i for i, node in enumerate(case.gm.graph.nodes)}
    result = []
    for instance in case.planted:
        positions = [order[name] for name in instance.nodes if name in order]
        result.append((min(positions), max(positions)) if positions else None)
    return result


def check_ground_truth(case: GraphCase) -> None:
    """Mutation sites name nodes of the graph; an instance is ``mutation_inside`` exactly when a
    must-match instance would have a mutation op strictly inside its span."""
    names = {node.name for node in case.gm.graph.nodes}
    for site in case.mutations:
        assert site.node in names and site.mutated in names, site
    marks = barriers(case)
    for instance, span in zip(case.planted, spans(case), strict=True):
        assert span is not None, instance
        inside = any(span[0] < b < span[1] for b in marks)
        if instance.must_match is True:
            assert not inside, (instance, case.gm.code)
        if instance.reason == "mutation_inside":
            assert instance.must_match is False and inside, instance


def placements_of(case: GraphCase, site_nodes: list[str]) -> set[str]:
    """Where the given nodes sit relative to planted instances: before, inside, after."""
    order = {node.name: i for i, node in enumerate(case.gm.graph.nodes)}
    found = set()
    for name in site_nodes:
        for span in spans(case):
            if span is None:
                continue
            p = order[name]
            found.add("before" if p < span[0] else "inside" if p < span[1] else "after")
    return found
