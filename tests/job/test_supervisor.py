"""The fuzzing job's supervisor logic, on a ``_Job`` whose workers are stand-ins: what a run that
checked nothing says and exits with, what an interrupt says, the per-target status lines."""

import dataclasses
import io
import json
import time
import types
import xml.etree.ElementTree as ET

import pytest

from pmverify._job import JobOptions
from pmverify._job.protocol import BatchRequest, CaseChecked, Rendered, RenderRequest
from pmverify._job.state import TargetRun
from pmverify._job.supervisor import _Job, _run
from pmverify._job.workers import WorkerState


class FakeWorker:
    """What the supervisor reads of a ``WorkerProcess``; no process behind it."""

    def __init__(self, state, job=None, case=None, since_s=0.0):
        self.state, self.job, self.case = WorkerState(state), job, case
        self.last_seen = self.job_start = time.monotonic() - since_s
        self.process = types.SimpleNamespace(is_alive=lambda: True)
        self.log = None
        self.killed = False

    def kill(self):
        self.killed = True

    def stop(self):
        self.killed = True

    def end(self):
        self.killed = True

    def done(self):
        self.state, self.job = WorkerState.IDLE, None

    def hang_stack(self):
        return None


@pytest.fixture
def make_job(tmp_path):
    """A ``_Job`` of targets named ``names`` (``search`` and the real-model check stubbed out by the
    tests), writing its report to ``tmp_path / "r.json"``; the Hypothesis profile it loads is
    restored."""
    from hypothesis import settings

    previous = settings.default

    def make(*names, **options):
        options = {"report": tmp_path / "r.json", "repro_dir": tmp_path, "real_model": False, **options}
        job = _Job(JobOptions(targets=list(names), progress="plain", **options), io.StringIO())
        for run in job.runs:
            run.families, run.keys = ["cases"], [b"key"]
            run.family_stats = {"cases": {"cases": 0, "batches": 0, "seconds": 0.0}}
        return job

    yield make
    settings.register_profile("test-restored", parent=previous)
    settings.load_profile("test-restored")


def _run_with(job, search):
    """``_run(job)`` with ``search`` in place of the job's search loop."""
    job.search = lambda: search(job)
    data, code = _run(job)
    return data, code, job.out.getvalue()


def test_a_run_whose_worker_was_still_starting_checked_nothing_and_exits_2(make_job):
    job = make_job("mod:Pass")
    job.runs[0].families = []  # never ready

    def search(job):
        job.runs[0].worker = FakeWorker("starting")

    data, code, out = _run_with(job, search)
    (target,) = data["targets"]
    assert code == 2 and data["status"] == "finished" and target["cases"] == 0
    assert "while its worker was starting" in target["no_cases_reason"]
    assert target["stopped_at_budget"]["doing"] == "starting" and target["interrupted_in"] is None
    assert "NO CASES checked in mod:Pass: the budget ended while its worker was starting" in out
    assert json.loads(job.options.report.read_text())["targets"][0]["no_cases_reason"] == target["no_cases_reason"]


def test_a_run_that_checked_cases_exits_0_and_says_nothing_of_it(make_job):
    job = make_job("mod:Pass")

    def search(job):
        job.runs[0].cases = 3

    data, code, out = _run_with(job, search)
    assert code == 0 and data["targets"][0]["no_cases_reason"] is None and "NO CASES" not in out


def test_one_target_that_checked_nothing_makes_the_run_exit_2(make_job):
    job = make_job("a:Pass", "b:Pass")

    def search(job):
        job.runs[0].cases = 3
        job.runs[1].worker = FakeWorker("busy", job=BatchRequest(0, 0, 25, False, 0.0), case=(0, b""), since_s=4)

    data, code, out = _run_with(job, search)
    assert code == 2
    assert [target["no_cases_reason"] for target in data["targets"]] == [
        None,
        "the budget ended during its first case (4s into it)",
    ]
    assert "stopped at the end of the budget: b:Pass (cases), 4s into a case" in out


def test_a_finding_still_exits_1_when_no_case_finished(make_job):
    job = make_job("mod:Pass")

    def search(job):
        job.runs[0].findings.append({"family": "cases", "kind": "crash", "violations": []})

    data, code, _ = _run_with(job, search)
    assert code == 1 and "crashed or hung its worker" in data["targets"][0]["no_cases_reason"]


def test_an_interrupt_is_not_the_end_of_the_budget(make_job):
    job = make_job("mod:Pass")

    def search(job):
        job.runs[0].cases = 7
        job.runs[0].worker = FakeWorker("busy", job=BatchRequest(0, 0, 25, True, 0.0), case=(0, b""), since_s=3)
        raise KeyboardInterrupt

    data, code, out = _run_with(job, search)
    (target,) = data["targets"]
    assert code == 130 and data["status"] == "interrupted"
    assert target["stopped_at_budget"] is None
    assert target["interrupted_in"] == {"doing": "replay", "family": "cases", "in_case_s": pytest.approx(3, abs=1)}
    assert "interrupted: mod:Pass (cases), 3s into a case" in out and "end of the budget" not in out


def test_an_interrupt_before_any_case_says_so(make_job):
    job = make_job("mod:Pass")

    def search(job):
        job.runs[0].worker = FakeWorker("busy", job=BatchRequest(0, 0, 25, False, 0.0))
        raise KeyboardInterrupt

    data, code, out = _run_with(job, search)
    assert code == 130
    assert data["targets"][0]["no_cases_reason"] == "the job was interrupted before it checked a case"
    assert "interrupted: mod:Pass (cases), between cases" in out


def test_an_interrupt_with_no_worker_at_work_is_an_interrupt_and_skips_the_unrun_families(make_job, tmp_path):
    # Ctrl-C between two searches, or while the first target's worker held the only turn: no worker
    # at work, yet the job was interrupted, not out of budget, and the families it never ran did not pass
    job = make_job("a:Pass", "b:Pass", junit=tmp_path / "j.xml")
    job.runs[1].families = ["cases", "more"]
    job.runs[1].family_stats = {name: {"cases": 0, "batches": 0, "seconds": 0.0} for name in ("cases", "more")}

    def search(job):
        job.runs[0].cases = job.runs[0].family_stats["cases"]["cases"] = 5
        raise KeyboardInterrupt

    data, code, out = _run_with(job, search)
    a, b = data["targets"]
    assert code == 130 and a["status"] == b["status"] == "interrupted"
    assert b["no_cases_reason"] == "the job was interrupted before it checked a case"
    assert "the budget ended" not in out and b["unrun_families"] == ["cases", "more"]
    assert "  interrupted; not run: cases, more" not in out  # the summary table is the CLI's
    junit = (tmp_path / "j.xml").read_text()
    assert junit.count('<skipped message="interrupted" />') == 2  # b's two families; a's ran 5 cases
    assert 'name="b:Pass" tests="2" skipped="2"' in junit


def test_a_target_done_before_the_interrupt_is_not_interrupted(make_job):
    job = make_job("mod:Pass")

    def search(job):
        job.runs[0].cases = job.runs[0].family_stats["cases"]["cases"] = 5
        job.runs[0].retired.add(0)
        raise KeyboardInterrupt

    data, code, _ = _run_with(job, search)
    assert code == 130 and data["targets"][0]["status"] == "done" and data["targets"][0]["unrun_families"] == []


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ({"failed": True, "families": []}, "its worker could not start"),
        ({"families": []}, "the budget ended before its worker started"),
        (
            {"stopped_at_budget": {"doing": "starting", "family": None, "in_case_s": None}},
            "while its worker was restarting",
        ),
        ({"errors": [{"family": "cases", "message": "boom"}], "retired": {0}}, "every family's search raised"),
        ({}, "the budget ended before it checked a case"),
        ({"cases": 1}, None),
    ],
)
def test_no_cases_reason(state, reason):
    run = TargetRun("t")
    run.families = ["cases"]
    for name, value in state.items():
        setattr(run, name, value)
    if reason is None:
        assert run.no_cases_reason() is None
    else:
        assert reason in run.no_cases_reason()


def test_status_lines_count_each_busy_target_and_label_the_totals(make_job):
    """Three targets, two at work: one searching, one restarting; the third idle."""
    job = make_job("a:P", "b:P", "c:P", jobs=2)
    a, b, c = job.runs
    a.cases, a.matches, a.findings = 10, 2, [{}]
    b.cases, b.restarts = 5, 1
    c.cases = 7
    a.worker = FakeWorker("busy", job=BatchRequest(0, 0, 25, False, 0.0))
    b.worker = FakeWorker("starting")
    c.worker = FakeWorker("idle")
    job.progress(force=True)
    (line,) = job.out.getvalue().splitlines()
    assert line.split("] ", 1)[1] == (
        "a:P (cases): 10 cases, 2 matches, 1 findings, 0 restarts | "
        "b:P (starting): 5 cases, 0 matches, 0 findings, 1 restarts | "
        f"all targets: 22 cases, 2 matches, 1 findings, 1 restarts ({line.rsplit('(', 1)[1]}"
    )


def _violation_finding(shrunk, choices, case="GraphCase(...)"):
    return {
        "target": "mod:Pass",
        "family": "cases",
        "kind": "violation",
        "violations": [{"oracle": "crash", "message": "boom", "nodes": []}],
        "case": case,
        "reproducer": None,
        "shrunk": shrunk,
        "replayed": True,
        "choices": choices,
    }


def test_a_shrunk_finding_takes_the_place_of_the_saved_one_and_is_marked_minimal(make_job):
    from hypothesis.database import InMemoryExampleDatabase

    from pmverify._job.shrink import minimal_key

    job = make_job("mod:Pass")
    job.database = InMemoryExampleDatabase()
    (run,) = job.runs
    job.found(run, _violation_finding(False, b"big"))
    assert set(job.database.fetch(b"key")) == {b"big"}
    job._shrunk(run, _violation_finding(True, b"small", case="GraphCase(fx_graphs: 1 ops)"))
    assert set(job.database.fetch(b"key")) == {b"small"}
    assert set(job.database.fetch(b"key.secondary")) == {b"big"}  # as Hypothesis keeps a case it shrank
    assert set(job.database.fetch(minimal_key(b"key"))) == {b"small"}
    (finding,) = run.findings
    assert finding["shrunk"] and finding["case"] == "GraphCase(fx_graphs: 1 ops)" and "choices" not in finding


def test_a_finding_shrunk_only_as_far_as_the_budget_let_it_is_not_marked_minimal(make_job):
    from hypothesis.database import InMemoryExampleDatabase

    from pmverify._job.shrink import minimal_key

    job = make_job("mod:Pass")
    job.database = InMemoryExampleDatabase()
    (run,) = job.runs
    job.found(run, _violation_finding(False, b"big"))
    job._shrunk(run, _violation_finding(False, b"smaller"))
    assert set(job.database.fetch(b"key")) == {b"smaller"} and not list(job.database.fetch(minimal_key(b"key")))
    assert not run.findings[0]["shrunk"]


def _crashed(job, run, exit_code=-11):
    """What ``died`` leaves of a worker killed by SIGSEGV in a case of choices ``b"big"``."""
    worker = FakeWorker("busy", job=BatchRequest(0, 0, 25, False, 0.0), case=(0, b"big"))
    worker.process.exitcode = exit_code
    run.worker = worker
    job.died(run, "crash", "the worker process was killed by SIGSEGV (signal 11)")


def test_a_crash_is_shrunk_by_a_fresh_worker_within_the_budget(make_job):
    from hypothesis.database import InMemoryExampleDatabase

    from pmverify._job.shrink import minimal_key

    job = make_job("mod:Pass", case_timeout_s=15.0)
    job.database = InMemoryExampleDatabase()
    (run,) = job.runs
    _crashed(job, run)
    render = job._next_job(run)
    assert isinstance(render, RenderRequest)
    assert (render.family, render.choices, render.exit_code, render.timeout_s) == (0, b"big", -11, 15.0)
    assert render.stop_at == pytest.approx(time.time() + job.deadline - time.monotonic() - 2.0, abs=1)
    run.worker = FakeWorker("busy", job=render)
    rendered = Rendered(reproducer="/r.py", case="GraphCase(fx_graphs: 1 ops)", note=None, choices=b"small")
    job._handle(run, dataclasses.replace(rendered, shrunk=True))
    (finding,) = run.findings
    assert finding["shrunk"] and finding["reproducer"] == "/r.py" and "1 ops" in finding["case"]
    assert set(job.database.fetch(b"key")) == {b"small"} and set(job.database.fetch(minimal_key(b"key"))) == {b"small"}
    # the next run replays it: minimal already, its reproducer is written without shrinking
    run.findings.clear()
    _crashed(job, run)
    assert run.renders[0].finding["shrunk"] is False  # b"big" again: not minimal
    run.renders.clear()
    run.worker = FakeWorker("busy", job=BatchRequest(0, 0, 25, True, 0.0), case=(0, b"small"))
    run.worker.process.exitcode = -11
    job.died(run, "crash", "killed")
    assert run.renders[0].finding["shrunk"] is True and job._next_job(run).stop_at is None


@pytest.mark.parametrize("why", ["no-shrink", "after the budget", "exit code unknown"])
def test_a_crash_is_not_shrunk(make_job, why):
    job = make_job("mod:Pass", shrink=why != "no-shrink")
    (run,) = job.runs
    _crashed(job, run, exit_code=None if why == "exit code unknown" else -11)
    if why == "after the budget":
        job.status = "finishing"
    assert job._next_job(run).stop_at is None


def test_a_worker_that_dies_shrinking_a_crash_leaves_it_to_the_next_one_unshrunk(make_job):
    job = make_job("mod:Pass")
    (run,) = job.runs
    _crashed(job, run)
    render = job._next_job(run)
    assert render.stop_at is not None
    run.worker = FakeWorker("busy", job=render)
    run.worker.process.exitcode = -9
    job.died(run, "crash", "the worker process was killed by SIGKILL (signal 9)")
    (finding,) = run.findings
    assert (
        "not shrunk: the worker shrinking the case ended (the worker process was killed by SIGKILL" in finding["note"]
        and not finding["shrunk"]
    )
    again = job._next_job(run)
    assert again == dataclasses.replace(render, stop_at=None)  # drawn again, not shrunk


def test_a_target_whose_whole_run_rewrote_nothing_is_a_never_matched_finding(make_job, tmp_path):
    """Judged over every case of the run, not batch by batch: a target that rewrote in one case of
    its third batch is quiet; one that never rewrote is a finding (JSON, JUnit, summary, exit 1)."""
    from pmverify import VerifySummary
    from pmverify.cli import _summary

    job = make_job("a:Pass", "b:Pass", junit=tmp_path / "j.xml")

    def search(job):
        for run, rewrites in zip(job.runs, (0, 1), strict=True):
            for batch in range(3):
                run.worker = FakeWorker("busy", job=BatchRequest(0, batch, 25, False, 0.0))
                one = VerifySummary(
                    cases=1, rewritten_cases=rewrites * (batch == 2), planted_counts={"near miss (eps)": 1}
                )
                job._handle(run, CaseChecked(tp_world=1, matches=0, events=(), summary=one))
            run.worker = None

    data, code, out = _run_with(job, search)
    assert code == 1
    (finding,) = data["targets"][0]["findings"]
    assert finding["kind"] == "never_matched" and finding["family"] is None and data["targets"][1]["findings"] == []
    (violation,) = finding["violations"]
    assert violation["oracle"] == "never_matched"
    assert violation["message"].startswith("a:Pass on cases: the pass rewrote nothing in the 3 cases drawn")
    assert "planted ground truth: near miss (eps): 3" in violation["message"]
    assert "leave this target out of the run" in violation["message"]
    assert [t["rewritten_cases"] for t in data["targets"]] == [0, 1]
    assert "NEVER MATCHED in a:Pass: 3 cases, 0 rewritten, 0 void" in out
    junit = (tmp_path / "j.xml").read_text()
    assert '<testcase classname="pmverify.fuzz.a:Pass" name="whole run">' in junit
    assert '<failure message="never_matched: never_matched" type="never_matched">' in junit
    table = io.StringIO()
    _summary(data, table)
    assert "  never_matched: a:Pass on cases: the pass rewrote nothing" in table.getvalue()


def test_a_group_the_whole_run_never_rewrote_is_a_warning(make_job):
    """Judged over every case of the run (batches added up), less the groups the target's
    ``allow_unfused`` names (sent with its worker's ``Ready``): console and JSON, not a finding."""
    from pmverify import VerifySummary

    job = make_job("a:Pass", "b:Pass")
    job.runs[1].allow_unfused = frozenset({"dtype bfloat16"})

    def search(job):
        for run in job.runs:
            for batch in range(3):
                run.worker = FakeWorker("busy", job=BatchRequest(0, batch, 25, False, 0.0))
                groups = {"dtype float32": (2, 2, 1), "dtype bfloat16": (2, 0, 1)}
                one = VerifySummary(cases=1, rewritten_cases=1, groups=groups)
                job._handle(run, CaseChecked(tp_world=1, matches=1, events=(), summary=one))
            run.worker = None

    data, code, out = _run_with(job, search)
    assert code == 0 and data["targets"][0]["findings"] == []
    (text,) = data["targets"][0]["warnings"]
    assert text.startswith("0 of 6 bfloat16 instances rewritten over 3 cases (the pass rewrote 6 other instances)")
    assert f"WARNING in a:Pass: {text}" in out
    assert data["targets"][1]["warnings"] == [] and "WARNING in b:Pass" not in out


def test_batches_are_seeded_by_the_one_batch_seed(make_job):
    """The fuzz job's batches, as ``selfcheck``'s rotation and the audit's rewrites, are seeded by
    ``batch_seed``: golden values, so that a seed draws the same cases across releases."""
    import zlib

    from pmverify._audit.job import rewrite_seed
    from pmverify._audit.sources import AuditedRewrite
    from pmverify._engine.verify import batch_seed

    job = make_job("mod:Pass", seed=5)
    (run,) = job.runs
    run.replay_todo = [0]
    assert job._next_job(run).seed == 5  # the replay: the job's seed itself
    assert [job._next_job(run).seed for _ in range(3)] == [batch_seed(5, i) for i in range(3)]
    assert [batch_seed(5, i) for i in range(3)] == [500_015, 500_016, 500_017]
    rewrite = AuditedRewrite("inductor", "mod", "name", "fwd_only", False)
    assert rewrite_seed(5, rewrite) == batch_seed(5, zlib.crc32(f"inductor/{rewrite.label}".encode()))


def _dump(package):
    """faulthandler's dump of a worker hung in a pass, its parent-watching thread first."""
    return f"""Thread 0x00007f089cdea6c0 (most recent call first):
  File "/usr/lib/python3.11/multiprocessing/connection.py", line 947 in wait
  File "{package}/_job/workers.py", line 244 in watch
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f089ec6ab80 (most recent call first):
  File "/home/me/passes/slow.py", line 9 in spin
  File "/home/me/passes/slow.py", line 45 in __call__
  File "{package}/_apply.py", line 238 in run_pass
  File "{package}/_apply.py", line 281 in _apply_rank
  File "{package}/_apply.py", line 252 in apply_direct
  File "{package}/_check.py", line 313 in check_case
  File "{package}/_verify.py", line 449 in run_case
  File "{package}/_job/worker.py", line 355 in serve
  File "<string>", line 1 in <module>
"""


def test_hang_stack_is_the_innermost_frames_of_the_thread_that_ran_the_case():
    from pmverify._job.workers import _PACKAGE, hang_stack

    stack = hang_stack(_dump(_PACKAGE)).splitlines()
    assert stack[0] == 'File "/home/me/passes/slow.py", line 9 in spin'
    assert stack[2].endswith("in run_pass") and stack[3] == "... 6 outer frames"  # down to the pass's caller
    assert "watch" not in "\n".join(stack)
    assert hang_stack("no dump here") is None
    # a pass shipped with pmverify (the fault bank) is a pass, not the tool
    faults = hang_stack(_dump(_PACKAGE).replace("/home/me/passes", f"{_PACKAGE}/faults")).splitlines()
    assert faults[0].endswith("in spin") and faults[2].endswith("in run_pass")


def test_a_timeout_says_where_it_hung_on_the_console_in_the_report_and_in_junit(make_job, tmp_path):
    from pmverify._job.workers import _PACKAGE, WorkerProcess

    job = make_job("mod:Pass", junit=tmp_path / "j.xml")
    (run,) = job.runs
    worker = FakeWorker("busy", job=BatchRequest(0, 0, 25, False, 0.0), case=(0, None))
    worker.log = tmp_path / "worker.log"
    worker.log.write_text("started\n" + _dump(_PACKAGE))
    worker.dump_from = len("started\n")
    worker.hang_stack = types.MethodType(WorkerProcess.hang_stack, worker)
    worker.log_tail = types.MethodType(WorkerProcess.log_tail, worker)
    run.worker = worker
    job.died(run, "timeout", "a case did not finish within the per-case timeout of 10s")
    (finding,) = run.findings
    assert finding["stack"].splitlines()[0].endswith("line 9 in spin")
    out = job.out.getvalue()
    assert (
        "  where it hung (innermost frame first):" in out
        and '    File "/home/me/passes/slow.py", line 9 in spin' in out
    )
    assert json.loads(job.options.report.read_text())["targets"][0]["findings"][0]["stack"] == finding["stack"]
    failure = ET.fromstring((tmp_path / "j.xml").read_text()).find("testsuite/testcase/failure")
    assert 'where it hung (innermost frame first):\n  File "/home/me/passes/slow.py", line 9 in spin' in failure.text
