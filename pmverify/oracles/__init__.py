"""Oracles: the properties ``check_case`` judges a pass by.

An oracle is a callable ``check(pair: RunPair) -> list[Violation]``; none raises on a finding.
``ORACLES`` maps each built-in oracle's name to its check, in the order ``check_case`` asks them.
Each built-in oracle is a module (``MODULES``) exporting ``check(pair)`` and ``applies(pair)``:
whether it has something to judge on a pair whose pass ran (``CaseResult.judged`` lists those that
had; :func:`applicability` gives an oracle's); a callable of yours always has.

Writing your own: ``check_case`` / ``verify`` apply the pass once, build one :class:`RunPair`
and hand that same object to every oracle, built-in or yours (``oracles=[..., my_oracle]``).
Read from it, do not modify it:

- ``pair.case`` (the :class:`~pmverify.GraphCase`), ``pair.before`` / ``pair.after`` (the graph
  modules before and after the pass; ``after`` is None when the pass raised, which ``check_case``
  reports as a ``"crash"`` without asking the oracles), ``pair.matched_count`` and
  ``pair.match_records`` (:class:`MatchRecord`: the rewrites made through Inductor's pattern
  entries), ``pair.ranks`` (the runs of ranks 1.. of a tensor-parallel case);
- ``pair.results(rank)`` (:class:`RankResults`: the graph before the pass, after it and the
  float64 reference run on that rank's inputs, each ``(flat outputs, final values of the
  inputs)``; ``after`` is the exception when the rewritten graph raised), computed on first use
  and shared with the semantics oracle;
- ``pair.repropagated()`` (:class:`Repropagation`: fake tensors re-propagated through ``after``)
  and ``pair.live_after()`` (the nodes dead-code elimination keeps), computed once.

Return one :class:`Violation` per finding (``Violation("my_oracle", "what is wrong", nodes)``). An
exception an oracle raises is not a finding of the pass: where the rewritten graph itself runs (and
its fake values propagate), it is an error of the oracle, an :class:`InternalError` in
``CaseResult.internal_errors`` with its traceback, and the case counts as not judged by that oracle;
only where the rewritten graph itself fails is it reported as a finding of that oracle ("could not
check the rewritten graph, which ..."). Raise :class:`PmverifyInternalError` to make it an internal
error either way. Example::

    def no_new_nodes(pair: RunPair) -> list[Violation]:
        if pair.after is None or len(pair.after.graph.nodes) <= len(pair.before.graph.nodes):
            return []
        return [Violation("no_new_nodes", "the pass made the graph larger")]

    pmverify.check_case(MyPass, case, oracles=[*ORACLES, no_new_nodes])
"""

from collections.abc import Callable
from types import ModuleType

from .._execution import MatchRecord, RankResults, Repropagation, RunPair
from . import (
    aliasing,
    cache_key,
    compile_ranges,
    expectations,
    functionalization,
    mutation_barriers,
    semantics,
    structure,
    tensor_parallel,
)
from ._violation import InternalError, PmverifyInternalError, Violation

#: The type of an oracle: a check of one :class:`RunPair`.
Oracle = Callable[[RunPair], list[Violation]]

#: The built-in oracles' modules, by name, in the order ``check_case`` asks them: each exports
#: ``check(pair)`` and ``applies(pair)``.
MODULES: dict[str, ModuleType] = {
    "structure": structure,
    "semantics": semantics,
    "mutation_barriers": mutation_barriers,
    "functionalization": functionalization,
    "aliasing": aliasing,
    "tensor_parallel": tensor_parallel,
    "expectations": expectations,
    "cache_key": cache_key,
    "compile_ranges": compile_ranges,
}

ORACLES: dict[str, Oracle] = {name: module.check for name, module in MODULES.items()}


def _always(pair: RunPair) -> bool:
    return True


def applicability(oracle: Oracle) -> Callable[[RunPair], bool]:
    """``applies`` of the built-in oracle whose check ``oracle`` is (its module's), else one that
    always holds: a callable oracle of yours judges every case whose pass ran."""
    for module in MODULES.values():
        if oracle is module.check:
            return module.applies
    return _always


__all__ = [
    "MODULES",
    "ORACLES",
    "applicability",
    "InternalError",
    "PmverifyInternalError",
    "MatchRecord",
    "Oracle",
    "RankResults",
    "Repropagation",
    "RunPair",
    "Violation",
    "aliasing",
    "cache_key",
    "compile_ranges",
    "expectations",
    "functionalization",
    "mutation_barriers",
    "semantics",
    "structure",
    "tensor_parallel",
]
