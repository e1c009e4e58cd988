"""expectations: a must-match instance rewritten while an intermediate of it, read outside it too, is
kept for that reader is matched (duplicated work, a note), not "not rewritten". Inductor's matcher
does this where its pattern reads the node more than once (``x.float()`` of a bfloat16 GELU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pmverify import GraphCase, PlantedInstance, check_case
from pmverify._engine.verify import case_events
from pmverify._findings.summary import KEPT_FOR_READERS, MATCHED_KEEPING, VerifySummary
from pmverify.faults import gelu_mul_pattern

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _gelu_mul_op_pass import GeluMulOpPass  # noqa: E402


@pytest.fixture(scope="module")
def gelu_pass():
    return GeluMulOpPass()


def _with_reader(dtype: torch.dtype, read: str, must_match: bool | None = True, reason: str | None = None) -> GraphCase:
    """The pattern traced at ``dtype`` as one planted instance, its node ``read`` also read by a
    ``neg`` returned beside the result."""
    from torch._inductor.pattern_matcher import fwd_only

    args = (torch.randn(4, 8, dtype=dtype), torch.randn(4, 8, dtype=dtype))
    gm = fwd_only(gelu_mul_pattern, args)
    graph = gm.graph
    instance = tuple(node.name for node in graph.nodes if node.op == "call_function")
    node = next(n for n in graph.nodes if n.name == read)
    output = next(iter(graph.find_nodes(op="output")))
    with graph.inserting_before(output):
        reader = graph.call_function(torch.ops.aten.neg.default, (node,))
    output.args = ((output.args[0], reader),)
    gm.recompile()
    return GraphCase(gm, [args], planted=(PlantedInstance("gelu_mul", instance, must_match, reason),))


def test_a_rewrite_keeping_an_intermediate_for_its_other_reader_is_a_note(gelu_pass):
    # bfloat16: x.float() is read four times by the pattern, so Inductor matches despite the fifth reader
    result = check_case(gelu_pass, _with_reader(torch.bfloat16, "convert_element_type"))
    assert result.rewrite_count == 1 and result.planted_matched == [True]
    assert result.violations == [], result.violations
    assert KEPT_FOR_READERS in result.notes[0] and "convert_element_type" in result.notes[0]
    assert VerifySummary.of(result).planted_counts == {MATCHED_KEEPING: 1}
    assert "gelu_mul: matched, an intermediate kept for its other readers" in case_events(result)


@pytest.mark.parametrize(("dtype", "read"), [(torch.bfloat16, "mul_5"), (torch.float32, "mul_5")])
def test_an_instance_left_alone_for_its_extra_reader_is_still_not_rewritten(gelu_pass, dtype, read):
    # the gelu's result is read once by the pattern: Inductor leaves the instance; declared must-match, a finding
    result = check_case(gelu_pass, _with_reader(dtype, read))
    assert result.rewrite_count == 0 and result.planted_matched == [False]
    (violation,) = result.violations
    assert violation.oracle == "expectations" and "was not rewritten" in violation.message
    assert result.notes == {}


def test_a_pass_that_rewrites_nothing_keeps_the_finding():
    result = check_case(lambda graph: None, _with_reader(torch.bfloat16, "convert_element_type"))
    assert [v.oracle for v in result.violations] == ["expectations"] and result.notes == {}


def test_an_extra_user_near_miss_rewritten_so_stays_quiet(gelu_pass):
    result = check_case(gelu_pass, _with_reader(torch.bfloat16, "convert_element_type", False, "extra_user"))
    assert result.rewrite_count == 1 and result.violations == []
