"""The audit job, on light stand-in workers (``_fake_workers``: no torch, they start in a blink):
statuses, a worker that dies or hangs is an error with its log and the next rewrite goes on in a
fresh worker, the budget, workers that cannot start, and the JSON / JUnit / Markdown outputs."""

import io
import json
import os
import xml.etree.ElementTree as ET

import _fake_workers
import pytest

from pmverify._audit import job
from pmverify._audit.report import markdown, summary
from pmverify._audit.sources import AuditedRewrite


def _rewrites(*names, duplicates=()):
    return [AuditedRewrite("fake", "fake_passes", name, "fwd_only", name in duplicates) for name in names]


@pytest.fixture
def fake_workers(monkeypatch):
    monkeypatch.setattr(job, "_WORKER_MAIN", _fake_workers.serve)


def _audit(tmp_path, rewrites, **options):
    options = job.AuditOptions(sources=options.pop("sources", ["fake"]), repro_dir=tmp_path / "repro", **options)
    out = io.StringIO()
    report, code = job.run_audit(options, rewrites, out)
    return report, code, out.getvalue()


def test_statuses_and_a_dead_or_hung_worker_is_an_error_then_the_next_rewrite_goes_on(fake_workers, tmp_path):
    names = ("ok_1", "exits", "ok_2", "hangs", "finding", "raises", "ok_3", "dup")
    report, code, out = _audit(
        tmp_path,
        _rewrites(*names, duplicates=("dup",)),
        timeout_s=2.0,
        report=tmp_path / "r.json",
        junit=tmp_path / "j.xml",
        markdown=tmp_path / "AUDIT.md",
    )
    rows = {row["name"]: row for row in report["rewrites"]}
    assert [row["name"] for row in report["rewrites"]] == list(names)  # the listing's order
    assert {name: row["status"] for name, row in rows.items()} == {
        "ok_1": "ok",
        "exits": "error",
        "ok_2": "ok",
        "hangs": "error",
        "finding": "finding",
        "raises": "error",
        "ok_3": "ok",
        "dup": "not registered",
    }
    assert code == 1 and report["status"] == "finished"
    assert report["counts"] == {"ok": 3, "finding": 1, "error": 3, "not registered": 1}
    # a dead worker: how it ended, and its output (where it was)
    assert "exited with status 3 while auditing it: pmverify's worker, not judged a finding" in rows["exits"]["reason"]
    assert "checking fake_passes/exits" in rows["exits"]["error"]
    # a hung one: killed at the timeout, its Python stack in its log first
    assert "per-rewrite timeout of 2s" in rows["hangs"]["reason"]
    assert "in serve" in rows["hangs"]["error"] and rows["hangs"]["seconds"] >= 2
    # one worker, restarted after each: three logs, one a worker
    assert len(list((tmp_path / "repro" / "worker-logs").iterdir())) == 3
    assert "register_replacement skipped it as a duplicate" in rows["dup"]["reason"]
    assert rows["ok_1"]["reason"] == f"seed {rows['ok_1']['seed']}" and rows["ok_1"]["seed"] != rows["ok_2"]["seed"]
    # the outputs: JSON as returned; JUnit a testcase per rewrite; the table
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(report))
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite.get("name") == "fake_passes"
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "8",
        "failures": "1",
        "errors": "3",
        "skipped": "1",
    }
    failure = suite.find("testcase[@name='finding']/failure")
    assert failure.get("message") == "semantics: output 0 off" and "reproducer: /tmp/repro.py" in failure.text
    assert "cases: 40 cases, 2 rewritten, 1 rejected" in failure.text
    assert suite.find("testcase[@name='ok_1']/system-out").text.endswith("(15 cases, 6 rewritten, 1 void)")
    table_md = (tmp_path / "AUDIT.md").read_text()
    assert table_md.startswith("# Audit of the pattern entries of `fake`") and "## Finding (1)" in table_md
    assert f"([reproducer]({os.path.relpath('/tmp/repro.py', tmp_path.resolve())}))" in table_md  # from the file
    assert "[2/7] fake_passes/exits: error" in out  # a line per rewrite as it is done
    printed = io.StringIO()
    summary(report, printed)
    out = printed.getvalue()
    table = out.splitlines()[1:]
    assert table[1].split() == ["kind", "module", "entries", "ok", "finding", "error", "not", "registered", "cases"]
    assert table[3].split() == ["replacement", "fake_passes", "8", "3", "1", "3", "1", "85"]  # 3 x 15 + 40
    assert "FINDING fake_passes/finding (40 cases, 2 rewritten, 1 rejected): semantics: output 0 off" in out


def test_each_rewrite_says_how_many_cases_it_got(fake_workers, tmp_path):
    names = ("ok_1", "finding", "exits", "dup")
    report, _, out = _audit(
        tmp_path, _rewrites(*names, duplicates=("dup",)), markdown=tmp_path / "AUDIT.md", report=tmp_path / "r.json"
    )
    rows = {row["name"]: row for row in report["rewrites"]}
    assert rows["ok_1"]["cases"] == {"checked": 15, "rewritten": 6, "void": 1, "rejected": 0}
    assert rows["finding"]["cases"] == {"checked": 40, "rewritten": 2, "void": 0, "rejected": 1}
    assert rows["exits"]["cases"] is None  # its worker died: not known
    assert rows["dup"]["cases"] == {"checked": 0, "rewritten": 0, "void": 0, "rejected": 0}
    assert json.loads((tmp_path / "r.json").read_text())["rewrites"][0]["cases"]["checked"] == 15
    assert "fake_passes/ok_1: ok (" in out and "s; 15 cases, 6 rewritten, 1 void) seed " in out
    assert "s; cases not known) " in out  # the dead worker's line
    table_md = (tmp_path / "AUDIT.md").read_text()
    assert "| kind | module | entries | ok | finding | error | not registered | cases |" in table_md
    assert "| replacement | fake_passes | 4 | 1 | 1 | 1 | 1 | 55 |" in table_md
    assert "- `fake_passes/finding` (fwd_only; 40 cases, 2 rewritten, 1 rejected): semantics: output 0 off" in table_md
    per_rewrite = table_md.split("## Cases per entry")[1]
    assert "| `fake_passes/ok_1` | fwd_only | ok | 15 | 6 | 1 | 0 |" in per_rewrite
    assert "| `fake_passes/exits` | fwd_only | error | - | - | - | - |" in per_rewrite
    assert "| `fake_passes/dup` | fwd_only | not registered | 0 | 0 | 0 | 0 | 0.0 |" in per_rewrite


def test_each_worker_gets_its_share_of_the_cores_as_torch_threads(fake_workers, tmp_path, monkeypatch):
    from pmverify._job import workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4}, raising=False)
    assert [workers.threads_per_worker(jobs) for jobs in (1, 2, 3, 5, 8)] == [5, 2, 1, 1, 1]
    report, _, _ = _audit(tmp_path, _rewrites("ok_1", "ok_2"), jobs=2)
    assert {row["worker_threads"] for row in report["rewrites"]} == {2}


def test_entries_of_each_kind_are_sent_with_their_kind_and_counted_by_kind_module_and_pass(fake_workers, tmp_path):
    entries = [
        AuditedRewrite("fake", "fake_passes", "ok_1", "fwd_only", False, "replacement", "fake_passes.PASS"),
        AuditedRewrite("fake", "fake_passes", "ok_h", "", False, "graph", "fake_passes.PASS", "fake_passes.ok_h"),
        AuditedRewrite("fake", "other", "finding_h", "", False, "graph", "other.PASSES[1]", "other.finding_h"),
    ]
    report, code, _ = _audit(tmp_path, entries, markdown=tmp_path / "AUDIT.md")
    rows = report["rewrites"]
    assert code == 1 and [row["request_kind"] for row in rows] == ["replacement", "graph", "graph"]
    assert rows[2]["finding_kind"] == "violation"  # the row's kind is the entry's
    assert [(r["kind"], r["pass"], r["handler"]) for r in rows] == [
        ("replacement", "fake_passes.PASS", None),
        ("graph", "fake_passes.PASS", "fake_passes.ok_h"),
        ("graph", "other.PASSES[1]", "other.finding_h"),
    ]
    printed = io.StringIO()
    summary(report, printed)
    lines = [line.split() for line in printed.getvalue().splitlines()]
    assert ["replacement", "fake_passes", "1", "1", "0", "15"] in lines
    assert ["graph", "fake_passes", "1", "1", "0", "15"] in lines
    assert ["graph", "other", "1", "0", "1", "40"] in lines
    assert ["total", "3", "2", "1", "70"] in lines
    assert ["pass", "entries", "ok", "finding", "cases"] in lines  # the counts per pass
    assert ["fake_passes.PASS", "2", "2", "0", "30"] in lines and ["other.PASSES[1]", "1", "0", "1", "40"] in lines
    table_md = (tmp_path / "AUDIT.md").read_text()
    assert "| graph | other | 1 | 0 | 1 | 40 |" in table_md and "| other.PASSES[1] | 1 | 0 | 1 | 40 |" in table_md
    assert "- `other/finding_h` (graph; 40 cases" in table_md


def test_the_budget_stops_starting_rewrites_and_the_rest_are_not_run(fake_workers, tmp_path):
    report, code, _ = _audit(tmp_path, _rewrites("slow_1", "slow_2", "slow_3"), budget_s=1.0, budget_text="1s")
    rows = report["rewrites"]
    assert code == 0 and report["status"] == "budget spent"
    assert rows[0]["status"] in ("ok", "not run")  # (started unless this machine took a second to begin)
    for row in rows[1:]:
        assert row["status"] == "not run"
        assert row["reason"] == "the budget (1s) was spent before it started"


def _lowering(name, handler):
    return AuditedRewrite("fake", "fake_passes", name, "", False, "lowering", "fake_passes.PASS", handler)


def test_lowering_entries_run_last_and_those_past_the_lowering_budget_are_not_run(fake_workers, tmp_path):
    entries = [
        _lowering("slow_a1", "fake_passes.a"),
        _lowering("slow_a2", "fake_passes.a"),
        AuditedRewrite("fake", "fake_passes", "ok_h", "", False, "graph", "fake_passes.PASS", "fake_passes.ok_h"),
        _lowering("slow_b1", "fake_passes.b"),
    ]
    kinds = ("graph", "lowering")
    report, code, out = _audit(tmp_path, entries, kinds=kinds, lowering_budget_s=1.0)
    rows = report["rewrites"]
    assert code == 0 and report["status"] == "finished" and report["lowering_budget_s"] == 1.0
    assert out.splitlines()[0].startswith("[1/4] fake_passes/ok_h: ok")  # the graph entry first
    lowering = [row for row in rows if row["kind"] == "lowering"]
    assert sorted(row["status"] for row in lowering) == ["not run", "not run", "ok"]  # one started, 1.5 s
    for row in lowering:
        if row["status"] == "not run":
            assert row["reason"].startswith("not sampled: the lowering budget (1 s, --lowering-budget) was spent on 1 ")
    # without a budget spent, every lowering entry runs
    report, _, _ = _audit(tmp_path, entries[2:], kinds=kinds, lowering_budget_s=60.0)
    assert [row["status"] for row in report["rewrites"]] == ["ok", "ok"]


def test_lowering_entries_are_sampled_one_handler_at_a_time_in_a_seeded_order():
    entries = [_lowering(f"e{i}", handler) for i, handler in enumerate("aaaabbc")]
    order = job.lowering_order(entries, list(range(7)), 0)
    assert sorted(order) == list(range(7)) and order == job.lowering_order(entries, list(range(7)), 0)
    assert {entries[i].handler for i in order[:3]} == {"a", "b", "c"}  # every handler before any twice
    assert {entries[i].handler for i in order[3:5]} == {"a", "b"}
    assert any(job.lowering_order(entries, list(range(7)), seed) != order for seed in range(1, 6))


def test_workers_that_cannot_start_make_every_rewrite_an_error_saying_why(fake_workers, tmp_path):
    report, code, _ = _audit(tmp_path, _rewrites("ok_1", "ok_2"), sources=["cannot-start"], jobs=2)
    assert code == 0
    for row in report["rewrites"]:
        assert row["status"] == "error"
        assert row["reason"].startswith(
            "no worker could start (3 tries in a row): the worker process exited with status 4"
        )
        assert "this worker cannot start" in row["error"]


def test_a_never_matched_finding_is_a_dead_pattern_apart_from_the_wrong_results():
    """Dead code (the rewrite never fired: nothing compared) is no wrong result: its own column and
    section, as is a row not covered."""
    rows = [
        {"name": "wrong", "status": "finding", "finding_kind": "violation", "reason": "semantics: output 0 off"},
        {"name": "dead", "status": "finding", "finding_kind": "never_matched", "reason": "never matched: none of 25"},
        {"name": "partly", "status": "not covered", "reason": "6 cases; judged: dtype; missed: values"},
        {"name": "fine", "status": "ok", "reason": "6 cases; judged: dtype"},
    ]
    common = {"module": "m", "trace_fn": "fwd_only", "cases": None, "reproducer": None, "seconds": 1.0}
    report = {
        "status": "finished",
        "elapsed_s": 4.0,
        "rewrites": [{**common, **row} for row in rows],
        **dict.fromkeys(("pmverify", "torch", "date", "command"), "x"),
        **{"seed": 0, "max_examples": 25, "planted_examples": 13, "jobs": 1, "sources": ["inductor"]},
    }
    printed = io.StringIO()
    summary(report, printed)
    out = printed.getvalue()
    table = out.splitlines()[1:]
    assert [c.strip() for c in table[1].split("  ") if c][:5] == ["kind", "module", "entries", "ok", "not covered"]
    assert [c.strip() for c in table[1].split("  ") if c][5:7] == ["finding", "dead pattern (never matches)"]
    assert table[3].split() == ["replacement", "m", "4", "1", "1", "1", "1", "0"]
    assert "  FINDING m/wrong (cases not known): semantics" in out
    assert "  DEAD PATTERN (NEVER MATCHES) m/dead (cases not known): never matched" in out
    assert "  NOT COVERED m/partly (cases not known): 6 cases; judged: dtype; missed: values" in out
    text = markdown(report)
    assert "## Finding (1)\n\n- `m/wrong`" in text
    assert "## Dead pattern (never matches) (1)\n\n- `m/dead`" in text
    assert "## Not covered (1)\n\n- `m/partly`" in text
