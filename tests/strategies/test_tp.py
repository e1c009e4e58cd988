"""``tp_cases``: per-rank inputs with replicated and sharded placements."""

from __future__ import annotations

import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify.strategies import Replicate, Shard, fx_graphs, like, planted, tp_cases, tp_sizes


def scale_pattern(x, w):
    return torch.tanh(x) * w


PER_RANK = planted(
    scale_pattern,
    like((torch.empty(4, 8), torch.empty(8)), vary={"tokens": [(0, 0)]}),
    min_instances=1,
    max_instances=1,
    near_misses=False,
)


def weight_sharded(case):
    """Context inputs come first, then the instance's x (replicated) and weight (sharded)."""
    return [Replicate()] * (len(case.inputs[0]) - 1) + [Shard(0)]


@given(tp_cases(PER_RANK, placements=weight_sharded))
def test_replicated_inputs_are_equal_and_shards_are_drawn(case):
    assert case.tp_world in (1, 2, 4, 8)
    assert len(case.inputs) == case.tp_world
    assert case.placements[-2:] == (Replicate(), Shard(0))
    x0, w0 = case.inputs[0][-2:]
    for x, w in (rank[-2:] for rank in case.inputs[1:]):
        assert torch.equal(x, x0) and x is not x0
        assert w.shape == w0.shape and w.dtype == w0.dtype
    assert case.label.endswith(f"tp_world={case.tp_world} [{', '.join(map(repr, case.placements))}]")


def test_shards_differ_between_ranks():
    case = find(
        tp_cases(PER_RANK, placements=weight_sharded, tp_world=st.just(2)),
        lambda c: not torch.equal(c.inputs[0][-1], c.inputs[1][-1]),
        settings=settings(database=None),
    )
    assert case.tp_world == 2


@given(tp_cases(fx_graphs(max_nodes=4)))
def test_drawn_placements_fit_every_input(case):
    assert len(case.placements) == len(case.inputs[0])
    for i, placement in enumerate(case.placements):
        values = [rank[i] for rank in case.inputs]
        if isinstance(placement, Replicate):
            assert all(torch.equal(v, values[0]) for v in values)
        else:
            assert values[0].is_floating_point() and 0 <= placement.dim < values[0].dim()
            assert all(v.shape == values[0].shape for v in values)
            limit = max(float(values[0].abs().max()), 2.0)  # fx_graphs' bounds hold on every rank
            assert all(float(v.abs().max()) <= limit for v in values[1:])


@given(tp_cases(PER_RANK, placements=lambda case: [Replicate()] * len(case.inputs[0]), tp_world=tp_sizes(max_size=4)))
def test_each_rank_runs_the_case(case):
    result = pmverify.check_case(lambda graph: None, case, oracles=["semantics", "structure"])
    assert result.ok, result.violations


def test_minimal_is_one_rank_replicated():
    case = find(tp_cases(PER_RANK), lambda c: True, settings=settings(database=None))
    assert case.tp_world == 1 and all(isinstance(p, Replicate) for p in case.placements)


BAD = [
    ({"cases": "x"}, "cases='x'"),
    ({"tp_world": 2}, "tp_world=2"),
    ({"placements": "R"}, "placements='R'"),
    ({"placements": [Replicate(), "S"]}, r"placements\[1\]='S'"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_bad_arguments(kwargs, message):
    args = {"cases": PER_RANK, **kwargs}
    with pytest.raises(InvalidArgument, match=message):
        tp_cases(args.pop("cases"), **args)


@pytest.mark.parametrize(
    ("placements", "message"),
    [
        (lambda case: [Replicate()], "holds 1 entries"),
        (lambda case: [Replicate()] * (len(case.inputs[0]) - 1) + [Shard(3)], r"\]=Shard\(dim=3\) does not fit"),
    ],
)
def test_placements_that_do_not_fit_are_reported_when_drawing(placements, message):
    one_instance = planted(scale_pattern, like((torch.empty(4, 8), torch.empty(8))), min_instances=1, max_instances=1)
    with pytest.raises(InvalidArgument, match=message):
        find(tp_cases(one_instance, placements=placements), lambda c: True, settings=settings(database=None))


def test_another_rank_s_bound_is_rank_0_s_finite_magnitude():
    # rank 0 holding an inf (a near miss's value) bounded the other ranks' draws by inf: InvalidArgument
    from pmverify.strategies._tp import _magnitude

    assert _magnitude(torch.tensor([1.0, float("inf"), -3.0])) == 3.0
    assert _magnitude(torch.tensor([float("nan")])) == 2.0
    assert _magnitude(torch.tensor([1, 2])) is None
