"""pmverify fuzz: exit codes, report, progress; the real model is covered by test_real_models."""

import json

import pytest

from pmverify.cli import main


def test_fuzz_clean_run_writes_report(tmp_path, capsys):
    report = tmp_path / "r.json"
    code = main(
        [
            "fuzz",
            "--max-examples",
            "60",
            "--seed",
            "1",
            "--no-real-model",
            "--report",
            str(report),
            "--db",
            str(tmp_path),
        ]
    )
    assert code == 0
    data = json.loads(report.read_text())
    assert data["seed"] == 1 and data["pmverify"]
    (target,) = data["targets"]
    assert target["name"] == "qk_norm" and target["cases"] == 60 and target["matches"] > 0
    # batches of 25 rotate through the case families, a tensor-parallel world after each single-rank one
    cases = {family: counts["cases"] for family, counts in target["families"].items() if counts["cases"]}
    assert cases == {"qk_norm_cases": 25, "qk_norm_tp_cases[tp_world=2]": 25, "with_mutations": 10}
    assert {world: counts["cases"] for world, counts in target["tp_worlds"].items()} == {"1": 35, "2": 25}
    assert target["tp_worlds"]["2"]["matches"] >= 25  # every case keeps a must-match instance
    assert target["violations"] == [] and target["cases_per_min"] > 0
    assert data["real_models"] == []
    out = capsys.readouterr().out
    assert "summary" in out and "qk_norm" in out and "cases/min" in out
    assert data["status"] == "finished" and data["profile"] == "ci" and data["versions"]["torch"]


def test_one_rotation_covers_every_tp_world():
    from pmverify._job.targets import load

    names = [name for name, _ in load("qk_norm").families]
    assert names == [
        "qk_norm_cases",
        "qk_norm_tp_cases[tp_world=2]",
        "with_mutations",
        "qk_norm_tp_cases[tp_world=4]",
        "with_mutating_custom_ops",
        "qk_norm_tp_cases[tp_world=8]",
    ]


def test_fuzz_finds_fault_and_exits_1(tmp_path, capsys):
    report = tmp_path / "r.json"
    code = main(
        [
            "fuzz",
            "--target",
            "QKNormWrongRoundingOrder",
            "--max-examples",
            "200",
            "--no-real-model",
            "--report",
            str(report),
            "--repro-dir",
            str(tmp_path / "repro"),
        ]
    )
    assert code == 1
    violations = json.loads(report.read_text())["targets"][0]["violations"]
    assert violations and all(
        (tmp_path / "repro").samefile(p.rsplit("/", 1)[0]) for p in {v["reproducer"] for v in violations}
    )
    assert "FOUND" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["fuzz", "--budget", "-1"],
        ["fuzz", "--budget", "soon"],
        ["fuzz", "--max-examples", "0"],
        ["frobnicate"],
    ],
)
def test_bad_usage_exits_2(argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2


def test_unknown_target_exits_2(capsys):
    assert main(["fuzz", "--target", "nope", "--no-real-model"]) == 2
    assert "--target='nope' is unknown" in capsys.readouterr().err


def test_unwritable_report_exits_2_before_running(tmp_path, capsys):
    assert main(["fuzz", "--report", str(tmp_path), "--no-real-model"]) == 2
    assert "cannot be written" in capsys.readouterr().err


def test_fuzz_searches_a_fault_in_its_own_families(tmp_path, capsys):
    """A fault outside the QK-norm domain is fuzzed on its bank row's cases; the real-model check,
    which builds passes from a QKNormConfig, is skipped with the reason."""
    report = tmp_path / "r.json"
    code = main(["fuzz", "--target", "AddmmDropsScalars", "--max-examples", "30", "--report", str(report)])
    data = json.loads(report.read_text())
    (target,) = data["targets"]
    assert set(target["families"]) == {"addmm_cases"}
    assert code == 1 and target["violations"][0]["oracle"] == "semantics"
    (model,) = data["real_models"]
    assert "not built from a QKNormConfig" in model["skipped"]
