"""How small the shrunk case of a bank fault is, found the way README's recipe searches.

Run: ``python benchmarks/shrink_size.py [--seeds N] [--max-examples N] [--fault NAME]... [--json PATH]``.
Each row searches one fault of :mod:`pmverify.faults` with ``verify`` on the README recipe's
strategy, ``with_mutations(planted(pattern, like(example, vary=...), min_instances=1))``, no
database, one seed at a time, and prints, per seed: the cases it ran until the first failure, the
seconds of the whole search (shrinking included) and the shrunk case's size: op nodes
(``call_function``), mutations (``case.mutations``), planted instances and, of those, near misses.
Figures, not assertions (timing on shared machines is noisy).

Issue 30 (shrinking): before, ``with_mutations`` drew 1..``max_mutations`` mutations, so every
shrunk case held one, even for a fault that has nothing to do with mutations; after, it draws
``min_mutations``..``max_mutations`` (default 0..2), the presence of each mutation drawn first and
each nested in the one before it, so the shrinker drops any mutation the failure does not need.
Seeds 0-1, ``--max-examples 100``, on the 2 cores shared with 5 other jobs (load 6-7: the seconds
are noisy, and a search whose shrinking passed the 180 s budget, marked ``cut``, stopped early;
``first``: the case that first failed; ``ops``: op nodes, the mutations' included)::

    fault                        seed   before: first secs ops mut inst near   after: first secs ops mut inst near
    HandRMSNormIgnoresMutations     0             5    62   7   1    1    1            4  207  20   1    3    2 cut
    HandRMSNormIgnoresMutations     1             3   188  22   1    3    3 cut        3  154   7   1    1    1
    RMSNormHardCodedEps             0             9   126   7   1    1    0            8   87   6   0    1    0
    RMSNormHardCodedEps             1             3   197  23   1    3    0 cut        3   41   6   0    1    0
    SoftmaxFusionIgnoresDim         0            22   208  19   1    3    1 cut        8   31   6   0    1    1
    SoftmaxFusionIgnoresDim         1             9    85   7   1    1    1           33   44   6   0    1    1
    AddcmulFusionDropsAlpha         0             7   186   3   1    1    1            5   39   4   2    1    1
    AddcmulFusionDropsAlpha         1             3    69   3   1    1    1            8   67   2   0    1    1

Every shrinking that ran to its end left one instance; before, one mutation always stayed (the
add_ of a scalar to an input: one op node of ``ops``), after, none where the failure does not
need it, and the one inside the norm for HandRMSNormIgnoresMutations. AddcmulFusionDropsAlpha
seed 0 found another failure after (mutation_barriers and expectations: the peephole, matching
by target, also fuses across an in-place op), which keeps the two mutations it shrank to.
HandRMSNormIgnoresMutations seed 0 again at load 1-2: before 105 cases, 30 s, 7/1/1/1; after 786
cases, 174 s, 7/1/1/1 (three distinct failures each shrunk; the after search found them at case 4
in a larger case: 3 instances, 20 ops), so one fault's shrinking can take longer where its first
failing case is larger; the other rows shrank faster after. ``--inside-rate 200`` (cases with a mutation / with
one inside an instance, what HandRMSNormIgnoresMutations needs): before 200 / 38, after 114 / 44.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import torch


def _minimax_rms_pattern(x, w):
    """transformers' float32 RMS norm as :class:`~pmverify.faults._hand.HandRMSNorm` matches it."""
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def _rows() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """name -> (the pass, the README recipe's strategy), each built lazily."""
    from pmverify.faults import mutations, reductions, scalars
    from pmverify.faults._common import DtypesConfig
    from pmverify.strategies import like, planted, with_mutations

    def recipe(pattern, example, vary, config=None, **kwargs):
        return lambda: with_mutations(
            planted(pattern, like(example, vary=vary), min_instances=1, pass_config=config, **kwargs)
        )

    rms = (torch.empty(8, 16), torch.empty(16))
    rms_vary = {"t": [(0, 0)], "h": [(0, 1), (1, 0)]}
    return {
        "HandRMSNormIgnoresMutations": (
            lambda: mutations.HandRMSNormIgnoresMutations(None),
            recipe(_minimax_rms_pattern, rms, rms_vary),
        ),
        "RMSNormHardCodedEps": (
            lambda: scalars.RMSNormHardCodedEps,
            recipe(scalars.rms_norm_pattern, rms, rms_vary, scalars.RMSNormEpsConfig()),
        ),
        "SoftmaxFusionIgnoresDim": (
            lambda: reductions.SoftmaxFusionIgnoresDim,
            recipe(reductions.softmax_pattern, (torch.empty(4, 8), torch.empty(4, 8)), "duck", DtypesConfig()),
        ),
        "AddcmulFusionDropsAlpha": (
            lambda: scalars.AddcmulFusionDropsAlpha,
            recipe(scalars.addcmul_pattern, (torch.empty(4, 8),) * 3, "duck", DtypesConfig()),
        ),
    }


def shrunk_size(case: Any) -> dict[str, int]:
    """Op nodes, mutations, planted instances and near misses of ``case``."""
    return {
        "ops": sum(1 for node in case.gm.graph.nodes if node.op == "call_function"),
        "mutations": len(case.mutations),
        "instances": len(case.planted),
        "near_misses": sum(1 for p in case.planted if p.reason is not None),
    }


def run(name: str, seed: int, max_examples: int) -> dict[str, Any]:
    import hypothesis

    import pmverify

    make_pass, make_cases = _rows()[name]
    results: list[Any] = []
    first: list[int] = []

    def on_result(result: Any) -> None:
        results.append(result)
        if not first and not result.ok:
            first.append(len(results))

    start = time.perf_counter()
    try:
        pmverify.verify(
            make_pass(),
            make_cases(),
            max_examples=max_examples,
            seed=seed,
            on_result=on_result,
            settings=hypothesis.settings(database=None),
        )
    except pmverify.PassVerificationError as error:
        oracles = sorted({v.oracle for v in error.violations})
        row = {"found": True, **shrunk_size(error.case), "oracles": oracles, "cut": bool(error.shrink_note)}
    else:
        row = {"found": False}
    return {"fault": name, "seed": seed, "first": first[0] if first else None, "cases": len(results),
            "seconds": round(time.perf_counter() - start, 1), **row}  # fmt: skip


def inside_rate(examples: int) -> tuple[int, int, int]:
    """Of ``examples`` cases drawn from the HandRMSNormIgnoresMutations row's strategy (generate
    phase, no shrinking): how many hold a mutation, a ``mutation_inside`` instance (what that
    fault needs: the chance a case finds it), and mutations in all."""
    from hypothesis import HealthCheck, given, settings

    cases = _rows()["HandRMSNormIgnoresMutations"][1]()
    counts = [0, 0, 0]

    @settings(max_examples=examples, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases)
    def draw(case: Any) -> None:
        counts[0] += bool(case.mutations)
        counts[1] += any(p.reason == "mutation_inside" for p in case.planted)
        counts[2] += len(case.mutations)

    draw()
    return counts[0], counts[1], counts[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-examples", type=int, default=100)
    parser.add_argument("--fault", action="append", choices=sorted(_rows()), default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--inside-rate", type=int, default=0, metavar="N", help="only draw N cases: mutation rates")
    args = parser.parse_args()
    import logging

    logging.disable(logging.WARNING)
    if args.inside_rate:
        mutated, inside, total = inside_rate(args.inside_rate)
        print(
            f"{args.inside_rate} cases: {mutated} with a mutation ({total} in all), {inside} with one inside an instance"
        )
        return
    rows = []
    print(
        f"{'fault':30} {'seed':>4} {'first':>5} {'cases':>5} {'secs':>6} {'ops':>4} {'mut':>4} {'inst':>4} {'near':>4}"
    )
    for name in args.fault or list(_rows()):
        for seed in range(args.seeds):
            row = run(name, seed, args.max_examples)
            rows.append(row)
            if row["found"]:
                sizes = f"{row['ops']:>4} {row['mutations']:>4} {row['instances']:>4} {row['near_misses']:>4}"
                sizes += " (shrinking cut at its budget)" if row["cut"] else ""
            else:
                sizes = "  not found"
            print(f"{name:30} {seed:>4} {row['first']!s:>5} {row['cases']:>5} {row['seconds']:>6} {sizes}", flush=True)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


if __name__ == "__main__":
    main()
