"""``tp_cases`` of symbolic cases: every rank gets the Sym inputs; runs at other sizes resize every rank."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify._shapes.sizes import case_at
from pmverify.strategies import Replicate, Shard, like, planted, tp_cases


def scale_pattern(x, w):
    return torch.tanh(x).view(x.shape[0], 2, 4).sum(-1) * w


PER_RANK = planted(
    scale_pattern,
    like((torch.empty(4, 8), torch.empty(2)), vary={"tokens": [(0, 0)]}),
    context=st.nothing(),
    min_instances=1,
    max_instances=1,
    near_misses=False,
    dynamic="tokens",
)
FEW = settings(max_examples=5, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def rows_sharded(case):
    """The Sym input, then x sharded along its symbolic token dim, the weight replicated."""
    return [Replicate(), Shard(0), Replicate()]


@FEW
@given(tp_cases(PER_RANK, placements=rows_sharded, tp_world=st.just(2)))
def test_symbolic_case_stays_symbolic_on_every_rank_and_runs_at_other_sizes(case):
    assert case.symbols and case.tp_world == 2
    assert [rank[0] for rank in case.inputs] == [11, 11]
    assert case.placements[:2] == (Replicate(), Shard(0))
    assert case.source is not None and case.source.tp_world == 2 and not case.source.symbols
    assert not torch.equal(case.inputs[0][1], case.inputs[1][1]) or case.inputs[0][1].abs().max() == 0
    result = pmverify.check_case(lambda graph: None, case)  # identity: every size point, both ranks
    assert {v.oracle for v in result.violations} == {"expectations"}, result.violations  # it rewrote nothing
    at = case_at(case, {"s0": case.symbols[0].min})
    assert all(rank[1].shape[0] == case.symbols[0].min for rank in at.inputs)


@FEW
@given(
    tp_cases(
        planted(
            scale_pattern,
            like((torch.empty(11, 8), torch.empty(2))),
            context=st.nothing(),
            min_instances=1,
            max_instances=1,
            near_misses=False,
        ),
        dynamic=True,
        tp_world=st.just(2),
    )
)
def test_dynamic_symbolizes_a_static_case_at_the_hint(case):
    if not case.symbols:  # a view producer's flat input of 88 entries: divisible by the hint
        assert "static: " in case.label and any(88 in v.shape for v in case.inputs[0])
        return
    assert [s.hint for s in case.symbols] == [11]
    assert [rank[0] for rank in case.inputs] == [11, 11]
    assert isinstance(case.placements[0], Replicate)


@pytest.mark.parametrize("dynamic", ["rows", 2, ()])
def test_bad_dynamic_values_are_refused(dynamic):
    with pytest.raises(InvalidArgument, match="dynamic="):
        tp_cases(PER_RANK, dynamic=dynamic).validate()
