"""A group of planted instances a search never rewrote (a dtype, a form, a may-match reason) is an
``UnfusedWarning``, with its count and remedy; ``allow_unfused=`` silences it."""

from __future__ import annotations

import dataclasses
import types
import warnings

import pytest
import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify import GraphCase, PlantedInstance
from pmverify._findings.summary import (
    UNFUSED_MIN_CASES,
    UNFUSED_MIN_INSTANCES,
    VerifySummary,
    unfused_warnings,
    validate_allow_unfused,
)


def _summary(**groups: tuple[int, int, int]) -> VerifySummary:
    return VerifySummary(cases=10, rewritten_cases=5, groups={k.replace("_", " ", 1): v for k, v in groups.items()})


def test_a_dtype_never_rewritten_warns_with_its_count_and_remedy():
    (text,) = unfused_warnings(_summary(dtype_float32=(40, 40, 30), dtype_bfloat16=(37, 0, 20)))
    assert text.startswith("0 of 37 bfloat16 instances rewritten over 20 cases (the pass rewrote 40 other")
    assert "Register the pattern per dtype" in text and "allow_unfused=['bfloat16']" in text


@pytest.mark.parametrize(
    "groups",
    [
        {"dtype_bfloat16": (UNFUSED_MIN_INSTANCES - 1, 0, 9), "dtype_float32": (9, 9, 9)},  # too few instances
        {"dtype_bfloat16": (9, 0, UNFUSED_MIN_CASES - 1), "dtype_float32": (9, 9, 9)},  # too few cases
        {"dtype_bfloat16": (9, 1, 9), "dtype_float32": (9, 9, 9)},  # rewritten once
        {"dtype_bfloat16": (9, 0, 9), "dtype_float32": (9, 0, 9)},  # nothing rewritten: RewriteNeverMatched's
    ],
)
def test_no_warning_below_the_threshold_or_when_rewritten(groups):
    assert unfused_warnings(_summary(**groups)) == []


def test_allow_unfused_silences_named_groups():
    summary = _summary(dtype_float32=(9, 9, 9), dtype_bfloat16=(9, 0, 9), dtype_float16=(9, 0, 9))
    assert len(unfused_warnings(summary)) == 2
    assert unfused_warnings(summary, validate_allow_unfused(["float16", "bfloat16"])) == []
    (left,) = unfused_warnings(summary, validate_allow_unfused({"dtype": ["float16"]}))
    assert "bfloat16" in left


def test_a_reason_group_counts_only_the_instances_of_dtypes_not_warned_about():
    groups = {
        "dtype float32": (9, 9, 9),
        "dtype bfloat16": (9, 0, 9),
        "reason trace_differs@bfloat16": (9, 0, 9),
        "reason trace_differs@float32": (3, 0, 3),
    }
    (text,) = unfused_warnings(VerifySummary(cases=9, groups=groups))  # trace_differs: bfloat16's own
    assert "bfloat16" in text
    groups["reason trace_differs@float32"] = (6, 0, 4)
    texts = unfused_warnings(VerifySummary(cases=9, groups=groups))
    assert len(texts) == 2 and texts[1].startswith("0 of 6 trace_differs instances rewritten over 4 cases")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("bfloat16", "must be None, a list"),
        (["bfloat17"], "'bfloat17' is not a dtype, form or reason"),
        (["unused"], "'unused' is not a dtype, form or reason"),
        ([3], "3 is not"),
        ({"dtypes": ["bfloat16"]}, "'dtypes' is not a family"),
        ({"dtype": "bfloat16"}, "must map to a list"),
        ({"form": ["bfloat16"]}, "'bfloat16' is not a form of"),
    ],
)
def test_bad_allow_unfused_is_invalid_argument(value, message):
    with pytest.raises(InvalidArgument, match=rf"allow_unfused=.*{message}"):
        validate_allow_unfused(value)


def test_good_allow_unfused_names_its_groups():
    assert validate_allow_unfused(None) == frozenset()
    assert validate_allow_unfused(["bfloat16", "inplace", "trace_differs"]) == {
        "dtype bfloat16",
        "form inplace",
        "reason trace_differs",
    }
    assert validate_allow_unfused({"reason": ["symbolic"]}) == {"reason symbolic"}


def test_verify_rejects_a_bad_allow_unfused_before_searching():
    with pytest.raises(InvalidArgument, match=r"allow_unfused=\['fp16'\]"):
        pmverify.verify(lambda graph: None, st.nothing(), allow_unfused=["fp16"])


def _case(dtype: torch.dtype, must_match: bool | None, reason: str | None) -> GraphCase:
    """``neg(x) * y`` as one planted instance, with meta vals as drawn cases carry them."""
    graph = torch.fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    neg = graph.call_function(torch.ops.aten.neg.default, (x,), name="neg")
    mul = graph.call_function(torch.ops.aten.mul.Tensor, (neg, y), name="mul")
    graph.output(mul)
    args = (torch.ones(2, 3, dtype=dtype), torch.ones(2, 3, dtype=dtype))
    for node, value in zip((x, y, neg, mul), (*args, -args[0], -args[0]), strict=True):
        node.meta["val"] = value
    planted = (PlantedInstance("neg_mul", ("neg", "mul"), must_match, reason),)
    return GraphCase(torch.fx.GraphModule({}, graph), [args], planted=planted)


def _result(case: GraphCase, matched: bool, notes: dict | None = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        case=case,
        planted_matched=[matched],
        notes=notes or {},
        rewrite_count=int(matched),
        rewritten=matched,
        void_reason=None,
        violations=[],
        judged=(),
        internal_errors=(),
    )


def test_groups_by_the_instances_dtype_form_and_reason():
    plain, bf16 = _case(torch.float32, True, None), _case(torch.bfloat16, None, "dtype")
    assert VerifySummary.of(_result(plain, True)).groups == {"dtype float32": (1, 1, 1), "form functional": (1, 1, 1)}
    assert VerifySummary.of(_result(bf16, False)).groups == {"dtype bfloat16": (1, 0, 1)}
    differs = _case(torch.bfloat16, None, "trace_differs")
    assert VerifySummary.of(_result(differs, False)).groups == {
        "dtype bfloat16": (1, 0, 1),
        "reason trace_differs@bfloat16": (1, 0, 1),
    }
    # near misses and may-match kinds a correct pass may refuse on purpose are not counted
    for must_match, reason in ((False, "extra_user"), (None, "unused"), (None, "optional_arg"), (None, "values")):
        assert VerifySummary.of(_result(_case(torch.bfloat16, must_match, reason), False)).groups == {}
    total = VerifySummary()
    for _ in range(3):
        total = total + VerifySummary.of(_result(plain, True)) + VerifySummary.of(_result(bf16, False))
        total = total + VerifySummary.of(_result(bf16, False))
    assert total.groups["dtype bfloat16"] == (6, 0, 6)
    (text,) = unfused_warnings(total)
    assert text.startswith("0 of 6 bfloat16 instances rewritten over 6 cases (the pass rewrote 3 other instances)")


def test_the_summary_describes_its_warnings():
    summary = dataclasses.replace(VerifySummary(cases=1), warnings=("0 of 6 bfloat16 instances rewritten",))
    assert summary.describe().endswith("\nWARNING: 0 of 6 bfloat16 instances rewritten")
    assert (summary + summary).warnings == summary.warnings


def test_the_warning_is_a_user_warning_pytest_shows():
    assert issubclass(pmverify.UnfusedWarning, pmverify.PmverifyWarning)
    assert issubclass(pmverify.PmverifyWarning, UserWarning)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("x", pmverify.UnfusedWarning, stacklevel=1)
    assert caught[0].category is pmverify.UnfusedWarning


def test_fuzz_targets_take_allow_unfused():
    from pmverify._job.targets import Target

    target = pmverify.FuzzTarget(pass_=lambda graph: None, families=[("f", st.nothing())], allow_unfused=["bfloat16"])
    assert Target("t", target).allow_unfused == ("dtype bfloat16",)
    with pytest.raises(ValueError, match=r"FuzzTarget\(allow_unfused\)=\['fp8'\]"):
        pmverify.FuzzTarget(pass_=lambda graph: None, families=[("f", st.nothing())], allow_unfused=["fp8"])
