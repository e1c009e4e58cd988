"""``pmverify fuzz --target`` with a user's pass or fuzz target sets up nothing of the shipped
QK-norm fusion (no Triton interpreter, no PMVERIFY_QK_NORM_IMPL, no import of pmverify.fusions),
in the job's process and in its worker's; a target's own set-up runs in the worker."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

HERE = pathlib.Path(__file__).parent


def _fuzz(tmp_path: pathlib.Path, *target: str, real_model: bool = False) -> tuple[subprocess.CompletedProcess, dict]:
    """Run ``pmverify fuzz`` on ``target`` in a fresh process without the QK-norm environment; the
    script fails unless the job's own process imported no fusion and set nothing up either."""
    report = tmp_path / "r.json"
    script = f"""
        import sys
        import pmverify.cli
        from _user_target import shipped_set_up
        code = pmverify.cli.main([
            "fuzz", *{list(target)!r}, *{[] if real_model else ["--no-real-model"]!r}, "--max-examples", "8", "--budget", "10m",
            "--progress", "plain",
            "--report", {str(report)!r}, "--db", {str(tmp_path / "db")!r}, "--repro-dir", {str(tmp_path)!r},
        ])
        assert not shipped_set_up(), shipped_set_up()
        sys.exit(code)
    """
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PMVERIFY_QK_NORM_IMPL")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True, timeout=300
    )
    return done, json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.parametrize(
    "target",
    [
        # the same job with a plain pass: in the slow step (each run is a fresh job and worker, ~10 s)
        pytest.param(("--target", "_user_target:untouched", "--cases", "_user_target:CASES"), marks=pytest.mark.slow),
        ("--target", "_user_target:target"),
    ],
    ids=["pass", "fuzz_target"],
)
def test_a_user_target_sets_up_nothing_of_the_shipped_pass(tmp_path, target):
    """The pass raises on a case (a violation) if its worker has the fusion set up; it rewrites
    nothing, so the one finding is the job's never_matched health check (exit 1)."""
    done, report = _fuzz(tmp_path, *target)
    assert done.returncode == 1, done.stdout + done.stderr
    (run,) = report["targets"]
    assert run["cases"] == 8 and not run["errors"], run
    assert [finding["kind"] for finding in run["findings"]] == ["never_matched"], run["findings"]
    assert report["real_models"] == []


def test_a_target_factory_is_told_from_a_pass_and_keeps_its_declarations():
    """In this process: ``module:function`` returning a FuzzTarget is the target (its families,
    its set-up run), with no --cases; a pass function (one graph argument) needs --cases."""
    from pmverify._job.targets import TargetError, load

    sys.path.insert(0, str(HERE))
    try:
        loaded = load("_user_target:target")
        assert [name for name, _ in loaded.families] == ["tiny_graphs"]
        assert os.environ.pop("PMVERIFY_TEST_USER_SET_UP") == "1"
        with pytest.raises(TargetError, match="declares its own families"):
            load("_user_target:target", "_user_target:CASES")
        with pytest.raises(TargetError, match="give its case strategy as --cases"):
            load("_user_target:untouched")
    finally:
        sys.path.remove(str(HERE))


@pytest.mark.slow  # end to end: runs in the slow step
def test_a_user_targets_extra_check_runs_in_its_worker_and_is_reported(tmp_path):
    done, report = _fuzz(tmp_path, "--target", "_user_target:checked", real_model=True)
    assert done.returncode == 1, done.stdout + done.stderr  # never_matched, as above
    (check,) = report["real_models"]
    assert check["name"] == "tiny_check" and check["ok"] and check["target"] == "_user_target:checked"
    assert check["checked"] == "needs_set_up" and check["set_up"] == "1"
    assert "real model: a check of the user's own" in done.stdout


def test_checking_the_targets_leaves_the_jobs_environment_as_it_was(monkeypatch):
    """The job resolves every target in its own process to refuse bad usage; what the targets'
    set-ups set there (qk_norm: TRITON_INTERPRET without a GPU) is undone, so that a user target's
    worker, started from the job's environment, does not inherit it."""
    from pmverify._job.targets import check

    monkeypatch.syspath_prepend(str(HERE))
    for name in ("TRITON_INTERPRET", "PMVERIFY_TEST_USER_SET_UP"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    check(["qk_norm", "_user_target:target"], None)
    assert dict(os.environ) == before


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"families": []}, "families=[]"),
        ({"families": "x"}, "families='x'"),
        ({"families": [42]}, "42 is not a (name, strategy) pair"),
        ({"families": [("a", 42)]}, "('a', 42) is not a (name, strategy) pair"),
        ({"set_up": 3}, "set_up=3): must be a callable"),
        ({"end_check": "no"}, "end_check='no'): must be an EndCheck"),
        ({"strict_order": "yes"}, "strict_order='yes'): must be a bool"),
    ],
)
def test_a_fuzz_target_of_the_wrong_kind_is_refused_naming_the_field(kwargs, message):
    from pmverify import FuzzTarget
    from pmverify.strategies import fx_graphs

    arguments = {"pass_": lambda graph: None, "families": [("graphs", fx_graphs(max_nodes=2))], **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        FuzzTarget(**arguments)


def test_a_strategy_given_as_families_is_refused():
    from pmverify import FuzzTarget
    from pmverify.strategies import fx_graphs

    with pytest.raises(ValueError, match=r"must be a non-empty list of \(name, strategy\) pairs"):
        FuzzTarget(lambda graph: None, fx_graphs())


def test_end_check_is_the_job_s_check_and_extra_check_its_deprecated_alias():
    """``extra_check`` names Inductor's match predicate only: a target's end-of-job check is
    ``end_check`` (``EndCheck``); the old keyword and class name still work, the keyword warns."""
    from pmverify import EndCheck, ExtraCheck, FuzzTarget
    from pmverify.strategies import fx_graphs

    check = EndCheck("tiny", "a tiny check", lambda pass_: {"ok": True})
    families = [("graphs", fx_graphs(max_nodes=2))]
    assert ExtraCheck is EndCheck
    assert FuzzTarget(lambda graph: None, families, end_check=check).end_check is check
    with pytest.warns(DeprecationWarning, match="end_check="):
        old = FuzzTarget(lambda graph: None, families, extra_check=check)
    assert old.end_check is check and old.extra_check is check
    with pytest.raises(ValueError, match="give end_check only"):
        FuzzTarget(lambda graph: None, families, end_check=check, extra_check=check)
