"""The kernel faults of the bank (:mod:`pmverify.faults.kernels`): each faulty launcher is wrong
exactly where its bug shows and bitwise equal to ``qk_norm_triton`` where it cannot; each fault
pass is caught on its bank row's cases by the semantics oracle, through the bug, not through an
error; the CLI turns Triton's interpreter on by itself without a GPU.

Launchers run in Triton's interpreter (``conftest.py`` sets ``TRITON_INTERPRET=1`` without a GPU)
on float32 inputs with small explicit tilings, and write into outputs poisoned with NaN, so that an
element never written shows."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import settings

from pmverify import PassVerificationError, verify
from pmverify.faults import (
    BANK,
    QKNormKernelGridCapped,
    QKNormKernelLeavesKOutUnwritten,
    QKNormKernelUnmaskedLoads,
)
from pmverify.faults.kernels import (
    LAUNCHERS,
    _KernelFault,
    qk_norm_grid_capped,
    qk_norm_k_out_floor_chunks,
    qk_norm_unmasked_loads,
)
from pmverify.fusions.qk_norm import QKNormConfig
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.fusions.qk_norm.triton_impl import Launch, qk_norm_triton

KERNEL_FAULTS = [QKNormKernelGridCapped, QKNormKernelUnmaskedLoads, QKNormKernelLeavesKOutUnwritten]
SPLIT_FORMS = ("qk_norm", "qk_norm_split3")


def _inputs(tokens, q_size, kv_size, seed=0):
    generator = torch.Generator().manual_seed(seed)
    qkv = torch.randn(tokens, q_size + 2 * kv_size, generator=generator)
    return qkv, torch.rand(q_size, generator=generator) + 0.5, torch.rand(kv_size, generator=generator) + 0.5


def _run(launcher, tokens, q_size, kv_size, launch=None):
    """``(faulty (q_out, k_out), shipped (q_out, k_out))`` on the same inputs and tiling; the faulty
    launcher writes into NaN-poisoned outputs and must leave qkv alone."""
    qkv, q_weight, k_weight = _inputs(tokens, q_size, kv_size)
    original = qkv.clone()
    expected = qk_norm_triton(qkv, q_weight, k_weight, q_size, kv_size, 1e-6, launch=launch)
    out = tuple(torch.full_like(e, float("nan")) for e in expected)
    got = launcher(qkv, q_weight, k_weight, q_size, kv_size, 1e-6, out=out, launch=launch)
    assert all(g is o for g, o in zip(got, out, strict=True)), "the launcher must return the out tensors"
    assert torch.equal(qkv, original), "the launcher wrote into qkv"
    assert all(not e.isnan().any() for e in expected)
    return got, expected


@pytest.mark.parametrize("launcher", [qk_norm_grid_capped, qk_norm_unmasked_loads, qk_norm_k_out_floor_chunks])
def test_faulty_launchers_are_drop_ins_for_the_shipped_one(launcher):
    assert inspect.signature(launcher) == inspect.signature(qk_norm_triton)
    assert LAUNCHERS[launcher.__name__] is launcher
    q_out, k_out = launcher(torch.empty(0, 10), torch.ones(4), torch.ones(3), 4, 3, 1e-6)
    assert q_out.shape == (0, 4) and k_out.shape == (0, 3)


# Three programs of two-row blocks: the capped grid covers rows 0..5.
CAPPED = Launch(rows=2, block_q=8, block_kv=4, num_programs=3)


@pytest.mark.parametrize("tokens", [1, 5, 6])
def test_grid_capped_is_exact_while_the_grid_covers_every_row(tokens):
    got, expected = _run(qk_norm_grid_capped, tokens, 8, 4, CAPPED)
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize("tokens", [7, 13])
def test_grid_capped_leaves_the_rows_past_the_grid_unwritten(tokens):
    covered = CAPPED.num_programs * CAPPED.rows
    for got, expected in zip(*_run(qk_norm_grid_capped, tokens, 8, 4, CAPPED), strict=True):
        assert torch.equal(got[:covered], expected[:covered])
        assert got[covered:].isnan().all()


@pytest.mark.parametrize(
    ("q_size", "kv_size", "launch"),
    [(8, 4, None), (16, 2, Launch(rows=4, block_q=4, block_kv=1, num_programs=2)), (32, 8, CAPPED)],
    ids=["one-chunk", "chunked", "chunked-both"],
)
def test_unmasked_loads_are_exact_for_power_of_two_widths(q_size, kv_size, launch):
    got, expected = _run(qk_norm_unmasked_loads, 7, q_size, kv_size, launch)
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize(
    ("q_size", "kv_size", "launch", "wrong"),
    [
        (30, 5, None, (True, True)),  # q sums k's first two columns, k three of v's
        (30, 5, Launch(rows=2, block_q=4, block_kv=2, num_programs=3), (True, True)),
        (8, 5, None, (False, True)),  # a power-of-two q is exact; k reads into v
        (24, 8, None, (True, False)),  # q reads k (and v); k is exact
        (5, 1, None, (True, False)),  # q reads past the row into the next one (and past the last)
    ],
    ids=["30-5", "30-5-chunked", "8-5", "24-8", "5-1"],
)
def test_unmasked_loads_sum_the_columns_past_a_non_power_of_two_width(q_size, kv_size, launch, wrong):
    for got, expected, is_wrong in zip(*_run(qk_norm_unmasked_loads, 7, q_size, kv_size, launch), wrong, strict=True):
        assert not got.isnan().any()  # stores stay masked: everything is written
        if is_wrong:
            assert (got != expected).any(dim=-1).all()  # every row, through its wrong rstd
        else:
            assert torch.equal(got, expected)


@pytest.mark.parametrize("kv_size", [1, 2, 8])
def test_floor_chunks_are_exact_for_power_of_two_kv_widths(kv_size):
    got, expected = _run(qk_norm_k_out_floor_chunks, 7, 30, kv_size)
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize("kv_size", [3, 5, 24])
def test_floor_chunks_leave_k_out_unwritten_for_other_kv_widths(kv_size):
    (q_out, k_out), (q_expected, _) = _run(qk_norm_k_out_floor_chunks, 7, 30, kv_size)
    assert torch.equal(q_out, q_expected) and k_out.isnan().all()  # the poison is left in place


def test_floor_chunks_drop_the_tail_chunk_of_a_wider_kv():
    launch = Launch(rows=2, block_q=32, block_kv=16, num_programs=3)  # kv 24: one whole chunk of 16
    (q_out, k_out), (q_expected, k_expected) = _run(qk_norm_k_out_floor_chunks, 7, 30, 24, launch)
    assert torch.equal(q_out, q_expected)
    assert k_out[:, 16:].isnan().all()  # the tail chunk: never written
    assert not k_out[:, :16].isnan().any() and (k_out[:, :16] != k_expected[:, :16]).any(dim=-1).all()


# ------------------------------------------------------------------------------------ the passes


class _ShippedKernel(_KernelFault):
    """Bug kind: none: the kernel faults' rewrites with the shipped launcher (a control)."""

    launcher = staticmethod(qk_norm_triton)


def _family(fault):
    ((_, cases),) = BANK[fault.__name__].families()
    return cases


def test_the_bank_family_is_quiet_with_the_shipped_kernel():
    """Findings on the kernel faults' family come from their bugs: the same rewrites with the
    shipped launcher (in the interpreter, no bfloat16) break nothing."""
    results = []
    verify(_ShippedKernel, _family(QKNormKernelGridCapped), seed=0, max_examples=4, on_result=results.append)
    assert sum(r.rewrite_count for r in results) >= len(results)


@pytest.mark.parametrize(
    ("fault", "symptom"),
    [
        (QKNormKernelGridCapped, "nan after it"),
        (QKNormKernelUnmaskedLoads, "elements far off"),
        (QKNormKernelLeavesKOutUnwritten, "nan after it"),
    ],
)
def test_kernel_faults_are_caught_on_their_bank_family(fault, symptom, tmp_path, finding_only):
    assert {f.__name__ for f in KERNEL_FAULTS} <= set(BANK)
    results = []
    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(fault, _family(fault), seed=0, repro_dir=tmp_path, on_result=results.append)
    assert len(results) <= settings.default.max_examples + 1
    violations = info.value.violations
    assert {v.oracle for v in violations} == {"semantics"}
    assert all("raised" not in v.message for v in violations), violations  # the bug, not an error
    assert any(symptom in v.message for v in violations), violations
    assert info.value.result.rewrite_count >= 1


@pytest.mark.parametrize(
    ("fault", "config"),
    [
        (QKNormKernelUnmaskedLoads, QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.float32)),
        (QKNormKernelLeavesKOutUnwritten, QKNormConfig(q_size=24, kv_size=8, eps=1e-6, dtype=torch.float16)),
        (QKNormKernelGridCapped, QKNormConfig(q_size=24, kv_size=6, eps=1e-6, dtype=torch.float32)),
    ],
)
def test_kernel_faults_are_exact_where_their_bug_cannot_show(fault, config):
    """Power-of-two widths for the mask and the chunk count; at most 16 tokens (one row block) for
    the grid."""
    results = []
    verify(fault, qk_norm_cases(config, forms=SPLIT_FORMS), seed=0, max_examples=4, on_result=results.append)
    assert sum(r.rewrite_count for r in results) >= len(results)


def _python(script, **env):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True, timeout=300
    )


_KERNEL_MODULES = ("pmverify.fusions.qk_norm.kernels", "pmverify.faults._triton_kernels")


@pytest.mark.slow  # a fresh process importing the whole bank
def test_importing_the_faults_decorates_no_kernel():
    """The faults, their bank rows and their pattern passes (which trace the replacements with
    fake tensors) import neither the shipped kernels nor the faulty ones."""
    done = _python(
        f"""
        import sys
        import torch
        from pmverify.faults import BANK
        from pmverify.fusions.qk_norm import QKNormConfig
        config = QKNormConfig(q_size=24, kv_size=6, eps=1e-6, dtype=torch.float32)
        for name in {[f.__name__ for f in KERNEL_FAULTS]!r}:
            BANK[name].pass_cls(config).patterns
            BANK[name].families()
        loaded = [m for m in {_KERNEL_MODULES!r} if m in sys.modules]
        assert not loaded, loaded
        """,
        **os.environ,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CLI turns the interpreter on only without a GPU")
@pytest.mark.slow
def test_cli_selfcheck_turns_the_interpreter_on_without_a_gpu(tmp_path):
    """In a fresh process without ``TRITON_INTERPRET``: importing the CLI imports no triton (Triton's
    own jit functions would be compiled ones) and no kernel, and ``pmverify selfcheck`` of a kernel
    fault finds its bug (NaN), not an interpreter error."""
    done = _python(
        f"""
        import sys
        import pmverify.cli
        loaded = [m for m in ("triton", *{_KERNEL_MODULES!r}) if m in sys.modules]
        assert not loaded, loaded
        sys.exit(pmverify.cli.main([
            "selfcheck", "--fault", "QKNormKernelLeavesKOutUnwritten", "--no-shrink", "--max-examples", "10",
            "--report", {str(tmp_path / "r.json")!r}, "--repro-dir", {str(tmp_path)!r},
        ]))
        """,
        **{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = json.loads((tmp_path / "r.json").read_text())["faults"]
    assert row["detected"] and row["oracles"] == ["semantics"]
    with open(row["reproducer"]) as reproducer:
        header = reproducer.read(2000)
    assert "nan after it" in header and "raised" not in header, header
    # The reproducer, run as a script without TRITON_INTERPRET, turns the interpreter on itself.
    rerun = subprocess.run(
        [sys.executable, row["reproducer"]],
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rerun.returncode == 1, rerun.stdout + rerun.stderr
    assert "nan after it" in rerun.stdout + rerun.stderr and "raised" not in rerun.stdout + rerun.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the kernel faults run there")
@pytest.mark.slow
def test_without_the_interpreter_the_kernel_faults_are_errors_not_detections(tmp_path):
    """``TRITON_INTERPRET=0`` on a machine without a GPU: selfcheck reports ERROR and exits 2 (the
    op would raise, which the semantics oracle would otherwise take for a finding); fuzz refuses the
    target in one line with exit 2."""
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    selfcheck = _python(
        f"""
        import sys, pmverify.cli
        sys.exit(pmverify.cli.main(["selfcheck", "--fault", "QKNormKernelGridCapped", "--no-shrink",
                                    "--report", {str(tmp_path / "r.json")!r}]))
        """,
        **env,
    )
    assert selfcheck.returncode == 2, selfcheck.stdout + selfcheck.stderr
    (row,) = json.loads((tmp_path / "r.json").read_text())["faults"]
    assert row["status"] == "error" and "set TRITON_INTERPRET=1" in row["error"] and row["cases"] == 0
    fuzz = _python(
        """
        import sys, pmverify.cli
        sys.exit(pmverify.cli.main(["fuzz", "--target", "QKNormKernelUnmaskedLoads", "--budget", "5"]))
        """,
        **env,
    )
    assert fuzz.returncode == 2, fuzz.stdout + fuzz.stderr
    (line,) = fuzz.stderr.strip().splitlines()
    assert (
        line.startswith("pmverify fuzz: --target=QKNormKernelUnmaskedLoads: the kernel faults run") and not fuzz.stdout
    )


_REFUSING_COMMANDS = (["fuzz", "--budget", "5"], ["selfcheck", "--fault", "QKNormWrongRoundingOrder"])


def test_the_cli_refuses_an_unknown_fused_op_setting(monkeypatch, capsys):
    """Not a semantics finding on every case: one line, exit 2, for fuzz and selfcheck alike (in the
    test's process; the next test runs the CLI in fresh ones)."""
    from pmverify.cli import main

    monkeypatch.setenv("PMVERIFY_QK_NORM_IMPL", "cuda")
    monkeypatch.setenv("TRITON_INTERPRET", os.environ["TRITON_INTERPRET"])  # restored: the fuzz job sets it
    for command in _REFUSING_COMMANDS:
        code = main(command)
        out, err = capsys.readouterr()
        assert code == 2, out + err
        (line,) = err.strip().splitlines()
        assert line.startswith(f"pmverify {command[0]}: ") and not out
        assert "PMVERIFY_QK_NORM_IMPL='cuda': expected one of auto, triton, torch" in line


@pytest.mark.slow  # two fresh processes, each importing the fault bank
def test_the_cli_refuses_forced_triton_without_the_interpreter():
    """As above, for a setting only a fresh process can have (Triton imported without its
    interpreter on a machine without a GPU)."""
    env = {**os.environ, "PMVERIFY_QK_NORM_IMPL": "triton", "TRITON_INTERPRET": "0"}
    for command in _REFUSING_COMMANDS:
        done = _python(f"import sys, pmverify.cli; sys.exit(pmverify.cli.main({command!r}))", **env)
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"pmverify {command[0]}: ") and not done.stdout
        assert "PMVERIFY_QK_NORM_IMPL=triton runs the Triton" in line


@pytest.mark.parametrize("launcher", [qk_norm_grid_capped, qk_norm_unmasked_loads, qk_norm_k_out_floor_chunks])
def test_faulty_launchers_read_strided_weights_as_the_shipped_one_does(launcher):
    """Power-of-two widths and one row block, where every bug is silent: strided and expanded
    weights and a column-strided qkv give the shipped kernel's result."""
    qkv = torch.randn(16 + 2 * 8, 5).t()
    weights = [((torch.rand(32) + 0.5)[::2], (torch.rand(16) + 0.5)[::2]), (torch.tensor([2.0]).expand(16),) * 2]
    for q_weight, k_weight in weights:
        k_weight = k_weight[:8]
        expected = qk_norm_triton(qkv.contiguous(), q_weight.contiguous(), k_weight.contiguous(), 16, 8, 1e-6)
        for got, want in zip(launcher(qkv, q_weight, k_weight, 16, 8, 1e-6), expected, strict=True):
            assert torch.equal(got, want)
