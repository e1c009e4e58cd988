"""``pmverify audit`` on the command line: bad usage is one line and exit 2, before any worker
starts; whole runs with real workers (crash, hang, finding, reproducer run as a script) are slow."""

import json
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from pmverify.cli import main

SOURCE = "_audit_passes"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["no_such_module"], "'no_such_module': cannot import no_such_module: ModuleNotFoundError"),
        ([f"{SOURCE}:nothing"], f"'{SOURCE}:nothing': {SOURCE} has no attribute nothing"),
        ([f"{SOURCE}:PASS"], f"'{SOURCE}:PASS' is PatternMatcherPass, not a callable that builds the pass"),
        (
            ["_fake_workers"],
            "no register_replacement or register_graph_pattern call was recorded while it was imported: if it "
            "registers lazily",
        ),
        ([SOURCE, "--kinds", "lowering"], "no register_lowering_pattern call was recorded while it was imported"),
        (
            [SOURCE, "--kinds", "graph,scheduler"],
            "--kinds='graph,scheduler' must be kinds among replacement, graph, lowering",
        ),
        ([SOURCE, "--kinds", ""], "--kinds='' must be kinds among"),
        ([SOURCE, "--rewrite", "nothing*"], "--rewrite='nothing*' matches none of the 7 entries of _audit_passes"),
        ([SOURCE, "--timeout", "-5s"], "--timeout='-5s' must be a positive, finite duration"),
        ([SOURCE, "--lowering-budget", "-5s"], "--lowering-budget='-5s' must be a positive, finite duration"),
        ([SOURCE, "--max-examples", "0"], "--max-examples='0' must be positive and finite"),
        ([SOURCE, "--report", "-", "--markdown", "/dev/stdout"], "are one stream: give one of them a file"),
        ([SOURCE, "--junit", "."], "--junit='.' cannot be written: it is a directory"),
        ([SOURCE, "--repro-dir", "/dev/null/r"], "--repro-dir='/dev/null/r' cannot be made a folder"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(capsys, argv, says):
    try:
        code = main(["audit", *argv])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert says in err and err.startswith("pmverify audit") and err.count("\n") == 1, err


def _rows(report):
    return {row["name"]: row for row in report["rewrites"]}


@pytest.mark.slow
def test_a_users_module_audited_in_real_workers(tmp_path, capsys):
    """Every status a user's module gives, its worker dying and hanging included, the finding's
    reproducer run as a script without edits (exit 1 while the rewrite is wrong)."""
    report_path, junit = tmp_path / "r.json", tmp_path / "j.xml"
    argv = [SOURCE, "--jobs", "2", "--max-examples", "4", "--timeout", "30s", "--report", str(report_path)]
    code = main(["audit", *argv, "--junit", str(junit), "--repro-dir", str(tmp_path / "repro")])
    report = json.loads(report_path.read_text())
    assert code == 1 and report["status"] == "finished"
    rows = _rows(report)
    assert {name: row["status"] for name, row in rows.items()} == {
        "relu_relu[float32, fwd_only]#1": "ok",
        "silu": "finding",
        "exits": "error",
        "hangs": "error",
        "complex_abs": "error",
        "never": "finding",
        "relu_relu[float32, fwd_only]#2": "not registered",
    }
    assert "exited with status 3 while auditing it" in rows["exits"]["reason"]
    assert "per-rewrite timeout of 30s" in rows["hangs"]["reason"] and "in hangs_replacement" in rows["hangs"]["error"]
    assert set(rows["silu"]) >= {
        "module",
        "name",
        "trace_fn",
        "status",
        "reason",
        "violations",
        "reproducer",
        "seconds",
    }
    assert set(report) >= {"torch", "pmverify", "date", "seed", "rewrites"}
    run = subprocess.run(
        [sys.executable, rows["silu"]["reproducer"]], capture_output=True, text=True, cwd=pathlib.Path(__file__).parent
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert ET.parse(junit).getroot().find("testsuite").get("name") == SOURCE
    out = capsys.readouterr().out
    table = [line.split() for line in out.splitlines()]
    # kind, module, entries, ok, finding, dead pattern (its own column), error, not registered
    assert ["replacement", "_audit_passes", "7", "1", "1", "1", "3", "1"] in [row[:8] for row in table]
    assert ["_audit_passes.PASS", "7", "1", "1", "1", "3", "1"] in [row[:7] for row in table]  # the count per pass


@pytest.mark.slow
def test_the_full_audit_of_inductor_gives_every_rewrite_a_status(tmp_path):
    """The default audit at the installed torch (rewrites and graph entries): no crash of the audit, a
    status for each entry, Inductor's duplicates not registered (the other statuses depend on
    check_rewrite's and check_entry's reach)."""
    report_path = tmp_path / "r.json"
    code = main(
        ["audit", "--jobs", "2", "--max-examples", "5", "--report", str(report_path), "--repro-dir", str(tmp_path)]
    )
    report = json.loads(report_path.read_text())
    assert code in (0, 1) and report["status"] == "finished"
    import torch

    if torch.__version__.startswith("2.13."):  # replacement,graph by default
        kinds = [row["kind"] for row in report["rewrites"]]
        assert (kinds.count("replacement"), kinds.count("graph")) == (149, 273)
        assert report["counts"]["not registered"] == 19 and report["kinds"] == ["replacement", "graph"]
    for row in report["rewrites"]:
        assert row["status"] != "not run" and row["reason"], row
        if row["status"] == "error":
            assert row["reason"].strip() and not row["reason"].endswith(": "), row
