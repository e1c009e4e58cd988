"""pmverify's pytest plugin: Hypothesis profiles for verifying passes, a seed pinned per test, a
shared example database, the ``slow`` / ``gpu`` / ``multiproc`` markers and a JSON session report.

Registered as the ``pmverify`` ``pytest11`` entry point. At load it imports the standard library,
pytest, Hypothesis and pmverify's torch-free helpers only (:mod:`pmverify._settings`: the profiles,
the example database, ``$PMVERIFY_SEED``; :mod:`pmverify._io`: the one writer of every report; the
command line and the jobs use the same); torch when a collected test of a project that opted in is
marked ``gpu``, redis-py for a ``redis://`` database.

Options (group ``pmverify``):

- ``--pmverify-profile {ci,dev,nightly}``: load that profile (default ``$PMVERIFY_PROFILE``, else the
  ``pmverify_profile`` ini value, else none: Hypothesis' active profile stays). Loaded after
  Hypothesis' own ``--hypothesis-profile``; giving both is a usage error.
- ``--pmverify-seed N`` (default 0): under ``ci``, every Hypothesis test without its own ``@seed``
  runs from seed N, with the example database still on, and ``$PMVERIFY_SEED`` is N, so that
  ``pmverify.verify(..., seed=None)`` searches from it too. ``--hypothesis-seed`` turns this off.
- ``--pmverify-shrink-budget SECONDS``: ``$PMVERIFY_SHRINK_BUDGET`` for the session: each
  ``pmverify.verify`` search shrinks its failures for that long at most.
- ``--pmverify-db DIR|redis://HOST:PORT[/N]``: the example database of the loaded profile.
- ``--pmverify-report PATH``: a JSON report of the session, written at its end by the controller
  (under xdist too), with every ``PassVerificationError`` as a finding (each of its distinct
  failures, most severe first, with its reproducer, under ``failures``) and every
  ``pmverify.UnfusedWarning`` under ``warnings`` (a group of planted instances a search never
  rewrote, with the test's node id; pytest's own warnings summary shows them too): a file replaced atomically
  (a symlink's target), or ``-`` / ``/dev/stdout`` written after the terminal summary; a device,
  FIFO, socket or directory is a usage error.

Markers ``slow``, ``gpu``, ``multiproc`` are registered for every project; ``gpu`` tests are skipped
without a CUDA GPU only in a project that opted in (a pmverify profile from the option,
``$PMVERIFY_PROFILE`` or the ``pmverify_profile`` ini value, or ``--pmverify-db`` /
``--pmverify-report``): any project with pmverify installed loads this plugin.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import inspect
import json
import os
import platform
import sys
import time
from typing import Any

import pytest
from hypothesis import Phase, Verbosity, is_hypothesis_test, settings

from pmverify._compat import pin_seed
from pmverify._io import output_stream, validate_writable, write_output
from pmverify._settings import PROFILES, env_seed, env_shrink_budget, example_database, load_profile, redacted

__all__: list[str] = []  # hooks only; the helpers it shares live in pmverify._settings and pmverify._io

_MARKERS = (
    "slow: long-running tests (deselect with -m 'not slow')",
    "gpu: needs a CUDA GPU (skipped when torch.cuda.is_available() is False, in a project that opted in to "
    "pmverify's plugin: a pmverify profile or a --pmverify-* option)",
    "multiproc: starts several processes (e.g. a gloo process world)",
)
_PLUMBING_MARKERS = {"parametrize", "usefixtures", "filterwarnings"}  # left out of the report
_GPU_SKIP = "needs a CUDA GPU: torch.cuda.is_available() is False"
_FINDING = "pmverify_finding"  # report.user_properties entry of a PassVerificationError
_STATE = pytest.StashKey[dict[str, Any]]()


# -- options, profile, seed ------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pmverify", "pmverify (verifying pattern-matcher passes)")
    group.addoption(
        "--pmverify-profile",
        choices=PROFILES,
        default=None,
        help="load pmverify's Hypothesis profile: ci (15 examples a test, seed pinned per test), dev (50), "
        "nightly (2000); default $PMVERIFY_PROFILE, else the pmverify_profile ini value, else none",
    )
    group.addoption(
        "--pmverify-seed",
        type=int,
        default=0,
        metavar="N",
        help="the seed the ci profile pins on every Hypothesis test without its own @seed, and sets as "
        "$PMVERIFY_SEED for pmverify.verify (default 0)",
    )
    group.addoption(
        "--pmverify-shrink-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="bound the shrinking of each pmverify.verify search to SECONDS at most (sets "
        "$PMVERIFY_SHRINK_BUDGET; default verify's own, 180 s)",
    )
    group.addoption(
        "--pmverify-db",
        metavar="DIR|redis://HOST:PORT[/N]",
        default=None,
        help="example database for the loaded profile (default Hypothesis' .hypothesis/examples)",
    )
    group.addoption(
        "--pmverify-report", metavar="PATH", default=None, help="write a JSON report of the session to PATH"
    )
    parser.addini("pmverify_profile", "pmverify profile loaded when neither option nor env var names one", default="")


def _resolve_profile(config: pytest.Config) -> tuple[str | None, str]:
    """(profile, where it came from); a usage error for a bad value or two profiles on the command line."""
    given = config.getoption("pmverify_profile")
    hypothesis_given = config.getoption("hypothesis_profile", default=None)
    if given is not None:
        if hypothesis_given:
            raise pytest.UsageError(f"--hypothesis-profile={hypothesis_given} and --pmverify-profile={given}: pick one")
        return given, "--pmverify-profile"
    if hypothesis_given:  # on the command line: it beats the env var and the ini default
        return None, "--hypothesis-profile"
    env, ini = os.environ.get("PMVERIFY_PROFILE", ""), config.getini("pmverify_profile")
    for source, value in (("PMVERIFY_PROFILE", env), ("ini pmverify_profile", ini)):
        if value.strip():
            if value.strip() not in PROFILES:
                raise pytest.UsageError(f"{source}={value!r} is not one of {', '.join(PROFILES)}")
            return value.strip(), source
    return None, ""


@pytest.hookimpl(trylast=True)  # after Hypothesis' plugin loads --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    try:  # the user's: refused now, not inside every verify() (under ci it is replaced below)
        env_seed()
        env_shrink_budget()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    budget = config.getoption("pmverify_shrink_budget")
    if budget is not None and not 0 < budget < float("inf"):
        raise pytest.UsageError(f"--pmverify-shrink-budget={budget:g} is not a positive number of seconds")
    profile, source = _resolve_profile(config)
    database = None
    spec = config.getoption("pmverify_db")
    if spec is not None:
        try:
            database = example_database(spec)
        except ValueError as exc:
            raise pytest.UsageError(f"--pmverify-db={redacted(spec)}: {exc}") from None
    if profile is not None:
        load_profile(profile, database=database)
    elif database is not None:  # no pmverify profile: the active one, with this database
        name = f"{settings.get_current_profile_name()}-with-pmverify-db"
        settings.register_profile(name, settings.default, database=database)
        settings.load_profile(name)
    if profile is not None:
        _reapply_hypothesis_options(config)
    forced = config.getoption("hypothesis_seed", default=None)
    seed = config.getoption("pmverify_seed") if profile == "ci" and forced is None else None
    state = {"profile": profile, "source": source, "seed": seed, "forced_seed": forced, "env": {}, "db": spec}
    # Only a project that opted in to the plugin has its ``gpu`` tests skipped without a GPU: any
    # project with pmverify installed loads it, and its own ``gpu`` marker may mean something else.
    state["opted_in"] = profile is not None or spec is not None or bool(config.getoption("pmverify_report"))
    if seed is not None:
        state["env"]["PMVERIFY_SEED"] = os.environ.get("PMVERIFY_SEED")
        os.environ["PMVERIFY_SEED"] = str(seed)
    if budget is not None:
        state["env"]["PMVERIFY_SHRINK_BUDGET"] = os.environ.get("PMVERIFY_SHRINK_BUDGET")
        os.environ["PMVERIFY_SHRINK_BUDGET"] = repr(budget)
    config.stash[_STATE] = state
    report = config.getoption("pmverify_report")
    if report and not hasattr(config, "workerinput"):  # the xdist controller, or no xdist
        path = report if output_stream(report) is not None else os.path.join(config.invocation_params.dir, report)
        try:  # refused now, not after the whole session has run
            validate_writable(path)
        except ValueError as exc:  # "'p' cannot be written: it is a FIFO, not a file; ..."
            raise pytest.UsageError(f"--pmverify-report={exc}") from None
        except OSError as exc:
            raise pytest.UsageError(f"--pmverify-report={report} cannot be written: {exc}") from None
        config.pluginmanager.register(_Report(config, path), "pmverify-report")


def _reapply_hypothesis_options(config: pytest.Config) -> None:
    """Hypothesis' ``--hypothesis-verbosity`` and ``--hypothesis-explain`` derive from the profile
    active before ours: derive them again from ours."""
    extra: dict[str, Any] = {}
    if verbosity := config.getoption("hypothesis_verbosity", default=None):
        extra["verbosity"] = Verbosity[verbosity]
    if config.getoption("hypothesis_explain", default=False) and Phase.explain not in settings.default.phases:
        extra["phases"] = (*settings.default.phases, Phase.explain)
    if extra:
        name = f"{settings.get_current_profile_name()}-with-hypothesis-options"
        settings.register_profile(name, settings.default, **extra)
        settings.load_profile(name)


def pytest_unconfigure(config: pytest.Config) -> None:
    for name, value in config.stash.get(_STATE, {}).get("env", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seed = config.stash.get(_STATE, {}).get("seed")
    if seed is not None:
        for item in items:
            test = item.obj if isinstance(item, pytest.Function) else None
            if test is not None and is_hypothesis_test(test):
                pin_seed(getattr(test, "__func__", test), seed)  # (a bound method: its function)
    if not config.stash.get(_STATE, {}).get("opted_in"):
        return
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and not _cuda_available():
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=_GPU_SKIP))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# -- header ----------------------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _versions() -> dict[str, str]:
    names = ("pmverify", "torch", "triton", "hypothesis")
    return {"python": platform.python_version()} | {name: _version(name) for name in names}


def _database_text(state: dict[str, Any]) -> str:
    """``--pmverify-db`` as given (a Redis client's repr is hundreds of characters), else the
    active profile's database."""
    return redacted(state["db"]) if state.get("db") else repr(settings.default.database)


def _seed_text(state: dict[str, Any]) -> str:
    if state.get("forced_seed") is not None:
        return f"seed {state['forced_seed']} (--hypothesis-seed)"
    if state.get("seed") is not None:
        return f"seed {state['seed']}, pinned per test"
    return "seed random"


def pytest_report_header(config: pytest.Config) -> list[str]:
    if hasattr(config, "workerinput"):
        return []
    versions = _versions()
    state = config.stash.get(_STATE, {})
    if state.get("profile"):
        profile = f"{state['profile']} (max_examples={settings.default.max_examples}, from {state['source']})"
    else:
        profile = f"none (Hypothesis' active profile: {settings.get_current_profile_name()})"
    return [
        ", ".join(f"{name} {versions[name]}" for name in ("pmverify", "torch", "triton", "hypothesis")),
        f"pmverify profile: {profile}, {_seed_text(state)}, database: {_database_text(state)}",
    ]


# -- findings and the report -----------------------------------------------------------------------


def _verification_error(exc: BaseException | None, depth: int = 0) -> BaseException | None:
    """The ``pmverify.PassVerificationError`` in ``exc``: itself, in an exception group, or a cause."""
    if exc is None or depth > 8:
        return None
    cls = getattr(sys.modules.get("pmverify"), "PassVerificationError", None)
    if (isinstance(cls, type) and isinstance(exc, cls)) or any(
        c.__name__ == "PassVerificationError" and c.__module__.startswith("pmverify") for c in type(exc).__mro__
    ):
        return exc
    inner = getattr(exc, "exceptions", None)  # BaseExceptionGroup, or its backport
    for each in inner if isinstance(inner, (tuple, list)) else ():
        if (found := _verification_error(each, depth + 1)) is not None:
            return found
    return _verification_error(exc.__cause__, depth + 1)


def _finding(error: Any, nodeid: str) -> dict[str, Any]:
    pair = getattr(getattr(error, "result", None), "pair", None)
    pass_ = getattr(pair, "pass_", None)
    name = pass_.__qualname__ if inspect.isfunction(pass_) else type(pass_).__name__
    reproducer = getattr(error, "reproducer", None)
    return {
        "nodeid": nodeid,
        "pass": name,
        "violations": [{"oracle": str(v.oracle), "message": str(v.message)} for v in getattr(error, "violations", ())],
        "reproducer": os.path.abspath(reproducer) if reproducer else None,
        # every distinct failure, most severe first (the first is the one above), each its reproducer
        "failures": [
            {
                "failure": str(failure.label),
                "shrunk": bool(failure.shrunk),
                "reproducer": os.path.abspath(failure.reproducer) if failure.reproducer else None,
            }
            for failure in getattr(error, "failures", ())
        ],
    }


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    error = _verification_error(call.excinfo.value) if call.excinfo is not None else None
    if error is not None:
        # user_properties travel to the xdist controller (and into junitxml's <properties>)
        report.user_properties.append((_FINDING, _finding(error, item.nodeid)))
    if item.config.getoption("pmverify_report"):
        # an extra report attribute: pytest serialises it for xdist (TestReport(**extra))
        report.pmverify_markers = sorted({marker.name for marker in item.iter_markers()} - _PLUMBING_MARKERS)
    return report


def _is_pmverify_warning(category: Any) -> bool:
    """Whether ``category`` is one of pmverify's warning classes (``pmverify.PmverifyWarning``),
    told by its name and module: the plugin does not import pmverify's modules that hold it."""
    return isinstance(category, type) and any(
        cls.__name__ == "PmverifyWarning" and cls.__module__.startswith("pmverify") for cls in category.__mro__
    )


def _outcome(report: pytest.TestReport) -> str | None:
    """The outcome pytest's summary counts for ``report``, or None when it counts none."""
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            return "xpassed" if xfail else "passed"
        return "failed" if report.failed else "xfailed" if xfail else "skipped"
    if report.failed:
        return "error"
    return ("xfailed" if xfail else "skipped") if report.skipped else None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class _Report:
    """Collects the session on the controller and writes ``--pmverify-report``."""

    def __init__(self, config: pytest.Config, path: str) -> None:
        self.config, self.path = config, path
        self.started, self.clock = _now(), time.monotonic()
        self.tests: list[dict[str, Any]] = []
        self.findings: list[dict[str, Any]] = []
        self.warnings: list[dict[str, Any]] = []
        self.collect_errors: set[str] = set()

    def pytest_warning_recorded(self, warning_message: Any, when: str, nodeid: str, location: Any) -> None:
        if _is_pmverify_warning(getattr(warning_message, "category", None)):
            entry = {"nodeid": nodeid, "category": warning_message.category.__name__}
            self.warnings.append(entry | {"message": str(warning_message.message)})

    def pytest_sessionstart(self) -> None:
        self.started, self.clock = _now(), time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == _FINDING:
                self.findings.append(value)
        outcome = _outcome(report)
        if outcome is not None:
            self.tests.append(
                {
                    "nodeid": report.nodeid,
                    "outcome": outcome,
                    "when": report.when,
                    "duration_s": round(report.duration, 3),
                    "markers": list(getattr(report, "pmverify_markers", [])),
                }
            )

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed and report.nodeid not in self.collect_errors:  # xdist: once, not per worker
            self.collect_errors.add(report.nodeid)
            self.tests.append(
                {"nodeid": report.nodeid, "outcome": "error", "when": "collect", "duration_s": 0.0, "markers": []}
            )

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # around the terminal's: a stream gets it after the summary
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Any:
        try:
            return (yield)
        finally:
            self._write(exitstatus)

    def _write(self, exitstatus: int) -> None:
        state = self.config.stash.get(_STATE, {})
        counts = dict.fromkeys(("passed", "failed", "skipped", "error", "xfailed", "xpassed"), 0)
        for test in self.tests:
            counts[test["outcome"]] += 1
        data = _versions() | {
            "profile": state.get("profile"),
            "hypothesis_profile": settings.get_current_profile_name(),
            "max_examples": settings.default.max_examples,
            "seed": state.get("seed") if state.get("forced_seed") is None else state["forced_seed"],
            "database": _database_text(state),
            "started": self.started,
            "finished": _now(),
            "duration_s": round(time.monotonic() - self.clock, 3),
            "exitstatus": int(exitstatus),
            "counts": counts,
            "tests": self.tests,
            "findings": self.findings,
            "warnings": self.warnings,
        }
        try:
            _write_json(self.path, data)
        except (OSError, ValueError) as exc:  # (ValueError: no longer a file)
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"pmverify: --pmverify-report={self.path} not written: {exc}", red=True)


def _write_json(path: str, data: dict[str, Any]) -> None:
    write_output(path, json.dumps(data, indent=2, default=str) + "\n")
