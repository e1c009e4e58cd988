"""How deep ``pmverify audit`` must look at a rewrite to find a wrong constant: the figures behind
its default ``--max-examples``.

Run: ``python benchmarks/audit_depth.py [--depths 10 25 50 100 200] [--seeds 5] [--json PATH]``.
For each rewrite below, the audit's per-rewrite check (:func:`pmverify._audit.check_one`, with the
settings an audit worker uses: pmverify's ``ci`` profile, no example database) runs at each depth
(``max_examples`` of check_rewrite; the planted check runs half as many) over ``--seeds`` seeds
(the audit's seeds of the rewrite, :func:`pmverify._audit.job.rewrite_seed`, for audit seeds
0, 1, ...). A row gives the runs with a ``finding`` (``found``), those whose finding is on a plain
instance of the pattern (``plain``: not shrunk to a near miss or variant, so the constant's), and
the mean and longest seconds per run (shrinking included):

- ``rms_eps_1e-5``: the bank's :class:`pmverify.faults.RMSNormHardCodedEps` (pattern eps 1e-6,
  replacement 1e-5), registered with ``register_replacement``;
- ``gelu_tanh_0.0447``: ``gelu(x, approximate="tanh") * y`` (float32) rewritten to the formula
  written out, with 0.0447 for the 0.044715 of GELU's tanh approximation (issue 30's wrong
  constant; a search with the formula written out would also be found through Inductor's matcher
  ignoring ``add``'s ``alpha``, a true finding of its own that says nothing of the constant);
- ``gelu_tanh_0.0447_bf16``: the same registered with bfloat16 example inputs: in bfloat16 the
  constant is far below an ulp, but Inductor's matcher does not look at dtypes, so the rewrite also
  fires on float32 instances (check_rewrite's ``dtype`` variants, random graphs' float32 nodes),
  where it shows;
- ``*_correct*``: their correct twins (the time a quiet rewrite costs, and no false alarm).

``--leave-out`` (default ``optional_arg``) leaves near-miss kinds out of both checks: Inductor's
matcher ignores ``aten.add.Tensor``'s ``alpha`` (checked by hand: ``add(x, x3, alpha=0.5)`` is
rewritten as if it were ``add(x, x3)``), a true finding that every rewrite whose trace holds an add
shows, the correct twins included; left in, it is found first and the finding says nothing of the
constant. ``--leave-out`` with no kind measures the audit as it is.

Figures, not assertions (timing on shared machines is not tested). Measured at issue 30 on 2 cores
shared with five other jobs (load 5-6; torch 2.13.0+cpu), so seconds are loose. Runs that found the
wrong constant, ``--no-shrink`` (the first failing case; its seconds are those of finding it)::

    --leave-out (none: the audit as is), 10 seeds   depth 3     5    10    25
    gelu_tanh_0.0447                                      9/10  10/10 10/10 10/10
    rms_eps_1e-5 (the bank's RMSNormHardCodedEps)         8/10   8/10 10/10 10/10

    --leave-out optional_arg, 10 seeds              depth 3     5    10    25    50   100   200
    gelu_tanh_0.0447                                      9/10   9/10 10/10 10/10 10/10 10/10 10/10
    rms_eps_1e-5                                          7/10   7/10 10/10 10/10 10/10 10/10 10/10
    gelu_tanh_0.0447_bf16 (3 seeds)                          -      -   0/3     -   0/3     -   0/3

Seconds per run of a rewrite that runs all its cases (the correct twins, with shrinking: both quiet
at every depth, 2 seeds; ``gelu_tanh_correct`` swung with the load)::

    depth                 10    25    50   100   200
    rms_eps_correct      0.9   2.3   4.0   9.4  24.5
    gelu_tanh_correct   12.6  14.4  70.1  27.8  37.9

A finding costs its shrinking (10-25 s here, up to the worker's shrink limit) at any depth.
Chosen: 25 (``pmverify._settings.AUDIT_MAX_EXAMPLES``, where the reasoning is).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import torch

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu_tanh_mul(x, y):
    """The search: ``gelu(x, approximate="tanh") * y`` (one ``aten.gelu`` node)."""
    return torch.nn.functional.gelu(x, approximate="tanh") * y


def _gelu_tanh(c: float) -> Callable[..., torch.Tensor]:
    def gelu_tanh_mul_replacement(x, y):
        xf = x.float()  # as Inductor's decomposition of gelu does: bfloat16 math would lose accuracy
        inner = SQRT_2_OVER_PI * (xf + c * xf * xf * xf)
        return (0.5 * xf * (1.0 + torch.tanh(inner))).to(x.dtype) * y

    return gelu_tanh_mul_replacement


def _rms_norm(eps: float) -> Callable[..., torch.Tensor]:
    def rms_norm(x, w):
        xf = x.float()
        return ((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)) * w).to(x.dtype)

    return rms_norm


def _register(search: Callable[..., torch.Tensor], replace: Callable[..., torch.Tensor], example: list) -> None:
    from torch._inductor import pattern_matcher as pm

    pm.register_replacement(search, replace, example, pm.fwd_only, pm.PatternMatcherPass())


def _bf16(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.to(torch.bfloat16) for t in tensors]


#: name -> (search, replacement, example inputs)
REWRITES: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor], Callable[[], list]]] = {
    "rms_eps_1e-5": (_rms_norm(1e-6), _rms_norm(1e-5), lambda: [torch.empty(8, 16), torch.empty(16)]),
    "rms_eps_correct": (_rms_norm(1e-6), _rms_norm(1e-6), lambda: [torch.empty(8, 16), torch.empty(16)]),
    "gelu_tanh_0.0447": (gelu_tanh_mul, _gelu_tanh(0.0447), lambda: [torch.empty(8, 16), torch.empty(8, 16)]),
    "gelu_tanh_correct": (gelu_tanh_mul, _gelu_tanh(0.044715), lambda: [torch.empty(8, 16), torch.empty(8, 16)]),
    "gelu_tanh_0.0447_bf16": (gelu_tanh_mul, _gelu_tanh(0.0447), lambda: _bf16(torch.empty(8, 16), torch.empty(8, 16))),
    "gelu_tanh_correct_bf16": (
        gelu_tanh_mul,
        _gelu_tanh(0.044715),
        lambda: _bf16(torch.empty(8, 16), torch.empty(8, 16)),
    ),
}


def recorded(name: str):
    """The :class:`pmverify.RecordedRewrite` of ``REWRITES[name]``."""
    import pmverify

    with pmverify.record_patterns() as rewrites:
        if name == "rms_eps_1e-5":  # the bank's own registration, uncached
            from pmverify.faults.scalars import _rms_patterns

            _rms_patterns.__wrapped__(1e-6)
        else:
            search, replace, example = REWRITES[name]
            _register(search, replace, example())
    (rewrite,) = rewrites
    return rewrite


@contextlib.contextmanager
def without_near_misses(kinds: tuple[str, ...]) -> Iterator[None]:
    """Leave the near-miss ``kinds`` out of both of the audit's checks while the block runs."""
    import pmverify._rewrites.rewrite as rewrite_module
    import pmverify.strategies as strategies
    from pmverify.strategies._planted import NEAR_MISS_KINDS

    saved = rewrite_module._NEAR_MISSES, strategies.planted
    rewrite_module._NEAR_MISSES = tuple(k for k in saved[0] if k not in kinds)
    strategies.planted = functools.partial(saved[1], near_misses=[k for k in NEAR_MISS_KINDS if k not in kinds])
    try:
        yield
    finally:
        rewrite_module._NEAR_MISSES, strategies.planted = saved


def measure(
    name: str, depth: int, seeds: int, repro_dir: str, leave_out: tuple[str, ...] = (), *, shrink: bool = True
) -> dict:
    from pmverify._audit import check_one
    from pmverify._engine.verify import batch_seed, fresh_settings
    from pmverify._settings import profile_settings

    rewrite = recorded(name)
    settings = fresh_settings(profile_settings("ci"), shrink=shrink)
    found = plain = 0
    seconds, statuses = [], []
    for audit_seed in range(seeds):
        seed = batch_seed(audit_seed, depth)
        start = time.monotonic()
        with without_near_misses(leave_out):
            outcome = check_one(
                rewrite, "PASS = None", max_examples=depth, seed=seed, repro_dir=repro_dir, settings=settings
            )
        seconds.append(time.monotonic() - start)
        statuses.append(outcome["status"])
        found += outcome["status"] == "finding"
        # a finding on a plain instance of the pattern, not on a near miss or variant: the constant's
        plain += outcome["status"] == "finding" and not outcome.get("variants")
    return {
        "rewrite": name,
        "depth": depth,
        "runs": seeds,
        "found": found,
        "rate": found / seeds,
        "plain": plain,
        "mean_s": statistics.mean(seconds),
        "max_s": max(seconds),
        "statuses": statuses,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 25, 50, 100, 200])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rewrites", nargs="+", default=list(REWRITES), choices=list(REWRITES))
    parser.add_argument(
        "--leave-out",
        nargs="*",
        default=["optional_arg"],
        metavar="KIND",
        help="near-miss kinds left out of both checks (default optional_arg: see the docstring; none: the audit as is)",
    )
    parser.add_argument(
        "--no-shrink",
        action="store_true",
        help="report the first failing case (detection only: faster, and its instance)",
    )
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--repro-dir", default=".pmverify/audit-depth-repro")
    args = parser.parse_args(argv)
    from pmverify._compat import set_max_shrinking_seconds

    set_max_shrinking_seconds(75.0)  # what an audit worker sets at the default 5 min timeout
    rows = []
    print(f"{'rewrite':<20}{'depth':>6}{'found':>8}{'plain':>8}{'mean s':>9}{'max s':>8}", flush=True)
    for name in args.rewrites:
        for depth in args.depths:
            row = measure(name, depth, args.seeds, args.repro_dir, tuple(args.leave_out), shrink=not args.no_shrink)
            rows.append(row)
            print(
                f"{name:<20}{depth:>6}{row['found']:>5}/{row['runs']:<2}{row['plain']:>5}/{row['runs']:<2}{row['mean_s']:>9.1f}"
                f"{row['max_s']:>8.1f}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
