"""Report paths (``pmverify._io.output_file`` / ``output_stream`` / ``validate_writable`` /
``write_output``, shared by ``pmverify fuzz --report/--junit``, ``pmverify selfcheck --report`` and
``--pmverify-report``): a file or a new path is replaced atomically (a symlink's target), a stream
is written once at the end, anything else is refused up front. Run as root, in tmp_path only: a
FIFO, a socket and symlinks made there, never a real device node (``/dev/null`` is only stat-ed)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import signal
import socket
import stat
import xml.etree.ElementTree as ET

import pytest

from pmverify import _io, _settings
from pmverify._job.report import write_outputs
from pmverify.cli import main

pytest_plugins = ["pytester"]


@contextlib.contextmanager
def _within(seconds):
    """Fail, not hang, when the code under test blocks (opening a FIFO waits for a reader)."""

    def expire(signum, frame):
        raise TimeoutError(f"still blocked after {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _socket(path):
    """A Unix socket's file at ``path`` (it stays there once the socket is closed)."""
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
    return path


def _refused(tmp_path, kind):
    """A path of ``kind`` that is not a file, and what the refusal must say."""
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo")
        return tmp_path / "fifo", "it is a FIFO, not a file"
    if kind == "socket":
        return _socket(tmp_path / "sock"), "it is a socket, not a file"
    if kind == "directory":
        (tmp_path / "d").mkdir()
        return tmp_path / "d", "it is a directory, not a file"
    if kind == "under a file":
        (tmp_path / "file.py").write_text("")
        return tmp_path / "file.py" / "r.json", f"{str(tmp_path / 'file.py')!r} is not a folder"
    if kind == "link to a fifo":
        os.mkfifo(tmp_path / "fifo")
        (tmp_path / "r.json").symlink_to("fifo")
        return tmp_path / "r.json", f"it links to {str(tmp_path / 'fifo')!r}, a FIFO, not a file"
    assert kind == "symlink loop"
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    return tmp_path / "a", "it is a symlink loop"


REFUSED = ["fifo", "socket", "directory", "under a file", "link to a fifo", "symlink loop"]


def _kind(path):
    return stat.S_IFMT(os.lstat(path).st_mode)


# -- the shared writer -----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["r.json", "missing/folder/r.json"])
def test_a_file_or_a_path_not_there_yet_is_replaced_atomically(tmp_path, where):
    path = tmp_path / where
    if where == "r.json":
        path.write_text("old")
    _io.validate_writable(path)
    assert path.exists() == (where == "r.json")  # the check leaves no file that was not there
    _io.write_output(path, "new\n")
    assert path.read_text() == "new\n" and os.listdir(path.parent) == ["r.json"]  # no temporary file


@pytest.mark.parametrize("target", ["real.json", "missing/real.json"], ids=["to a file", "dangling"])
def test_a_symlink_stays_a_link_and_its_target_is_written(tmp_path, target):
    link = tmp_path / "r.json"
    link.symlink_to(target)
    if target == "real.json":
        (tmp_path / target).write_text("old")
    _io.validate_writable(link)
    assert _io.output_file(link) == str(tmp_path / target)
    _io.write_output(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == target and (tmp_path / target).read_text() == "new\n"


@pytest.mark.parametrize("kind", REFUSED)
def test_what_is_not_a_file_is_refused_and_left_alone(tmp_path, kind):
    path, message = _refused(tmp_path, kind)
    before = _kind(path) if os.path.lexists(path) else None
    with _within(10):
        for call in (_io.validate_writable, lambda p: _io.write_output(p, "{}")):
            with pytest.raises(ValueError, match="cannot be written") as info:
                call(path)
            assert str(info.value) == f"{str(path)!r} cannot be written: {message}" + (
                "; give a file (replaced whole), - or /dev/stdout" if "not a file" in message else ""
            )
    assert (_kind(path) if os.path.lexists(path) else None) == before


def test_dev_null_is_a_device_by_its_stat_alone():
    """Classified, never opened: ``output_file`` only stats the path."""
    before = os.stat("/dev/null")
    assert _io.output_stream("/dev/null") is None
    with pytest.raises(ValueError, match=r"'/dev/null' cannot be written: it is a character device, not a file"):
        _io.output_file("/dev/null")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_rdev, after.st_mode) == (before.st_rdev, before.st_mode)


@pytest.mark.parametrize(
    ("path", "fd"),
    [("-", 1), ("/dev/stdout", 1), ("/dev/stderr", 2), ("/dev/fd/5", 5), ("/proc/self/fd/7", 7)]
    + [("./-", None), ("r.json", None), ("/dev/stdin", None), ("/dev/fd", None)],
)
def test_streams_are_named_by_their_paths(path, fd):
    assert _io.output_stream(path) == fd


def test_a_stream_is_written_through_never_replaced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stdout = io.StringIO()
    _io.write_output("-", "{}\n", stdout=stdout)
    assert stdout.getvalue() == "{}\n" and os.listdir(tmp_path) == []
    read, write = os.pipe()
    try:
        _io.validate_writable(f"/dev/fd/{write}")
        _io.write_output(f"/dev/fd/{write}", "<x/>\n")
        assert os.read(read, 100) == b"<x/>\n"
    finally:
        os.close(read)
        os.close(write)
    with pytest.raises(OSError):  # a descriptor that is not open
        _io.validate_writable(f"/dev/fd/{write}")


def test_the_job_checkpoints_only_files_and_writes_streams_once_at_the_end(tmp_path, monkeypatch):
    report = {"targets": [], "real_models": [], "seed": 0}
    stdout = io.StringIO()
    monkeypatch.chdir(tmp_path)
    write_outputs(report, pathlib.Path("-"), tmp_path / "j.xml", streams=False, stdout=stdout)
    assert stdout.getvalue() == "" and ET.parse(tmp_path / "j.xml").getroot().tag == "testsuites"
    (tmp_path / "j.xml").unlink()
    write_outputs(report, pathlib.Path("-"), tmp_path / "j.xml", streams=True, stdout=stdout)
    assert json.loads(stdout.getvalue()) == report and not (tmp_path / "j.xml").exists()


def test_a_folder_under_a_file_is_said_to_be_one(tmp_path):
    (tmp_path / "file.py").write_text("")
    with pytest.raises(ValueError, match=rf"^{str(tmp_path / 'file.py')!r} is not a folder$"):
        _io.make_folder(tmp_path / "file.py" / "repro")
    with pytest.raises(ValueError, match=r"cannot be made a folder: .*file.py' is not a folder"):
        _settings.example_database(str(tmp_path / "file.py" / "db"))


# -- the CLI: refused up front, in one line, exit 2 --------------------------------------------------


@pytest.mark.parametrize("option", ["--report", "--junit"])
@pytest.mark.parametrize("kind", REFUSED)
def test_fuzz_refuses_what_is_not_a_file_in_one_line(tmp_path, capsys, kind, option):
    path, message = _refused(tmp_path, kind)
    with _within(30):
        assert main(["fuzz", option, str(path), "--no-real-model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pmverify fuzz: {option}={str(path)!r} cannot be written: {message}")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fuzz", "--repro-dir", "file.py/r"], "--repro-dir='file.py/r' cannot be made a folder: "),
        (["fuzz", "--repro-dir", "file.py"], "--repro-dir='file.py' cannot be made a folder: "),
        (
            ["fuzz", "--db", "file.py/db"],
            "--db='file.py/db': the example database 'file.py/db' cannot be made a folder: ",
        ),
        (["selfcheck", "--report", "file.py/r.json"], "--report='file.py/r.json' cannot be written: "),
    ],
)
def test_a_path_under_a_file_is_one_clear_line(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.py").write_text("")
    assert main([*argv, *(["--no-real-model"] if argv[0] == "fuzz" else [])]) == 2
    err = capsys.readouterr().err
    assert f"{message}{str(tmp_path / 'file.py')!r} is not a folder\n" in err and err.count("\n") == 1
    assert (tmp_path / "file.py").read_text() == ""


def test_selfcheck_refuses_a_fifo_and_a_socket(tmp_path, capsys):
    os.mkfifo(tmp_path / "fifo")
    sock = _socket(tmp_path / "sock")
    with _within(30):
        assert main(["selfcheck", "--report", str(tmp_path / "fifo")]) == 2
        assert main(["selfcheck", "--report", str(sock)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "it is a FIFO, not a file" in err[0] and "it is a socket, not a file" in err[1] and len(err) == 2


def test_selfcheck_report_to_stdout_is_the_whole_stdout(tmp_path, monkeypatch, capsys):
    """The searches stubbed out: what is checked is where the report and the table go."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("pmverify._selfcheck.selfcheck", lambda names, **kwargs: [])
    assert main(["selfcheck", "--fault", "AddmmDropsScalars", "--report", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["faults"] == [] and "0 of 0 faults detected" in err and os.listdir(tmp_path) == []


def test_fuzz_refuses_two_documents_on_one_stream(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # (code that took - for a file would write ./- here)
    assert main(["fuzz", "--report", "-", "--junit", "-", "--no-real-model"]) == 2
    assert "--report='-' and --junit='-' are one stream" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_fuzz_refuses_two_documents_in_one_file(tmp_path, capsys):
    (tmp_path / "link.json").symlink_to(tmp_path / "same.json")
    for junit in ("same.json", "link.json"):
        assert main(["fuzz", "--report", str(tmp_path / "same.json"), "--junit", str(tmp_path / junit)]) == 2
        assert "are one file: give them two" in capsys.readouterr().err
    assert not (tmp_path / "same.json").exists()


@pytest.mark.slow  # end to end: runs in the slow step
def test_fuzz_report_to_stdout_is_the_whole_stdout_and_a_linked_junit_stays_a_link(tmp_path, monkeypatch, capsys):
    """A real (short) job: the JSON report is written once, after the summary, alone on stdout
    (the progress and summary go to stderr); no checkpoint reaches it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "junit.xml").symlink_to("out/real.xml")
    argv = ["fuzz", "--report", "-", "--junit", str(tmp_path / "junit.xml"), "--max-examples", "3", "--budget", "10m"]
    argv += ["--no-real-model", "--db", str(tmp_path / "db"), "--repro-dir", str(tmp_path / "repro")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)  # one document, nothing else
    assert data["status"] == "finished" and data["targets"][0]["cases"] == 3
    assert "summary (finished" in err
    assert (tmp_path / "junit.xml").is_symlink()
    assert ET.parse(tmp_path / "out" / "real.xml").getroot().find("testsuite").get("name") == "qk_norm"


# -- the plugin ------------------------------------------------------------------------------------


@pytest.fixture
def project(pytester, monkeypatch):
    for name in ("PMVERIFY_PROFILE", "PMVERIFY_SEED", "HYPOTHESIS_PROFILE", "PYTEST_XDIST_AUTO_NUM_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    return pytester


def test_the_plugin_refuses_a_fifo_at_once(project):
    os.mkfifo(project.path / "fifo")
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--pmverify-report", "fifo", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--pmverify-report='*/fifo' cannot be written: it is a FIFO, not a file;*"])
    assert stat.S_ISFIFO(os.lstat(project.path / "fifo").st_mode)


def test_the_plugin_writes_a_links_target_and_a_stream_after_the_summary(project):
    (project.path / "r.json").symlink_to("out/real.json")
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--pmverify-report", "r.json", timeout=120)
    assert result.ret == 0 and (project.path / "r.json").is_symlink()
    assert json.loads((project.path / "out" / "real.json").read_text())["counts"]["passed"] == 1
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--pmverify-report", "-", timeout=120)
    lines = result.stdout.lines
    summary = max(i for i, line in enumerate(lines) if " passed in " in line)
    assert json.loads("\n".join(lines[summary + 1 :]))["counts"]["passed"] == 1
    assert sum(line == "{" for line in lines) == 1  # written once
