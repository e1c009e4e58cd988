"""pmverify fuzz: exit codes, report, progress; the real model is covered by tests/fusions/test_qk_norm_real_model.py."""

import json

import pytest

from pmverify.cli import main


@pytest.mark.slow
def test_fuzz_clean_run_writes_report(tmp_path, capsys):
    report = tmp_path / "r.json"
    code = main(
        [
            "fuzz",
            "--max-examples",
            "60",
            "--budget",
            "15m",  # the case count ends the run, not the clock: under CI load 60 cases took more than the ci profile's 60 s
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
    # batches of 25 rotate through the case families, a tensor-parallel world after each single-rank
    # one, static families then dynamic ones (a symbolic token count)
    cases = {family: counts["cases"] for family, counts in target["families"].items() if counts["cases"]}
    assert cases == {"qk_norm_cases": 25, "qk_norm_tp_cases[tp_world=2]": 25, "qk_norm_cases[dynamic=True]": 10}
    assert {world: counts["cases"] for world, counts in target["tp_worlds"].items()} == {"1": 35, "2": 25}
    assert target["tp_worlds"]["2"]["matches"] >= 25  # every case keeps a must-match instance
    assert target["violations"] == [] and target["cases_per_min"] > 0
    assert data["real_models"] == []
    out = capsys.readouterr().out
    assert "summary" in out and "qk_norm" in out and "cases/min" in out
    assert data["status"] == "finished" and data["profile"] == "ci" and data["versions"]["torch"]


def test_one_rotation_covers_every_tp_world_static_and_dynamic():
    from pmverify._job.targets import load

    names = [name for name, _ in load("qk_norm").families]
    assert names == [
        "qk_norm_cases",
        "qk_norm_tp_cases[tp_world=2]",
        "qk_norm_cases[dynamic=True]",
        "qk_norm_tp_cases[tp_world=2,dynamic=True]",
        "with_mutations",
        "qk_norm_tp_cases[tp_world=4]",
        "with_mutating_custom_ops",
        "qk_norm_tp_cases[tp_world=8]",
    ]


@pytest.mark.slow  # end to end: runs in the slow step
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


@pytest.mark.parametrize("option", ["--budget", "--case-timeout", "--checkpoint-every", "--shrink-budget"])
@pytest.mark.parametrize("value", ["-5s", "-1h30m"])
def test_a_negative_duration_reaches_the_options_own_check(option, value, capsys):
    with pytest.raises(SystemExit) as info:
        main(["fuzz", option, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == f"pmverify fuzz: {option}='{value}' must be a positive, finite duration (see pmverify fuzz --help)\n"


def test_strict_order_reaches_the_job(monkeypatch):
    from pmverify import cli

    seen = []
    monkeypatch.setattr("pmverify._job.run_job", lambda options, out: seen.append(options) or ({}, 0))
    monkeypatch.setattr("pmverify._job.targets.check", lambda names, cases: None)
    monkeypatch.setattr(cli, "_summary", lambda report, out: None)
    assert main(["fuzz", "--strict-order", "--no-real-model", "--budget", "5m"]) == 0
    assert main(["fuzz", "--no-real-model", "--budget", "5m"]) == 0
    assert [options.strict_order for options in seen] == [True, False]


def test_the_shrink_budget_reaches_the_job_and_its_workers(monkeypatch):
    from pmverify import cli
    from pmverify._job.worker import serve_options

    seen = []
    monkeypatch.setattr("pmverify._job.run_job", lambda options, out: seen.append(options) or ({}, 0))
    monkeypatch.setattr("pmverify._job.targets.check", lambda names, cases: None)
    monkeypatch.setattr(cli, "_summary", lambda report, out: None)
    assert main(["fuzz", "--shrink-budget", "90s", "--no-real-model", "--budget", "5m"]) == 0
    assert main(["fuzz", "--no-real-model", "--budget", "5m"]) == 0
    assert [options.shrink_budget_s for options in seen] == [90.0, 180.0]
    assert serve_options(seen[0], None)["shrink_budget_s"] == 90.0
    # each worker's torch threads: its share of the cores (one per core each oversubscribes them)
    from pmverify._job.workers import threads_per_worker

    assert serve_options(seen[0], None)["threads"] == threads_per_worker(seen[0].jobs)


def test_only_a_duration_options_value_is_joined_to_it():
    from pmverify.cli import _joined

    argv = ["fuzz", "--budget", "-5s", "--seed", "-3", "--target", "-x", "--case-timeout", "--no-shrink"]
    assert _joined(argv) == ["fuzz", "--budget=-5s", "--seed", "-3", "--target", "-x", "--case-timeout", "--no-shrink"]


def test_every_duration_option_documents_days(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "1000")  # an option's help on one line
    with pytest.raises(SystemExit):
        main(["fuzz", "--help"])
    lines = capsys.readouterr().out.splitlines()
    for option in ("--budget", "--case-timeout", "--checkpoint-every", "--shrink-budget"):
        (at,) = [i for i, line in enumerate(lines) if line.strip().startswith(f"{option} DURATION")]
        help_text = " ".join(lines[at : at + 2])  # (a long option's help starts on the next line)
        assert "90s, 30m, 8h, 1h30m or 1d" in help_text, help_text


@pytest.mark.parametrize(("command", "bad"), [("fuzz", ["--target", "nope"]), ("selfcheck", ["--fault", "Nope"])])
def test_a_bad_pmverify_seed_is_refused_at_start_up(command, bad, monkeypatch, capsys):
    monkeypatch.setenv("PMVERIFY_SEED", "abc")
    assert main([command, *bad]) == 2  # the seed first (and without a job run if it were not checked)
    err = capsys.readouterr().err
    assert err == f"pmverify {command}: PMVERIFY_SEED='abc' is not an int (the seed of pmverify.verify(seed=None))\n"


@pytest.mark.slow  # end to end: runs in the slow step
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
