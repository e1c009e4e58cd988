"""Random numbers in the graphs the semantics oracle runs (randperm, dropout, rand_like...).

Every run of a graph that draws random numbers (the graph before the pass, after it, and its
float64 reference) starts from the same state of the default generators (:data:`RNG_SEED`: the CPU
one and, for a case on CUDA, its device's, which its random ops draw from), restored afterwards. A replacement that draws the same numbers in the same order as its pattern
(the same random ops, with outputs of the same shapes and dtypes, in graph order) then computes
the same values, and the case is compared as any other; one that draws them otherwise (a dropout
mask drawn with another op, two draws in the other order) cannot be compared value by value, nor
can a graph that draws more than once when the pass made any draw anew (two like ``randperm``
calls whose rewrites swap their order draw the same sequence, but each use gets the other's): the
case is *not comparable*, :func:`rng_reason` says why in words starting ``"rng: "``, and the
semantics oracle judges nothing there. So are tensor-parallel cases that draw (the ranks of the
threaded world share one generator) and compiled ones (Inductor draws with its own generator).

A node *draws* when its op is tagged ``torch.Tag.nondeterministic_seeded`` in its schema (read at
torch 2.13: the ``rand*`` / ``randn*`` / ``randint*`` / ``randperm`` factories, ``bernoulli``,
``normal``, ``uniform``, ``native_dropout``, ``multinomial``, ``rrelu_with_noise``, and the
attention kernels for their dropout), except a call whose ``dropout_p`` is a literal 0 or whose
``train`` is a literal False: those draw nothing. A custom op that draws inside is not seen.

The float64 reference of a graph that draws reads the numbers the graph before the pass drew: each
random op of the float64 run starts from the generator state its twin started from; where its
outputs, cast to the dtypes of the graph before the pass, equal what that graph drew (a dropout
mask, a permutation: draws that do not depend on the dtype) the float64 values stand, else (a
``rand_like`` draws other bits in float64) the values drawn before the pass are used, widened.

The runs themselves (:func:`seeded`, :func:`run_recording`, :func:`run_replaying`, :func:`draws`)
live in :mod:`pmverify._execution`, re-exported here; this module judges what they drew
(:func:`rng_reason`).
"""

from __future__ import annotations

from typing import Any

from .._execution import RNG_SEED, draws, random_calls, run_recording, run_replaying, seeded

__all__ = ["RNG_SEED", "draws", "random_calls", "rng_reason", "seeded", "run_recording", "run_replaying"]


def _listed(calls: list[str]) -> str:
    return "[" + "; ".join(calls) + "]" if calls else "nothing"


def rng_reason(pair: Any) -> str | None:
    """Why ``pair`` (a ``RunPair``) cannot be compared value by value because its graphs draw
    random numbers (``"rng: ..."``), or None: the graph before the pass draws nothing, or the
    graph after it draws the same numbers in the same order (see the module docstring)."""
    propagation = getattr(pair, "before_propagation", None)  # its fake values, whether gm has them or not
    before = random_calls(pair.case.gm, propagation.vals if propagation is not None else None)
    if not before:
        return None
    if pair.compiled is not None:
        return (
            f"rng: the graph draws random numbers ({_listed(before)}), which compiled code draws with "
            "Inductor's own generator: not comparable value by value"
        )
    if pair.case.tp_world > 1:
        return (
            f"rng: the graph draws random numbers ({_listed(before)}) on {pair.case.tp_world} ranks, "
            "which share one generator in the threaded world: not comparable value by value"
        )
    after = random_calls(pair.after)
    if after != before:
        return (
            f"rng: the graph before the pass draws {_listed(before)}, the graph after it {_listed(after)}: "
            "the replacement draws its random numbers otherwise than its pattern, so their values cannot be "
            "compared (a case is compared when both draw the same numbers in the same order)"
        )
    kept = [node.name for node in pair.before.graph.nodes if draws(node)]
    remade = [node.name for node in pair.after.graph.nodes if draws(node)]
    if len(before) > 1 and remade != kept:
        return (
            f"rng: the graph draws {len(before)} times ({_listed(before)}) and the pass made some of those draws "
            f"anew ({', '.join(n for n in remade if n not in kept) or 'in another order'}): which draw feeds "
            "which use may have changed, so their values cannot be compared (a case is compared when it draws "
            "once, or when the pass keeps every draw)"
        )
    return None
