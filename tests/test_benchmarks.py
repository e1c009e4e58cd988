"""benchmarks/qk_norm_gpu.py in its smoke mode: Triton's interpreter, rows, table and JSON (no timing)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ROW_KEYS = {
    "ulp_vs_float64",
    "unfused_ulp_vs_float64",
    "case",
    "geometry",
    "kernel",
    "tp_world",
    "q_size",
    "kv_size",
    "tokens",
    "bytes",
    "fused_us",
    "fused_gbps",
    "copy_us",
    "copy_gbps",
    "copy_fraction",
    "unfused_us",
    "speedup",
    "in_l2",
    "max_ulp_vs_unfused",
    "max_ulp_vs_torch_impl",
}
TIMINGS = ("fused_us", "fused_gbps", "copy_us", "copy_gbps", "copy_fraction", "unfused_us", "speedup", "in_l2")


def expected_bytes(kernel: str, tokens: int, q_size: int, kv_size: int) -> int:
    """The docstring's formula, bf16 activations and weights: one pass reads q and k once and writes
    them; sum + apply reads them twice and writes and reads the float32 [T, 2] sums."""
    width = q_size + kv_size
    if kernel == "one-pass":
        return 2 * tokens * width * 2 + width * 2
    assert kernel == "sum+apply"
    return 3 * tokens * width * 2 + width * 2 + 2 * tokens * 2 * 4


def test_qk_norm_gpu_smoke_writes_rows(tmp_path):
    out = tmp_path / "qk_norm_gpu.json"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop("PMVERIFY_QK_NORM_IMPL", None)
    proc = subprocess.run(
        [sys.executable, "benchmarks/qk_norm_gpu.py", "--smoke", "--tokens", "1", "5", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "timing needs a GPU" in proc.stdout and "n/a" in proc.stdout
    assert "all-reduce of the [T, 2] fp32 sums is excluded" in proc.stdout

    data = json.loads(out.read_text())
    assert data["mode"] == "smoke" and data["dtype"] == "bfloat16" and data["weight_dtype"] == "bfloat16"
    assert data["failures"] == []
    rows = data["rows"]
    cases = {
        ("tp1", "tp1", "one-pass", 1, 6144, 1024),
        ("tp8", "tp8", "sum+apply", 8, 768, 128),
        ("tp8/1pass", "tp8", "one-pass", 1, 768, 128),
    }
    seen = [
        (r["case"], r["geometry"], r["kernel"], r["tp_world"], r["q_size"], r["kv_size"], r["tokens"]) for r in rows
    ]
    assert sorted(seen) == sorted((*case, t) for case in cases for t in (1, 5))
    for row in rows:
        assert set(row) == ROW_KEYS
        assert row["bytes"] == expected_bytes(row["kernel"], row["tokens"], row["q_size"], row["kv_size"])
        assert all(row[key] is None for key in TIMINGS)
        # the interpreter truncates float32 to bf16: one ulp at most, against both references
        assert 0 <= row["max_ulp_vs_unfused"] <= 1
        assert 0 <= row["max_ulp_vs_torch_impl"] <= 1
        # against float64: the unfused pattern rounds correctly (half an ulp); the interpreter's
        # truncation to bf16 costs the kernels up to one
        assert 0 < row["unfused_ulp_vs_float64"] <= 0.5 + 1e-9 and row["ulp_vs_float64"] <= 1 + 1e-9
    # spot values: tp1 at T=1 moves 2·7168·2 + 7168·2 bytes; tp8 at T=5, 3·5·896·2 + 896·2 + 80
    by_key = {(r["case"], r["tokens"]): r["bytes"] for r in rows}
    assert by_key["tp1", 1] == 43008 and by_key["tp8", 5] == 28752
