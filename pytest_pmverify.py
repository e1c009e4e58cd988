"""pmverify's pytest plugin: Hypothesis profiles for verifying passes, a seed pinned per test, a
shared example database, the ``slow`` / ``gpu`` / ``multiproc`` markers and a JSON session report.

Registered as the ``pmverify`` ``pytest11`` entry point. At load it imports the standard library,
pytest and Hypothesis only: torch when a collected test is marked ``gpu``, redis-py for a
``redis://`` database, pmverify never (``pmverify fuzz --profile`` imports :data:`PROFILES`,
:func:`load_profile` and :func:`example_database` from here; every pmverify report, the CLI's and
this plugin's, is written by :func:`write_output` after :func:`check_writable`; ``$PMVERIFY_SEED``
is read by :func:`env_seed`).

Options (group ``pmverify``):

- ``--pmverify-profile {ci,dev,nightly}``: load that profile (default ``$PMVERIFY_PROFILE``, else the
  ``pmverify_profile`` ini value, else none: Hypothesis' active profile stays). Loaded after
  Hypothesis' own ``--hypothesis-profile``; giving both is a usage error.
- ``--pmverify-seed N`` (default 0): under ``ci``, every Hypothesis test without its own ``@seed``
  runs from seed N, with the example database still on, and ``$PMVERIFY_SEED`` is N, so that
  ``pmverify.verify(..., seed=None)`` searches from it too. ``--hypothesis-seed`` turns this off.
- ``--pmverify-db DIR|redis://HOST:PORT[/N]``: the example database of the loaded profile.
- ``--pmverify-report PATH``: a JSON report of the session, written at its end by the controller
  (under xdist too), with every ``PassVerificationError`` as a finding: a file replaced atomically
  (a symlink's target), or ``-`` / ``/dev/stdout`` written after the terminal summary; a device,
  FIFO, socket or directory is a usage error.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import inspect
import json
import os
import platform
import re
import stat
import sys
import tempfile
import time
import urllib.parse
from typing import Any, TextIO

import pytest
from hypothesis import HealthCheck, Phase, Verbosity, is_hypothesis_test, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

__all__ = [
    "PROFILES",
    "check_writable",
    "env_seed",
    "example_database",
    "load_profile",
    "make_folder",
    "output_file",
    "output_stream",
    "profile_name",
    "redacted",
    "write_atomic",
    "write_output",
]

#: pmverify's Hypothesis profiles, by short name; registered as ``pmverify-<name>``.
PROFILES = ("ci", "dev", "nightly")
_MAX_EXAMPLES = {"ci": 15, "dev": 50, "nightly": 2000}
_SUPPRESSED = (HealthCheck.too_slow, HealthCheck.data_too_large)  # torch is slow; graphs are big
_MARKERS = (
    "slow: long-running tests (deselect with -m 'not slow')",
    "gpu: needs a CUDA GPU (skipped when torch.cuda.is_available() is False)",
    "multiproc: starts several processes (e.g. a gloo process world)",
)
_PLUMBING_MARKERS = {"parametrize", "usefixtures", "filterwarnings"}  # left out of the report
_GPU_SKIP = "needs a CUDA GPU: torch.cuda.is_available() is False"
_FINDING = "pmverify_finding"  # report.user_properties entry of a PassVerificationError
_STATE = pytest.StashKey[dict[str, Any]]()


def profile_name(name: str) -> str:
    """The Hypothesis name of pmverify's profile ``name`` (``"ci"`` → ``"pmverify-ci"``); raises
    ``ValueError`` for a name not in :data:`PROFILES`."""
    if name not in PROFILES:
        raise ValueError(f"profile={name!r} is not one of PROFILES={PROFILES}")
    return f"pmverify-{name}"


def _register_profiles() -> None:
    # From Hypothesis' "default" profile, not the active one: on CI Hypothesis loads its own "ci"
    # profile, whose derandomize=True and database=None must not leak into these.
    base = settings.get_profile("default")
    for name in PROFILES:
        settings.register_profile(
            profile_name(name),
            base,
            max_examples=_MAX_EXAMPLES[name],
            deadline=None,  # torch trips deadlines at random
            suppress_health_check=_SUPPRESSED,
            print_blob=name == "ci",
        )


_register_profiles()


def load_profile(name: str, *, database: ExampleDatabase | None = None) -> str:
    """Load pmverify's Hypothesis profile ``name`` (one of :data:`PROFILES`) and return the
    Hypothesis name of the profile loaded.

    - ``database``: an example database for it (see :func:`example_database`); default Hypothesis'
      own (``.hypothesis/examples``). Given, a profile ``pmverify-<name>-with-db`` is registered
      from ``pmverify-<name>`` and loaded.

    Raises ``ValueError`` for an unknown ``name``, ``TypeError`` for a ``database`` that is not an
    ``ExampleDatabase``. Example: ``load_profile("nightly", database=example_database("redis://ci:6379"))``.
    """
    loaded = profile_name(name)
    if database is not None:
        if not isinstance(database, ExampleDatabase):
            raise TypeError(f"database={database!r} must be a hypothesis.database.ExampleDatabase")
        settings.register_profile(f"{loaded}-with-db", settings.get_profile(loaded), database=database)
        loaded = f"{loaded}-with-db"
    settings.load_profile(loaded)
    return loaded


def redacted(spec: str) -> str:
    """``spec`` fit to print: a ``redis://user:password@host`` URL's password, and a
    ``?password=`` query value, replaced by ``***``."""
    if "://" not in spec:
        return spec
    url = urllib.parse.urlsplit(spec)
    if url.password is not None:
        url = url._replace(netloc=url.netloc.replace(f":{url.password}@", ":***@", 1))
    if url.query:
        query = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
        hidden = [(key, "***" if key.lower() == "password" else value) for key, value in query]
        url = url._replace(query=urllib.parse.urlencode(hidden, safe="*"))
    return urllib.parse.urlunsplit(url)


def env_seed() -> int | None:
    """``$PMVERIFY_SEED`` as an int (the seed of ``pmverify.verify(seed=None)``), None when it is
    unset or empty; raises ``ValueError`` (``"PMVERIFY_SEED='abc' is not an int ..."``) for anything
    else. Read by ``verify``, and checked when pytest and the ``pmverify`` command start."""
    text = os.environ.get("PMVERIFY_SEED", "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"PMVERIFY_SEED={text!r} is not an int (the seed of pmverify.verify(seed=None))") from None


def example_database(spec: str) -> ExampleDatabase:
    """The Hypothesis example database ``spec`` names: a directory (``DirectoryBasedExampleDatabase``)
    or ``redis://HOST:PORT[/N]`` (``RedisExampleDatabase``, after a ping: 2 s to connect, 5 s a
    command). Raises ``ValueError`` with a one-line message (naming no option) for an empty spec,
    a path that is a file or under one, another URL scheme, a bad Redis URL, redis-py not installed, or a Redis
    server that cannot be reached."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"the example database {spec!r} is empty: give a directory or redis://HOST:PORT[/N]")
    if "://" not in spec:
        if os.path.exists(spec) and not os.path.isdir(spec):
            raise ValueError(f"the example database {spec!r} is a file, not a directory")
        try:  # refused now: Hypothesis would fail to save into it silently
            make_folder(spec)
        except (OSError, ValueError) as exc:
            raise ValueError(f"the example database {spec!r} cannot be made a folder: {exc}") from None
        return DirectoryBasedExampleDatabase(spec)
    url = urllib.parse.urlsplit(spec)
    if url.scheme != "redis":
        raise ValueError(
            f"unsupported example database scheme {url.scheme!r}: give a directory or redis://HOST:PORT[/N]"
        )
    try:
        where = f"{url.hostname}:{url.port or 6379}"
    except ValueError as exc:  # a port that is not a number
        raise ValueError(f"bad Redis URL: {exc}") from None
    if not url.hostname or url.path.strip("/") and not url.path.strip("/").isdigit():
        raise ValueError(f"bad Redis URL: give redis://HOST:PORT[/N], N a database number (got host {url.hostname!r})")
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise ValueError("redis-py is not installed: pip install 'pmverify[redis]'") from None
    client = redis.Redis.from_url(spec, socket_connect_timeout=2, socket_timeout=5)
    try:
        client.ping()
    except (redis.exceptions.RedisError, OSError) as exc:
        client.close()
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"cannot reach Redis at {where}: {reason}") from None
    return RedisExampleDatabase(client)


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
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
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
    if seed is not None:
        state["env"]["PMVERIFY_SEED"] = os.environ.get("PMVERIFY_SEED")
        os.environ["PMVERIFY_SEED"] = str(seed)
    config.stash[_STATE] = state
    report = config.getoption("pmverify_report")
    if report and not hasattr(config, "workerinput"):  # the xdist controller, or no xdist
        path = report if output_stream(report) is not None else os.path.join(config.invocation_params.dir, report)
        try:  # refused now, not after the whole session has run
            check_writable(path)
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
                test = getattr(test, "__func__", test)  # a bound method: its function
                # What hypothesis.seed sets, less its database=None (as pmverify.verify does)
                if getattr(test, "_hypothesis_internal_use_seed", None) is None:
                    test._hypothesis_internal_use_seed = seed
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
        self.collect_errors: set[str] = set()

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
        }
        try:
            _write_json(self.path, data)
        except (OSError, ValueError) as exc:  # (ValueError: no longer a file)
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"pmverify: --pmverify-report={self.path} not written: {exc}", red=True)


# -- output paths: one writer for every report ------------------------------------------------------

_STREAMS = {"/dev/stdout": 1, "/dev/stderr": 2}
_FD_PATH = re.compile(r"/(?:dev|proc/self)/fd/(\d+)")
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def output_stream(path: str | os.PathLike[str]) -> int | None:
    """The file descriptor an output ``path`` names as a stream: 1 for ``-`` and ``/dev/stdout``, 2
    for ``/dev/stderr``, N for ``/dev/fd/N`` and ``/proc/self/fd/N``; None for any other path."""
    text = os.fspath(path)
    if text == "-":  # (./- is a file)
        return 1
    text = os.path.normpath(text)
    if text in _STREAMS:
        return _STREAMS[text]
    match = _FD_PATH.fullmatch(text)
    return int(match.group(1)) if match else None


def _not_a_folder(folder: str) -> str | None:
    """The nearest of ``folder`` and the folders above it that exists, when it is not a folder."""
    folder = os.path.abspath(folder)
    while not os.path.exists(folder):
        if os.path.dirname(folder) == folder:
            return None
        folder = os.path.dirname(folder)
    return None if os.path.isdir(folder) else folder


def make_folder(path: str | os.PathLike[str]) -> None:
    """Make the folder ``path`` and those above it. Raises ``ValueError`` (``"'/a/file.py' is not a
    folder"``) when it or one above it is there and is not a folder, ``OSError`` when it cannot be made."""
    blocking = _not_a_folder(os.fspath(path))
    if blocking is not None:
        raise ValueError(f"{blocking!r} is not a folder")
    os.makedirs(path, exist_ok=True)


def output_file(path: str | os.PathLike[str]) -> str:
    """The regular file an output at ``path`` replaces: ``path`` with its symlinks resolved (a
    dangling link's target too), so that a link stays a link and its target is written; a file, or
    a path that is not there yet.

    Raises ``ValueError`` (``"'p' cannot be written: it is a FIFO, not a file; ..."``, to follow
    an option's ``--report=``) for anything else: a stream (:func:`output_stream`), a directory, a
    device, a FIFO, a socket, a symlink loop, or a path under something that is not a folder.
    Nothing is opened or written.
    """
    text = os.fspath(path)
    refused = f"{text!r} cannot be written"
    if output_stream(text) is not None:
        raise ValueError(f"{refused} as a file: it is a stream")
    target = os.path.realpath(text)
    try:
        mode = os.lstat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        blocking = _not_a_folder(os.path.dirname(target))
        if blocking is not None:
            raise ValueError(f"{refused}: {blocking!r} is not a folder") from None
        return target
    if stat.S_ISREG(mode):
        return target
    if stat.S_ISLNK(mode):
        raise ValueError(f"{refused}: it is a symlink loop")
    what = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    where = f"it links to {target!r}, {what}" if target != os.path.abspath(text) else f"it is {what}"
    raise ValueError(f"{refused}: {where}, not a file; give a file (replaced whole), - or /dev/stdout")


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to the file ``path`` (its symlinks resolved, see :func:`output_file`) through a
    temporary file in the same folder and ``os.replace`` (parent folders made): a reader, or a process
    killed mid-write, sees the old file or the new one, never half of one. The file gets the mode
    ``open()`` would give it, not ``mkstemp``'s 0600. Raises ``ValueError`` for a path that is not a
    file (:func:`output_file`): a device, FIFO or directory is never replaced."""
    target = output_file(path)
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_output(path: str | os.PathLike[str], text: str, *, stdout: TextIO | None = None) -> None:
    """Write ``text`` to the output ``path``: through the stream it names (:func:`output_stream`;
    descriptor 1 is ``stdout``, default ``sys.stdout``, and 2 is ``sys.stderr``), else with
    :func:`write_atomic`. Shared by the plugin's report, ``pmverify fuzz``'s report and JUnit XML
    and ``pmverify selfcheck``'s report: a stream is written once, at the end, never replaced."""
    fd = output_stream(path)
    if fd is None:
        write_atomic(path, text)
        return
    stream = (stdout or sys.stdout) if fd == 1 else sys.stderr if fd == 2 else None
    if stream is None:
        with open(fd, "w", encoding="utf-8", closefd=False) as handle:
            handle.write(text)
        return
    stream.write(text)
    stream.flush()


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise unless the output ``path`` can be written: ``ValueError`` (see :func:`output_file`) for
    a path that is neither a file, nor one not there yet, nor a stream; ``OSError`` for a file that
    cannot be written (parent folders are made) or a stream whose descriptor is not open. Opens
    nothing that could block, and leaves no file behind that was not there. For refusing a report
    path before a long run, not after it."""
    fd = output_stream(path)
    if fd is not None:
        os.fstat(fd)
        return
    target = output_file(path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        handle = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        os.close(os.open(target, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
        return
    os.close(handle)
    os.unlink(target)


def _write_json(path: str, data: dict[str, Any]) -> None:
    write_output(path, json.dumps(data, indent=2, default=str) + "\n")
