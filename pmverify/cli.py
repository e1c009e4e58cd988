"""pmverify command line: `pmverify fuzz` verifies a pass (the shipped QK-norm pass, a fault of
the bank, or your own) on random graphs within a time budget, crash-isolated; `pmverify audit`
checks every rewrite Inductor (or your pass module) registers, one by one; `pmverify selfcheck`
checks that pmverify catches every fault of its bank.

Exit status: fuzz 0 when nothing was found, 1 when something was (a target whose whole run rewrote
nothing included: a never_matched finding), 2 when nothing was but a target
could not be searched or checked no case, 130 when interrupted; selfcheck 0 when every fault was detected, 1 when one
escaped, 2 when none escaped but one could not run here; audit 1 when a rewrite has a finding, 0 otherwise, 130
when interrupted; 2 for bad usage (including an environment
the Triton kernels cannot run in, or an example database that cannot be reached).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from ._cli_parser import DURATION_OPTIONS, PROFILE_DEFAULTS, parser
from ._cli_parser import duration as _duration

__all__ = ["main"]

#: The shortest per-case timeout the profiles' defaults are cut to for a short budget (a fresh
#: worker's first case builds the pass, which takes seconds).
MIN_CASE_TIMEOUT_S = 30.0
#: About what a worker takes to start (torch, pmverify, Inductor's pattern matcher) on 2 cores.
WORKER_START_S = 10.0


def _parser() -> argparse.ArgumentParser:
    """The argument parser of ``pmverify`` (:mod:`._cli_parser`), described by this module's first paragraph."""
    return parser(" ".join(__doc__.split("\n\n")[0].split()))


def _summary(report: dict[str, Any], out: Any) -> None:
    print(f"\nsummary ({report['status']}, {report['elapsed_s']:.0f}s)", file=out)
    width = max([28, *(len(t["name"]) + 2 for t in report["targets"])])
    header = f"{'target':<{width}}{'cases':>8}{'matches':>9}{'findings':>10}{'restarts':>10}{'cases/min':>11}"
    print(header, file=out)
    print("-" * len(header), file=out)
    for target in report["targets"]:
        print(
            f"{target['name']:<{width}}{target['cases']:>8}{target['matches']:>9}{len(target['findings']):>10}"
            f"{target['worker_restarts']:>10}{target['cases_per_min']:>11.0f}",
            file=out,
        )
        if target.get("status") == "interrupted":
            unrun = target.get("unrun_families") or []
            print(f"  interrupted{'; not run: ' + ', '.join(unrun) if unrun else ''}", file=out)
        worlds = ", ".join(
            f"tp {world}: {counts['cases']} cases / {counts['matches']} matches"
            for world, counts in target["tp_worlds"].items()
        )
        if worlds:
            print(f"  {worlds}", file=out)
        for finding in target["findings"]:
            if finding["family"] is None:  # a finding of the whole run: never_matched
                print(f"  {finding['kind']}: {finding['violations'][0]['message']}", file=out)
                continue
            oracles = ", ".join(dict.fromkeys(v["oracle"] for v in finding["violations"]))
            print(
                f"  {finding['kind']} in {finding['family']} ({oracles}): {finding['reproducer'] or 'no reproducer'}",
                file=out,
            )
            for other in finding.get("other_failures") or ():
                label = f"{other['oracle']} ({other['oracle_kind']})" if other.get("oracle_kind") else other["oracle"]
                print(f"    also {label}, on another case: {other['reproducer'] or 'no reproducer'}", file=out)
        for error in target["errors"]:
            print(f"  error in {error['family'] or 'the worker'}: {error['message'].splitlines()[0]}", file=out)
    for model in report["real_models"]:
        name = f"{model.get('target', '')}: {model['name']}"
        if model.get("skipped"):
            print(f"{name}: skipped ({model['skipped']})", file=out)
        elif model.get("error"):
            print(f"{name}: NOT OK ({model['error']})", file=out)
        else:
            err = model["max_abs_err"]
            print(
                f"{name}: {model['matches']} matches, max |err| {'n/a' if err is None else f'{err:.3g}'}, "
                f"{'exact, ' if model.get('exact') else ''}{'ok' if model['ok'] else 'NOT OK'} "
                f"({model['elapsed_s']:.1f}s)",
                file=out,
            )


#: What :func:`_device` returns for a ``--device`` this machine lacks (its one line is printed).
_NO_DEVICE = object()


def _device(command: str, text: str | None) -> Any:
    """``--device`` (None: not given) as the device string every check runs on (``"cpu"``,
    ``"cuda:0"``: :func:`pmverify.device.require_device`'s, which also keys the example database),
    None when not given, or :data:`_NO_DEVICE` when this machine lacks it (one line on stderr,
    ``pmverify fuzz: --device='cuda': this machine has no CUDA device ...``). Imports torch only
    when given."""
    if text is None:
        return None
    from hypothesis.errors import InvalidArgument

    from .device import require_device
    from .errors import DeviceUnavailable

    try:
        return str(require_device("--device", text))
    except (DeviceUnavailable, InvalidArgument) as exc:
        print(f"pmverify {command}: {exc}", file=sys.stderr)
        return _NO_DEVICE


def fuzz(args: argparse.Namespace, out: Any = None) -> int:
    from . import _io, _settings
    from ._job import JobOptions, TargetError, format_duration, run_job
    from ._job.report import write_outputs
    from ._job.targets import DEFAULT_TARGET, check

    out = out if out is not None else sys.stdout
    device = _device("fuzz", getattr(args, "device", None))
    if device is _NO_DEVICE:
        return 2
    defaults = PROFILE_DEFAULTS[args.profile]
    budget = args.budget if args.budget is not None else _duration("--budget")(defaults["budget"])
    if args.case_timeout is not None:
        case_timeout = args.case_timeout
    else:  # the profile's, made short enough that a hang shows within the budget
        case_timeout = min(_duration("--case-timeout")(defaults["case_timeout"]), max(MIN_CASE_TIMEOUT_S, budget / 4))
    targets = args.target or [DEFAULT_TARGET]
    # A user's MODULE:ATTRIBUTE imports from the current folder, as with python -m (workers inherit it).
    if any(":" in name for name in targets) and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        check(targets, args.cases)
    except TargetError as exc:
        print(f"pmverify fuzz: {exc}", file=sys.stderr)
        return 2
    if args.db is not None:
        try:
            _settings.example_database(args.db)
        except ValueError as exc:
            print(f"pmverify fuzz: --db={_settings.redacted(args.db)!r}: {exc}", file=sys.stderr)
            return 2
    if not _outputs_ok("fuzz", [("--report", args.report), ("--junit", args.junit)]):
        return 2
    stdout = out  # where --report - goes, written once at the end; nothing else goes there then
    if any(_io.output_stream(path) == 1 for path in (args.report, args.junit) if path is not None):
        out = sys.stderr
    if not _folder_made("fuzz", args.repro_dir):  # (a --db folder is made by example_database above)
        return 2
    options = JobOptions(
        targets=targets,
        cases=args.cases,
        profile=args.profile,
        budget_s=budget,
        budget_text=format_duration(budget),
        max_examples=args.max_examples,
        seed=args.seed,
        db=args.db,
        report=args.report,
        junit=args.junit,
        repro_dir=args.repro_dir,
        case_timeout_s=case_timeout,
        batch=args.batch or defaults["batch"],
        checkpoint_s=args.checkpoint_every,
        shrink=not args.no_shrink,
        shrink_budget_s=args.shrink_budget,
        real_model=not args.no_real_model,
        progress=args.progress,
        jobs=args.jobs,
        strict_order=args.strict_order,
        device=device,
    )
    if case_timeout + WORKER_START_S >= budget:  # said once the usage is known good
        print(
            f"pmverify fuzz: note: the per-case timeout ({case_timeout:g}s) and a worker's start (about "
            f"{WORKER_START_S:g}s) do not fit in the budget ({budget:g}s): a hanging pass cannot be reported; "
            "give a shorter --case-timeout or a longer --budget",
            file=out,
        )
    report, code = run_job(options, out)
    _summary(report, out)
    for option, path in (("report", args.report), ("junit", args.junit)):
        if path is not None and _io.output_stream(path) is None:
            print(f"{option}: {path}", file=out)
    try:  # the streams, once: the job wrote only the files
        write_outputs(report, args.report, args.junit, streams=True, stdout=stdout)
    except OSError as exc:
        print(f"pmverify fuzz: the report was not written to its stream: {exc}", file=sys.stderr)
    return code


def _writable(command: str, path: pathlib.Path | None, option: str = "--report") -> bool:
    """Whether ``path`` (given as ``option``) can be written: a file, a path not there yet, or a
    stream (:func:`pmverify._io.validate_writable`); says why not in one line on stderr."""
    from . import _io

    if path is None:
        return True
    try:
        _io.validate_writable(path)
    except ValueError as exc:  # not a file: "'p' cannot be written: it is a FIFO, not a file; ..."
        print(f"pmverify {command}: {option}={exc}", file=sys.stderr)
        return False
    except OSError as exc:
        print(f"pmverify {command}: {option}={str(path)!r} cannot be written: {exc}", file=sys.stderr)
        return False
    return True


def _folder_made(command: str, path: pathlib.Path | None, option: str = "--repro-dir") -> bool:
    """Whether the folder ``path`` (given as ``option``; None: not given) is there or was made; says
    why not in one line on stderr."""
    from . import _io

    if path is None:
        return True
    try:
        _io.make_folder(path)
    except (OSError, ValueError) as exc:
        print(f"pmverify {command}: {option}={str(path)!r} cannot be made a folder: {exc}", file=sys.stderr)
        return False
    return True


def _outputs_ok(command: str, outputs: Sequence[tuple[str, pathlib.Path | None]]) -> bool:
    """Whether every output given (``(option, path)``, None: not given) can be written and no two
    of them are one stream or one file (one would overwrite the other); says why not in one line
    on stderr."""
    from . import _io

    given = [(option, path) for option, path in outputs if path is not None]
    if not all(_writable(command, path, option) for option, path in given):
        return False
    for i, (option, path) in enumerate(given):
        for other_option, other in given[i + 1 :]:
            both = f"{option}={str(path)!r} and {other_option}={str(other)!r}"
            stream, other_stream = _io.output_stream(path), _io.output_stream(other)
            if stream is not None and stream == other_stream:
                print(f"pmverify {command}: {both} are one stream: give one of them a file", file=sys.stderr)
                return False
            if stream is None and other_stream is None:
                if _io.output_file(path) == _io.output_file(other):
                    print(f"pmverify {command}: {both} are one file: give them two", file=sys.stderr)
                    return False
    return True


def audit(args: argparse.Namespace, out: Any = None) -> int:
    from . import _io
    from ._audit import run_command

    out = out if out is not None else sys.stdout
    args.device = _device("audit", getattr(args, "device", None))
    if args.device is _NO_DEVICE:
        return 2
    outputs = [("--report", args.report), ("--junit", args.junit), ("--markdown", args.markdown)]
    if not _outputs_ok("audit", outputs):
        return 2
    if not _folder_made("audit", args.repro_dir):
        return 2
    stdout = out  # where an output given as - goes, written once at the end; nothing else goes there then
    if any(_io.output_stream(path) == 1 for _, path in outputs if path is not None):
        out = sys.stderr
    return run_command(args, out, stdout)


def selfcheck(args: argparse.Namespace, out: Any = None) -> int:
    from . import _io
    from ._selfcheck import DEFAULT_MAX_EXAMPLES, load_bank, report, table
    from ._selfcheck import selfcheck as run_selfcheck
    from ._version import __version__

    out = out if out is not None else sys.stdout
    device = _device("selfcheck", getattr(args, "device", None))
    if device is _NO_DEVICE:
        return 2
    if device is not None and device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") == "1":
        print(
            "pmverify selfcheck: --device cuda runs the kernel faults' Triton kernels on the GPU, but TRITON_INTERPRET=1 "
            "would run them in Triton's interpreter: unset it",
            file=sys.stderr,
        )
        return 2
    try:  # the bank sets up its environment; a setting its passes cannot run with is bad usage
        BANK = load_bank()
    except (ValueError, RuntimeError) as exc:
        print(f"pmverify selfcheck: {exc}", file=sys.stderr)
        return 2
    unknown = [name for name in args.fault or () if name not in BANK]
    if unknown:
        print(f"pmverify selfcheck: --fault={unknown[0]!r} is unknown; choose from {', '.join(BANK)}", file=sys.stderr)
        return 2
    if not _writable("selfcheck", args.report):
        return 2
    stdout = out  # where --report - goes, at the end; nothing else goes there then
    if args.report is not None and _io.output_stream(args.report) == 1:
        out = sys.stderr
    max_examples = args.max_examples or DEFAULT_MAX_EXAMPLES
    names = list(dict.fromkeys(args.fault or BANK))
    print(
        f"pmverify {__version__}: selfcheck of {len(names)} fault(s), up to {max_examples} cases each (seed {args.seed}, "
        f"device {device or 'cpu'})",
        file=out,
        flush=True,
    )

    def progress(result: Any) -> None:
        found = f"after {result.examples} cases" if result.examples is not None else f"in {result.cases} cases"
        oracles = ", ".join(result.oracles) or result.error or "-"
        print(f"  {result.name}: {result.status} {found} ({result.seconds:.1f}s; {oracles})", file=out, flush=True)

    start = time.monotonic()
    results = run_selfcheck(
        names,
        max_examples=max_examples,
        seed=args.seed,
        repro_dir=args.repro_dir,
        shrink=not args.no_shrink,
        bank=BANK,
        on_fault=progress,
        device=device,
    )
    print("\n" + table(results), file=out)
    if args.report is not None:
        data = report(
            results,
            pmverify=__version__,
            seed=args.seed,
            max_examples=max_examples,
            shrink=not args.no_shrink,
            device=device or "cpu",
            elapsed_s=round(time.monotonic() - start, 3),
        )
        _io.write_output(args.report, json.dumps(data, indent=2) + "\n", stdout=stdout)
        if _io.output_stream(args.report) is None:
            print(f"report: {args.report}", file=out)
    if any(not r.detected and r.status != "error" for r in results):
        return 1  # an escape outranks a fault that could not be searched here
    return 2 if any(r.status == "error" for r in results) else 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _joined(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--budget -5s`` as ``--budget=-5s`` (any of :data:`DURATION_OPTIONS`): argparse
    takes a value starting with ``-`` (but for a negative number) for an option and says "expected
    one argument", where the option's own check says what is wrong with the value."""
    args = list(argv)
    for i in range(len(args) - 2, -1, -1):
        value = args[i + 1]
        if args[i] in DURATION_OPTIONS and value.startswith("-") and not value.startswith("--") and value != "-":
            args[i : i + 2] = [f"{args[i]}={value}"]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(_joined(argv))
    args.command_line = shlex.join(["pmverify", *argv])
    from . import _settings

    try:  # bad usage ends here, before torch is imported
        _settings.env_seed()
    except ValueError as exc:
        print(f"pmverify {args.command}: {exc}", file=sys.stderr)
        return 2
    # What a target needs set up (the shipped pass: Triton's interpreter without a GPU, before
    # triton is first imported) its fuzz target does, when the command resolves it: nothing
    # imported with this module imports torch._inductor, triton or a target.
    if args.command in ("fuzz", "audit"):
        command = fuzz if args.command == "fuzz" else audit
        if threading.current_thread() is not threading.main_thread():
            return command(args)
        # A scheduler's SIGTERM ends the job as Ctrl-C does: workers stopped, report finished.
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return command(args)
        except KeyboardInterrupt:  # before the job started (importing a target): nothing to report
            print(f"pmverify {args.command}: interrupted", file=sys.stderr)
            return 130
        finally:
            signal.signal(signal.SIGTERM, previous)
    if args.command == "selfcheck":
        return selfcheck(args)
    return 2  # pragma: no cover - argparse requires a command


if __name__ == "__main__":
    sys.exit(main())
