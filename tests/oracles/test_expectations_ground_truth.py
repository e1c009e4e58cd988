"""The expectations oracle's ground truth for near misses (issue 28, item 3): a rewritten near miss
is a finding only where the pass's own matcher says it should not match. Correct passes of each
shape that drew false alarms (a pattern covering part of the planted function, a fill value taken
as a wildcard, an ``extra_user`` fusion keeping the intermediate, a token limit left to
``is_applicable_for_range``) are quiet, each wrong twin is still caught. The 300-case searches run
with ``-m slow``; the default run checks explicit cases."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import pmverify
from pmverify import GraphCase, PlantedInstance, check_case
from pmverify._execution import compiled_expectation
from pmverify.fusions.qk_norm import QKNormConfig
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.fusions.qk_norm.testing.cases import build_case, make_layer
from pmverify.oracles import expectations
from pmverify.strategies import like, planted

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _ground_truth_passes as passes  # noqa: E402


def _whole_case(fn, inputs, must_match=False, reason="constant", truth_from="pattern", extra=None):
    """``fn`` traced as Inductor's ``fwd_only`` does, every op of it one planted instance; ``extra``:
    the name of a node given a ``clone`` reader returned as a second output (an extra user)."""
    from torch._inductor.pattern_matcher import fwd_only

    gm = fwd_only(fn, list(inputs))
    names = tuple(node.name for node in gm.graph.nodes if node.op == "call_function")
    if extra is not None:
        node = next(node for node in gm.graph.nodes if node.name == extra)
        (output,) = gm.graph.find_nodes(op="output")
        with gm.graph.inserting_before(output):
            leak = gm.graph.call_function(torch.ops.aten.clone.default, (node,))
        output.args = ((*output.args[0], leak) if isinstance(output.args[0], tuple) else (output.args[0], leak),)
        gm.recompile()
    instance = PlantedInstance("p", names, must_match, None if must_match is True else reason, None, truth_from)
    return GraphCase(gm, [tuple(inputs)], planted=(instance,))


def _rms_then_scale(scale=0.5, eps=1e-6):
    def fn(x, w, y):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w) * y * scale

    gen = torch.Generator().manual_seed(0)
    return fn, (torch.randn(4, 8, generator=gen), torch.randn(8, generator=gen), torch.randn(4, 8, generator=gen))


# ------------------------------------------------------------------- a pattern covering part of the planted function


@pytest.mark.parametrize("truth_from", ["pattern", None])
def test_a_pattern_covering_the_head_rewriting_a_near_miss_of_the_tail_is_a_note(truth_from):
    """The tail's 0.5 made 1.0: a near miss of the planted function, but the pass's own pattern (the
    RMS norm alone) matches its head on the graph before the pass. Declared or derived, its entry
    decides."""
    fn, inputs = _rms_then_scale(scale=1.0)
    result = check_case(passes.rms_norm_only(), _whole_case(fn, inputs, truth_from=truth_from))
    assert result.ok, result.violations
    assert result.rewrite_count == 1 and result.planted_matched == [True]
    assert list(result.notes) == [0] and "pattern entry" in result.notes[0]
    (record,) = result.pair.match_records
    assert expectations._own_entries(result.pair, result.case.planted[0]) == [(record, True)]


def test_a_pattern_covering_the_head_that_never_matches_is_caught():
    fn, inputs = _rms_then_scale()
    result = check_case(passes.rms_norm_only(eps=1e-5), _whole_case(fn, inputs, must_match=True))
    assert [v.oracle for v in result.violations] == ["expectations"]
    assert "not rewritten" in result.violations[0].message


def test_an_entry_matching_only_what_the_pass_itself_changed_is_a_finding():
    """The pass moves the eps of the near miss (2e-6) to its pattern's 1e-6 before matching: its
    entry matched at run time, but not on the graph before the pass."""
    fn, inputs = _rms_then_scale(eps=2e-6)
    inner = passes.rms_norm_only()

    def normalising(graph):
        for node in graph.nodes:
            if node.target is torch.ops.aten.add.Tensor and node.args[1] == 2e-6:
                node.args = (node.args[0], 1e-6)
        inner.apply(graph)

    case = _whole_case(fn, inputs, reason="constant", truth_from="pattern")
    result = check_case(normalising, case, oracles=["expectations"])
    assert [v.oracle for v in result.violations] == ["expectations"], result.violations
    assert "which does not match it on the graph before the pass" in result.violations[0].message
    assert not result.notes


# ---------------------------------------------------------------------------- a fill value taken as a wildcard


def _masked_add(value):
    def fn(x, mask, y):
        return x.masked_fill(mask, value) + y

    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 8, generator=gen), torch.randn(4, 8, generator=gen)
    return fn, (x, torch.rand(4, 8, generator=gen) > 0.5, y)


@pytest.mark.parametrize(
    "make",
    [passes.masked_add_wildcard, passes.masked_add_fill_input, passes.HandMaskedAdd],
    ids=["scalar_workaround", "input", "hand"],
)
def test_a_fill_value_taken_as_a_wildcard_is_a_note(make):
    """-2e4 for the planted -1e4: a pattern pass with ``scalar_workaround`` or with the fill tensor
    an input of its pattern (its entry matches there) and a hand pass (its matcher unknown: either
    is right) all use the value they matched."""
    fn, inputs = _masked_add(-20000.0)
    result = check_case(make(), _whole_case(fn, inputs))
    assert result.ok, result.violations
    assert result.rewrite_count == 1
    # (the input form keeps the instance's scalar_tensor and reads it: a partial rewrite, no note)
    assert list(result.notes) == ([] if make is passes.masked_add_fill_input else [0])


@pytest.mark.parametrize(
    "make",
    [lambda: passes.masked_add_wildcard(hard_coded=True), passes.HandMaskedAddHardCoded],
    ids=["pattern", "hand"],
)
def test_a_fill_value_taken_as_a_wildcard_and_hard_coded_is_caught(make):
    fn, inputs = _masked_add(-20000.0)
    result = check_case(make(), _whole_case(fn, inputs))
    assert [v.oracle for v in result.violations] == ["semantics"], result.violations


def test_a_hand_rewrite_of_a_declared_near_miss_is_still_a_finding():
    """The same hand pass on a near miss whoever built the case declared (``truth_from=None``)."""
    fn, inputs = _masked_add(-20000.0)
    result = check_case(passes.HandMaskedAdd(), _whole_case(fn, inputs, truth_from=None))
    assert [v.oracle for v in result.violations] == ["expectations"]
    assert "near miss (constant)" in result.violations[0].message


# ------------------------------------------------------------ an extra_user fusion keeping the intermediate


def _gate_case():
    gen = torch.Generator().manual_seed(0)
    return _whole_case(
        passes.sigmoid_gate_pattern, (torch.randn(4, 8, generator=gen),), reason="extra_user", extra="sigmoid"
    )


def test_an_extra_user_near_miss_rewritten_with_its_intermediate_kept_is_a_note():
    result = check_case(passes.HandSigmoidGate(), _gate_case())
    assert result.ok, result.violations
    assert result.rewrite_count == 1 and "duplicated work" in result.notes[0]
    assert "sigmoid" in {node.name for node in result.pair.after.graph.nodes}  # kept for its other reader
    # the case's Hypothesis event and the search summary say so too
    from pmverify._engine.verify import case_events
    from pmverify._findings.summary import VerifySummary

    assert "near miss extra_user: rewritten, either is right (see the note)" in case_events(result)
    assert VerifySummary.of(result).planted_counts == {
        "near miss (extra_user), rewritten: either is right (see the case's note)": 1
    }


def test_an_extra_user_near_miss_rewritten_with_its_intermediate_dropped_is_caught():
    result = check_case(passes.HandSigmoidGateDropsIntermediate(), _gate_case())
    assert "semantics" in {v.oracle for v in result.violations}, result.violations


# ------------------------------------------------------------- the token limit left to is_applicable_for_range

_CONFIG = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.float32, max_tokens=4)


def _tokens_case():
    """One norm of 5 rows (over ``max_tokens``: a ``tokens`` near miss), one of 2 (must match)."""
    return build_case(
        _CONFIG,
        [make_layer(_CONFIG, "rms_norm", "tokens", target="q", tokens=2), make_layer(_CONFIG, "rms_norm", tokens=2)],
    )


def test_a_tokens_near_miss_on_a_static_case_is_judged_by_is_applicable_for_range():
    case = _tokens_case()
    assert [p.reason for p in case.planted].count("tokens") == 1
    result = check_case(passes.HandRMSNormByRange, case)
    assert result.ok, result.violations
    (index,) = [i for i, p in enumerate(case.planted) if p.reason == "tokens"]
    assert "is_applicable_for_range(Range(5, 5)) is False" in result.notes[index]


def test_a_tokens_near_miss_rewritten_without_is_applicable_for_range_is_caught():
    result = check_case(passes.HandRMSNormIgnoringRange, _tokens_case())
    assert [v.oracle for v in result.violations] == ["expectations"]
    assert "near miss (tokens)" in result.violations[0].message


# ------------------------------------------------------------------------------------------- compiled mode


def test_a_derived_or_extra_user_near_miss_may_match_in_compiled_mode():
    derived = PlantedInstance("p", ("a",), False, "constant", None, "pattern")
    declared = PlantedInstance("p", ("a",), False, "constant")
    extra = PlantedInstance("p", ("a",), False, "extra_user")
    tokens = PlantedInstance("p", ("a",), False, "tokens")
    case = GraphCase(torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph()), [()])
    ranged = passes.HandRMSNormByRange(_CONFIG)
    assert [compiled_expectation(p, case) for p in (derived, declared, extra, tokens)] == [
        None,
        False,
        None,
        False,
    ]
    assert compiled_expectation(tokens, case, ranged) is None


# --------------------------------------------------------------------------------------------- searches

CORRECT = {
    "pattern covering the head": (
        passes.rms_norm_only,
        lambda: planted(
            passes.rms_norm_then_scale_pattern,
            like(passes.RMS_THEN_SCALE_EXAMPLE, vary=passes.RMS_THEN_SCALE_VARY),
        ),
    ),
    "fill value as a scalar_workaround wildcard": (
        passes.masked_add_wildcard,
        lambda: planted(passes.masked_add_pattern, like(passes.MASKED_ADD_EXAMPLE, vary="duck")),
    ),
    "fill value as an input of the pattern": (
        passes.masked_add_fill_input,
        lambda: planted(passes.masked_add_pattern, like(passes.MASKED_ADD_EXAMPLE, vary="duck")),
    ),
    "fill value read by a hand matcher": (
        passes.HandMaskedAdd,
        lambda: planted(passes.masked_add_pattern, like(passes.MASKED_ADD_EXAMPLE, vary="duck")),
    ),
    "extra_user fusion keeping the intermediate": (
        passes.HandSigmoidGate,
        lambda: planted(passes.sigmoid_gate_pattern, like((torch.empty(4, 8),), vary="duck")),
    ),
    "token limit left to is_applicable_for_range": (
        lambda: passes.HandRMSNormByRange,
        lambda: qk_norm_cases(forms=["rms_norm"]),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CORRECT))
def test_a_correct_pass_is_quiet_over_300_cases(name, tmp_path):
    make, cases = CORRECT[name]
    results = []
    summary = pmverify.verify(make(), cases(), max_examples=300, seed=1, repro_dir=tmp_path, on_result=results.append)
    assert summary.rewritten_cases > 30, summary.describe()
    # the rule was exercised: near misses rewritten (each a note, or, for a replacement reading the
    # instance's own nodes, a part of it rewritten by the pass's own pattern entry)
    noted = any("rewritten: either is right" in outcome for outcome in summary.planted_counts)
    entered = any(
        set(instance.nodes) & set(record.nodes)
        for result in results
        for instance in result.case.planted
        if instance.must_match is False
        for record in result.pair.match_records
    )
    assert noted or entered, summary.describe()


WRONG = {
    "pattern covering the head, never matching": (
        lambda: passes.rms_norm_only(eps=1e-5),
        CORRECT["pattern covering the head"][1],
        {"expectations"},
    ),
    "fill value hard-coded (scalar_workaround)": (
        lambda: passes.masked_add_wildcard(hard_coded=True),
        CORRECT["fill value as a scalar_workaround wildcard"][1],
        {"semantics"},
    ),
    "fill value hard-coded (hand)": (
        passes.HandMaskedAddHardCoded,
        CORRECT["fill value read by a hand matcher"][1],
        {"semantics"},
    ),
    "extra_user fusion dropping the intermediate": (
        passes.HandSigmoidGateDropsIntermediate,
        CORRECT["extra_user fusion keeping the intermediate"][1],
        {"semantics", "structure"},
    ),
    "token limit neither checked nor declared": (
        lambda: passes.HandRMSNormIgnoringRange,
        CORRECT["token limit left to is_applicable_for_range"][1],
        {"expectations"},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_twin_is_caught_by_a_search(name, tmp_path):
    make, cases, oracles = WRONG[name]
    with pytest.raises(pmverify.PassVerificationError) as caught:
        pmverify.verify(make(), cases(), max_examples=300, seed=1, repro_dir=tmp_path)
    assert {v.oracle for v in caught.value.violations} & oracles, caught.value.violations
