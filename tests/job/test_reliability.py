"""The fuzzing job survives what the passes it verifies do to it, and never loses a finding.

Passes of ``_crashing_passes`` segfault, exit, hang, corrupt the graph or raise; the job reports
each with a reproducer and goes on within its budget. A job killed with SIGKILL after a finding
leaves the database and the report holding it, and the next run replays it first, from a folder or
from a real redis-server on loopback (``.ci/run`` starts one; else one is started here).
"""

import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from _crashing_passes import HANGING_FILE_ENV

from pmverify.cli import main

HERE = pathlib.Path(__file__).parent
CASES = "_crashing_passes:CASES"


def _fuzz(tmp_path, *targets, db=None, name="r", extra=()):
    report = tmp_path / f"{name}.json"
    argv = ["fuzz", "--cases", CASES, "--report", str(report), "--repro-dir", str(tmp_path / "repro")]
    for target in targets:
        argv += ["--target", f"_crashing_passes:{target}"]
    argv += ["--db", str(db or tmp_path / "db"), "--no-real-model", "--progress", "plain", *extra]
    code = main(argv)
    return code, json.loads(report.read_text())


def _findings(report):
    return {target["name"].split(":")[1]: target["findings"] for target in report["targets"]}


@pytest.mark.slow
def test_crashes_hangs_and_malformed_graphs_are_findings_and_the_job_goes_on(tmp_path):
    code, report = _fuzz(
        tmp_path,
        "hangs",  # first: its timeout, then its shrinking (a timeout a candidate that hangs), take longest
        "segfault",
        "exits",
        "malformed_graph",
        "raises",
        # two at a time: the others go on while one worker hangs
        extra=["--budget", "300", "--case-timeout", "10s", "--junit", str(tmp_path / "j.xml"), "--jobs", "2"],
    )
    assert code == 1 and report["status"] == "finished"
    # within its budget: every target was done (each family retired by its finding), none cut by it
    assert [target["stopped_at_budget"] for target in report["targets"]] == [None] * 5
    findings = _findings(report)
    assert {name: [f["kind"] for f in found] for name, found in findings.items()} == {
        "segfault": ["crash"],
        "exits": ["crash"],
        "hangs": ["timeout"],
        "malformed_graph": ["violation"],
        "raises": ["violation"],
    }
    message = {name: found[0]["violations"][0]["message"] for name, found in findings.items()}
    assert "SIGSEGV" in message["segfault"] and "exited with status 3" in message["exits"]
    # the worker's output, with faulthandler's Python stack of the segfault
    assert "Segmentation fault" in findings["segfault"][0]["log_tail"]
    assert "in segfault" in pathlib.Path(findings["segfault"][0]["log"]).read_text()
    assert "per-case timeout of 10s" in message["hangs"]
    # where the pass hung: the worker's Python stack, written before it was killed
    assert "in hangs" in findings["hangs"][0]["log_tail"]
    assert findings["hangs"][0]["stack"].splitlines()[0].endswith(" in hangs")  # its innermost frame first
    assert findings["malformed_graph"][0]["violations"][0]["oracle"] == "structure"
    # the job's last searches still shrink their findings before it ends; crashes and hangs are
    # shrunk too, each candidate in a process forked for it
    for name in ("malformed_graph", "raises", "segfault", "exits", "hangs"):
        assert findings[name][0]["shrunk"] and "fx_graphs: 1 ops" in findings[name][0]["case"], name
    assert "raises() cannot handle this graph" in message["raises"]
    for found in findings.values():
        assert pathlib.Path(found[0]["reproducer"]).is_file()
    restarts = {target["name"].split(":")[1]: target["worker_restarts"] for target in report["targets"]}
    assert restarts["segfault"] == restarts["exits"] == restarts["hangs"] == 1  # to write the reproducer
    assert restarts["malformed_graph"] == restarts["raises"] == 0  # an exception does not kill the worker
    assert (tmp_path / "j.xml").read_text().count("<failure") == 5


@pytest.mark.slow
def test_a_crash_reproducer_crashes_the_same_way_and_a_hang_one_exits_1_after_the_timeout(tmp_path):
    code, report = _fuzz(tmp_path, "hangs", "exits", extra=["--budget", "120", "--case-timeout", "10s"])
    assert code == 1
    runs = {}
    for name in ("exits", "hangs"):
        (finding,) = _findings(report)[name]
        runs[name] = subprocess.run(
            [sys.executable, finding["reproducer"]],
            env={**os.environ, "PYTHONPATH": str(HERE)},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert runs["exits"].returncode == 3
    # the very pass, imported by name; a hang stops at the timeout with its stack, exit 1
    assert "from _crashing_passes import hangs" in pathlib.Path(_findings(report)["hangs"][0]["reproducer"]).read_text()
    assert runs["hangs"].returncode == 1 and "in hangs" in runs["hangs"].stderr, runs["hangs"].stderr[-2000:]


@pytest.mark.slow
def test_kill_9_mid_run_keeps_database_and_report_and_the_next_run_replays_first(tmp_path):
    report = tmp_path / "r.json"
    job = subprocess.Popen(
        [sys.executable, "-m", "pmverify", "fuzz", "--cases", CASES, "--progress", "plain", "--no-real-model"]
        + ["--target", "_crashing_passes:segfault", "--target", "_crashing_passes:malformed_graph"]
        + ["--target", "_crashing_passes:identity", "--budget", "10m", "--checkpoint-every", "1s"]
        + ["--db", str(tmp_path / "db"), "--report", str(report), "--repro-dir", str(tmp_path / "repro")],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # so that the kill takes the workers too, as a scheduler's would
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                found = _findings(json.loads(report.read_text()))
            except (OSError, ValueError):  # not written yet (a half-written report is never seen)
                continue
            if found.get("segfault") and found.get("malformed_graph"):
                break
        else:
            pytest.fail("the job found nothing within 240 s")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    last = json.loads(report.read_text())
    assert last["status"] == "running" and {f["kind"] for f in _findings(last)["segfault"]} == {"crash"}
    assert any((tmp_path / "db").rglob("*")), "the example database holds the findings"

    code, again = _fuzz(tmp_path, "segfault", "malformed_graph", name="again", extra=["--budget", "120"])
    findings = _findings(again)
    assert code == 1
    for name in ("segfault", "malformed_graph"):
        (finding,) = findings[name]
        assert finding["replayed"], f"{name}: found by a new search, not replayed from the database"
        # shrunk when the killed job had not finished shrinking it; else known minimal: shrunk
        assert finding["shrunk"] and "fx_graphs: 1 ops" in finding["case"], name
    assert findings["segfault"][0]["kind"] == "crash"
    assert again["targets"][1]["families"][CASES]["batches"] == 1  # the replay, nothing after it
    # done before the budget: neither target was cut by it
    assert [target["stopped_at_budget"] for target in again["targets"]] == [None, None]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """``$PMVERIFY_TEST_REDIS_URL`` (``.ci/run`` starts a redis-server), else a redis-server started
    here on a free loopback port; skipped only outside CI when neither is there."""
    url = os.environ.get("PMVERIFY_TEST_REDIS_URL")
    if url:
        yield url
        return
    server = shutil.which("redis-server")
    if server is None:
        if os.environ.get("CI"):
            pytest.fail("CI must provide a redis-server (.ci/run installs and starts one)")
        pytest.skip("redis-server is not installed")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    folder = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_redis_database_shares_findings_between_runs(tmp_path, redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    code, first = _fuzz(tmp_path, "malformed_graph", db=redis_url, extra=["--budget", "120", "--no-shrink"])
    assert code == 1 and client.keys("*"), "the finding is in Redis"
    assert not _findings(first)["malformed_graph"][0]["shrunk"]
    # another machine: another folder, the same server
    code, second = _fuzz(tmp_path / "other", "malformed_graph", db=redis_url, extra=["--budget", "120"])
    (finding,) = _findings(second)["malformed_graph"]
    assert code == 1 and finding["replayed"]
    # saved unshrunk (--no-shrink), shrunk once replayed
    assert finding["shrunk"] and "fx_graphs: 1 ops" in finding["case"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fuzz", "--budget", "soon"], "--budget='soon' is not a duration"),
        (["fuzz", "--budget", "0s"], "--budget='0s' must be a positive"),
        (["fuzz", "--target", "nope"], "--target='nope' is unknown"),
        (["fuzz", "--db", "redis://127.0.0.1:1"], "cannot reach Redis at 127.0.0.1:1"),
        (["fuzz", "--db", "ftp://x"], "--db='ftp://x'"),
        (["fuzz", "--db", "/dev/null/db"], "'/dev/null/db' cannot be made a folder"),
        (["fuzz", "--repro-dir", "/dev/null/r"], "--repro-dir='/dev/null/r' cannot be made a folder"),
        (["fuzz", "--db", "redis://:s3cret@127.0.0.1:1/0"], "redis://:***@127.0.0.1:1/0"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(argv, message, capsys):
    """In the test's process (``pmverify.cli.main``, as ``python -m pmverify`` calls it: the next
    test runs that once)."""
    try:
        code = main([*argv, "--no-real-model"])
    except SystemExit as exit:  # argparse's own usage errors
        code = exit.code
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err
    assert out == ""


def test_bad_usage_from_the_command_line_is_one_line_and_exit_2():
    run = subprocess.run(
        [sys.executable, "-m", "pmverify", "fuzz", "--budget", "0s", "--no-real-model"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "--budget='0s' must be a positive" in lines[0], run.stderr
    assert run.stdout == ""


@pytest.mark.slow
def test_sigterm_finishes_the_report_as_interrupted(tmp_path):
    report = tmp_path / "r.json"
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        job = subprocess.Popen(
            [sys.executable, "-m", "pmverify", "fuzz", "--cases", CASES, "--target", "_crashing_passes:identity"]
            + ["--budget", "10m", "--checkpoint-every", "1s", "--no-real-model", "--progress", "plain"]
            + ["--db", str(tmp_path / "db"), "--report", str(report)],
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])},
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                if json.loads(report.read_text())["targets"][0]["cases"] > 0:
                    break
            except (OSError, ValueError, IndexError):
                continue
        job.send_signal(signal.SIGTERM)
        assert job.wait(60) == 130
        # multiprocessing's resource tracker (of the job's session) says what leaked once the job is gone
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _alive(job.pid):
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the job and its workers are gone: good
            os.killpg(job.pid, signal.SIGKILL)
    data = json.loads(report.read_text())
    (target,) = data["targets"]
    assert data["status"] == "interrupted" and target["cases"] > 0
    # the worker killed in its search was interrupted, not stopped at the budget's end (the signal
    # may come in the instant between two searches: then no worker was at work)
    lines = (tmp_path / "out").read_text()
    assert target["stopped_at_budget"] is None and "end of the budget" not in lines
    if target["interrupted_in"] is not None:
        assert target["interrupted_in"]["doing"] == "search"
        assert "interrupted: _crashing_passes:identity (_crashing_passes:CASES)" in lines
    assert "leaked semaphore" not in (tmp_path / "err").read_text()


def _alive(group):
    """Whether a process of the process group ``group`` is left."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _children(pid):
    """Pids whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.slow
def test_workers_die_with_the_job_even_when_only_the_job_is_killed(tmp_path):
    report = tmp_path / "r.json"
    hanging = tmp_path / "hanging"  # created by the hangs pass as it starts to hang
    job = subprocess.Popen(
        [sys.executable, "-m", "pmverify", "fuzz", "--cases", CASES, "--target", "_crashing_passes:hangs"]
        + ["--budget", "10m", "--case-timeout", "10m", "--no-real-model", "--progress", "plain"]
        + ["--db", str(tmp_path / "db"), "--report", str(report), "--repro-dir", str(tmp_path / "repro")],
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            HANGING_FILE_ENV: str(hanging),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not hanging.exists():
            time.sleep(0.5)
        assert hanging.exists(), "no worker reached the hanging case within 240 s"
        workers = [pid for pid in _children(job.pid) if "resource_tracker" not in _cmdline(pid)]
        assert workers, "the worker in the hanging case is not a child of the job"
        job.kill()  # the job alone, not its process group
        job.wait(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(pathlib.Path(f"/proc/{pid}").exists() for pid in workers):
            time.sleep(0.5)
        alive = [pid for pid in workers if pathlib.Path(f"/proc/{pid}/stat").exists() and _state(pid) != "Z"]
        assert not alive, f"workers {alive} outlived the job"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)


def _cmdline(pid):
    with contextlib.suppress(OSError):
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    return ""


def _state(pid):
    with contextlib.suppress(OSError, IndexError):
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return "gone"


@pytest.mark.slow
def test_a_user_module_imports_from_the_current_folder(tmp_path):
    """The console script (whose sys.path holds its own folder, not the current one) finds the
    user's MODULE:ATTRIBUTE next to where it runs, as python -m would."""
    (tmp_path / "userpass.py").write_text(
        "from pmverify.strategies import fx_graphs\n\ndef keep(graph):\n    pass\n\nCASES = fx_graphs(max_nodes=2)\n"
    )
    script = pathlib.Path(sys.executable).parent / "pmverify"
    run = subprocess.run(
        [str(script), "fuzz", "--target", "userpass:keep", "--cases", "userpass:CASES", "--max-examples", "3"]
        + ["--no-real-model", "--db", str(tmp_path / "db"), "--progress", "plain", "--strict-order"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    # it ran the cases: a pass that keeps every graph is then a never_matched finding, exit 1
    assert run.returncode == 1, run.stderr
    assert "NEVER MATCHED in userpass:keep: 3 cases, 0 rewritten" in run.stdout, run.stdout


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow  # about 8 s: the job imports its target (torch) before its first checkpoint
def test_ctrl_c_reports_the_run_interrupted(tmp_path):
    """Ctrl-C (SIGINT to the job's process group, workers too) while its workers start: exit 130,
    the report and console say "interrupted", never that the budget ended; no torch imported here."""
    report = tmp_path / "r.json"
    with open(tmp_path / "out", "w") as out:
        job = subprocess.Popen(
            [sys.executable, "-m", "pmverify", "fuzz", "--cases", CASES, "--target", "_crashing_passes:identity"]
            + ["--target", "_crashing_passes:hangs", "--budget", "10m", "--no-real-model", "--progress", "plain"]
            + ["--db", str(tmp_path / "db"), "--report", str(report), "--junit", str(tmp_path / "j.xml")],
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # a terminal's Ctrl-C reaches a job whose SIGINT is the default: a test suite run in the
            # background of a script (`.ci/run &`) ignores SIGINT, and its children would inherit that
            preexec_fn=_sigint_default,
        )
    try:
        deadline = time.monotonic() + 60
        while not report.exists() and time.monotonic() < deadline:  # the job's first checkpoint
            time.sleep(0.1)
        os.killpg(job.pid, signal.SIGINT)
        assert job.wait(60) == 130
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    data = json.loads(report.read_text())
    lines = (tmp_path / "out").read_text()
    assert data["status"] == "interrupted"
    assert [target["status"] for target in data["targets"]] == ["interrupted", "interrupted"]
    assert "budget ended" not in lines and "the job was interrupted" in lines, lines
    assert "summary (interrupted" in lines
