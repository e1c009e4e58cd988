"""The compile-ranges oracle: where a pass says it applies (vLLM's ``is_applicable_for_range``),
its rewrite must hold at every size of the range; where it says it does not, nothing is checked."""

import pytest
import torch

import pmverify
from pmverify import GraphCase
from pmverify.oracles import ORACLES, compile_ranges
from pmverify.oracles.compile_ranges import Range, ranges_for

aten = torch.ops.aten


def _case():
    """relu of an (s0, 8) input, s0 in [2, 64] (hint 11)."""
    from pmverify._shapes.symbolic import symbolize

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(aten.relu.default, (x,)),))
    case = symbolize(GraphCase(torch.fx.GraphModule(torch.nn.Module(), graph), [(torch.randn(11, 8),)]))
    assert [(s.name, s.min, s.max) for s in case.symbols] == [("s0", 2, 64)]
    return case


class _FixedBuffer:
    """Rewrites relu into a "kernel" that handles at most ``rows`` rows (a fixed-size buffer): the
    rows past it come out 0. Says it applies to ranges ending at ``max_tokens`` at most."""

    def __init__(self, rows=40, max_tokens=None):
        self.rows, self.max_tokens = rows, max_tokens

    def __call__(self, graph):
        for node in graph.find_nodes(op="call_function", target=aten.relu.default):
            x = node.args[0]
            with graph.inserting_before(node.next):
                count = graph.call_function(aten.sym_size.int, (x, 0))
                index = graph.call_function(
                    aten.arange.start_step, (0, count, 1), {"dtype": torch.int64, "device": torch.device("cpu")}
                )
                kept = graph.call_function(aten.lt.Scalar, (index, self.rows))
                column = graph.call_function(aten.unsqueeze.default, (kept, 1))
                out = graph.call_function(aten.where.ScalarOther, (column, node, 0.0))
            node.replace_all_uses_with(out, delete_user_cb=lambda user, out=out: user is not out)

    def is_applicable_for_range(self, compile_range):
        return self.max_tokens is None or compile_range.end <= self.max_tokens


def test_a_rewrite_wrong_past_a_size_of_a_range_it_claims_is_found_naming_range_and_size():
    result = pmverify.check_case(_FixedBuffer(rows=40), _case(), oracles=["compile_ranges"])
    messages = [v.message for v in result.violations]
    assert messages and all(v.oracle == "compile_ranges" for v in result.violations)
    assert messages[0].startswith("applicable to range [2, 64] of s0 (is_applicable_for_range is True), but at s0=")
    assert "s0=64" in messages[0] and "(is_applicable_for_range is True), but at s0=2" not in messages[0]
    sizes = [int(m.split("but at s0=")[1].split(" ")[0].rstrip(":")) for m in messages]
    assert all(n > 40 for n in sizes) and len(messages) <= len(ranges_for(2, 64, "s0:11:2:64:(11, 2, 64)")), messages
    assert "compile_ranges" in result.judged


def test_quiet_for_a_correct_rewrite_and_where_the_pass_declines_the_range():
    """Rows past 64 never occur: the rewrite is right on the whole range. A pass that declines
    ranges ending past 40 is not run by vLLM there: nothing to check (the semantics oracle, which
    runs the rewritten case on its whole range, still sees rows past 40 zeroed)."""
    case = _case()
    assert pmverify.check_case(_FixedBuffer(rows=64), case, oracles=["compile_ranges", "semantics"]).ok
    declining = _FixedBuffer(rows=40, max_tokens=40)
    assert pmverify.check_case(declining, case, oracles=["compile_ranges"]).ok
    # semantics too judges only the sizes the pass says it applies to (vLLM runs the graph without it elsewhere)
    assert pmverify.check_case(declining, case, oracles=["semantics"]).ok


def test_no_method_no_symbols_no_findings_and_a_raising_method_is_one():
    case = _case()

    def relu_to_clamp(graph):
        for node in graph.find_nodes(op="call_function", target=aten.relu.default):
            node.target = aten.clamp_min.default
            node.args = (node.args[0], 0.0)

    assert compile_ranges.check(pmverify.check_case(relu_to_clamp, case, oracles=[]).pair) == []
    static = case.source
    assert compile_ranges.check(pmverify.check_case(_FixedBuffer(rows=4), static, oracles=[]).pair) == []
    assert "compile_ranges" not in pmverify.check_case(_FixedBuffer(rows=4), static).judged

    class Raising(_FixedBuffer):
        def is_applicable_for_range(self, compile_range):
            raise TypeError(f"compile_range={compile_range!r} is not a vllm Range")

    found = pmverify.check_case(Raising(rows=64), case, oracles=["compile_ranges"]).violations
    assert len(found) == len(ranges_for(2, 64, "s0:11:2:64:(11, 2, 64)"))
    assert "is_applicable_for_range(CompileRange(start=2, end=64)) raised TypeError" in found[0].message


@pytest.mark.parametrize(("low", "high"), [(2, 64), (5, 5), (2, 3)])
def test_ranges_are_vllm_shaped_within_the_symbol_and_the_same_for_the_same_seed(low, high):
    ranges = ranges_for(low, high, "s0")
    assert ranges == ranges_for(low, high, "s0") and ranges[0] == Range(low, high)
    assert all(low <= r.start <= r.end <= high for r in ranges) and len(set(ranges)) == len(ranges)
    assert any(r.is_single_size() for r in ranges) and low in ranges[0] and high + 1 not in ranges[0]


def test_registered_as_a_default_oracle():
    assert ORACLES["compile_ranges"] is compile_ranges.check


@pytest.mark.slow
def test_compiled_mode_runs_the_ranges_through_the_compiled_functions():
    case = _case()
    found = pmverify.check_case(_FixedBuffer(rows=40), case, mode="compiled", oracles=["compile_ranges"]).violations
    assert found and found[0].message.startswith("applicable to range [2, 64] of s0"), found
    assert "compile_ranges" in pmverify.check_case(_FixedBuffer(rows=64), case, mode="compiled").judged
    assert pmverify.check_case(_FixedBuffer(rows=64), case, mode="compiled", oracles=["compile_ranges"]).ok
