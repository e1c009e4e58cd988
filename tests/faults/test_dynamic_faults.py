"""The faults only a symbolic token count shows: each is right on static graphs (the shipped pass's
cases at the hint, unsymbolized) and caught on the same cases made symbolic, by the oracles its bank
row names."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

import pmverify
from pmverify.faults import BANK
from pmverify.fusions.qk_norm import QKNormFusionPass
from pmverify.fusions.qk_norm.testing import qk_norm_cases

_SETTINGS = settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
_QK = [
    "QKNormBakesTokenHint",
    "QKNormFakeImplConcreteRows",
    pytest.param("QKNormAppliesOutsideRange", marks=pytest.mark.slow),  # 16 s
]


@pytest.mark.parametrize("name", _QK)
def test_a_dynamic_qk_fault_is_right_on_the_static_case_and_caught_on_the_symbolic_one(name):
    row = BANK[name]

    @_SETTINGS
    @given(qk_norm_cases(dynamic=True, forms=("qk_norm", "qk_norm_split3")))
    def check(case):
        assert case.symbols and case.expected_matches >= 1
        static = pmverify.check_case(row.pass_cls, case.source)
        assert static.ok and static.rewrite_count == case.expected_matches, static.violations
        assert pmverify.check_case(QKNormFusionPass, case).ok
        found = {v.oracle for v in pmverify.check_case(row.pass_cls, case).violations}
        assert found & set(row.oracles), found

    check()


def test_the_int_view_matcher_matches_static_graphs_and_never_symbolic_ones():
    row = BANK["HandHeadRMSNormIntViews"]
    ((_, cases),) = row.families()
    seen = []

    # only symbolic cases with must-match instances test anything; the filter, not the draw's luck,
    # makes sure some are drawn (about a third of the family's draws are static or plant no match)
    @_SETTINGS
    @given(cases.filter(lambda case: case.symbols and case.expected_matches))
    def check(case):
        seen.append(case)
        assert pmverify.check_case(row.pass_cls, case.source).ok
        result = pmverify.check_case(row.pass_cls, case)
        assert result.rewrite_count == 0 and {v.oracle for v in result.violations} == {"expectations"}

    check()
    assert seen  # symbolic cases with must-match instances were drawn
