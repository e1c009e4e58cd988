"""Output paths, one writer for every report pmverify writes (the pytest plugin's, ``pmverify
fuzz``'s report and JUnit XML, ``pmverify audit``'s and ``selfcheck``'s): streams (``-``,
``/dev/stdout``, ``/dev/fd/N``), files replaced atomically, folders made, paths refused before a long
run rather than after it. Standard library only (no torch, no pytest): the plugin and the command line
share it."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import tempfile
from typing import TextIO

__all__ = ["validate_writable", "make_folder", "output_file", "output_stream", "write_atomic", "write_output"]

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


def validate_writable(path: str | os.PathLike[str]) -> None:
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
