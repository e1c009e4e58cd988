"""Gates and the cases' device (issue 33): a gate a CUDA device gives is no gate there
(:func:`pmverify._registry.gates.unmet`), and a rewrite whose check the simulation of CUDA accepts
but that never matched on the device is unsatisfiable on it, never a dead pattern; ``device=`` of
check_rewrite validated up front. Real CUDA runs: tests/gpu/test_cli_cuda.py."""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis.errors import InvalidArgument
from test_gates import _on_cuda, _pattern, _rewrite
from torch._inductor import pattern_matcher as pm

from pmverify import RewriteNeverMatched, RewriteUnsatisfiable, check_rewrite
from pmverify._registry.gates import Gate, Lever, gate_of_rewrite, unmet
from pmverify._registry.record import isolated_pass
from pmverify._rewrites.rewrite import _never_matched, examples_on
from pmverify.device import simulated
from pmverify.errors import DeviceUnavailable

CUDA = Lever("device", "cuda")
PAD = Lever("config", "force_shape_pad", True)
FROZEN = Lever("frozen", "inputs", ("w",))
CUDA0 = torch.device("cuda", 0)


@pytest.mark.parametrize(
    ("gate", "device", "left"),
    [
        (None, CUDA0, None),
        (Gate((CUDA,), triton=True), None, Gate((CUDA,), triton=True)),  # on CPU: what is missing is the device
        (Gate((CUDA,), triton=True), torch.device("cpu"), Gate((CUDA,), triton=True)),
        (Gate((CUDA,), triton=True), CUDA0, None),  # the device gives it whole
        (Gate((CUDA,)), "cuda:1", None),
        (Gate((PAD, CUDA), triton=True), CUDA0, Gate((PAD,))),  # pad_mm on a GPU: force_shape_pad is missing
        (Gate((FROZEN,)), CUDA0, Gate((FROZEN,))),
        (Gate((CUDA,), computed=("w",)), CUDA0, Gate((), computed=("w",))),
    ],
)
def test_what_of_a_gate_the_cases_device_does_not_give(gate, device, left):
    assert unmet(gate, device) == left


def test_pad_mm_gate_on_a_cuda_device_names_only_the_config_it_needs():
    assert unmet(Gate((PAD, CUDA), triton=True), CUDA0).condition == "torch._inductor.config.force_shape_pad=True"


@pytest.fixture(scope="module")
def cuda_gated():
    """A rewrite whose extra_check wants CUDA tensors, checked on CPU: unsatisfiable here; its
    one-rewrite pass keeps the matches the check rejected (on CPU, as ground truth draws them)."""
    rewrite = _rewrite(_on_cuda)
    with pytest.raises(RewriteUnsatisfiable) as info:
        check_rewrite(rewrite, max_examples=4, seed=0, device="cpu")  # on CPU as without device=
    assert info.value.condition == "tensors on a CUDA device"
    return rewrite, info.value


def test_a_cuda_gate_met_by_the_cases_device_is_unsatisfiable_there_not_a_device_to_simulate(cuda_gated):
    rewrite, error = cuda_gated
    assert isolated_pass(rewrite).rejected  # ground truth's matches, with CPU tensors
    with simulated("cuda"):
        judged = _never_matched(error.result, error.summary, rewrite, False, CUDA0)
    assert isinstance(judged, RewriteUnsatisfiable)  # never a dead pattern: the simulation accepts
    assert "tensors on a CUDA device" not in judged.condition.split("(")[0]
    assert judged.condition.startswith("a cuda:0 on which its extra_check accepts")
    assert "which the cases on cuda:0 have, and rejected every match there" in judged.condition


def test_on_cpu_the_cuda_gate_is_still_what_is_missing(cuda_gated):
    rewrite, error = cuda_gated
    found = gate_of_rewrite(rewrite, isolated_pass(rewrite), device=torch.device("cpu"))
    assert found.gate == Gate((CUDA,)) and found.met is None


def test_example_inputs_are_moved_to_the_device_and_kept_when_there():
    rewrite = _rewrite(_on_cuda)
    assert examples_on(rewrite, None) is rewrite
    assert examples_on(rewrite, torch.device("cpu")) is rewrite  # already there: the same record, its pass kept
    with simulated("cuda"):
        moved = examples_on(rewrite, CUDA0)
    assert moved is not rewrite and moved.search_fn is _pattern
    assert [x.device for x in moved.example_inputs] == [CUDA0, CUDA0]
    assert [x.device for x in moved.arguments["example_inputs"]] == [CUDA0, CUDA0]
    assert [x.shape for x in moved.example_inputs] == [x.shape for x in rewrite.example_inputs]
    assert moved._isolated is None  # registered afresh, its pattern traced on the device


def test_check_rewrite_validates_its_device_before_anything_runs():
    rewrite = _rewrite(_on_cuda)
    with pytest.raises(InvalidArgument, match="device='mps'"):
        check_rewrite(rewrite, max_examples=1, device="mps")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceUnavailable, match="device='cuda': this machine has no CUDA device"):
            check_rewrite(rewrite, max_examples=1, device="cuda")
    assert rewrite._isolated is None  # nothing registered


def test_a_never_matched_rewrite_without_a_gate_stays_a_finding_on_a_device():
    """The device changes what is unmet, not the rule: no gate at all is still never matched."""
    from test_gates import _three_rows

    rewrite = _rewrite(_three_rows)
    with pytest.raises(RewriteNeverMatched) as info:
        check_rewrite(rewrite, max_examples=4, seed=0, device="cpu")
    assert not isinstance(info.value, RewriteUnsatisfiable)


def test_check_entry_runs_its_cases_on_the_device_given():
    from test_entry_check import _entry

    from pmverify._rewrites.entry_check import check_entry

    result = check_entry(_entry(), max_examples=6, seed=0, device="cpu")
    assert result.rewritten_cases > 0
    with pytest.raises(InvalidArgument, match="device='mps'"):
        check_entry(_entry(), max_examples=1, device="mps")


@pytest.mark.parametrize(
    ("gate", "searched_again_with"),
    [
        (Gate((CUDA,), triton=True), None),  # the device gives it: nothing to search with
        (Gate((Lever("config", "shape_padding", True), CUDA)), "torch._inductor.config.shape_padding=True"),
    ],
)
def test_a_graph_entry_on_cuda_is_searched_again_with_only_what_the_device_does_not_give(
    gate, searched_again_with, monkeypatch
):
    """check_entry's gate comes from ground truth's rejected matches, drawn on CPU: on a CUDA
    device its CUDA lever is given, and what is left decides (a config lever: searched again with
    it, on the device); nothing left: unsatisfiable without naming CUDA as missing."""
    from test_entry_check import _entry

    from pmverify._rewrites import entry_check

    searches = []

    def search_once(*args, **kwargs):
        searches.append(kwargs)
        raise RewriteNeverMatched("never fired", None, types.SimpleNamespace(outcomes={"extra_check": 3}, examples=3))

    monkeypatch.setattr(entry_check, "_search_once", search_once)
    monkeypatch.setattr(entry_check, "_gate", lambda entry, rejected: gate)
    with simulated("cuda"), pytest.raises(RewriteUnsatisfiable) as info:
        entry_check.check_entry(_entry(), max_examples=3, device="cuda")
    assert [kwargs["device"] for kwargs in searches] == [CUDA0] * len(searches)
    assert "tensors on a CUDA device" not in info.value.condition
    if searched_again_with is None:
        assert len(searches) == 1
    else:
        assert len(searches) == 2 and searches[1]["lever_note"].endswith(searched_again_with)
        assert info.value.condition == searched_again_with


def _case(*instances):
    from pmverify import GraphCase

    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    return GraphCase(gm=gm, inputs=[(torch.zeros(2),)], planted=instances)


def test_ground_truth_from_an_extra_check_on_cpu_is_either_way_on_another_device():
    """Inductor's _sfdp_extra_check(disable_cuda=True) accepts on CPU what it rejects on CUDA: a
    must-match instance whose truth came from the check on CPU would be a false "not rewritten" on
    the GPU. A near miss keeps its truth (the expectations oracle asks the entry again there)."""
    from pmverify import PlantedInstance
    from pmverify._rewrites.rewrite import truth_for_device

    must = PlantedInstance("p", ("a",), True, truth_from="matcher")
    rejected = PlantedInstance("p", ("b",), False, "extra_check", truth_from="matcher")
    near = PlantedInstance("p", ("c",), False, "values", "mask 2", truth_from="matcher")
    case = _case(must, rejected, near)
    gated, plain = _rewrite(_on_cuda), _rewrite(pm._return_true)
    assert truth_for_device(case, gated, None) is case
    assert truth_for_device(case, gated, torch.device("cpu")) is case
    assert truth_for_device(case, plain, CUDA0) is case  # no extra_check: the matcher alone, the same anywhere
    on_cuda = truth_for_device(case, gated, CUDA0)
    assert on_cuda.planted == (
        PlantedInstance("p", ("a",), None, "extra_check on cuda:0", truth_from="matcher"),
        rejected,
        near,
    )
    assert case.planted[0] is must  # the drawn case is left as it was


def test_a_rewrite_its_check_accepts_on_cpu_but_never_on_the_device_is_unsatisfiable_there():
    """As Inductor's sfdp patterns registered with _sfdp_extra_check(disable_cuda=True), on a GPU:
    gated away from CUDA, not a dead pattern."""
    from pmverify import VerifySummary
    from pmverify._rewrites.rewrite import RewriteResult

    rewrite = _rewrite(_on_cuda)
    result = RewriteResult(rewrite, 4, 0, {"extra_check on cuda:0": 3, "values": 1})
    judged = _never_matched(result, VerifySummary(), rewrite, False, CUDA0)
    assert isinstance(judged, RewriteUnsatisfiable)
    assert judged.condition == (
        "a device other than cuda:0 (its extra_check accepted 3 of the instances drawn, on CPU, and rejected every "
        "match on cuda:0)"
    )
