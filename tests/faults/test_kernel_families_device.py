"""The kernel faults' bank row sizes its cases for the device they run on: past the fused kernel's
grid without its grid-stride loop (4 programs in the interpreter, 4 per SM on CUDA)."""

import types

import torch

from pmverify import _selfcheck
from pmverify.faults.target import bank


def test_kernel_cases_outgrow_the_grid_of_the_device_they_run_on(monkeypatch):
    fault = bank()["QKNormKernelGridCapped"]
    ((_, on_cpu),) = _selfcheck._families(fault, None)
    assert "min_tokens=257" in repr(on_cpu)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(multi_processor_count=132)
    )
    ((_, on_cuda),) = _selfcheck._families(fault, torch.device("cuda", 0))
    assert "min_tokens=33793" in repr(on_cuda) and "max_tokens=33856" in repr(on_cuda)  # 132 SMs * 4 * 64 rows + 1


def test_a_row_whose_families_take_no_device_is_called_without_one():
    fault = bank()["QKNormWrongRoundingOrder"]
    assert repr(_selfcheck._families(fault, torch.device("cuda", 0))) == repr(fault.families())
