"""``planted(..., dynamic=...)``: instances drawn at a symbol's hint, and their ground truth on the
symbolic graph.

An instance's inputs are drawn with concrete sizes (by the caller's ``inputs`` strategy), then the
sizes to make symbolic are set to a hint (:func:`hinted_args`: their entries repeated cyclically,
so every input keeps its drawn values and the equalities between sizes hold). The whole case is
then traced again in a ``ShapeEnv`` (:func:`~pmverify.strategies._dynamic.symbolize_drawn`), so
the instances hold real ``SymInt`` arguments. Inductor's matcher for the pattern then says, on the
symbolic graph with symbolic fake values (its re-trace and ``extra_check`` included), which
instances it matches (:func:`symbolic_truth`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from .._case import GraphCase, PlantedInstance
from .._execution import propagate_symbolic, quiet_fake_tensor_errors
from .._registry.record import RecordedRewrite, isolated_pass
from .._shapes.symbolic import HINTS

__all__ = ["hinted_args", "symbolic_matches", "symbolic_truth", "SYMBOLIC_REASON", "MAX_HINTED_NUMEL"]

#: ``PlantedInstance.reason`` of an instance Inductor's matcher does not match on the symbolic graph.
SYMBOLIC_REASON = "symbolic"
#: An input is not set to a hint where it would then hold more elements than this.
MAX_HINTED_NUMEL = 4096


def _resized(value: torch.Tensor, sizes: dict[int, int], dims: Sequence[int] | None) -> torch.Tensor:
    """``value`` with each dim (of ``dims``, default all) whose size is a key of ``sizes`` made that
    size, its entries repeated cyclically; its layout kept when dense."""
    result = value.detach()
    for d, side in enumerate(value.shape):
        if side in sizes and (dims is None or d in dims):
            result = result.index_select(d, torch.arange(sizes[side]) % side)
    if result.shape == value.shape:
        return value
    if math.prod(result.shape) > MAX_HINTED_NUMEL:
        return value
    if value.is_contiguous():
        result = result.contiguous()
    elif torch.empty_like(value).stride() == value.stride():  # a permuted dense layout: kept
        result = torch.empty_like(result).copy_(result)
    return result.requires_grad_(value.requires_grad) if value.is_floating_point() else result


def hinted_args(draw: Any, args: Sequence[Any], dynamic: bool | tuple[str, ...]) -> tuple[Any, ...]:
    """``args`` (a pattern's inputs, drawn with concrete sizes) with the sizes to make symbolic set
    to a hint of :data:`~pmverify._shapes.symbolic.HINTS`:

    - ``"tokens"``: the token count T, the leading dim of the first tensor input of rank >= 2, at
      ``s0``'s hint (11): the leading dim of every tensor input of rank >= 2 whose leading dim is T
      (other dims and inputs of rank < 2 keep their sizes, a 1-d input of T entries included;
      nothing changes where another size is 11 already);
    - ``True``: each size above 1 of the tensor inputs (in order of first appearance, as long as
      a hint is free) drawn static (the simplest) or at the next free hint, every dim of that size
      in every input set to it (duck sizing: equal sizes stay equal). A size already at a hint
      stays.

    Values are the drawn entries repeated cyclically along each resized dim; an input that would
    hold more than :data:`MAX_HINTED_NUMEL` elements keeps its size. The caller keeps ``args`` when
    the pattern does not run on the result (e.g. a relation between sizes the resizing broke)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    present = {side for t in tensors for side in t.shape if side in HINTS}
    free = [hint for hint in HINTS if hint not in present]
    if dynamic is True:
        sides = [side for t in tensors for side in t.shape if side > 1 and side not in HINTS]
        sizes: dict[int, int] = {}
        for side in dict.fromkeys(sides):
            if not free:
                break
            if draw(st.booleans()):
                sizes[side] = free.pop(0)
        return tuple(_resized(a, sizes, None) if isinstance(a, torch.Tensor) else a for a in args)
    rows = next((t.shape[0] for t in tensors if t.dim() >= 2), None)
    if "tokens" not in dynamic or rows is None or rows in (0, HINTS[0]):
        return tuple(args)
    leading = [a for a in tensors if a.dim() >= 2 and a.shape[0] == rows]
    others = [side for t in tensors for d, side in enumerate(t.shape) if d or not any(t is a for a in leading)]
    if HINTS[0] in others:  # s0's hint is a static size here: the rows would join it
        return tuple(args)
    return tuple(_resized(a, {rows: HINTS[0]}, (0,)) if any(a is b for b in leading) else a for a in args)


def symbolic_matches(case: GraphCase, rewrite: RecordedRewrite) -> list[frozenset[str]] | None:
    """The node names of each match Inductor's matcher holding ``rewrite`` alone finds in the
    symbolic case ``case`` (every node its ``PatternExpr`` matches and whose ``extra_check``, the
    re-trace of the search function on the symbolic fake values included, accepts), without
    rewriting anything; None when the matcher raises (its ``extra_check``: the pass under test
    raises there too)."""
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    from .._compat import is_match

    gm = copy.deepcopy(case.gm)
    propagate_symbolic(gm, case)
    patterns = isolated_pass(rewrite).pass_.patterns
    found: list[frozenset[str]] = []
    try:
        with quiet_fake_tensor_errors():
            for (op, target), entries in patterns.items():
                for node in gm.graph.find_nodes(op=op, target=target):
                    for entry in entries:
                        match = entry.pattern.match(node)
                        if is_match(match) and guard_or_false(entry.extra_check(match)):
                            found.append(frozenset(n.name for n in match.nodes))
    except Exception:  # noqa: BLE001 - e.g. a raising extra_check
        return None
    return found


def symbolic_truth(case: GraphCase, asked: Sequence[tuple[int, RecordedRewrite | None]]) -> tuple[PlantedInstance, ...]:
    """``case.planted`` (``case`` symbolic) with the ground truth of the instances at the positions
    ``asked`` names following Inductor's matcher (the rewrite paired with each; None: no matcher
    to ask, the instance kept) on the symbolic graph: a must-match instance no match lies within
    becomes ``must_match=None, reason="symbolic"``; a must-not-match one a match lies within
    becomes ``must_match=None`` (its reason kept); where the matcher raises, each asked instance
    becomes ``must_match=None``. An instance with ``must_match=None`` is not asked."""
    planted = list(case.planted)
    results: dict[int, list[frozenset[str]] | None] = {}
    for position, rewrite in asked:
        instance = planted[position]
        if rewrite is None or instance.must_match is None:
            continue
        key = id(rewrite)
        if key not in results:
            results[key] = symbolic_matches(case, rewrite)
        matches = results[key]
        nodes = set(instance.nodes)
        if matches is None:
            planted[position] = dataclasses.replace(
                instance, must_match=None, reason=instance.reason or "matcher_raised"
            )
            continue
        matched = any(match and match <= nodes for match in matches)
        if instance.must_match is True and not matched:
            planted[position] = dataclasses.replace(
                instance,
                must_match=None,
                reason=SYMBOLIC_REASON,
                detail="Inductor's matcher for the pattern does not match it on the symbolic graph",
            )
        elif instance.must_match is False and matched:
            planted[position] = dataclasses.replace(instance, must_match=None)
    return tuple(planted)
