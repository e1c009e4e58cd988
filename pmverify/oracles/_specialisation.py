"""The structure oracle's checks of a case with symbolic sizes: the rewrite keeps the graph as
dynamic as it was.

A graph torch.compile traced with ``dynamic=True`` serves every size of its symbols' range (vLLM
runs one graph for a whole compile range and evaluates no guard at run time). A rewrite that reads
a symbolic size as an int bakes its hint into the graph: a ``view`` or ``full`` of the hint's size,
or a guard (``Eq(s0, 11)``) the pass added while it matched. Checked here, with fake tensors of
symbolic sizes (:func:`pmverify._shapes.sizes.symbolic_inputs`):

- the guards the pass added to the ``ShapeEnv`` of the graph it was handed (``RunPair.pass_guards``)
  hold at every size of each symbol's range;
- the guards a fresh symbolic propagation through the rewritten graph records allow every size the
  same propagation through the graph before the pass allows;
- every output keeps the symbolic sizes it had (``s0``, not ``11``): a size is lost only where the
  two differ somewhere in the symbols' ranges (``12`` and ``s1 - 1`` are one size while ``s1``'s
  range is [13, 13]). Equal means equal as expressions, or at every point of ranges of at most
  :data:`MAX_POINTS` size assignments; a wider range where they differ as expressions is a loss.

Each finding names the symbol and the sizes it loses.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import sympy
import torch

from .._execution import RunPair, propagate_symbolic
from .._fx import output_vals
from .._shapes.sizes import allowed_sizes, written_size
from ._violation import SPECIALISATION, Violation

__all__ = ["violations", "MAX_POINTS"]

#: The most size assignments (the product of the free symbols' range widths) two different size
#: expressions are compared at; past it they are taken as different.
MAX_POINTS = 64


def _names(shape_env: Any) -> dict[sympy.Symbol, str]:
    """The env's symbols -> the case's names (the source each was created from)."""
    return {sym: sources[0].name for sym, sources in shape_env.var_to_sources.items() if sources}


def _lost(pair: RunPair, shape_env: Any, guards: Iterable[Any] | None = None) -> dict[str, list[int]]:
    """Per symbol, the sizes of its range where a guard (``guards``, else all of ``shape_env``'s)
    fails, the others at their hints."""
    names = _names(shape_env)
    hints = {s.name: s.hint for s in pair.case.symbols}
    exprs = [guard.expr for guard in shape_env.guards] if guards is None else list(guards)
    lost = {}
    for symbol in pair.case.symbols:
        sizes = range(symbol.min, symbol.max + 1)
        kept = set(allowed_sizes(exprs, names, hints, symbol.name, sizes))
        missing = [n for n in sizes if n not in kept]
        if missing:
            lost[symbol.name] = missing
    return lost


def _spans(sizes: list[int]) -> str:
    runs, start = [], sizes[0]
    for previous, n in zip(sizes, sizes[1:] + [None], strict=True):
        if n != previous + 1:
            runs.append(f"{start}" if start == previous else f"{start}..{previous}")
            start = n
    return ", ".join(runs)


def _written(value: Any, names: Mapping[sympy.Symbol, str]) -> Any:
    """A tensor's sizes (an int, or a symbolic size written with the case's names), a ``SymInt``'s
    expression, or None for anything else."""
    if isinstance(value, torch.Tensor):
        return tuple(written_size(s, names) or int(s) for s in value.shape)
    if isinstance(value, torch.SymInt):
        return written_size(value, names)
    return None


def _exprs(value: Any, names: Mapping[sympy.Symbol, str]) -> tuple[Any, ...] | None:
    """A tensor's sizes, or a ``SymInt``, as sympy expressions over the case's names (the symbols
    :func:`~pmverify._shapes.sizes.written_size` writes), ints as ``sympy.Integer``; None otherwise."""
    renamed = {sym: sympy.Symbol(name, integer=True, positive=True) for sym, name in names.items()}

    def expr(size: Any) -> Any:
        return size.node.expr.xreplace(renamed) if isinstance(size, torch.SymInt) else sympy.Integer(int(size))

    if isinstance(value, torch.Tensor):
        return tuple(expr(s) for s in value.shape)
    if isinstance(value, torch.SymInt):
        return (expr(value),)
    return None


def _same_size(before: Any, after: Any, case: Any) -> bool:
    """Whether sizes ``before`` and ``after`` (sympy expressions over the case's names) are equal at
    every size of the case's ranges: equal as expressions, or at each point of ranges of at most
    :data:`MAX_POINTS` assignments of their free symbols."""
    try:
        if sympy.expand(before - after) == 0:
            return True
    except Exception:  # noqa: BLE001 - an expression sympy cannot subtract: compare the points
        pass
    ranges = {s.name: range(s.min, s.max + 1) for s in case.symbols}
    free = sorted(before.free_symbols | after.free_symbols, key=str)
    if any(sym.name not in ranges for sym in free):
        return False
    points = 1
    for sym in free:
        points *= len(ranges[sym.name])
    if points > MAX_POINTS:
        return False
    for values in itertools.product(*(ranges[sym.name] for sym in free)):
        at = {sym: sympy.Integer(v) for sym, v in zip(free, values, strict=True)}
        b, a = before.xreplace(at), after.xreplace(at)
        if not (b.is_number and a.is_number and b == a):
            return False
    return True


def _renamed(guards: Iterable[Any], shape_env: Any) -> set[str]:
    """``guards`` (sympy expressions over ``shape_env``'s symbols) written with the case's names."""
    names = {sym: sympy.Symbol(name) for sym, name in _names(shape_env).items()}
    return {str(guard.xreplace(names)) for guard in guards}


def _propagated(gm: torch.fx.GraphModule, pair: RunPair) -> tuple[Any, list[Any]]:
    copied = copy.deepcopy(gm)
    propagation = propagate_symbolic(copied, pair.case)
    return propagation.mode.shape_env, output_vals(copied)


def violations(pair: RunPair) -> list[Violation]:
    """The findings above for ``pair``; [] for a case without symbols, a pass that raised, or
    compiled mode (which compares torch.compile's own dynamic runs)."""
    case = pair.case
    if not case.symbols or pair.after is None or pair.compiled is not None:
        return []
    found: list[Violation] = []
    propagation = pair.before_propagation
    if pair.pass_guards and propagation is not None and propagation.mode.shape_env is not None:
        env = propagation.mode.shape_env
        for name, sizes in _lost(pair, env, pair.pass_guards).items():
            guards = ", ".join(sorted(_renamed(pair.pass_guards, env)))
            found.append(
                Violation(
                    "structure",
                    f"the pass added guards {guards} while it ran: the rewrite holds only where they do, and "
                    f"{name} loses {_spans(sizes)} of its range [{_range(case, name)}] (a symbolic size read as an int)",
                    kind=SPECIALISATION,
                )
            )
    try:
        before_env, before_out = _propagated(pair.before, pair)
    except Exception:  # noqa: BLE001 - the case's own graph: nothing to compare with
        return found
    try:
        after_env, after_out = _propagated(pair.after, pair)
    except Exception as exc:  # noqa: BLE001 - a finding: the rewrite no longer traces symbolically
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        return [
            *found,
            Violation(
                "structure",
                f"fake tensors of symbolic sizes do not propagate through the rewritten graph: {first}",
                kind=SPECIALISATION,
            ),
        ]
    before_lost, after_lost = _lost(pair, before_env), _lost(pair, after_env)
    for symbol in case.symbols:
        extra = sorted(set(after_lost.get(symbol.name, ())) - set(before_lost.get(symbol.name, ())))
        if extra:
            guards = sorted(
                _renamed((g.expr for g in after_env.guards), after_env)
                - _renamed((g.expr for g in before_env.guards), before_env)
            )
            found.append(
                Violation(
                    "structure",
                    f"the rewritten graph specialises {symbol.name}: its symbolic trace holds for "
                    f"{symbol.name} in [{_range(case, symbol.name)}] before the pass, not at {_spans(extra)} after "
                    f"(new guards: {', '.join(guards) or 'none'})",
                    kind=SPECIALISATION,
                )
            )
    names_before, names_after = _names(before_env), _names(after_env)
    for i, (b, a) in enumerate(zip(before_out, after_out, strict=False)):
        wb, wa = _written(b, names_before), _written(a, names_after)
        if wb is None or wa is None or wb == wa or len(wb) != len(wa):
            continue
        eb, ea = _exprs(b, names_before), _exprs(a, names_after)
        if not all(_same_size(x, y, case) for x, y in zip(eb, ea, strict=True)):
            found.append(
                Violation(
                    "structure",
                    f"output {i} has sizes {_show(wb)} before the pass, {_show(wa)} after (symbolic sizes lost)",
                    kind=SPECIALISATION,
                )
            )
    return found


def _show(written: Any) -> str:
    return "[" + ", ".join(str(s) for s in written) + "]" if isinstance(written, tuple) else str(written)


def _range(case: Any, name: str) -> str:
    symbol = next(s for s in case.symbols if s.name == name)
    return f"{symbol.min}, {symbol.max}"
