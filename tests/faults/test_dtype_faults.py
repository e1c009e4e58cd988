"""The never-fused dtype: a GELU-mul fusion registered at float32 only warns (``UnfusedWarning``) with
the count of bfloat16 instances it never rewrote; its twin registered per dtype is quiet."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import strategies as st

import pmverify
from pmverify import GraphCase, PlantedInstance
from pmverify._engine.verify import fresh_settings
from pmverify.faults import BANK, GeluMulConfig, GeluMulFusion, GeluMulRegisteredAtFloat32Only, gelu_mul_pattern


def _instance_case(dtype: torch.dtype, rows: int) -> GraphCase:
    """One instance of the pattern as its own graph: float32 must match; bfloat16, whose trace holds
    casts, is ``trace_differs`` (what ``planted`` records given the float32 example inputs)."""
    from torch._inductor.pattern_matcher import fwd_only

    args = (torch.randn(rows, 8, dtype=dtype), torch.randn(rows, 8, dtype=dtype))
    gm = fwd_only(gelu_mul_pattern, args)
    nodes = tuple(node.name for node in gm.graph.nodes if node.op == "call_function")
    must, reason = (True, None) if dtype == torch.float32 else (None, "trace_differs")
    planted = (PlantedInstance("gelu_mul", nodes, must, reason),)
    return GraphCase(gm, [args], planted=planted, pass_config=GeluMulConfig())


@pytest.fixture(scope="module")
def explicit_cases():
    """3 float32 and 5 bfloat16 cases: each drawn once by ``sampled_from`` (8 cases in all)."""
    return st.sampled_from(
        [_instance_case(torch.float32, n) for n in (2, 3, 4)]
        + [_instance_case(torch.bfloat16, n) for n in (2, 3, 4, 5, 6)]
    )


def _verify(pass_cls, cases, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = pmverify.verify(pass_cls, cases, max_examples=20, settings=fresh_settings(), **kwargs)
    return summary, [str(w.message) for w in caught if issubclass(w.category, pmverify.UnfusedWarning)]


def test_the_float32_only_fusion_warns_with_the_count(explicit_cases):
    summary, texts = _verify(GeluMulRegisteredAtFloat32Only, explicit_cases)
    assert summary.cases == 8 and summary.failing_cases == 0
    (text,) = texts
    assert "0 of 5 bfloat16 instances rewritten over 5 cases (the pass rewrote 3 other instances)" in text
    assert "Register the pattern per dtype" in text and "allow_unfused=['bfloat16']" in text
    assert summary.warnings == (text.partition(": ")[2],) and "WARNING: 0 of 5 bfloat16" in summary.describe()


def test_allow_unfused_silences_it(explicit_cases):
    summary, texts = _verify(GeluMulRegisteredAtFloat32Only, explicit_cases, allow_unfused={"dtype": ["bfloat16"]})
    assert texts == [] and summary.warnings == ()


def test_the_twin_registered_per_dtype_is_quiet(explicit_cases):
    summary, texts = _verify(GeluMulFusion, explicit_cases)
    assert texts == [] and summary.groups["dtype bfloat16"] == (5, 5, 5)


def test_the_bank_row_is_caught_by_the_warning():
    row = BANK["GeluMulRegisteredAtFloat32Only"]
    assert row.oracles == ("unfused",) and issubclass(row.pass_cls, GeluMulFusion)


@pytest.mark.slow  # the README recipe at Hypothesis' default budget: about 20 s a pass
@pytest.mark.parametrize("pass_cls", [GeluMulRegisteredAtFloat32Only, GeluMulFusion])
def test_the_readme_recipe_tells_the_fault_from_its_twin(pass_cls):
    ((_, cases),) = BANK["GeluMulRegisteredAtFloat32Only"].families()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = pmverify.verify(pass_cls, cases, max_examples=100, seed=0, settings=fresh_settings())
    texts = [str(w.message) for w in caught if issubclass(w.category, pmverify.UnfusedWarning)]
    if pass_cls is GeluMulFusion:
        assert texts == [] and summary.groups["dtype bfloat16"][1] > 0
    else:
        assert any("bfloat16 instances rewritten" in text for text in texts), texts  # float16 too, maybe
        assert all("instances rewritten over" in text for text in texts)
