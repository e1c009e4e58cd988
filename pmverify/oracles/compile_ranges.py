"""Compile-ranges oracle: where a pass says it applies, its rewrite holds at every size there.

vLLM compiles one graph per *compile range* of token counts (``Range(start, end)``, ``end``
included; a single compile size is ``Range(n, n)``) and runs a pass on that graph only when the
pass's ``is_applicable_for_range(compile_range)`` is True. The rewrite it then makes runs at every
token count of the range. So, for a pass with that method, on a case with symbols, this oracle:

- takes a few ranges inside the first symbol's ``[min, max]`` (the token dim, as strategies draw it):
  the whole range (vLLM's default, one range up to ``max_num_batched_tokens``), the two halves of a
  split at a point (vLLM's ``compile_ranges_split_points``) and one single size (its
  ``compile_sizes``). Points are drawn with a ``random.Random`` seeded from the symbol (its name,
  hint, range and sizes): the same case gives the same ranges, and no Hypothesis draw is made;
- asks the pass about each (:class:`Range`, with vLLM's ``start`` / ``end`` / ``is_single_size()``
  / ``in``); a pass whose method raises is a finding (vLLM's pass manager would raise too);
- where the pass says it applies, runs the graphs before and after the pass at the range's ends and
  one size inside (:meth:`RunPair.at`, the other symbols at their hints) and compares them with
  :func:`pmverify.oracles.semantics.check`; a finding names the range and the size
  (``"applicable to range [2, 40] of s0 ..., but at s0=33 (also wrong at s0=40): output 0 ..."``:
  one finding per range, the first failing size's semantics finding, the other failing sizes named). The sizes of
  :attr:`Symbol.sizes <pmverify.Symbol.sizes>` that fall in a range are checked too (the results are
  shared with the semantics oracle, computed once), so a size the semantics oracle flags is flagged
  here as well, naming the range the pass claimed. A size in several applicable ranges is reported
  once, for the first.

Where the pass says it does not apply, nothing is checked: vLLM does not run it on that range's
graph. In particular a pass that rewrites a case whose whole range it declines is fine here (pmverify
calls the pass on every case, vLLM would not). A pass without ``is_applicable_for_range``, a case
without symbols and a pass that raised give no findings. In compiled mode the sizes run through the
compiled functions (``CompiledRun.at``: a recompile of the one with the pass is a finding).
"""

from __future__ import annotations

import random
import zlib

from .._execution import RunPair, error_summary
from .._shapes.sizes import CompileRange
from . import semantics
from ._violation import Violation

__all__ = ["Range", "applies", "check", "ranges_for"]


#: vLLM's ``Range(start, end)``, both ends included (:class:`pmverify.CompileRange`).
Range = CompileRange


def ranges_for(low: int, high: int, seed: str) -> list[Range]:
    """The ranges judged for a symbol valid in ``[low, high]``: the whole range, the halves of a
    split at a drawn point and one drawn single size, without repeats; points drawn by a
    ``random.Random`` seeded with ``seed`` (a string: the same string, the same ranges)."""
    rng = random.Random(zlib.crc32(seed.encode()))
    ranges = [Range(low, high)]
    if high > low:
        split = rng.randint(low, high - 1)
        ranges += [Range(low, split), Range(split + 1, high)]
    single = rng.randint(low, high)
    ranges.append(Range(single, single))
    return list(dict.fromkeys(ranges))


def _sizes(compile_range: Range, rng: random.Random, also: list[int]) -> list[int]:
    """The range's ends, one size drawn inside, and the sizes of ``also`` that lie in it, sorted."""
    inside = rng.randint(compile_range.start, compile_range.end)
    sizes = [compile_range.start, compile_range.end, inside, *(n for n in also if n in compile_range)]
    return sorted(dict.fromkeys(sizes))


def applies(pair: RunPair) -> bool:
    """Whether this oracle has something to judge on ``pair`` (whose pass ran): the pass has vLLM's
    ``is_applicable_for_range`` and the case has symbols."""
    return callable(getattr(pair.pass_, "is_applicable_for_range", None)) and bool(pair.case.symbols)


def check(pair: RunPair) -> list[Violation]:
    """Return the compile-range violations of ``pair`` (see the module docstring): one per range the
    pass says it applies to where the rewrite does not hold at some size (the semantics finding at
    the first such size, prefixed with the range and the sizes), and one per range for which
    ``is_applicable_for_range`` raised.
    Empty for a pass without the method, a case without symbols and a pass that raised."""
    method = getattr(pair.pass_, "is_applicable_for_range", None)
    if not callable(method) or not pair.case.symbols or pair.after is None:
        return []
    symbol = pair.case.symbols[0]
    hints = {s.name: s.hint for s in pair.case.symbols}
    seed = f"{symbol.name}:{symbol.hint}:{symbol.min}:{symbol.max}:{symbol.sizes}"
    rng = random.Random(zlib.crc32(seed.encode()) + 1)
    violations: list[Violation] = []
    checked: set[int] = set()  # a size in two applicable ranges is reported once, for the first
    for compile_range in ranges_for(symbol.min, symbol.max, seed):
        try:
            applies = bool(method(compile_range))
        except Exception as exc:  # noqa: BLE001 - vLLM's pass manager would raise it: a finding
            violations.append(
                Violation("compile_ranges", f"is_applicable_for_range({compile_range!r}) raised {error_summary(exc)}")
            )
            continue
        if not applies:
            continue
        failed: list[tuple[int, Violation]] = []
        for size in _sizes(compile_range, rng, list(symbol.sizes)):
            if size in checked:
                continue
            checked.add(size)
            found = semantics.check(pair.at({**hints, symbol.name: size}))
            if found:
                failed.append((size, found[0]))
        if failed:
            (size, first), others = failed[0], [n for n, _ in failed[1:]]
            also = f" (also wrong at {', '.join(f'{symbol.name}={n}' for n in others)})" if others else ""
            violations.append(
                Violation(
                    "compile_ranges",
                    f"applicable to range {compile_range} of {symbol.name} (is_applicable_for_range is True), "
                    f"but at {symbol.name}={size}{also}: {first.message}",
                    first.nodes,
                )
            )
    return violations
