"""GeluMulFlattensUnbroadcast: a GELU-mul fusion whose flat kernel reads a broadcast operand as if
it had the output's shape. Exact on same-shape operands (the example's, a hand test's), caught by
the README recipe (``planted`` of ``like`` the example inputs, which draws broadcast forms) within
the default profile; its correct twin (each operand expanded first) stays quiet."""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings

from pmverify import PassVerificationError, check_case, verify
from pmverify._case import GraphCase
from pmverify.faults import BANK, GeluMulFlattensUnbroadcast
from pmverify.faults.broadcasts import GELU_MUL_EXAMPLE, GeluMulFlattens, gelu_mul_pattern
from pmverify.strategies import like, planted


def _recipe():
    return planted(gelu_mul_pattern, like(GELU_MUL_EXAMPLE, vary="duck"), min_instances=1)


def _case(x: torch.Tensor, y: torch.Tensor) -> GraphCase:
    from torch._inductor.pattern_matcher import fwd_only

    return GraphCase(gm=fwd_only(gelu_mul_pattern, [x, y]), inputs=[(x, y)])


def test_bank_row():
    row = BANK["GeluMulFlattensUnbroadcast"]
    assert row.oracles == ("semantics",)
    assert [name for name, _ in row.families()] == ["planted(gelu_mul)"]


@pytest.mark.parametrize("y_shape", [(4, 8), (8,), (1, 8), (4, 1), ()], ids=["same", "drop", "row", "column", "scalar"])
def test_wrong_only_on_a_broadcast_operand_examples(y_shape):
    x, y = torch.randn(4, 8), torch.randn(y_shape)
    faulty, twin = check_case(GeluMulFlattensUnbroadcast, _case(x, y)), check_case(GeluMulFlattens, _case(x, y))
    assert faulty.rewrite_count == twin.rewrite_count == 1  # Inductor's matcher matches every form
    assert twin.ok
    assert faulty.ok == (y_shape == (4, 8))
    if not faulty.ok:
        assert {v.oracle for v in faulty.violations} == {"semantics"}


def test_caught_by_the_readme_recipe(tmp_path, finding_only):
    results = []
    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(GeluMulFlattensUnbroadcast(), _recipe(), seed=0, repro_dir=tmp_path, on_result=results.append)
    assert len(results) <= settings.default.max_examples + 1
    error = info.value
    assert {v.oracle for v in error.violations} == {"semantics"}
    assert any(p.reason == "broadcast" for p in error.case.planted), (error.case.planted, error.case.inputs)


def test_exact_without_broadcast_forms():
    # what the recipe found before like() drew broadcast forms: nothing
    cases = planted(gelu_mul_pattern, like(GELU_MUL_EXAMPLE, vary="duck", broadcast=False), min_instances=1)
    results = []
    verify(GeluMulFlattensUnbroadcast(), cases, seed=0, on_result=results.append)
    assert sum(r.rewrite_count for r in results) >= 1


@pytest.mark.slow
def test_twin_quiet_over_300_cases():
    results = []
    verify(GeluMulFlattens(), _recipe(), seed=0, max_examples=300, on_result=results.append)
    assert sum(r.rewrite_count for r in results) >= 100
