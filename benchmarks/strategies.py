"""Cases per second for each public strategy of ``pmverify.strategies``, on this machine.

Run: ``python benchmarks/strategies.py [--examples N] [--json PATH]``. Each strategy is drawn
``N`` times (Hypothesis' generate phase only, no database, no shrinking) after one warm-up draw
(imports, op registration), with ``planted``'s memo of pattern traces emptied before each row so
rows do not depend on their order; the table gives wall seconds and cases per second. Figures, not
assertions: timing is not tested (shared machines make timed tests flaky).

Before / after issue 15 part 1 (fx_graphs from 38 ops in one form each to 81 ops in every argument
form and 7 dtypes; tensors() with scales and row kinds), cases/s with ``--examples 100``: four runs
of main (f5b8d07) and two of the branch, alternating on the same 2 shared cores (torch 2.13.0 CPU).
Rows whose code did not change (qk_norm_cases, qk_norm_tp_cases) moved by up to 30 % between runs::

    strategy                                      before        after
    tensors(float32, [64, 64])                1518-1778    1340-1533
    fx_graphs()                                 142-156      133-164
    fx_graphs(max_nodes=30)                       33-48       32-33
    like(qk_norm example)                       693-834      612-694
    planted(rms_norm)                             33-44       35-38
    planted(qk_norm)                              29-48       26-35
    qk_norm_cases()          (own tensors)        31-38       31-35
    qk_norm_tp_cases()       (own tensors)        26-32       21-24
    with_mutations(planted(rms_norm))             29-40       36-37
    with_mutating_custom_ops(planted(rms_norm))   27-31       23-28
    tp_cases(planted(rms_norm))                   43-54       60-66

A tensor costs one more choice (scale and row kind together) and a row pass on half of the draws
(~15 % fewer tensors and like() tuples a second); a graph holds more nodes per op on average
(unbind's and split's getitems, guarded ops), so fx_graphs' largest cases are up to ~20 % slower;
planted, which traces patterns, is about as fast as before.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pmverify._fx import clear_trace_memo
from pmverify.fusions.qk_norm import QKNormConfig
from pmverify.fusions.qk_norm.patterns import rewrites
from pmverify.fusions.qk_norm.testing import qk_norm_cases, qk_norm_tp_cases
from pmverify.strategies import (
    dtypes,
    fx_graphs,
    like,
    planted,
    shapes,
    tensors,
    tp_cases,
    tp_sizes,
    with_mutating_custom_ops,
    with_mutations,
)


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
        clear_trace_memo()  # every row starts with planted's trace memo empty, as a fresh process does
        count, seconds = measure(strategy, args.examples)
        rate = count / seconds
        rows.append({"strategy": name, "cases": count, "seconds": seconds, "cases_per_s": rate})
        print(f"{name:<48} {count:>6} {seconds:>8.2f} {rate:>9.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
