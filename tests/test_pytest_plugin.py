"""pytest_pmverify: profiles, example databases, options, header, markers, the pinned seed and the
JSON report, the last in small projects run by pytester in subprocesses (under xdist for the report)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

import pytest_pmverify
from pmverify._settings import PROFILES, example_database, load_profile, profile_name

pytest_plugins = ["pytester"]


@pytest.fixture
def restored_profile():
    previous = settings.get_current_profile_name()
    yield
    settings.load_profile(previous)


@pytest.fixture
def clean_env(monkeypatch):
    """The subprocess projects must not inherit this session's profile or seed."""
    for name in (
        "PMVERIFY_PROFILE",
        "PMVERIFY_SEED",
        "PMVERIFY_SHRINK_BUDGET",
        "HYPOTHESIS_PROFILE",
        "PYTEST_XDIST_AUTO_NUM_WORKERS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")


# -- import ----------------------------------------------------------------------------------------


def test_import_loads_neither_torch_nor_pmverify_beyond_its_torch_free_helpers():
    code = (
        "import sys, pytest_pmverify; print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'pmverify', 'redis')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert (
        out.stdout.strip()
        == "['pmverify', 'pmverify._compat', 'pmverify._io', 'pmverify._settings', 'pmverify._version', 'pmverify.lazy']"
    )


# -- profiles --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "max_examples"), [("ci", 15), ("dev", 50), ("nightly", 2000)])
def test_profiles_are_registered_with_their_settings(name, max_examples):
    profile = settings.get_profile(profile_name(name))
    assert profile_name(name) == f"pmverify-{name}"
    assert profile.max_examples == max_examples and profile.deadline is None and not profile.derandomize
    assert set(profile.suppress_health_check) >= {HealthCheck.too_slow, HealthCheck.data_too_large}
    assert profile.print_blob is (name == "ci")
    assert isinstance(profile.database, DirectoryBasedExampleDatabase)  # Hypothesis' default one
    assert PROFILES == ("ci", "dev", "nightly")


def test_profiles_do_not_inherit_hypothesis_ci_profile():
    """On CI (``CI`` set) Hypothesis loads its own ``ci`` profile (derandomize=True, no database)."""
    code = (
        "import pytest_pmverify; from hypothesis import settings; from hypothesis.database import "
        "DirectoryBasedExampleDatabase as D; p = settings.get_profile('pmverify-ci'); "
        "print(settings.get_current_profile_name(), p.derandomize, isinstance(p.database, D))"
    )
    env = {**os.environ, "CI": "true"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, timeout=60)
    assert out.stdout.split() == ["ci", "False", "True"]


@pytest.mark.parametrize("name", ["CI", "default", "", "pmverify-ci"])
def test_bad_profile_names_are_refused(name, restored_profile):
    with pytest.raises(ValueError, match=rf"profile={name!r} is not one of PROFILES=\('ci', 'dev', 'nightly'\)"):
        profile_name(name)
    with pytest.raises(ValueError, match="is not one of PROFILES"):
        load_profile(name)


def test_load_profile_with_and_without_a_database(tmp_path, restored_profile):
    assert load_profile("dev") == "pmverify-dev" and settings.default.max_examples == 50
    db = DirectoryBasedExampleDatabase(tmp_path)
    assert load_profile("nightly", database=db) == "pmverify-nightly-with-db"
    assert settings.default.database is db and settings.default.max_examples == 2000
    assert settings.get_profile("pmverify-nightly").database is not db  # the base profile is untouched
    with pytest.raises(TypeError, match="ExampleDatabase"):
        load_profile("ci", database=str(tmp_path))


# -- example databases -----------------------------------------------------------------------------


def test_a_directory_is_a_directory_database(tmp_path):
    db = example_database(str(tmp_path / "db"))
    assert isinstance(db, DirectoryBasedExampleDatabase)
    db.save(b"k", b"v")
    assert list(db.fetch(b"k")) == [b"v"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", r"the example database '' is empty: give a directory or redis://HOST:PORT\[/N\]"),
        ("  ", "is empty"),
        ("ftp://host/db", r"unsupported example database scheme 'ftp': give a directory or redis://"),
        ("redis://localhost:port", "bad Redis URL"),
        ("redis://localhost:6379/db", "bad Redis URL: give redis://HOST:PORT"),
    ],
)
def test_bad_database_specs_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        example_database(spec)


def test_a_file_is_not_a_directory_database(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        example_database(str(tmp_path / "f"))


def test_unreachable_redis_is_one_line_and_does_not_hang():
    outcome = []
    done = threading.Event()

    def connect():
        try:
            example_database("redis://127.0.0.1:1")
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome.append(exc)
        done.set()

    threading.Thread(target=connect, daemon=True).start()
    assert done.wait(60), "example_database kept trying an unreachable Redis for a minute"
    (error,) = outcome
    assert isinstance(error, ValueError) and str(error).startswith("cannot reach Redis at 127.0.0.1:1: ")
    assert "\n" not in str(error)
    assert "--" not in str(error)  # the CLI names its own option


def test_redis_py_missing_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis raises ImportError
    with pytest.raises(ValueError, match=r"^redis-py is not installed: pip install 'pmverify\[redis\]'$"):
        example_database("redis://127.0.0.1:6379")


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not on PATH")
def test_a_reachable_redis_is_a_redis_database(tmp_path):
    from hypothesis.extra.redis import RedisExampleDatabase

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                db = example_database(f"redis://127.0.0.1:{port}/2")
                break
            except ValueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        assert isinstance(db, RedisExampleDatabase)
        db.save(b"k", b"v")
        assert list(db.fetch(b"k")) == [b"v"]
    finally:
        server.terminate()
        server.wait(timeout=10)


# -- verify's default seed -------------------------------------------------------------------------


def test_verify_refuses_a_bad_pmverify_seed(monkeypatch):
    import pmverify
    from pmverify.fusions.qk_norm import QKNormFusionPass
    from pmverify.fusions.qk_norm.testing import qk_norm_cases

    monkeypatch.setenv("PMVERIFY_SEED", "zero")
    with pytest.raises(ValueError, match=r"PMVERIFY_SEED='zero' is not an int"):
        pmverify.verify(QKNormFusionPass, qk_norm_cases(), max_examples=1)


# -- options and header, in subprocess projects ------------------------------------------------------

DRAWS = """
import os

from hypothesis import given, strategies as st


def _record(name, value):
    with open(f"draws-{os.environ['RUN']}.txt", "a") as file:
        file.write(f"{name} {value!r} {os.environ.get('PMVERIFY_SEED')}\\n")


@given(st.integers(), st.text())
def test_draws(n, s):
    _record("function", (n, s))


class TestDraws:
    @given(st.floats(allow_nan=False))
    def test_method(self, x):
        _record("method", x)
"""


def _draws(pytester, monkeypatch, run, *args):
    monkeypatch.setenv("RUN", run)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    assert result.ret == 0, result.stdout.str()
    return (pytester.path / f"draws-{run}.txt").read_text().splitlines(), result


@pytest.mark.slow  # end to end: runs in the slow step
def test_the_ci_profile_pins_the_seed_per_test(pytester, clean_env, monkeypatch):
    pytester.makepyfile(test_draws=DRAWS)
    first, result = _draws(pytester, monkeypatch, "a", "--pmverify-profile", "ci")
    again, _ = _draws(pytester, monkeypatch, "b", "--pmverify-profile", "ci")
    other_seed, _ = _draws(pytester, monkeypatch, "c", "--pmverify-profile", "ci", "--pmverify-seed", "7")
    random_, random_result = _draws(pytester, monkeypatch, "d", "--pmverify-profile", "dev")
    random_again, _ = _draws(pytester, monkeypatch, "e", "--pmverify-profile", "dev")
    assert first == again and len(first) == 2 * 15  # a function and a method, 15 examples each
    assert all(line.endswith(" 0") for line in first)  # $PMVERIFY_SEED is the seed
    assert other_seed != first and all(line.endswith(" 7") for line in other_seed)
    assert random_ != random_again and all(line.endswith(" None") for line in random_)
    result.stdout.fnmatch_lines(["pmverify profile: ci (max_examples=15, from --pmverify-profile), seed 0, pinned*"])
    random_result.stdout.fnmatch_lines(["pmverify profile: dev (max_examples=50, *), seed random, database: *"])


def test_env_and_ini_pick_the_profile_and_hypothesis_profile_beats_them(pytester, clean_env, monkeypatch):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    pytester.makeini("[pytest]\npmverify_profile = nightly\n")
    pytester.runpytest_subprocess().stdout.fnmatch_lines(
        ["pmverify profile: nightly (max_examples=2000, from ini pmverify_profile), *"]
    )
    monkeypatch.setenv("PMVERIFY_PROFILE", "dev")
    pytester.runpytest_subprocess().stdout.fnmatch_lines(["pmverify profile: dev (*from PMVERIFY_PROFILE)*"])
    result = pytester.runpytest_subprocess("--pmverify-profile", "ci")
    result.stdout.fnmatch_lines(["pmverify profile: ci (*from --pmverify-profile)*"])
    result = pytester.runpytest_subprocess("--hypothesis-profile", "default")
    result.stdout.fnmatch_lines(["pmverify profile: none (Hypothesis' active profile: default), seed random, *"])


def test_bad_usage_is_a_usage_error(pytester, clean_env, monkeypatch):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("--hypothesis-profile", "default", "--pmverify-profile", "ci")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hypothesis-profile=default and --pmverify-profile=ci: pick one*"])
    result = pytester.runpytest_subprocess("--pmverify-db", "redis://127.0.0.1:1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--pmverify-db=redis://127.0.0.1:1: cannot reach Redis at 127.0.0.1:1: *"])
    monkeypatch.setenv("PMVERIFY_PROFILE", "fast")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*PMVERIFY_PROFILE='fast' is not one of ci, dev, nightly*"])


@pytest.mark.parametrize("args", [(), ("--pmverify-profile", "ci")], ids=["no profile", "ci sets its own"])
def test_a_bad_pmverify_seed_is_a_usage_error(pytester, clean_env, monkeypatch, args):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    monkeypatch.setenv("PMVERIFY_SEED", "abc")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*PMVERIFY_SEED='abc' is not an int (the seed of pmverify.verify(seed=None))"])


def test_the_shrink_budget_option_sets_verifys_cap_for_the_session(pytester, clean_env):
    pytester.makepyfile(
        test_one="import os\n\ndef test_one():\n    assert os.environ['PMVERIFY_SHRINK_BUDGET'] == '2.5'\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--pmverify-shrink-budget", "2.5")
    assert result.ret == pytest.ExitCode.OK


def test_a_verification_error_is_found_in_groups_and_causes():
    try:
        from builtins import ExceptionGroup
    except ImportError:  # Python 3.10: Hypothesis depends on the backport
        from exceptiongroup import ExceptionGroup

    error_cls = type("PassVerificationError", (AssertionError,), {"__module__": "pmverify._engine.verify"})
    error = error_cls("broke")
    assert pytest_pmverify._verification_error(error) is error
    assert pytest_pmverify._verification_error(ExceptionGroup("two", [ValueError(), error])) is error
    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = error
    assert pytest_pmverify._verification_error(wrapped) is error
    assert pytest_pmverify._verification_error(AssertionError("PassVerificationError")) is None


# -- the report, under xdist -------------------------------------------------------------------------

PROJECT = """
import json
import os

import pytest
import torch
from hypothesis import Phase, given, settings, strategies as st

import pmverify
from pmverify.faults import QKNormWrongRoundingOrder
from pmverify.fusions.qk_norm.testing import qk_norm_cases


@pytest.fixture(autouse=True)
def _no_shrinking():  # seconds, not the point here
    previous = settings.get_current_profile_name()
    settings.register_profile("unshrunk", settings.default, phases=[Phase.explicit, Phase.reuse, Phase.generate])
    settings.load_profile("unshrunk")
    yield
    settings.load_profile(previous)


def test_wrong_pass():
    checked, failing = [], None
    try:
        pmverify.verify(
            QKNormWrongRoundingOrder, qk_norm_cases(), repro_dir="repros", on_result=checked.append
        )
    except pmverify.PassVerificationError as error:
        failing = repr(error.case)
        raise
    finally:
        with open(f"verify-{os.environ['RUN']}.json", "w") as file:
            json.dump({"first": repr(checked[0].case), "first_ok": checked[0].ok, "failing": failing}, file)


@given(st.integers())
def test_plain(n):
    assert n == n


@pytest.mark.gpu
def test_on_gpu():
    assert torch.cuda.is_available()


@pytest.mark.slow
def test_slow():
    pass


@pytest.mark.xfail(reason="a known bug")
def test_known_bug():
    assert False


@pytest.fixture
def broken():
    raise RuntimeError("setup fails")


def test_setup_error(broken):
    pass
"""


@pytest.mark.slow
def test_report_under_xdist_holds_the_finding_and_the_database_replays_it(pytester, clean_env, monkeypatch):
    pytester.makepyfile(test_project=PROJECT)
    report = pytester.path / "out" / "report.json"
    args = ("-n", "2", "--pmverify-profile", "ci", "--pmverify-report", str(report), "-p", "no:cacheprovider", "-rs")
    monkeypatch.setenv("RUN", "1")
    result = pytester.runpytest_subprocess(*args, timeout=240)
    gpu = importlib.metadata.version("torch") and pytest_pmverify._cuda_available()
    result.assert_outcomes(passed=3 if gpu else 2, failed=1, skipped=0 if gpu else 1, xfailed=1, errors=1)
    versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in ("pmverify", "torch", "hypothesis"))
    assert versions.split(", ")[0] in result.stdout.str() and versions.split(", ")[1] in result.stdout.str()
    result.stdout.fnmatch_lines(
        ["pmverify profile: ci (max_examples=15, from --pmverify-profile), seed 0, pinned per test*"]
    )
    assert result.stdout.str().count("pmverify profile:") == 1  # the controller's header only
    if not gpu:
        result.stdout.fnmatch_lines(["SKIPPED *test_project.py:* needs a CUDA GPU: torch.cuda.is_available() is False"])

    data = json.loads(report.read_text())
    assert data["profile"] == "ci" and data["seed"] == 0 and data["exitstatus"] == pytest.ExitCode.TESTS_FAILED
    assert data["torch"] == importlib.metadata.version("torch") and data["pmverify"] == pmverify_version()
    assert data["counts"] == {
        "passed": 3 if gpu else 2, "failed": 1, "skipped": 0 if gpu else 1, "error": 1, "xfailed": 1, "xpassed": 0
    }  # fmt: skip
    tests = {test["nodeid"].split("::")[-1]: test for test in data["tests"]}
    assert tests["test_on_gpu"]["markers"] == (["gpu"] if gpu else ["gpu", "skip"])
    assert tests["test_slow"]["markers"] == ["slow"] and tests["test_wrong_pass"]["outcome"] == "failed"
    assert tests["test_known_bug"]["outcome"] == "xfailed" and tests["test_known_bug"]["markers"] == ["xfail"]
    assert tests["test_setup_error"]["outcome"] == "error" and tests["test_setup_error"]["when"] == "setup"
    [finding] = data["findings"]
    assert finding["nodeid"].endswith("test_project.py::test_wrong_pass")
    assert finding["pass"] == "QKNormWrongRoundingOrder" and finding["violations"]
    assert {v["oracle"] for v in finding["violations"]} <= {"semantics", "structure"}
    assert os.path.isabs(finding["reproducer"]) and os.path.isfile(finding["reproducer"])
    assert data["started"] <= data["finished"] and data["duration_s"] > 0

    examples = pytester.path / ".hypothesis" / "examples"
    assert any(path.is_file() for path in examples.rglob("*")), "the failure was not saved"
    first = json.loads((pytester.path / "verify-1.json").read_text())
    monkeypatch.setenv("RUN", "2")
    result = pytester.runpytest_subprocess(*args[2:], timeout=240)  # without xdist this time
    result.assert_outcomes(passed=3 if gpu else 2, failed=1, skipped=0 if gpu else 1, xfailed=1, errors=1)
    second = json.loads((pytester.path / "verify-2.json").read_text())
    data = json.loads(report.read_text())
    assert data["counts"]["failed"] == 1 and [f["pass"] for f in data["findings"]] == ["QKNormWrongRoundingOrder"]
    # float32 first (no rounding to get wrong), then a wrong case; the second run, from the same
    # seed, starts from that case: the database's
    assert first["first_ok"] and first["failing"] != first["first"]
    assert not second["first_ok"] and second["first"] == first["failing"]


def pmverify_version():
    return importlib.metadata.version("pmverify")


def test_a_redis_password_is_not_printed(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q", "--pmverify-db"]
        + ["redis://:s3cretPW@127.0.0.1:1/0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 4 and "redis://:***@127.0.0.1:1/0" in run.stderr
    assert "s3cretPW" not in run.stdout + run.stderr


# -- the gpu marker: only for a project that opted in ----------------------------------------------

GPU_PROJECT = """
import pytest

@pytest.mark.gpu
def test_marked_gpu():
    pass
"""


@pytest.mark.parametrize(
    ("args", "opted_in"),
    [((), False), (("--pmverify-profile", "dev"), True), (("--pmverify-report", "r.json"), True)],
)
def test_gpu_tests_are_skipped_only_in_a_project_that_opted_in(
    pytester, clean_env, monkeypatch, restored_profile, args, opted_in
):
    monkeypatch.setattr(pytest_pmverify, "_cuda_available", lambda: False)  # (in-process run: no GPU either way)
    pytester.makepyfile(test_gpu_project=GPU_PROJECT)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(**({"skipped": 1} if opted_in else {"passed": 1}))


def test_gpu_tests_are_skipped_under_the_ini_profile(pytester, clean_env, monkeypatch, restored_profile):
    monkeypatch.setattr(pytest_pmverify, "_cuda_available", lambda: False)
    pytester.makeini("[pytest]\npmverify_profile = ci\n")
    pytester.makepyfile(test_gpu_project=GPU_PROJECT)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(skipped=1)


UNFUSED = """
import warnings

import pmverify


def test_search_with_a_group_never_rewritten():
    warnings.warn("verify(P, ...): 0 of 6 bfloat16 instances rewritten over 5 cases", pmverify.UnfusedWarning)


def test_other_warning():
    warnings.warn("not pmverify's", UserWarning)
"""


def test_the_report_lists_unfused_warnings_under_xdist(pytester, clean_env):
    pytester.makepyfile(test_unfused=UNFUSED)
    report = pytester.path / "report.json"
    result = pytester.runpytest_subprocess("-n", "2", "--pmverify-report", str(report), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, warnings=2)
    result.stdout.fnmatch_lines(["*UnfusedWarning: verify(P, ...): 0 of 6 bfloat16 instances rewritten*"])
    (warning,) = json.loads(report.read_text())["warnings"]
    assert warning["nodeid"].endswith("test_unfused.py::test_search_with_a_group_never_rewritten")
    assert warning["category"] == "UnfusedWarning" and warning["message"].startswith("verify(P, ...): 0 of 6")
