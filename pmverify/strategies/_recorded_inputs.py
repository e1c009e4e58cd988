"""What :func:`planted` (hence :func:`pmverify.check_rewrite`) draws for a recorded rewrite by
default, beyond :func:`like` of its example inputs:

- **Capped sizes.** Inductor registers some patterns on large example inputs (its attention
  pattern 13 on three ``[1024, 128, 128]`` tensors, 16M elements each: minutes for ten cases). Each
  size is mapped to a smaller one, the same map for every tensor, until every example tensor holds
  at most :data:`MAX_NUMEL` elements and every side is at most :data:`MAX_SIDE` (:func:`capped_sizes`).
  The map keeps what a pattern may rely on: ranks, sizes 0 and 1, equal sizes equal and distinct
  ones distinct, divisibility (a head dim that divides a hidden size still does) and the example's
  layout family. A cap is kept only when the search function traces and runs eagerly at the capped
  sizes and Inductor's matcher holding the rewrite judges the capped example as it judges the
  recorded one (matched, or refused by its ``extra_check``); otherwise the example's sizes stay.
- **0-d tensors that stand for numbers.** Inductor gives some scalars as 0-d example tensors
  (``torch.tensor(2.0)`` for the attention patterns' ``inv_scale`` / ``scale_factor``) while their
  ``extra_check`` wants a Python number there (a model divides by ``math.sqrt(head_dim)``): drawn
  as 0-d tensors only, they are never matched. A 0-d float or int example tensor stands for a number
  when the search function reads it only as one: traced with a number in its place, it has the same
  ops and wiring, the number a literal where the tensor was an input (:func:`number_positions`).
  Such a position is drawn either as a Python number (3 in 4; the simplest, shrunk to), around and
  far from the example's value as ``scalar_workaround`` values are (1 where the example holds 0 or
  no value: Inductor's are fake tensors, re-created as zeros), or as the 0-d tensor.
- **Quantization scales.** An example tensor that is a scale (named ``scale`` / ``*_scale``, read
  as a divisor before a narrowing cast...: :mod:`._scales`) is drawn positive and finite: a zero
  scale makes the float64 reference NaN (a void case), which no real quantized model holds.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from .._fx import trace
from .._registry.record import RecordedRewrite
from ._like import TensorLike
from ._scales import scale_positions
from ._traced import Traced, runs_eagerly, signature
from ._truth import isolated_truth

__all__ = [
    "MAX_NUMEL",
    "MAX_SIDE",
    "NumberForms",
    "RecordedExample",
    "capped_sizes",
    "describe_sizes",
    "number_positions",
    "recorded_example",
]

#: The most elements an example tensor keeps at the capped sizes.
MAX_NUMEL = 4096
#: The largest side an example tensor keeps at the capped sizes, in elements.
MAX_SIDE = 64


def _factors(n: int) -> dict[int, int]:
    """The prime factorisation of ``n`` >= 1, as {prime: exponent}."""
    factors: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            factors[p] = factors.get(p, 0) + 1
            n //= p
        p += 1
    if n > 1:
        factors[n] = factors.get(n, 0) + 1
    return factors


def capped_sizes(
    shapes: Sequence[Sequence[int]], *, max_numel: int = MAX_NUMEL, max_side: int = MAX_SIDE
) -> dict[int, int]:
    """A map of the sizes of ``shapes`` to smaller ones (sizes it leaves alone are absent) under
    which every shape holds at most ``max_numel`` elements and every side is at most ``max_side``,
    or as close as the rules allow:

    - a size ``n = prod(p ** e)`` maps to ``prod(p ** f_p(e))`` with ``f_p(e) = max(rank_p(e), e -
      k_p)``: ``rank_p(e)`` the rank (from 1) of ``e`` among the exponents of ``p`` in the sizes, ``k_p``
      a shift per prime. ``f_p`` is strictly increasing and at least 1 on the exponents in use, so
      divisibility is kept (``a | b`` implies ``f(a) | f(b)``), distinct sizes stay distinct and no
      size above 1 becomes 1; sizes 0 and 1 stay;
    - shifts grow one at a time, each time for the prime that shrinks the excess (the log of the
      ratio of each number above its cap to the cap, summed) most, changing the fewest sizes.

    Example: ``[(1024, 128, 128)]`` maps ``{1024: 64, 128: 8}`` (64 * 8 * 8 = 4096 elements)."""
    sizes = sorted({n for shape in shapes for n in shape if n > 1})
    factored = {n: _factors(n) for n in sizes}
    exponents: dict[int, list[int]] = {}
    for factors in factored.values():
        for p, e in factors.items():
            exponents.setdefault(p, [])
            if e not in exponents[p]:
                exponents[p].append(e)
    ranks = {p: {e: i + 1 for i, e in enumerate(sorted(es))} for p, es in exponents.items()}

    def mapping(shifts: dict[int, int]) -> dict[int, int]:
        return {
            n: math.prod(p ** max(ranks[p][e], e - shifts.get(p, 0)) for p, e in factors.items())
            for n, factors in factored.items()
        }

    def excess(shifts: dict[int, int]) -> float:
        new = mapping(shifts)
        numels = [math.prod(new.get(n, n) for n in shape) for shape in shapes]
        sides = [new[n] for n in sizes]
        return sum(math.log(x / max_numel) for x in numels if x > max_numel) + sum(
            math.log(x / max_side) for x in sides if x > max_side
        )

    shifts: dict[int, int] = {}
    current = excess(shifts)
    while current > 0:
        best = None
        for p in sorted(exponents):
            trial = {**shifts, p: shifts.get(p, 0) + 1}
            value = excess(trial)
            changed = sum(m != n for n, m in mapping(trial).items())
            if value < current and (best is None or (value, changed) < best[:2]):
                best = (value, changed, trial)
        if best is None:
            break
        current, _, shifts = best
    return {n: m for n, m in mapping(shifts).items() if m != n}


def _example_value(tensor: torch.Tensor) -> float | int:
    """The Python number a 0-d example tensor holds; 1 (of its kind) when it holds none readable (a
    fake or meta tensor), 0 (a fake example tensor re-created by :func:`pmverify.record_patterns`
    holds zeros; a zero scale only divides by zero) or a non-finite one (``torch.empty`` garbage)."""
    floating = tensor.is_floating_point()
    try:
        value = tensor.item()
    except Exception:  # noqa: BLE001 - a fake or meta tensor has no value
        value = 0
    if not value or (floating and not math.isfinite(value)):
        return 1.0 if floating else 1
    return float(value) if floating else int(value)


def _literal_signature(gm: torch.fx.GraphModule, placeholders: set[torch.fx.Node]) -> tuple[Any, ...]:
    """The loose signature of ``gm`` with every use of ``placeholders`` made a literal."""
    copied = copy.deepcopy(gm)
    names = {ph.name for ph in placeholders}
    chosen = [n for n in copied.graph.nodes if n.op == "placeholder" and n.name in names]
    for node in copied.graph.nodes:
        if node.op != "placeholder":
            node.args = torch.fx.node.map_arg(node.args, lambda n: 1.0 if n in chosen else n)
            node.kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: 1.0 if n in chosen else n)
    return signature(copied, loose=True)


def number_positions(
    pattern: Callable[..., Any], args: Sequence[Any], trace_fn: Any, example: Sequence[Any] | None = None
) -> tuple[dict[int, float | int], tuple[Any, ...] | None]:
    """The positions of ``args`` (the search function's arguments, e.g. zeros like its example
    inputs) holding a 0-d float or int tensor that ``pattern`` reads only as a number, each with its
    value in ``example`` (default ``args``; 1 where it holds none: :func:`_example_value`); and the
    loose signature of the pattern traced with numbers there (None when none). All 0-d tensors are
    tried together: when the pattern does not trace with numbers in their place, or traces to other
    ops or wiring than with the tensors, there are none."""
    zero_d = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.dim() == 0 and a.dtype != torch.bool]
    if not zero_d:
        return {}, None
    example = args if example is None else example
    values = {i: _example_value(example[i]) for i in zero_d}
    numbers = tuple(values.get(i, a) for i, a in enumerate(args))
    try:
        tensor_gm = trace(pattern, args, trace_fn)
        number_gm = trace(pattern, numbers, trace_fn)
    except Exception:  # noqa: BLE001 - not traceable with numbers there: they stay tensors
        return {}, None
    # the pattern's arguments: a joint (training) trace has its tangents after them
    placeholders = list(tensor_gm.graph.find_nodes(op="placeholder"))[: len(args)]
    if len(placeholders) != len(args):
        return {}, None
    reference = signature(number_gm, loose=True)
    if reference != _literal_signature(tensor_gm, {placeholders[i] for i in zero_d}):
        return {}, None
    return values, reference


class NumberForms:
    """The 0-d tensor positions of a recorded rewrite that stand for numbers, drawn as numbers (from
    ``values``: a strategy per position) or left as the 0-d tensors drawn; ``reference`` is the
    loose signature of the search function traced with numbers there; ``examples`` the example
    values (put back where a drawn number does not trace). Its repr (which keys the example
    database) names the positions and strategies."""

    def __init__(self, values: dict[int, Any], reference: tuple[Any, ...] | None, examples: dict[int, Any]) -> None:
        self.values, self.reference, self.examples = values, reference, examples

    def __repr__(self) -> str:
        return f"numbers({self.values!r})"

    def draw(self, draw: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``args`` with every such position a number (3 draws in 4, and the simplest: shrinks to
        it) or all left as the 0-d tensors drawn."""
        if draw(st.integers(0, 3)) == 3:
            return args
        return tuple(draw(self.values[i]) if i in self.values else a for i, a in enumerate(args))


@dataclasses.dataclass(frozen=True)
class RecordedExample:
    """A recorded rewrite's example, as :func:`planted` draws like it by default.

    - ``args``: the search function's arguments (``scalar_workaround`` values in place), tensors as
      zeros at the capped sizes in the example's layouts.
    - ``capped_sizes``: the example sizes changed, ``{old: new}`` (empty: none).
    - ``not_capped``: why sizes above the caps were kept, else None.
    - ``numbers``: the positions of 0-d tensors that stand for numbers, with their example values.
    - ``number_reference``: the loose signature of the search function traced with those numbers.
    - ``scales``: the positions of the example tensors that are quantization scales
      (:func:`~._scales.scale_positions`), drawn positive and finite.
    """

    args: tuple[Any, ...]
    capped_sizes: dict[int, int]
    not_capped: str | None
    numbers: dict[int, float | int]
    number_reference: tuple[Any, ...] | None
    scales: tuple[int, ...] = ()

    def describe_cap(self) -> str | None:
        """The cap in words, for results and labels (None when nothing was capped or refused)."""
        return describe_sizes(self.capped_sizes) or self.not_capped


def describe_sizes(capped: dict[int, int]) -> str | None:
    """A map of capped sizes in words (None when empty): ``"sizes capped 128->8, 1024->64 (...)"``."""
    if not capped:
        return None
    sizes = ", ".join(f"{old}->{new}" for old, new in sorted(capped.items()))
    return f"sizes capped {sizes} (at most {MAX_NUMEL} elements a tensor, sides at most {MAX_SIDE})"


_EXAMPLES: weakref.WeakKeyDictionary[RecordedRewrite, RecordedExample] = weakref.WeakKeyDictionary()


def _zeros(args: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(x.zeros() if isinstance(x, TensorLike) else x for x in args)


def _verdict(rewrite: RecordedRewrite, args: tuple[Any, ...]) -> str:
    """What Inductor's matcher holding ``rewrite`` alone does with the search function traced on
    ``args``: "matched", "extra_check", "no_match", "matcher_raised" or "does not trace"."""
    try:
        gm = trace(rewrite.search_fn, args, rewrite.trace_fn)
    except Exception:  # noqa: BLE001 - compared only: the draw reports a pattern that does not trace
        return "does not trace"
    truth = isolated_truth(rewrite, Traced(gm, args))
    return "matched" if truth.must_match is True else truth.reason or "no_match"


def _capped(rewrite: RecordedRewrite, example: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[int, int], str | None]:
    """``example`` at capped sizes (zeros), the sizes changed, and why not when the cap was refused."""
    likes = [TensorLike.of(x) for x in example]
    shapes = [x.shape for x in likes if isinstance(x, TensorLike)]
    sizes = capped_sizes(shapes)
    if not sizes:
        if any(math.prod(s) > MAX_NUMEL or max(s, default=0) > MAX_SIDE for s in shapes):
            return _zeros(likes), {}, "sizes not capped: no size map keeps their divisibility within the caps"
        return _zeros(likes), {}, None
    capped = tuple(
        x.resized(tuple(sizes.get(n, n) for n in x.shape)).zeros() if isinstance(x, TensorLike) else x for x in likes
    )
    if not runs_eagerly(rewrite.search_fn, capped):
        return _zeros(likes), {}, "sizes not capped: the search function does not run at the capped sizes"
    before, after = _verdict(rewrite, example), _verdict(rewrite, capped)
    if before != after:
        return (
            _zeros(likes),
            {},
            f"sizes not capped: Inductor's matcher gives {after} at the capped sizes, {before} at the example's",
        )
    return capped, sizes, None


def recorded_example(rewrite: RecordedRewrite) -> RecordedExample:
    """The :class:`RecordedExample` of ``rewrite`` (memoised per rewrite: its decisions trace the
    search function and run Inductor's matcher, 25-50 ms each). Raises ``ValueError`` as
    :attr:`RecordedRewrite.search_args` does."""
    found = _EXAMPLES.get(rewrite)
    if found is None:
        example = rewrite.search_args
        args, sizes, why = _capped(rewrite, example)
        numbers, reference = number_positions(rewrite.search_fn, args, rewrite.trace_fn, example)
        scales = scale_positions(rewrite.search_fn, args, rewrite.trace_fn)
        found = RecordedExample(args, sizes, why, numbers, reference, scales)
        _EXAMPLES[rewrite] = found
    return found
