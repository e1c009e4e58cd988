"""The structure oracle's device rule: an output (or a meta value) that changes device is a finding
of kind ``device`` (a replacement that makes its buffer on the default device, CPU, while the case
runs on CUDA), checked on fake CUDA tensors; a real run is in tests/gpu."""

import types

import torch

from pmverify._findings.severity import failure_key, most_severe
from pmverify.device import simulated
from pmverify.oracles.structure import DEVICE, _outputs, _same_layout


def test_an_output_moved_to_another_device_is_a_device_finding():
    with simulated("cuda") as mode, mode:
        on_cuda = torch.empty(4, 3, device="cuda")
        on_cpu = torch.empty(4, 3)
    (violation,) = _outputs([on_cuda], types.SimpleNamespace(outputs=[on_cpu]))
    assert violation.kind == DEVICE and "was on cuda:0 before the pass, on cpu after" in violation.message
    assert _outputs([on_cuda], types.SimpleNamespace(outputs=[on_cuda])) == []
    assert not _same_layout(on_cpu, on_cuda) and _same_layout(on_cuda, on_cuda)


def test_a_device_change_ranks_with_a_dtype_or_shape_change():
    found = [
        types.SimpleNamespace(oracle=o, message="m", kind=k)
        for o, k in [("structure", "strides"), ("structure", DEVICE), ("expectations", ""), ("mutation_barriers", "")]
    ]
    assert most_severe(found) == ("structure", DEVICE)
    assert failure_key(types.SimpleNamespace(oracle="structure", message="m", kind=DEVICE)) == ("structure", DEVICE)
