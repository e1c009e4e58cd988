"""``--device cuda`` for real (issue 33): check_rewrite judges a CUDA-gated rewrite on the GPU, the
audit judges Inductor's CUDA-gated entries there instead of "unsatisfiable here", and ``pmverify
fuzz`` / ``selfcheck`` run their cases (and the kernel faults' compiled Triton kernels) on it.
Skipped without CUDA (the ``gpu`` marker); the plumbing is tested on CPU by tests/test_cli_device.py,
tests/audit/test_audit_device.py and tests/test_gates_device.py.

The commands run in subprocesses with ``TRITON_INTERPRET`` removed from their environment: the
suite's conftest turns Triton's interpreter on for its CPU kernel tests, and ``selfcheck --device
cuda`` refuses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu


def _pmverify(tmp_path, *argv, timeout=540):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("PYTHONPATH", os.getcwd())
    return subprocess.run(
        [sys.executable, "-m", "pmverify", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_rewrite_gated_on_cuda_tensors_is_compared_on_the_device():
    """tests/test_gates.py's CUDA-gated rewrite: unsatisfiable on CPU, compared on the GPU."""
    from torch._inductor import pattern_matcher as pm

    from pmverify import check_rewrite, record_patterns

    def pattern(x, w):
        return torch.relu(x) * w

    def replacement(x, w):
        return w * torch.relu(x)

    def on_cuda(match):
        return match.kwargs["x"].meta["val"].is_cuda

    with record_patterns(register=False) as rewrites:
        pm.register_replacement(
            pattern, replacement, [torch.empty(4, 8), torch.empty(8)], pm.fwd_only, [], extra_check=on_cuda
        )
    result = check_rewrite(rewrites[0], max_examples=6, seed=0, device="cuda")
    assert result.rewritten_cases > 0 and result.simulated == ()
    assert result.outcomes.get("must match", 0) + result.outcomes.get("extra_check", 0) > 0


def test_the_audit_judges_inductor_s_cuda_gated_entries_on_the_device(tmp_path):
    """On CPU pad_mm and prepare_softmax are "unsatisfiable here: tensors on a CUDA device"
    (docs/AUDIT.md). On the GPU no row may lack CUDA: prepare_softmax is compared, and pad_mm's
    rows name at most what the configuration lacks (force_shape_pad skips its benchmark)."""
    report = tmp_path / "audit.json"
    done = _pmverify(
        tmp_path,
        "audit",
        "--device",
        "cuda",
        "--rewrite",
        "post_grad/prepare_softmax_pattern",
        "--rewrite",
        "pad_mm/mm_pattern_inference",
        "--max-examples",
        "6",
        "--report",
        str(report),
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["device"] == "cuda:0"
    rows = {row["name"]: row for row in data["rewrites"]}
    assert set(rows) == {"prepare_softmax_pattern", "mm_pattern_inference"}, rows
    for row in rows.values():
        assert "tensors on a CUDA device" not in (row.get("reason") or ""), row
        assert row["status"] not in ("error", "not run"), row
    assert rows["prepare_softmax_pattern"]["status"] != "unsatisfiable here", rows["prepare_softmax_pattern"]


def test_fuzz_runs_the_shipped_pass_s_cases_on_the_device(tmp_path):
    report = tmp_path / "fuzz.json"
    done = _pmverify(
        tmp_path,
        "fuzz",
        "--device",
        "cuda",
        "--budget",
        "120s",
        "--max-examples",
        "10",
        "--no-real-model",
        "--db",
        str(tmp_path / "db"),
        "--report",
        str(report),
    )
    data = json.loads(report.read_text())
    assert data["device"] == "cuda:0"
    assert done.returncode == 0, done.stderr[-3000:]
    assert sum(target["cases"] for target in data["targets"]) > 0
    assert "device cuda:0" in done.stdout + done.stderr  # the run's header


@pytest.mark.parametrize(
    "fault", ["QKNormKernelGridCapped", "QKNormKernelUnmaskedLoads", "QKNormKernelLeavesKOutUnwritten"]
)
def test_selfcheck_detects_a_kernel_fault_running_its_compiled_kernel_on_the_gpu(tmp_path, fault):
    report = tmp_path / "selfcheck.json"
    done = _pmverify(
        tmp_path,
        "selfcheck",
        "--device",
        "cuda",
        "--fault",
        fault,
        "--max-examples",
        "60",
        "--no-shrink",
        "--report",
        str(report),
    )
    data = json.loads(report.read_text())
    assert data["device"] == "cuda:0"
    assert done.returncode == 0 and data["detected"] == [fault], done.stdout[-3000:]
