"""Cases per second for each public strategy of ``pmverify.strategies``, on this machine.

Run: ``python benchmarks/strategies.py [--examples N] [--json PATH]``. Each strategy is drawn
``N`` times (Hypothesis' generate phase only, no database, no shrinking) after one warm-up draw
(imports, op registration), with ``planted``'s memo of pattern traces emptied before each row so
rows do not depend on their order; the table gives wall seconds and cases per second. Figures, not
assertions: timing is not tested (shared machines make timed tests flaky).

Before / after issue 15 part 1 (fx_graphs from 38 ops in one form each to 81 ops in every argument
form and 7 dtypes; tensors() with scales and row kinds), cases/s with ``--examples 100``, two runs
each, back to back on the same 2 shared cores (torch 2.13.0 CPU), so differences under ~15 % are
noise::

    strategy                                      before        after
    tensors(float32, [64, 64])                1500-1620    1065-1090
    fx_graphs()                                 137-141      133-167
    fx_graphs(max_nodes=30)                       37-37       32-34
    like(qk_norm example)                       770-772      576-604
    planted(rms_norm)                             38-46       42-45
    planted(qk_norm)                              32-35       32-34
    qk_norm_cases()          (own tensors)        28-36       34-38
    with_mutations(planted(rms_norm))             35-41       34-35
    with_mutating_custom_ops(planted(rms_norm))   27-29       23-27
    tp_cases(planted(rms_norm))                   50-58       51-62

A tensor costs up to three more choices (scale, row kind) and a row pass; a graph holds more nodes
per op on average (unbind's and split's getitems, guarded ops), so fx_graphs' larger cases are ~10 %
slower; planted, which traces patterns, is as fast as before.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pmverify.fusions.qk_norm import QKNormConfig
from pmverify.fusions.qk_norm.patterns import rewrites
from pmverify.strategies import (
    dtypes,
    fx_graphs,
    like,
    planted,
    qk_norm_cases,
    qk_norm_tp_cases,
    shapes,
    tensors,
    tp_cases,
    tp_sizes,
    with_mutating_custom_ops,
    with_mutations,
)
from pmverify.strategies._near_miss import _TRACES


def rms_pattern(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(x.dtype)


def _strategies() -> dict[str, Callable[[], st.SearchStrategy]]:
    config = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16)
    qk = {r.name: r for r in rewrites(config)}["qk_norm"]
    rms_inputs = like(
        (torch.empty(4, 16, dtype=torch.bfloat16), torch.empty(16, dtype=torch.bfloat16)), vary={"tokens": [(0, 0)]}
    )
    rms_planted = planted(rms_pattern, rms_inputs, max_instances=2)
    return {
        "dtypes()": dtypes,
        "shapes()": shapes,
        "tensors(float32, [64, 64])": lambda: tensors(torch.float32, (64, 64)),
        "tp_sizes()": tp_sizes,
        "fx_graphs()": fx_graphs,
        "fx_graphs(max_nodes=30)": lambda: fx_graphs(min_nodes=20, max_nodes=30),
        "like(qk_norm example)": lambda: like(qk.example_inputs, vary={"tokens": [(0, 0)]}),
        "planted(rms_norm)": lambda: rms_planted,
        "planted(qk_norm)": lambda: planted(qk.search_fn, like(qk.example_inputs, vary={"tokens": [(0, 0)]})),
        "qk_norm_cases()": qk_norm_cases,
        "qk_norm_tp_cases()": qk_norm_tp_cases,
        "with_mutations(planted(rms_norm))": lambda: with_mutations(rms_planted),
        "with_mutating_custom_ops(planted(rms_norm))": lambda: with_mutating_custom_ops(rms_planted),
        "tp_cases(planted(rms_norm))": lambda: tp_cases(rms_planted),
    }


def measure(strategy: st.SearchStrategy, examples: int) -> tuple[int, float]:
    """Draw up to ``examples`` values of ``strategy`` (fewer when Hypothesis exhausts a small
    space); return (values drawn, seconds)."""
    drawn = 0

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def draw(value):
        nonlocal drawn
        drawn += 1

    start = time.perf_counter()
    draw()
    return drawn, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="draws per strategy (default 100)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    rows = []
    print(f"{'strategy':<48} {'cases':>6} {'seconds':>8} {'cases/s':>9}")
    for name, make in _strategies().items():
        strategy = make()
        measure(strategy, 1)  # warm-up: imports, op registration
        _TRACES.clear()  # every row starts with planted's trace memo empty, as a fresh process does
        count, seconds = measure(strategy, args.examples)
        rate = count / seconds
        rows.append({"strategy": name, "cases": count, "seconds": seconds, "cases_per_s": rate})
        print(f"{name:<48} {count:>6} {seconds:>8.2f} {rate:>9.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
