"""``pmverify audit``: every pattern entry of a pass module (Inductor's own by default) of the kinds
asked (``--kinds``: rewrites, graph and lowering handlers) recorded, then audited one by one in
crash-isolated workers: a rewrite by :func:`pmverify.check_rewrite` and planted into random graphs
with near misses, a graph handler by ``check_entry``; a status per entry, a table per kind and
module and per pass, JSON, JUnit and Markdown reports.

- :mod:`.sources`: what is audited (``inductor``, ``MODULE``, ``MODULE:ATTR``) and how a worker or
  a reproducer gets one rewrite back;
- :mod:`.check`: one rewrite's checks and status; :mod:`.worker`, :mod:`.job`: the processes;
- :mod:`.report`: the outputs.
"""

from __future__ import annotations

import collections
import fnmatch
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .check import STATUSES, check_one, planted_examples
from .job import AuditOptions, run_audit
from .sources import INDUCTOR, AuditedRewrite, SourceError, listing, record_source

__all__ = [
    "INDUCTOR",
    "STATUSES",
    "AuditOptions",
    "AuditedRewrite",
    "SourceError",
    "check_one",
    "list_rewrites",
    "run_audit",
    "run_command",
]


def list_rewrites(
    sources: Sequence[str], globs: Sequence[str] | None = None, kinds: Sequence[str] = ("replacement", "graph")
) -> list[AuditedRewrite]:
    """The entries of the ``kinds`` of ``sources`` (in order, each source's kind by kind, in
    registration order) whose name or ``module/name`` matches one of ``globs`` (``fnmatch``, or
    equal: a name such as ``gelu_mul[bfloat16, fwd_only]`` holds brackets, which ``fnmatch`` reads
    as a set; None: all). Raises :class:`SourceError` for a source that cannot be recorded, or
    records no entry of those kinds, or for globs that match none of the entries."""
    rewrites = [rewrite for spec in sources for rewrite in listing(spec, _recorded(spec, kinds))]
    if not globs:
        return rewrites
    chosen = [r for r in rewrites if any(_matches(r, g) for g in globs)]
    if not chosen:
        shown = ", ".join(r.label for r in rewrites[:3])
        raise SourceError(
            f"--rewrite={' '.join(globs)!r} matches none of the {len(rewrites)} entries of {', '.join(sources)} "
            f"(names such as {shown}; a glob is matched against NAME and MODULE/NAME)"
        )
    return chosen


def _recorded(spec: str, kinds: Sequence[str]) -> list[Any]:
    return record_source(spec, kinds=tuple(kinds))


def _matches(rewrite: AuditedRewrite, glob: str) -> bool:
    return glob in (rewrite.name, rewrite.label) or any(
        fnmatch.fnmatchcase(n, glob) for n in (rewrite.name, rewrite.label)
    )


def run_command(args: Any, out: TextIO, stdout: TextIO) -> int:
    """The body of ``pmverify audit`` (the command line parsed and its outputs checked by
    :mod:`pmverify.cli`): list the rewrites, audit them, print the table, write the reports to
    their streams. ``out``: where progress and the table go; ``stdout``: where ``-`` goes.
    Returns the exit status (2: a source that cannot be recorded, or globs matching nothing)."""
    from .._job.durations import format_duration
    from .._version import __version__
    from .report import summary, write_outputs

    sources = list(dict.fromkeys(args.modules or [INDUCTOR]))
    kinds = tuple(getattr(args, "kinds", None) or ("replacement", "graph"))
    # a user's module imports from the current folder, as with python -m (the workers inherit it)
    if any(spec != INDUCTOR for spec in sources) and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        rewrites = list_rewrites(sources, args.rewrite, kinds)
    except SourceError as exc:
        print(f"pmverify audit: {exc}", file=sys.stderr)
        return 2
    options = AuditOptions(
        sources=sources,
        kinds=kinds,
        max_examples=args.max_examples,
        seed=args.seed,
        jobs=args.jobs,
        timeout_s=args.timeout,
        budget_s=args.budget,
        budget_text=format_duration(args.budget) if args.budget is not None else None,
        repro_dir=pathlib.Path(args.repro_dir) if args.repro_dir is not None else None,
        report=args.report,
        junit=args.junit,
        markdown=args.markdown,
        command=args.command_line,
        reproducer_prelude=getattr(args, "reproducer_prelude", None),
        lowering_budget_s=getattr(args, "lowering_budget", None),
        device=getattr(args, "device", None),
    )
    skipped = sum(r.duplicate for r in rewrites)
    by_kind = collections.Counter(r.kind for r in rewrites)
    counts = ", ".join(f"{by_kind[kind]} {kind}" for kind in kinds if by_kind[kind])
    print(
        f"pmverify {__version__}: auditing {len(rewrites)} entries ({counts}) of {', '.join(sources)} "
        f"({len(rewrites) - skipped} to check, {skipped} not registered) with {args.jobs} job(s): "
        f"{args.max_examples} cases each, {planted_examples(args.max_examples)} planted on {options.device or 'cpu'} "
        f"(seed {args.seed}"
        f"{f', budget {options.budget_text}' if args.budget is not None else ''}, "
        f"per-rewrite timeout {format_duration(args.timeout)})",
        file=out,
        flush=True,
    )
    report, code = run_audit(options, rewrites, out)
    summary(report, out)
    for option, path in (("report", args.report), ("junit", args.junit), ("markdown", args.markdown)):
        if path is not None and _is_file(path):
            print(f"{option}: {path}", file=out)
    try:
        write_outputs(report, options, streams=True, stdout=stdout)
    except OSError as exc:
        print(f"pmverify audit: the report was not written to its stream: {exc}", file=sys.stderr)
    return code


def _is_file(path: Any) -> bool:
    from .._io import output_stream

    return output_stream(path) is None
