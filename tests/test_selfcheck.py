"""pmverify selfcheck: every fault of the bank is detected by the oracle its row names; an escaping
fault exits 1; bad usage exits 2 with one line on stderr."""

from __future__ import annotations

import json

import pytest

from pmverify import _selfcheck
from pmverify.cli import main
from pmverify.faults import BANK, AddmmDropsScalars, Fault, addmm_cases
from pmverify.fusions.qk_norm import QKNormFusionPass

#: Enough for every fault at seed 0 (the slowest, swapped getitems, needs the third family of the
#: rotation: cases 21..30), with a rotation to spare.
MAX_EXAMPLES = "200"  # NoOpSliceEndMinusOne: at its 156th case at seed 0 (20-77 at seeds 1-3)


def _run(tmp_path, *argv: str) -> tuple[int, dict]:
    report = tmp_path / "report.json"
    argv = ("selfcheck", *argv, "--report", str(report), "--repro-dir", str(tmp_path / "repro"))
    code = main(list(argv))
    return code, json.loads(report.read_text())


#: The fault whose selfcheck runs in the default suite (a few seconds); every fault runs in the slow
#: step. Each fault also has its own tests of being caught by its oracles (tests/test_faults.py,
#: tests/faults/), which stay in the default suite.
_DEFAULT_SELFCHECK = "RMSNormHardCodedEps"


@pytest.mark.parametrize(
    "name", [name if name == _DEFAULT_SELFCHECK else pytest.param(name, marks=pytest.mark.slow) for name in BANK]
)
def test_selfcheck_detects_each_fault(name, tmp_path, capsys):
    code, data = _run(tmp_path, "--fault", name, "--max-examples", MAX_EXAMPLES, "--no-shrink")
    assert code == 0
    (row,) = data["faults"]
    assert row["name"] == name and row["detected"] and row["status"] == "detected"
    assert data["detected"] == [name] and data["escaped"] == []
    assert 1 <= row["examples"] <= int(MAX_EXAMPLES) and row["examples"] <= row["cases"]
    assert set(row["oracles"]) & set(BANK[name].oracles), row
    if row["oracles"] == ["unfused"]:  # the search's warning over all its cases: no failing case
        assert row["examples"] == row["cases"] and row["nodes"] is None and "instances rewritten" in row["case"]
    else:
        assert row["nodes"] == row["first_nodes"] >= 1  # unshrunk: the reproducer is the first failing case
        assert row["reproducer"] and (tmp_path / "repro").is_dir()
    assert row["seconds"] > 0
    assert data["seed"] == 0 and data["max_examples"] == int(MAX_EXAMPLES) and data["shrink"] is False
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith(name))
    cells = line.split()
    assert cells[1] == "yes" and cells[2] == str(row["examples"]) and cells[4] == str(row["nodes"] or "-")
    assert "1 of 1 faults detected" in out


def test_selfcheck_shrinks_the_reproducer(tmp_path):
    code, data = _run(tmp_path, "--fault", "HandRMSNormInsertedBeforeInputs", "--seed", "1")
    (row,) = data["faults"]
    assert code == 0 and row["detected"] and data["shrink"] is True
    assert row["nodes"] <= row["first_nodes"] and "structure" in row["oracles"]
    assert row["cases"] > row["examples"]  # shrinking ran cases after the first failing one


def test_an_escaping_fault_exits_1(tmp_path, capsys, monkeypatch):
    # The shipped pass, filed as a fault: nothing to find.
    monkeypatch.setitem(BANK, "QKNormFusionPass", Fault(QKNormFusionPass, "none", ("semantics",)))
    # The detected one: a crash on a form about a third of its cases hold (found within 5 at any seed).
    detected = "NoOpScatterUnpacksFiveArguments"
    code, data = _run(
        tmp_path, "--fault", "QKNormFusionPass", "--fault", detected, "--max-examples", "5", "--no-shrink"
    )
    assert code == 1
    assert data["escaped"] == ["QKNormFusionPass"] and data["detected"] == [detected]
    row = data["faults"][0]
    assert row["status"] == "escaped" and row["examples"] is None and row["cases"] == 5 and row["nodes"] is None
    out = capsys.readouterr().out
    assert "QKNormFusionPass: escaped in 5 cases" in out
    assert next(line for line in out.splitlines() if line.startswith("QKNormFusionPass")).split()[1] == "NO"
    assert "1 of 2 faults detected" in out


def test_a_finding_by_other_oracles_only_is_not_a_detection(tmp_path, monkeypatch):
    row = Fault(AddmmDropsScalars, "filed under the wrong oracle", ("cache_key",), lambda: [("addmm", addmm_cases())])
    monkeypatch.setitem(BANK, "Misfiled", row)
    code, data = _run(tmp_path, "--fault", "Misfiled", "--max-examples", "20", "--no-shrink")
    assert code == 1 and data["escaped"] == ["Misfiled"]
    assert data["faults"][0]["status"] == "other oracles" and data["faults"][0]["oracles"] == ["semantics"]


def test_a_search_that_fails_is_reported_not_raised(monkeypatch):
    def broken():
        raise RuntimeError("no strategy today")

    row = Fault(AddmmDropsScalars, "broken families", ("semantics",), broken)
    (result,) = _selfcheck.selfcheck(["Broken"], bank={"Broken": row})
    assert result.status == "error" and "no strategy today" in result.error and not result.detected
    assert "ERROR" in _selfcheck.table([result])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--fault", "Nope"], "--fault='Nope' is unknown; choose from QKNormWrongRoundingOrder"),
        (["--fault", "AddmmDropsScalars", "--fault", "nope"], "--fault='nope' is unknown"),
    ],
)
def test_unknown_fault_exits_2_with_one_line(argv, message, capsys):
    assert main(["selfcheck", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("argv", [["--max-examples", "0"], ["--max-examples", "many"], ["--seed", "x"]])
def test_bad_options_exit_2(argv):
    with pytest.raises(SystemExit) as info:
        main(["selfcheck", *argv])
    assert info.value.code == 2


def test_unwritable_report_exits_2_before_running(tmp_path, capsys):
    assert main(["selfcheck", "--report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot be written" in err and err.count("\n") == 1


def test_an_escape_outranks_a_fault_that_cannot_run_here(monkeypatch, tmp_path):
    """Exit 1 when one fault escapes, whatever else could not run; 2 when the only failures are
    faults this machine cannot run (ERROR), which the report lists apart from escapes."""

    def missing():
        raise RuntimeError("no such device here")

    monkeypatch.setitem(
        BANK, "Unrunnable", Fault(AddmmDropsScalars, "needs a device", ("semantics",), requires=missing)
    )
    monkeypatch.setitem(
        BANK, "Misfiled", Fault(AddmmDropsScalars, "wrong oracle", ("cache_key",), BANK["AddmmDropsScalars"].families)
    )
    code, data = _run(tmp_path, "--fault", "Unrunnable", "--max-examples", "5", "--no-shrink")
    assert code == 2 and data["errors"] == ["Unrunnable"] and data["escaped"] == []
    assert data["faults"][0]["error"] == "RuntimeError: no such device here" and data["faults"][0]["cases"] == 0
    code, data = _run(tmp_path, "--fault", "Unrunnable", "--fault", "Misfiled", "--max-examples", "20", "--no-shrink")
    assert code == 1 and data["errors"] == ["Unrunnable"] and data["escaped"] == ["Misfiled"]
