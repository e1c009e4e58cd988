"""The fuzzing job's small parts: durations, the JSON checkpoint and JUnit XML, target resolution."""

import json
import pathlib
import xml.etree.ElementTree as ET

import pytest

from pmverify._job import TargetError, format_duration, parse_duration
from pmverify._job.report import junit_xml, write_json
from pmverify._job.targets import check, load


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("30m", 1800), ("8h", 28800), ("1h30m", 5400), ("2.5h", 9000), ("1d", 86400)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "-1", "0", "inf", "nan", "30m1h", "1h1h", "h", "1 h", "1.2.3s"])
def test_parse_duration_refuses(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["-5s", "-1h30m", "-.5m", "-1d", "-1", "-0s"])
def test_a_negative_duration_is_said_to_be_one(text):
    with pytest.raises(ValueError, match=rf"^'{text}' must be a positive, finite duration$"):
        parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [(28800, "8h"), (5400, "1h30m"), (90, "1m30s"), (12.5, "12.5s")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def _report():
    finding = {
        "target": "t",
        "family": "cases",
        "kind": "crash",
        "violations": [{"oracle": "crash", "message": "the worker process was killed by SIGSEGV", "nodes": []}],
        "case": "GraphCase(...)",
        "reproducer": "/tmp/r.py",
        "other_failures": [
            {
                "oracle": "semantics",
                "violations": [{"oracle": "semantics", "message": "out: 3 elements differ", "nodes": []}],
                "case": "GraphCase(first)",
                "reproducer": "/tmp/s.py",
            }
        ],
    }
    return {
        "seed": 0,
        "profile": "ci",
        "budget_s": 60.0,
        "database": "db",
        "targets": [
            {
                "name": "t",
                "elapsed_s": 1.0,
                "families": {"cases": {"cases": 3, "seconds": 1.0}, "other": {"cases": 5, "seconds": 2.0}},
                "findings": [finding],
                "errors": [{"family": "other", "message": "ValueError: bad strategy\ntraceback"}],
            }
        ],
        "real_models": [{"name": "minimax_m2", "target": "t", "skipped": "not a QKNormConfig pass", "ok": True}],
    }


def test_junit_has_a_testcase_per_family_with_findings_and_errors():
    root = ET.fromstring(junit_xml(_report()))
    suite = root.find("testsuite[@name='t']")
    assert suite.get("tests") == "2" and suite.get("failures") == "1" and suite.get("errors") == "1"
    failure = suite.find("testcase[@name='cases']/failure")
    assert failure.get("type") == "crash" and "SIGSEGV" in failure.text and "/tmp/r.py" in failure.text
    # what shrinking left behind: another oracle's first failing case, under the finding
    assert failure.text.endswith(
        "also broken during the search, semantics (its first failing case, not shrunk): GraphCase(first)\n"
        "  semantics: out: 3 elements differ\n  reproducer: /tmp/s.py"
    )
    assert suite.find("testcase[@name='other']/error").get("message") == "ValueError: bad strategy"
    assert root.find("testsuite[@name='real_models']/testcase/skipped") is not None


def test_junit_shows_internal_errors_apart_from_failures():
    report = _report()
    report["targets"][0].update(
        internal_errors=2, first_internal_error="pmverify internal error in semantics: E\nTraceback"
    )
    suite = ET.fromstring(junit_xml(report)).find("testsuite[@name='t']")
    assert suite.get("failures") == "1" and suite.get("errors") == "1"  # not counted as either
    assert suite.find("system-err").text.startswith("2 pmverify internal error(s), not findings of the pass; first:")
    assert suite.find("system-err").text.endswith("Traceback")
    assert ET.fromstring(junit_xml(_report())).find("testsuite[@name='t']/system-err") is None


def test_junit_shows_warnings_apart_from_failures():
    report = _report()
    report["targets"][0]["warnings"] = ["0 of 6 bfloat16 instances rewritten over 5 cases"]
    suite = ET.fromstring(junit_xml(report)).find("testsuite[@name='t']")
    assert suite.get("failures") == "1" and suite.find("system-out").text == (
        "WARNING: 0 of 6 bfloat16 instances rewritten over 5 cases"
    )
    assert ET.fromstring(junit_xml(_report())).find("testsuite[@name='t']/system-out") is None


def test_write_json_replaces_atomically(tmp_path):
    path = tmp_path / "sub" / "report.json"
    write_json(path, {"a": float("nan"), "b": b"\x01"})
    write_json(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]  # no temporary file left


@pytest.mark.parametrize(
    ("names", "cases", "message"),
    [
        (["nope"], None, "--target='nope' is unknown"),
        (["_crashing_passes:segfault"], None, "give its case strategy as --cases"),
        (["no_such_module_xyz:Pass"], None, "cannot import no_such_module_xyz"),
        (["_crashing_passes:nothing"], None, "has no attribute nothing"),
        (["_crashing_passes:MIN_NODES"], None, "is int, not a pass"),
        (["_crashing_passes:segfault"], "_crashing_passes:MIN_NODES", "not a Hypothesis strategy"),
        (["_crashing_passes:segfault"], "nocolon", "must be MODULE:ATTRIBUTE"),
        (["qk_norm"], "_crashing_passes:CASES", "only for a user pass"),
    ],
)
def test_bad_targets_are_refused_in_one_line(names, cases, message):
    with pytest.raises(TargetError, match=message) as info:
        check(names, cases)
    assert "\n" not in str(info.value)


def test_user_target_loads_with_its_cases():
    target = load("_crashing_passes:identity", "_crashing_passes:CASES")
    assert target.families[0][0] == "_crashing_passes:CASES" and target.fuzz.end_check is None
    # its reproducers import the very object by name (an instance built with state would be lost)
    assert target.pass_source == "from _crashing_passes import identity\nPASS = identity"
    assert load("qk_norm").pass_source is None


def test_progress_is_plain_off_a_terminal_and_rich_on_request():
    import io

    from pmverify._job.progress import Display, make_display

    status = {
        "elapsed_s": 61.0,
        "budget_s": 120.0,
        "budget": "2m",
        "busy": [{"name": "t", "doing": "cases", "cases": 120, "matches": 7, "findings": 1, "restarts": 2}],
        "total": {"cases": 120, "matches": 7, "findings": 1, "restarts": 2},
    }
    plain = io.StringIO()
    display = make_display("auto", plain, 120.0)
    assert type(display) is Display
    display.status(status, force=True)
    display.line("FOUND in t")
    assert plain.getvalue().splitlines() == [
        "[   61.0s/2m] t (cases): 120 cases, 7 matches, 1 findings, 2 restarts | "
        "all targets: 120 cases, 7 matches, 1 findings, 2 restarts (118 cases/min)",
        "FOUND in t",
    ]
    live = io.StringIO()
    display = make_display("rich", live, 120.0)
    display.status(status)
    display.line("FOUND in t")
    display.close()
    assert "FOUND in t" in live.getvalue() and "120 cases" in live.getvalue()


def test_a_finding_the_database_cannot_take_is_still_reported(tmp_path):
    """A Redis server gone at the moment of a finding: the finding is reported, with the reason."""
    import io

    from hypothesis import settings

    from pmverify._job import JobOptions
    from pmverify._job.state import TargetRun
    from pmverify._job.supervisor import _Job

    class Gone:
        def save(self, key, value):
            raise ConnectionError("Redis went away")

    previous = settings.default
    try:
        job = _Job(JobOptions(targets=["t"], report=tmp_path / "r.json", repro_dir=tmp_path), io.StringIO())
    finally:
        settings.register_profile("test-restored", parent=previous)
        settings.load_profile("test-restored")
    job.database = Gone()
    run = TargetRun("t")
    run.families, run.keys = ["cases"], [b"key"]
    job.runs = [run]
    violation = {"oracle": "semantics", "message": "off by one", "nodes": []}
    job.found(
        run, {"family": "cases", "kind": "violation", "violations": [violation], "reproducer": None, "choices": b"\0"}
    )
    (finding,) = json.loads((tmp_path / "r.json").read_text())["targets"][0]["findings"]
    assert "could not be saved to the example database: ConnectionError: Redis went away" in finding["note"]
    assert "choices" not in finding and run.errors


def test_redis_passwords_are_not_shown():
    from pmverify._settings import redacted

    assert redacted("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert redacted("redis://user:s3cret@host/1") == "redis://user:***@host/1"
    assert redacted("redis://host:6379") == "redis://host:6379"
    assert redacted("some/folder") == "some/folder"
    assert redacted("redis://host/0?password=s3cret&x=1") == "redis://host/0?password=***&x=1"


def test_junit_drops_what_xml_cannot_hold():
    report = _report()
    report["targets"][0]["findings"][0]["violations"][0]["message"] = "boom \x1b[31mred\x1b[0m\x07 bell"
    report["targets"][0]["errors"][0]["message"] = "\x1b[1mValueError\x1b[0m: bad"
    root = ET.fromstring(junit_xml(report))  # parses
    assert "boom red bell" in root.find(".//failure").text
    assert root.find(".//error").get("message") == "ValueError: bad"


def test_database_keys_do_not_hold_memory_addresses():
    import functools

    from pmverify._engine.verify import database_key
    from pmverify.strategies import fx_graphs

    class Knob:
        pass

    def tuned(graph, knob):
        pass

    cases = fx_graphs(max_nodes=2)
    assert database_key(functools.partial(tuned, Knob()), cases) == database_key(
        functools.partial(tuned, Knob()), cases
    )


def test_a_finding_is_the_failure_hypothesis_shrank_and_lists_the_others_most_severe_first():
    import types

    from pmverify import Violation
    from pmverify._engine.verify import Failure
    from pmverify._job.worker import _finding

    strides = Violation("structure", "strides", kind="strides")
    dtype, semantics = Violation("structure", "dtype", kind="dtype/shape"), Violation("semantics", "values")
    shrunk = types.SimpleNamespace(violations=[strides], case="shrunk")
    first = types.SimpleNamespace(violations=[strides, semantics], case="first")
    other = types.SimpleNamespace(violations=[strides, dtype], case="other")
    # verify's order: most severe first; the job's search reported (shrank) the strides failure
    failures = [
        Failure(("semantics", ""), first, pathlib.Path("/tmp/s.py"), shrunk=False, first_only=True),
        Failure(("structure", "dtype/shape"), other, None, shrunk=False, first_only=True),
        Failure(("structure", "strides"), shrunk, pathlib.Path("/tmp/r.py")),
    ]
    error = types.SimpleNamespace(failures=failures)
    target = types.SimpleNamespace(name="t", families=[("cases", None)])
    finding = _finding(target, 0, shrunk, "/tmp/r.py", shrunk=True, replayed=False, choices=None, error=error).as_row()
    assert finding["violations"] == [
        {"oracle": "structure", "message": "strides", "nodes": [], "oracle_kind": "strides"}
    ]
    assert finding["other_failures"] == [
        {
            "oracle": "semantics",
            "oracle_kind": "",
            "violations": [{"oracle": "semantics", "message": "values", "nodes": []}],
            "case": "'first'",
            "reproducer": "/tmp/s.py",
            "shrunk": False,
        },
        {
            "oracle": "structure",
            "oracle_kind": "dtype/shape",
            "violations": [{"oracle": "structure", "message": "dtype", "nodes": [], "oracle_kind": "dtype/shape"}],
            "case": "'other'",
            "reproducer": None,
            "shrunk": False,
        },
    ]


def test_a_targets_findings_are_reported_most_severe_first():
    from pmverify._job.state import TargetRun

    run = TargetRun.__new__(TargetRun)
    rows = [
        ("crash", [{"oracle": "crash", "message": "killed", "nodes": []}]),
        ("violation", [{"oracle": "structure", "message": "s", "nodes": [], "oracle_kind": "strides"}]),
        ("violation", [{"oracle": "structure", "message": "d", "nodes": [], "oracle_kind": "dtype/shape"}]),
        ("violation", [{"oracle": "aliasing", "message": "a", "nodes": []}]),
        (
            "violation",
            [
                {"oracle": "structure", "message": "s", "nodes": [], "oracle_kind": "strides"},
                {"oracle": "semantics", "message": "v", "nodes": []},
            ],
        ),
    ]
    run.findings = [{"kind": kind, "violations": violations, "family": "f"} for kind, violations in rows]
    order = [finding["violations"][-1]["message"] for finding in run.ordered_findings()]
    assert order == ["v", "d", "a", "s", "killed"]


def test_a_fault_whose_bank_row_asks_for_strict_order_is_fuzzed_with_it(monkeypatch):
    import dataclasses

    from pmverify.faults import BANK, Fault

    class Unsorted:
        def __init__(self, config):
            self.config = config

    from pmverify.strategies import fx_graphs

    row = Fault(Unsorted, "left unsorted", ("structure",), lambda: [("graphs", fx_graphs(max_nodes=2))])
    monkeypatch.setitem(BANK, "PlainFault", row)
    monkeypatch.setitem(BANK, "UnsortedFault", dataclasses.replace(row, strict_order=True))
    assert load("UnsortedFault").strict_order and not load("PlainFault").strict_order
