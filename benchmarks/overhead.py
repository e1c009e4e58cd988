"""What pmverify's checking costs over a bare apply-and-compare loop, on the same graphs.

Run: ``python benchmarks/overhead.py [--cases N] [--seed S] [--repeat R] [--json PATH]``. ``N`` graphs (default
100) are drawn once from ``qk_norm_cases()`` with Hypothesis seed ``S`` (default 0; generate phase
only, no database) and run through the shipped :class:`~pmverify.fusions.qk_norm.QKNormFusionPass`
(built per case from its ``pass_config``) three ways:

- **bare**: deep-copy the graph module, run the pass on the copy's graph, recompile, run both
  graphs on the case's inputs and ``torch.testing.assert_close`` the outputs: what a hand-written
  test does;
- **check_case**: :func:`pmverify.check_case` with every oracle (fake-tensor propagation, the
  sort Inductor does after custom passes, then structure, semantics with its float64 reference and
  deterministic fill, mutation barriers, functionalization, expectations and cache key);
- **breakdown**: ``apply_direct`` and each oracle on its own, summed over the cases.

Both loops first run once over every case untimed, so that each config's patterns are registered
(``register_replacement`` traces, about a second per new config) and per-config caches are warm:
the figures are steady-state rates. Then ``R`` timed rounds (``--repeat``, default 3) alternate the
two loops, so that a load other processes put on the machine falls on both alike; the ratio is
given per round (median, min, max), in wall-clock time and in this process's CPU time (steadier
on a shared machine). Figures, not assertions: timing is not tested.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

import pmverify
from pmverify._compat import no_local_constants
from pmverify._engine.apply import apply_direct
from pmverify.fusions.qk_norm import QKNormFusionPass
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.oracles import ORACLES


def draw_cases(count: int, seed: int) -> list[pmverify.GraphCase]:
    """``count`` cases of ``qk_norm_cases()``, the same ones for the same seed (and the same
    torch and Hypothesis), whatever pmverify's source holds."""
    cases: list[pmverify.GraphCase] = []

    @hypothesis_seed(seed)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(qk_norm_cases())
    def draw(case: pmverify.GraphCase) -> None:
        cases.append(case)

    with no_local_constants():  # else they depend on every literal in pmverify's source (see there)
        draw()
    return cases


def bare(case: pmverify.GraphCase) -> int:
    """Apply the pass to a copy and compare outputs with ``assert_close``; return the matches."""
    gm = copy.deepcopy(case.gm)
    pass_ = QKNormFusionPass(case.pass_config)
    pass_(gm.graph)
    gm.recompile()
    for inputs in case.inputs:
        with torch.no_grad():
            expected = case.gm(*[x.clone() for x in inputs])
            actual = gm(*[x.clone() for x in inputs])
        torch.testing.assert_close(actual, expected)
    return pass_.matched_count


def checked(case: pmverify.GraphCase) -> int:
    """:func:`pmverify.check_case` with every oracle; return the matches."""
    result = pmverify.check_case(QKNormFusionPass, case)
    if result.violations:
        raise AssertionError(result.violations)
    return result.rewrite_count


def timed(loop: Callable[[pmverify.GraphCase], int], cases: Sequence[pmverify.GraphCase]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, matches) of one round of ``loop`` over ``cases``."""
    wall, cpu = time.perf_counter(), time.process_time()
    matches = sum(loop(case) for case in cases)
    return time.perf_counter() - wall, time.process_time() - cpu, matches


def rounds(
    loops: dict[str, Callable[[pmverify.GraphCase], int]], cases: Sequence[pmverify.GraphCase], repeat: int
) -> dict[str, list[tuple[float, float, int]]]:
    """``repeat`` timed rounds of each loop, alternating, after one untimed warm-up round of each."""
    for loop in loops.values():
        for case in cases:
            loop(case)
    times: dict[str, list[tuple[float, float, int]]] = {name: [] for name in loops}
    for _ in range(repeat):
        for name, loop in loops.items():
            times[name].append(timed(loop, cases))
    return times


def breakdown(cases: Sequence[pmverify.GraphCase]) -> dict[str, float]:
    """Seconds in ``apply_direct`` and in each oracle, summed over ``cases``."""
    seconds = dict.fromkeys(["apply_direct", *ORACLES], 0.0)
    for case in cases:
        start = time.perf_counter()
        pair = apply_direct(QKNormFusionPass, case)
        seconds["apply_direct"] += time.perf_counter() - start
        for name, oracle in ORACLES.items():
            start = time.perf_counter()
            oracle(pair)
            seconds[name] += time.perf_counter() - start
    return seconds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100, help="graphs drawn from qk_norm_cases() (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed of the draw (default 0)")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds of each loop (default 3)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    # register_replacement's check logs a traceback at ERROR for each near miss it rejects (a failed
    # broadcast in fake tensors); check_case silences it, and so does the bare loop here.
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)

    start = time.perf_counter()
    cases = draw_cases(args.cases, args.seed)
    print(f"drew {len(cases)} cases from qk_norm_cases() (seed {args.seed}) in {time.perf_counter() - start:.1f}s")
    nodes = sum(1 for case in cases for n in case.gm.graph.nodes if n.op == "call_function")
    print(f"{nodes / len(cases):.1f} call_function nodes per case on average")

    times = rounds({"bare": bare, "check_case": checked}, cases, args.repeat)
    rows: dict[str, Any] = {}
    print(f"{'loop':<12} {'seconds':>8} {'cpu s':>8} {'cases/s':>9} {'matches':>8}   (median of {args.repeat} rounds)")
    for name, runs in times.items():
        seconds, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        rows[name] = {"seconds": seconds, "cpu_seconds": cpu, "cases_per_s": len(cases) / seconds, "matches": runs[0][2],
                      "rounds_s": [r[0] for r in runs], "rounds_cpu_s": [r[1] for r in runs]}  # fmt: skip
        print(f"{name:<12} {seconds:>8.2f} {cpu:>8.2f} {len(cases) / seconds:>9.1f} {runs[0][2]:>8}", flush=True)
    walls = [c[0] / b[0] for b, c in zip(times["bare"], times["check_case"], strict=True)]
    cpus = [c[1] / b[1] for b, c in zip(times["bare"], times["check_case"], strict=True)]
    ratio, cpu_ratio = statistics.median(walls), statistics.median(cpus)
    print(
        f"check_case costs {ratio:.2f}x the bare loop per case (rounds {min(walls):.2f}-{max(walls):.2f}; "
        f"CPU time {cpu_ratio:.2f}x, {min(cpus):.2f}-{max(cpus):.2f}): {1 / ratio:.2f} of its rate (target >= 0.8)"
    )

    parts = breakdown(cases)
    total = sum(parts.values())
    print(f"\n{'part':<20} {'seconds':>8} {'share':>7}")
    for name, seconds in parts.items():
        print(f"{name:<20} {seconds:>8.2f} {seconds / total:>7.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"torch": torch.__version__, "cases": len(cases), "seed": args.seed, **rows, "ratio": ratio,
                 "rate_ratio": 1 / ratio, "ratios": walls, "cpu_ratio": cpu_ratio, "cpu_ratios": cpus,
                 "breakdown_s": parts},
                f,
                indent=2,
            )  # fmt: skip


if __name__ == "__main__":
    main()
