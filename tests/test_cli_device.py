"""``--device`` of ``pmverify fuzz`` / ``audit`` / ``selfcheck`` (issue 33), on a machine without
CUDA: refusals (exit 2, one line, before any work), ``--device cpu`` accepted and recorded, the
device threaded to the job's workers and to every check they run (spies; a simulated CUDA device,
:func:`pmverify.device.simulated`, for the CUDA path). Real CUDA runs: tests/gpu/test_cli_cuda.py."""

from __future__ import annotations

import io
import json
import os
import time
import types

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st

import pmverify
import pmverify._rewrites.entry_check
import pmverify._rewrites.rewrite
from pmverify.cli import main
from pmverify.device import simulated

#: What each command needs besides --device to get as far as its work.
COMMANDS = {"fuzz": ["--no-real-model", "--budget", "5m"], "audit": [], "selfcheck": []}
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a machine without CUDA")


def _no_work(monkeypatch):
    """Make every command's work fail the test: a refusal must come before any of it."""

    def started(*args, **kwargs):
        raise AssertionError("the command's work started")

    monkeypatch.setattr("pmverify._job.run_job", started)
    monkeypatch.setattr("pmverify._job.targets.check", started)
    monkeypatch.setattr("pmverify._audit.run_command", started)
    monkeypatch.setattr("pmverify._selfcheck.load_bank", started)


@no_cuda
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_device_this_machine_lacks_exits_2_in_one_line_before_any_work(command, device, monkeypatch, capsys):
    _no_work(monkeypatch)
    assert main([command, "--device", device, *COMMANDS[command]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pmverify {command}: --device='{device}': this machine has no CUDA device (torch ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("device", ["mps", "foo", "cuda:x", "CUDA", "cpu:0x"])
def test_a_bad_device_is_bad_usage_naming_device(command, device, monkeypatch, capsys):
    _no_work(monkeypatch)
    with pytest.raises(SystemExit) as info:
        main([command, "--device", device])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pmverify {command}: --device='{device}': cases run on cpu or cuda devices")
    assert err.count("\n") == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_help_documents_device(command, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--device DEVICE where every case runs: cpu (default) or cuda, cuda:N" in out
    assert "recorded in the reports" in out


def _fuzz_options(monkeypatch):
    from pmverify import cli

    seen = []
    monkeypatch.setattr("pmverify._job.run_job", lambda options, out: seen.append(options) or ({}, 0))
    monkeypatch.setattr("pmverify._job.targets.check", lambda names, cases: None)
    monkeypatch.setattr(cli, "_summary", lambda report, out: None)
    return seen


def test_fuzz_device_reaches_the_job_and_its_workers_spec(monkeypatch):
    from pmverify._job.worker import serve_options

    seen = _fuzz_options(monkeypatch)
    assert main(["fuzz", "--device", "cpu", *COMMANDS["fuzz"]]) == 0
    assert main(["fuzz", *COMMANDS["fuzz"]]) == 0
    with simulated("cuda"):
        assert main(["fuzz", "--device", "cuda", *COMMANDS["fuzz"]]) == 0
    assert [options.device for options in seen] == ["cpu", None, "cuda:0"]  # as require_device names it
    assert [serve_options(options, None)["device"] for options in seen] == ["cpu", None, "cuda:0"]


def _pass(graph):
    return None


def _bare_worker(device):
    """A fuzz worker as ``serve`` builds it, without loading a target (its pieces stand in)."""
    from pmverify._job import worker

    sent = []
    w = object.__new__(worker._Worker)
    w.conn = types.SimpleNamespace(send=sent.append)
    w.options = {"repro_dir": None, "shrink": False}
    w.settings = settings(max_examples=1)
    w.target = types.SimpleNamespace(
        name="t",
        pass_=_pass,
        families=[("plain", st.just(None))],
        pass_source=None,
        reproducer_prelude=None,
        allow_unfused=frozenset(),
        fuzz=types.SimpleNamespace(end_check=None),
    )
    w.strict_order, w.device, w.shrink_budget_s = False, device, float("inf")
    return w, sent


def test_a_fuzz_worker_searches_on_its_device_and_keys_its_database_by_it(monkeypatch):
    from pmverify._engine import verify
    from pmverify._job import protocol

    w, sent = _bare_worker("cuda:0")
    w.ready()
    strategy = w.target.families[0][1]
    assert sent[0].keys == (verify.database_key(_pass, strategy, device="cuda:0"),)
    assert sent[0].keys != (verify.database_key(_pass, strategy),)  # what verify(device=) saves under
    calls = []
    monkeypatch.setattr(verify, "verify", lambda *args, **kwargs: calls.append(kwargs))
    w.batch(protocol.BatchRequest(family=0, seed=0, max_examples=1, replay=False, stop_at=time.time() + 60))
    assert [call["device"] for call in calls] == ["cuda:0"]


def test_a_crash_on_cuda_is_not_shrunk_in_forked_processes():
    from pmverify._job.worker import _forks_run

    assert _forks_run(None) and _forks_run("cpu")
    assert not _forks_run("cuda:0")


def test_the_fuzz_report_records_the_device(tmp_path):
    from pmverify._job.findings import Findings
    from pmverify._job.state import JobOptions

    for device, recorded in ((None, "cpu"), ("cuda:0", "cuda:0")):
        options = JobOptions(targets=[], device=device, repro_dir=tmp_path, db=str(tmp_path / "db"))
        assert Findings(options, io.StringIO()).report()["device"] == recorded


# -- selfcheck ---------------------------------------------------------------------------------


def _selfcheck_spy(monkeypatch):
    seen = []

    def run(names, **kwargs):
        seen.append(kwargs)
        return []

    monkeypatch.setattr("pmverify._selfcheck.load_bank", lambda: {})
    monkeypatch.setattr("pmverify._selfcheck.selfcheck", run)
    return seen


def test_selfcheck_device_reaches_the_search_and_the_report(monkeypatch, tmp_path, capsys):
    seen = _selfcheck_spy(monkeypatch)
    report = tmp_path / "r.json"
    assert main(["selfcheck", "--device", "cpu", "--report", str(report)]) == 0
    assert json.loads(report.read_text())["device"] == "cpu"
    assert "(seed 0, device cpu)" in capsys.readouterr().out
    assert main(["selfcheck", "--report", str(report)]) == 0
    assert json.loads(report.read_text())["device"] == "cpu"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with simulated("cuda"):
        assert main(["selfcheck", "--device", "cuda", "--report", str(report)]) == 0
    assert json.loads(report.read_text())["device"] == "cuda:0"
    assert [kwargs["device"] for kwargs in seen] == ["cpu", None, "cuda:0"]


def test_selfcheck_on_cuda_refuses_triton_s_interpreter(monkeypatch, capsys):
    _selfcheck_spy(monkeypatch)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with simulated("cuda"):
        assert main(["selfcheck", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pmverify selfcheck: --device cuda runs the kernel faults' Triton kernels on the GPU")
    assert err.count("\n") == 1
    assert os.environ["TRITON_INTERPRET"] == "1"  # told, not changed


def test_a_fault_is_searched_on_the_device_family_by_family_and_entry_by_entry(monkeypatch):
    from pmverify import _selfcheck
    from pmverify._engine import verify

    rotations, entries = [], []
    monkeypatch.setattr(verify, "verify_in_rotation", lambda *args, **kwargs: rotations.append(kwargs) or iter(()))
    monkeypatch.setattr(pmverify._rewrites.entry_check, "check_entry", lambda *a, **kwargs: entries.append(kwargs))
    row = types.SimpleNamespace(
        name="F", bug="b", oracles=("semantics",), requires=None, pass_cls=_pass, families=list, strict_order=False
    )
    _selfcheck.run_fault(types.SimpleNamespace(**vars(row), entries=None), device="cuda:0")
    assert [kwargs["device"] for kwargs in rotations] == ["cuda:0"]
    with_entries = types.SimpleNamespace(**vars(row), entries=lambda: [types.SimpleNamespace(label="p/e")])
    _selfcheck.run_fault(with_entries, max_examples=3, device="cuda:0")
    assert [kwargs["device"] for kwargs in entries] == ["cuda:0"]


def test_the_end_check_runs_on_the_jobs_device_when_it_takes_one():
    from pmverify import EndCheck
    from pmverify._job.worker import _run_end_check

    seen = []
    takes = EndCheck("m", "model", lambda pass_, device=None: seen.append(device) or {"ok": True})
    plain = EndCheck("m", "model", lambda pass_: seen.append("plain") or {"ok": True})
    _run_end_check(takes, object(), "cuda:0")
    _run_end_check(takes, object(), None)
    _run_end_check(plain, object(), "cuda:0")
    assert seen == ["cuda:0", None, "plain"]
