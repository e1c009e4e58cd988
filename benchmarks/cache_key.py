"""Seconds to find and shrink a ``uuid()`` that ignores a config field.

Run: ``python benchmarks/cache_key.py [--seed N]`` from the repository root (it imports tests/ for
the README recipe's vLLM-style pass): one ``verify`` (shrinking on, no database, the default
profile's example budget) of the README recipe's ``EpsilonBlindUuidQuantFusionPass``
(tests/test_vllm_style_passes.py: ``planted`` from the rewrite it registers, fp8 config); prints
the seconds and the start of the finding. The bank's ``QKNormUuidIgnoresConfig``:
``pmverify selfcheck --fault QKNormUuidIgnoresConfig`` prints its cases and seconds. Figures, not
assertions.

Issue 30: before, a same-uuid field was a finding only where the pass built with it rewrote the
case otherwise (one match of a variant pass a failing case); after, the pattern entries of the two
configs (their traced search patterns and replacements) are compared once per config pair, graph-
free, and a difference is the finding on any case. 2 shared cores, load 2.5-3.5, seed 0::

    fault                                        before          after
    QKNormUuidIgnoresConfig (selfcheck, 1 case)  2.7-2.8 s       3.5-5.8 s
    EpsilonBlindUuidQuantFusionPass (this)       5.5-6.8 s       1.4-1.9 s (shrunk to 1 op, no instance)

The bank's fault costs more after: its pass caches its pattern pass per config, so the case's
config cannot be recorded again, and the first config's field variants are built and traced
(about 0.2 s each) before the one that differs (eps) is found.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _recipe_row():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import torch
    from _vllm_style import fusions
    from _vllm_style.config import VStyleConfig

    import pmverify
    from pmverify.strategies import planted

    config = VStyleConfig(quant_dtype=torch.float8_e4m3fn)
    bug = fusions.EpsilonBlindUuidQuantFusionPass
    with pmverify.record_patterns() as recorded:
        built = bug(config)
    (rewrite,) = recorded
    return "EpsilonBlindUuidQuantFusionPass", built, planted(rewrite, pass_config=config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import pmverify
    from pmverify._engine.verify import fresh_settings

    name, pass_, cases = _recipe_row()
    started = time.perf_counter()
    try:
        pmverify.verify(pass_, cases, settings=fresh_settings(), seed=args.seed)
        finding = "no finding"
    except Exception as error:  # the finding verify raises
        text = " ".join(str(error).split())
        finding = text[:120] + " ... " + text[text.find("cache_key") :][:360]
    print(f"{name}: {time.perf_counter() - started:.1f} s (search and shrink): {finding}", flush=True)


if __name__ == "__main__":
    main()
