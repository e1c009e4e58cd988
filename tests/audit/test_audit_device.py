"""``--device`` of ``pmverify audit`` (issue 33): the device reaches the audit's workers, every
check they run and every report (light stand-in workers: ``_fake_workers``; a simulated CUDA
device, :func:`pmverify.device.simulated`, for the CUDA path). The refusals: tests/test_cli_device.py."""

from __future__ import annotations

import io
import types

import _fake_workers
import pytest

import pmverify
import pmverify._rewrites.entry_check
import pmverify._rewrites.rewrite
from pmverify.cli import main
from pmverify.device import simulated


def test_audit_device_reaches_its_workers_and_every_report(monkeypatch, tmp_path):
    from pmverify._audit import job
    from pmverify._audit.report import junit_xml, markdown
    from pmverify._audit.sources import AuditedRewrite

    monkeypatch.setattr(job, "_WORKER_MAIN", _fake_workers.serve)
    rewrites = [AuditedRewrite("fake", "fake_passes", "ok_1", "fwd_only", False)]
    for device, recorded in (("cuda:0", "cuda:0"), (None, "cpu")):
        options = job.AuditOptions(sources=["fake"], repro_dir=tmp_path / "repro", device=device)
        report, code = job.run_audit(options, rewrites, io.StringIO())
        assert code == 0 and [row["worker_device"] for row in report["rewrites"]] == [device]
        assert report["device"] == recorded
        assert f"seed {report['seed']}, on {recorded}, " in markdown(report)
        assert f'<property name="device" value="{recorded}" />' in junit_xml(report)


def test_audit_command_line_device_reaches_the_job(monkeypatch, tmp_path, capsys):
    seen = []
    monkeypatch.setattr("pmverify._audit.list_rewrites", lambda sources, globs, kinds: [])
    monkeypatch.setattr("pmverify._audit.run_audit", lambda options, rewrites, out: seen.append(options) or ({}, 0))
    monkeypatch.setattr("pmverify._audit.report.summary", lambda report, out: None)
    monkeypatch.setattr("pmverify._audit.report.write_outputs", lambda *args, **kwargs: None)
    assert main(["audit", "--device", "cpu", "--repro-dir", str(tmp_path)]) == 0
    with simulated("cuda"):
        assert main(["audit", "--device", "cuda", "--repro-dir", str(tmp_path)]) == 0
    assert [options.device for options in seen] == ["cpu", "cuda:0"]
    assert "planted on cuda:0 (seed 0" in capsys.readouterr().out


def _spy(calls, outcome):
    def spy(*args, **kwargs):
        calls.append(kwargs)
        raise outcome

    return spy


@pytest.mark.parametrize("kind", ["replacement", "graph", "lowering"])
def test_each_audited_entry_is_checked_on_the_device(kind, monkeypatch):
    from pmverify._audit import check

    calls = []
    unsatisfiable = _spy(calls, pmverify.RewriteUnsatisfiable("m", "a condition"))
    monkeypatch.setattr(pmverify._rewrites.rewrite, "check_rewrite", unsatisfiable)
    monkeypatch.setattr(pmverify._rewrites.entry_check, "check_entry", unsatisfiable)
    entry = types.SimpleNamespace(kind=kind, rewrite=None)
    outcome = check.check_one(entry, "PASS = None", max_examples=1, seed=0, device="cuda:0")
    assert outcome["status"] == "unsatisfiable here" and [call["device"] for call in calls] == ["cuda:0"]
