"""The ``pmverify`` command line's argument parser (see :mod:`pmverify.cli`): one function per
subcommand, and the option types (durations, positive numbers, entry kinds) with their one-line
usage errors."""

from __future__ import annotations

import argparse
import pathlib
import re
from typing import Any, NoReturn

__all__ = ["DEVICE_HELP", "DURATION_OPTIONS", "PROFILE_DEFAULTS", "device", "parser", "duration"]

#: What ``--profile`` sets unless given: the Hypothesis profile ``pmverify-<name>`` the searches
#: run under, the time budget, cases per search (batch) and the per-case timeout.
PROFILE_DEFAULTS = {
    "ci": {"budget": "60s", "batch": 25, "case_timeout": "120s"},
    "dev": {"budget": "10m", "batch": 50, "case_timeout": "120s"},
    "nightly": {"budget": "8h", "batch": 100, "case_timeout": "300s"},
}

#: The options that take a DURATION: ``--budget -5s`` is read as ``--budget=-5s`` (see :func:`pmverify.cli._joined`).
DURATION_OPTIONS = (
    "--budget",
    "--case-timeout",
    "--checkpoint-every",
    "--timeout",
    "--shrink-budget",
    "--lowering-budget",
)
_DURATION_HELP = "a duration such as 90s, 30m, 8h, 1h30m or 1d, or a number of seconds"
_OUTPUT_HELP = (
    "PATH is a file (a symlink's target), replaced whole, or - or /dev/stdout, written once at the end "
    "while the rest of the output goes to stderr"
)


class _Parser(argparse.ArgumentParser):
    """Bad usage is one line on stderr (and exit status 2), not the usage block."""

    def error(self, message: str) -> NoReturn:
        # argparse's "argument --budget: --budget='0' must be ..." says the option twice
        message = re.sub(r"^argument (\S+): (?=\1=)", "", message)
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _positive(kind: type, name: str):
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name}={text!r} is not a{'n integer' if kind is int else ' number'}"
            ) from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{name}={text!r} must be positive and finite")
        return value

    return parse


def _kinds(text: str) -> tuple[str, ...]:
    """``--kinds``: a comma-separated list of :data:`pmverify._registry.entries.KINDS`, as a tuple in the
    order given, without repeats."""
    from ._registry.entries import KINDS

    kinds = tuple(dict.fromkeys(part.strip() for part in text.split(",")))
    bad = [kind for kind in kinds if kind not in KINDS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(
            f"--kinds={text!r} must be kinds among {', '.join(KINDS)}, comma-separated (e.g. replacement,graph)"
        )
    return kinds


#: ``--device``'s help, shared by the commands that take it.
DEVICE_HELP = (
    "where every case runs: cpu (default) or cuda, cuda:N; the cases are drawn on CPU (the same draws, shrinks "
    "and saved examples on every machine) and moved there, so the pass sees fake tensors on that device and the runs "
    "before and after it and the float64 reference run there; recorded in the reports. A device this machine lacks is "
    "bad usage (exit status 2) before any case runs"
)


def device(text: str) -> str:
    """``--device``: ``cpu``, ``cuda`` or ``cuda:N`` (checked without importing torch: the device
    types of :data:`pmverify.device.DEVICE_TYPES`); whether this machine has it is checked by the
    command (:func:`pmverify.device.require_device`)."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(
            f"--device={text!r}: cases run on cpu or cuda devices (cpu, cuda or cuda:N: the float64 reference "
            "runs on the case's device, and needs float64 there)"
        )
    return text


def duration(name: str):
    def parse(text: str) -> float:
        from ._job import parse_duration

        try:
            return parse_duration(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{name}={exc}") from None

    return parse


def parser(description: str) -> argparse.ArgumentParser:
    """The ``pmverify`` argument parser, described by ``description``: a subparser per command
    (:func:`_fuzz_parser`, :func:`_selfcheck_parser`, :func:`_audit_parser`)."""
    parser = _Parser(prog="pmverify", description=description)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _fuzz_parser(sub)
    _selfcheck_parser(sub)
    _audit_parser(sub)
    return parser


def _fuzz_parser(sub: Any) -> None:
    fuzz = sub.add_parser(
        "fuzz",
        help="verify a pass on random cases within a time budget, crash-isolated",
        description="Verify a pass on random graphs within a time budget: the shipped QK-norm fusion pass (default) "
        "on qk_norm_cases() (plain, in-place with_mutations, with_mutating_custom_ops) and qk_norm_tp_cases() (the "
        "all-reduce form on tensor-parallel worlds of 2, 4 and 8 ranks, with real collectives), a batch of each in "
        "turn; a fault of the bank on its own families; or your own pass on your case strategy. Each target runs in "
        "a worker process: a pass that raises, hangs, corrupts the graph, segfaults or exits is a finding with a "
        "reproducer, and the job goes on. Findings are saved to the example database before they are reported, and "
        "every run first replays what the database holds. The shipped pass is then checked on a tiny MiniMax-M2 "
        "model compiled by torch.compile.",
    )
    fuzz.add_argument(
        "--profile",
        choices=tuple(PROFILE_DEFAULTS),
        default="ci",
        help="Hypothesis profile pmverify-<name> and the defaults below (default %(default)s): "
        + "; ".join(
            f"{name}: budget {d['budget']}, batch {d['batch']}, case timeout {d['case_timeout']}"
            for name, d in PROFILE_DEFAULTS.items()
        ),
    )
    fuzz.add_argument(
        "--budget",
        type=duration("--budget"),
        metavar="DURATION",
        help=f"time for the search, {_DURATION_HELP}; the real-model check runs after it",
    )
    fuzz.add_argument(
        "--max-examples", type=_positive(int, "--max-examples"), help="stop a target after this many cases"
    )
    fuzz.add_argument("--seed", type=int, default=0, help="seed of the search (default %(default)s)")
    fuzz.add_argument(
        "--target",
        action="append",
        metavar="NAME",
        help="what to verify (repeatable): qk_norm (the shipped pass, default), a fault of pmverify.faults, "
        "MODULE:ATTRIBUTE of your fuzz target (a pmverify.FuzzTarget or a function returning one), or of your "
        "pass (a class built per case from case.pass_config, a pass object, or a function on a torch.fx.Graph; "
        "with --cases) or of a pass factory (a function of no arguments returning the pass, called per case; "
        "with --cases), imported from the current folder or the installed packages",
    )
    fuzz.add_argument(
        "--cases",
        metavar="MODULE:ATTRIBUTE",
        help="the case strategy of a --target MODULE:ATTRIBUTE pass or pass factory: a strategy of GraphCase or a "
        "function returning one",
    )
    fuzz.add_argument(
        "--db",
        metavar="DIR|redis://HOST:PORT",
        help="the Hypothesis example database: a folder, or a Redis server that many machines share "
        "(default: the profile's, .hypothesis/examples)",
    )
    fuzz.add_argument(
        "--report",
        type=pathlib.Path,
        metavar="PATH",
        help=f"JSON report, rewritten as a checkpoint; {_OUTPUT_HELP}",
    )
    fuzz.add_argument(
        "--junit", type=pathlib.Path, metavar="PATH", help=f"JUnit XML, a testcase per case family; {_OUTPUT_HELP}"
    )
    fuzz.add_argument("--repro-dir", type=pathlib.Path, metavar="DIR", help="where reproducer scripts go")
    fuzz.add_argument(
        "--case-timeout",
        type=duration("--case-timeout"),
        metavar="DURATION",
        help=f"a case that runs longer is a hang: its worker is killed and restarted; {_DURATION_HELP} "
        "(default: the profile's)",
    )
    fuzz.add_argument(
        "--checkpoint-every",
        type=duration("--checkpoint-every"),
        default=60.0,
        metavar="DURATION",
        help=f"rewrite the report this often, {_DURATION_HELP} (default 60s; also after every finding)",
    )
    fuzz.add_argument("--batch", type=_positive(int, "--batch"), help="cases per search (default: the profile's)")
    fuzz.add_argument(
        "--jobs",
        type=_positive(int, "--jobs"),
        default=1,
        metavar="N",
        help="targets searched at once, each in its worker process (default %(default)s; one core or more each)",
    )
    fuzz.add_argument("--no-shrink", action="store_true", help="report the first failing case unshrunk (faster)")
    fuzz.add_argument(
        "--shrink-budget",
        type=duration("--shrink-budget"),
        default=180.0,
        metavar="DURATION",
        help=f"time the shrinking of a failure may take (within --budget), {_DURATION_HELP} (default 3m); the "
        "report then says how far it got",
    )
    fuzz.add_argument(
        "--strict-order",
        action="store_true",
        help="a graph the pass leaves out of topological order is a finding even where an Inductor pattern entry "
        "put a node before its input (default: forgiven, as Inductor sorts the graph right after "
        "post_grad_custom_post_pass); for a pass another may run after before any sort, as in vLLM's pass manager",
    )
    fuzz.add_argument("--device", type=device, metavar="DEVICE", help=DEVICE_HELP)
    fuzz.add_argument("--no-real-model", action="store_true", help="skip the compiled real-model check")
    fuzz.add_argument(
        "--progress",
        choices=("auto", "rich", "plain"),
        default="auto",
        help="live display on a terminal (auto: when stdout is one), or plain periodic lines",
    )


def _selfcheck_parser(sub: Any) -> None:
    selfcheck = sub.add_parser(
        "selfcheck",
        help="check that pmverify catches every fault of its bank",
        description="Search the default case families of each fault of pmverify.faults.BANK (the fuzz rotation, "
        "or the fault's own cases) until a case breaks a property; print a table of the faults detected, the "
        "examples to first detection, seconds, reproducer size and the oracles that fired. Exit status 0 when every "
        "fault was detected by an oracle its bank row names, 1 when one escaped, 2 when none escaped but one could not "
        "run on this machine (ERROR), or for bad usage.",
    )
    selfcheck.add_argument(
        "--fault",
        action="append",
        metavar="NAME",
        help="a fault of pmverify.faults to check (repeatable; default all)",
    )
    selfcheck.add_argument(
        "--max-examples",
        type=_positive(int, "--max-examples"),
        default=None,
        metavar="N",
        help="cases per fault at most, shrinking aside (default 200)",
    )
    selfcheck.add_argument("--seed", type=int, default=0, help="seed of the searches (default %(default)s)")
    selfcheck.add_argument(
        "--report", type=pathlib.Path, metavar="PATH", help=f"write the figures as JSON to PATH; {_OUTPUT_HELP}"
    )
    selfcheck.add_argument("--repro-dir", type=pathlib.Path, metavar="DIR", help="where reproducer scripts go")
    selfcheck.add_argument("--no-shrink", action="store_true", help="report the first failing case unshrunk (faster)")
    selfcheck.add_argument(
        "--device",
        type=device,
        metavar="DEVICE",
        help=DEVICE_HELP + "; on cuda the kernel faults run their Triton kernels on the GPU, compiled (the interpreter "
        "must be off: TRITON_INTERPRET=1 is refused)",
    )


def _audit_parser(sub: Any) -> None:
    from ._settings import AUDIT_MAX_EXAMPLES

    audit = sub.add_parser(
        "audit",
        help="check every pattern entry of Inductor (or of your pass modules) one by one, crash-isolated",
        description="Record every pattern entry of the --kinds of Inductor's own pattern passes at the installed torch "
        "(default), or of your pass modules, and check each alone in a worker process: a rewrite by "
        "pmverify.check_rewrite, then planted into random graphs with near misses; a graph handler by check_entry; a "
        "lowering handler by check_entry under torch.compile (--kinds lowering). A rewrite's check judges two cases "
        "of each near-miss kind that applies first, then random ones (a handler's: two with every optional argument "
        "its pattern does not bind set). Each gets a status: ok (for a rewrite, every "
        "near-miss kind that applies judged: its reason names them); not covered (a kind that applies never judged); "
        "finding (oracles, reproducer; an entry that never fired and has no gate is a never_matched finding, shown as "
        "a dead pattern apart from the wrong results); unsatisfiable here (gated on what this "
        "machine lacks); not comparable (random numbers drawn otherwise, or no finite reference); error (pmverify's own "
        "failure, a worker that died or hung included: never a finding); not registered (register_replacement skipped "
        "it as a duplicate: it never runs); not run (budget spent or interrupted). Prints a table per kind and module, "
        "and one per pass. Exit "
        "status 1 when a rewrite has a finding, 0 otherwise, 130 when interrupted, 2 for bad usage.",
    )
    audit.add_argument(
        "modules",
        nargs="*",
        metavar="MODULE",
        help="what to audit: inductor (Inductor's rewrites, the default), a pass module (its rewrites recorded while it "
        "is imported) or MODULE:ATTR, a callable building the pass (recorded while it runs); imported from the current "
        "folder or the installed packages",
    )
    audit.add_argument(
        "--kinds",
        type=_kinds,
        default=("replacement", "graph"),
        metavar="KINDS",
        help="which entries of the pattern passes to audit, comma-separated: replacement (register_replacement "
        "rewrites), graph (register_graph_pattern handlers), lowering (register_lowering_pattern handlers: they lower "
        "to Inductor IR, checked only under torch.compile); default replacement,graph",
    )
    audit.add_argument(
        "--rewrite",
        action="append",
        metavar="GLOB",
        help="audit only the rewrites whose NAME or MODULE/NAME matches (repeatable), e.g. '_sfdp_pattern_1_*' or "
        "'pad_mm/*', or equal to it as printed ('gelu_mul[bfloat16, fwd_only]': a name several rewrites share says their "
        "dtypes and trace)",
    )
    audit.add_argument(
        "--max-examples",
        type=_positive(int, "--max-examples"),
        default=AUDIT_MAX_EXAMPLES,
        metavar="N",
        help="cases of check_rewrite per rewrite (default %(default)s, measured: benchmarks/audit_depth.py); the "
        "planted check runs half as many",
    )
    audit.add_argument(
        "--budget",
        type=duration("--budget"),
        metavar="DURATION",
        help=f"start no rewrite after this long ({_DURATION_HELP}); the rest are reported as not run",
    )
    audit.add_argument(
        "--lowering-budget",
        type=duration("--lowering-budget"),
        metavar="DURATION",
        help=f"with --kinds lowering: the time the lowering entries may take together ({_DURATION_HELP}, default 10m; "
        "each case is two torch.compile runs); they run last, in a seeded order spread over their handlers, and "
        "those not started within it are reported as not run",
    )
    audit.add_argument(
        "--timeout",
        type=duration("--timeout"),
        default=300.0,
        metavar="DURATION",
        help=f"a rewrite audited longer is an error (its worker killed; the next goes on in a fresh one), "
        f"{_DURATION_HELP} (default 5m)",
    )
    audit.add_argument(
        "--jobs",
        type=_positive(int, "--jobs"),
        default=1,
        metavar="N",
        help="rewrites audited at once, each in its worker process (default %(default)s; one core each)",
    )
    audit.add_argument("--seed", type=int, default=0, help="seed of the checks (default %(default)s)")
    audit.add_argument("--report", type=pathlib.Path, metavar="PATH", help=f"JSON report; {_OUTPUT_HELP}")
    audit.add_argument(
        "--junit",
        type=pathlib.Path,
        metavar="PATH",
        help=f"JUnit XML, a testsuite per module and a testcase per rewrite; {_OUTPUT_HELP}",
    )
    audit.add_argument(
        "--markdown",
        type=pathlib.Path,
        metavar="PATH",
        help=f"the Markdown table of docs/AUDIT.md (counts per module, a line per rewrite not ok); {_OUTPUT_HELP}",
    )
    audit.add_argument("--repro-dir", type=pathlib.Path, metavar="DIR", help="where reproducer scripts go")
    audit.add_argument(
        "--device",
        type=device,
        metavar="DEVICE",
        help=DEVICE_HELP + "; each entry's example inputs are moved there too, and an entry gated on a CUDA device "
        "(pad_mm, prepare_softmax...) is judged on cuda instead of unsatisfiable here",
    )
    audit.add_argument(
        "--reproducer-prelude",
        metavar="CODE",
        help="Python code each reproducer runs first (e.g. importing a module that registers custom ops of a C++ "
        "extension; those defined with torch.library in Python are imported without it)",
    )
