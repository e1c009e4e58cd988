"""pmverify command line: `pmverify fuzz` verifies the shipped QK-norm pass; `pmverify selfcheck`
checks that pmverify catches every fault of its bank.

Exit status: fuzz 0 when nothing was found, 1 when a violation was found; selfcheck 0 when every
fault was detected, 1 when one escaped, 2 when none escaped but one could not run here; 2 for bad
usage (including an environment the Triton kernels cannot run in).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]

DEFAULT_BUDGET_S = 60.0
BATCH = 25
#: The world sizes the shipped pass is fuzzed on, one rotation batch each (besides tp_world 1).
TP_WORLDS = (2, 4, 8)


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


def _targets() -> dict[str, Any]:
    from . import faults
    from .fusions.qk_norm import QKNormFusionPass

    targets: dict[str, Any] = {"qk_norm": QKNormFusionPass}
    targets.update({name: getattr(faults, name) for name in faults.__all__})
    return targets


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pmverify", description=" ".join(__doc__.split("\n\n")[0].split()))
    sub = parser.add_subparsers(dest="command", required=True)
    fuzz = sub.add_parser(
        "fuzz",
        help="verify a pass on random cases, then on a real model",
        description="Verify the shipped QK-norm fusion pass (or a fault) on random graphs from "
        "qk_norm_cases() (plain, in-place with_mutations, and with_mutating_custom_ops) and from qk_norm_tp_cases() "
        "(the all-reduce form on tensor-parallel worlds of 1, 2, 4 and 8 ranks, run with real collectives), a batch "
        "of each in turn, in direct mode, then on a tiny MiniMax-M2 model compiled by torch.compile.",
    )
    fuzz.add_argument(
        "--budget",
        type=_positive(float, "--budget"),
        default=DEFAULT_BUDGET_S,
        help="seconds of random-case search (default %(default)s); the real-model check runs after it",
    )
    fuzz.add_argument("--max-examples", type=_positive(int, "--max-examples"), help="stop after this many cases")
    fuzz.add_argument("--seed", type=int, default=0, help="seed of the search (default %(default)s)")
    fuzz.add_argument("--report", type=pathlib.Path, help="write a JSON report to this path")
    fuzz.add_argument(
        "--target",
        default="qk_norm",
        help="what to verify: qk_norm (the shipped pass, default) or a fault from pmverify.faults",
    )
    fuzz.add_argument("--repro-dir", type=pathlib.Path, help="where reproducer scripts go")
    fuzz.add_argument("--no-real-model", action="store_true", help="skip the compiled real-model check")
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
    selfcheck.add_argument("--report", type=pathlib.Path, metavar="PATH", help="write the figures as JSON to this path")
    selfcheck.add_argument("--repro-dir", type=pathlib.Path, metavar="DIR", help="where reproducer scripts go")
    selfcheck.add_argument("--no-shrink", action="store_true", help="report the first failing case unshrunk (faster)")
    return parser


class _Stats:
    """Counts over every case checked, for progress lines, the summary and the report."""

    def __init__(self) -> None:
        self.cases = 0
        self.matches = 0
        self.events: collections.Counter[str] = collections.Counter()
        self.tp_worlds: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)

    def __call__(self, result: Any) -> None:
        from ._verify import case_events

        self.cases += 1
        self.matches += result.matches
        self.tp_worlds[result.case.tp_world].update(cases=1, matches=result.matches)
        self.events.update(label for label in case_events(result) if not label.startswith("matches"))


def _families(target: str) -> list[tuple[str, Any]]:
    """The case families the random phase rotates through, one per batch: for the shipped pass,
    plain graphs, their in-place form, their functional form with mutating custom ops
    (auto_functionalized), and the all-reduce form on tensor-parallel worlds; for a fault, the
    families of its bank row."""
    from hypothesis import strategies as st

    from . import faults
    from .strategies import qk_norm_tp_cases

    if target in faults.BANK:
        return faults.BANK[target].families()
    # One tensor-parallel batch per world size after each single-rank family, so that a run of
    # six batches has checked tp_world 2, 4 and 8 (tp_world 1 is what the other families check).
    tp = [(f"qk_norm_tp_cases[tp_world={world}]", qk_norm_tp_cases(tp_world=st.just(world))) for world in TP_WORLDS]
    return [family for pair in zip(faults.rotation(), tp, strict=True) for family in pair]


def _takes_qk_norm_config(pass_cls: Any) -> bool:
    """Whether ``pass_cls`` is built from a ``QKNormConfig`` (so the real-model check can build it)."""
    from .fusions.qk_norm import QKNormConfig

    try:
        pass_cls(QKNormConfig(q_size=8, kv_size=4))
    except (TypeError, ValueError):
        return False
    return True


def _fuzz_target(name: str, pass_: Any, args: argparse.Namespace, out: Any) -> dict[str, Any]:
    from ._verify import verify_in_rotation

    family_cases = collections.Counter()
    stats = _Stats()
    violations: list[dict[str, Any]] = []
    start = time.monotonic()

    def remaining() -> int:
        if time.monotonic() - start >= args.budget or violations:
            return 0
        return BATCH if args.max_examples is None else args.max_examples - stats.cases

    counted = 0
    for family, error in verify_in_rotation(
        pass_,
        _families(name),
        batch=BATCH,
        remaining=remaining,
        seed=args.seed,
        on_result=stats,
        repro_dir=args.repro_dir,
    ):
        if error is not None:
            violations += [
                {
                    "oracle": v.oracle,
                    "message": v.message,
                    "nodes": list(v.nodes),
                    "reproducer": str(error.reproducer) if error.reproducer else None,
                }
                for v in error.violations
            ]
            print(f"FOUND on {error.case!r}", file=out)
            for v in error.violations:
                print(f"  - {v}", file=out)
            print(f"  reproducer: {error.reproducer or 'not written'}", file=out)
        family_cases[family] += stats.cases - counted
        counted = stats.cases
        elapsed = time.monotonic() - start
        print(
            f"[{elapsed:6.1f}s] {name} ({family}): {stats.cases} cases, {stats.matches} matches, "
            f"{len(violations)} violations ({60 * stats.cases / max(elapsed, 1e-9):.0f} cases/min)",
            file=out,
            flush=True,
        )
    elapsed = time.monotonic() - start
    return {
        "name": name,
        "cases": stats.cases,
        "matches": stats.matches,
        "elapsed_s": round(elapsed, 3),
        "cases_per_min": round(60 * stats.cases / max(elapsed, 1e-9), 1),
        "families": dict(family_cases),
        "tp_worlds": {str(world): dict(counts) for world, counts in sorted(stats.tp_worlds.items())},
        "events": dict(sorted(stats.events.items())),
        "violations": violations,
    }


def _summary(report: dict[str, Any], out: Any) -> None:
    print("\nsummary", file=out)
    width = max([28, *(len(t["name"]) + 2 for t in report["targets"])])
    header = f"{'target':<{width}}{'cases':>8}{'matches':>9}{'violations':>12}{'cases/min':>11}"
    print(header, file=out)
    print("-" * len(header), file=out)
    for target in report["targets"]:
        print(
            f"{target['name']:<{width}}{target['cases']:>8}{target['matches']:>9}{len(target['violations']):>12}"
            f"{target['cases_per_min']:>11.0f}",
            file=out,
        )
        worlds = ", ".join(
            f"tp {world}: {counts['cases']} cases / {counts['matches']} matches"
            for world, counts in target["tp_worlds"].items()
        )
        print(f"  {worlds}", file=out)
        by_oracle = collections.Counter(v["oracle"] for v in target["violations"])
        for oracle, count in sorted(by_oracle.items()):
            print(f"  {oracle}: {count}", file=out)
    for model in report["real_models"]:
        if model.get("skipped"):
            print(f"{model['name']}: skipped ({model['skipped']})", file=out)
        else:
            err = model["max_abs_err"]
            print(
                f"{model['name']}: {model['matches']} matches, max |err| {'n/a' if err is None else f'{err:.3g}'}, "
                f"{'exact, ' if model.get('exact') else ''}{'ok' if model['ok'] else 'NOT OK'} "
                f"({model['elapsed_s']:.1f}s)",
                file=out,
            )


def fuzz(args: argparse.Namespace, out: Any = None) -> int:
    from . import __version__

    out = out if out is not None else sys.stdout
    targets = _targets()
    if args.target not in targets:
        print(f"pmverify fuzz: --target={args.target!r} is unknown; choose from {', '.join(targets)}", file=sys.stderr)
        return 2
    from .faults import BANK

    fault = BANK.get(args.target)
    if fault is not None and fault.requires is not None:
        try:
            fault.requires()
        except RuntimeError as exc:
            print(f"pmverify fuzz: --target={args.target}: {exc}", file=sys.stderr)
            return 2
    if args.report is not None:
        try:
            args.report.parent.mkdir(parents=True, exist_ok=True)
            with open(args.report, "a"):
                pass
        except OSError as exc:
            print(f"pmverify fuzz: --report={str(args.report)!r} cannot be written: {exc}", file=sys.stderr)
            return 2
    start = time.monotonic()
    report: dict[str, Any] = {
        "pmverify": __version__,
        "seed": args.seed,
        "elapsed_s": 0.0,
        "targets": [],
        "real_models": [],
    }
    print(
        f"pmverify {__version__}: fuzzing {args.target} for {args.budget:g}s (seed {args.seed})", file=out, flush=True
    )
    report["targets"].append(_fuzz_target(args.target, targets[args.target], args, out))
    pass_cls = targets[args.target]
    if args.no_real_model:
        pass
    elif not _takes_qk_norm_config(pass_cls):
        reason = f"{args.target} is not built from a QKNormConfig"
        print(f"real model: skipped ({reason})", file=out, flush=True)
        report["real_models"].append({"name": "minimax_m2", "skipped": reason, "ok": True})
    else:
        from .real_models import check_minimax_m2

        print("real model: tiny MiniMax-M2, compiled with and without the pass...", file=out, flush=True)
        result = check_minimax_m2(pass_factory=pass_cls)
        report["real_models"].append(_jsonable(result))
    report["elapsed_s"] = round(time.monotonic() - start, 3)
    _summary(report, out)
    if args.report is not None:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
        print(f"report: {args.report}", file=out)
    found = any(t["violations"] for t in report["targets"]) or any(
        not m["ok"] and not m.get("skipped") for m in report["real_models"]
    )
    return 1 if found else 0


def _writable(command: str, report: pathlib.Path | None) -> bool:
    """Whether ``--report`` can be written; says why not on stderr."""
    if report is None:
        return True
    try:
        report.parent.mkdir(parents=True, exist_ok=True)
        with open(report, "a"):
            pass
    except OSError as exc:
        print(f"pmverify {command}: --report={str(report)!r} cannot be written: {exc}", file=sys.stderr)
        return False
    return True


def selfcheck(args: argparse.Namespace, out: Any = None) -> int:
    from . import __version__
    from ._selfcheck import DEFAULT_MAX_EXAMPLES, report, table
    from ._selfcheck import selfcheck as run_selfcheck
    from .faults import BANK

    out = out if out is not None else sys.stdout
    unknown = [name for name in args.fault or () if name not in BANK]
    if unknown:
        print(f"pmverify selfcheck: --fault={unknown[0]!r} is unknown; choose from {', '.join(BANK)}", file=sys.stderr)
        return 2
    if not _writable("selfcheck", args.report):
        return 2
    max_examples = args.max_examples or DEFAULT_MAX_EXAMPLES
    names = list(dict.fromkeys(args.fault or BANK))
    print(
        f"pmverify {__version__}: selfcheck of {len(names)} fault(s), up to {max_examples} cases each (seed {args.seed})",
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
        on_fault=progress,
    )
    print("\n" + table(results), file=out)
    if args.report is not None:
        data = report(
            results,
            pmverify=__version__,
            seed=args.seed,
            max_examples=max_examples,
            shrink=not args.no_shrink,
            elapsed_s=round(time.monotonic() - start, 3),
        )
        args.report.write_text(json.dumps(data, indent=2) + "\n")
        print(f"report: {args.report}", file=out)
    if any(not r.detected and r.status != "error" for r in results):
        return 1  # an escape outranks a fault that could not be searched here
    return 2 if any(r.status == "error" for r in results) else 0


def _jsonable(value: Any) -> Any:
    """A dataclass, dict or scalar as plain JSON (NaN and Inf as null)."""
    import dataclasses
    import math

    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    return str(value)


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    # Without a GPU, pmverify's Triton kernels (the fused op's, and the kernel faults' of the bank)
    # run only in Triton's interpreter, which must be on before triton is first imported (its own
    # jit functions, tl.sum..., are decorated then, as are the kernels on their first use): set it
    # here, before the commands import torch._inductor (which imports triton) or the kernels;
    # nothing imported with this module imports either.
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    args = _parser().parse_args(argv)
    from .fusions.qk_norm import ops

    try:  # a setting the fused ops cannot run with is bad usage, not a finding of every case
        ops.check_environment()
    except (ValueError, RuntimeError) as exc:
        print(f"pmverify {args.command}: {exc}", file=sys.stderr)
        return 2
    if args.command == "fuzz":
        return fuzz(args)
    if args.command == "selfcheck":
        return selfcheck(args)
    return 2  # pragma: no cover - argparse requires a command


if __name__ == "__main__":
    sys.exit(main())
