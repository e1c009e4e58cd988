"""Expectations oracle: the pass rewrote what it must and left alone what it must not.

For each planted instance of the case (``GraphCase.planted``): a must-match instance is matched
when none of its compute nodes is left in the rewritten graph; a must-not-match instance is
untouched when all of them are; an instance with ``must_match=None`` (either is correct) is not
judged. View nodes (``getitem``, ``split``, ``slice``, ``view``... any aten overload whose schema
aliases its input) are not judged: a correct replacement may keep or rebuild
them (e.g. the slice that yields v). "Silently never matches" is a finding, as is a match on a near
miss.
"""

from __future__ import annotations

from typing import Any

from .._fx import is_view
from ._violation import Violation

__all__ = ["check", "matched_instances"]


def _compute_nodes(pair: Any, instance: Any) -> list[str]:
    """The instance's nodes that compute, not view (see the module docstring)."""
    targets = {node.name: node.target for node in pair.before.graph.nodes}
    judged = [name for name in instance.nodes if not is_view(targets.get(name))]
    return judged or list(instance.nodes)


def matched_instances(pair: Any) -> list[bool]:
    """For each planted instance, whether the pass rewrote it (no compute node of it left)."""
    if pair.after is None:
        return [False] * len(pair.case.planted)
    left = {node.name for node in pair.after.graph.nodes}
    return [not (set(_compute_nodes(pair, instance)) & left) for instance in pair.case.planted]


def check(pair: Any) -> list[Violation]:
    """Return the expectation violations of ``pair`` (a ``RunPair``)."""
    if pair.after is None:
        return []
    left = {node.name for node in pair.after.graph.nodes}
    violations = []
    for instance in pair.case.planted:
        judged = _compute_nodes(pair, instance)
        gone = [name for name in judged if name not in left]
        if instance.must_match is True and len(gone) != len(judged):
            kept = tuple(name for name in judged if name in left)
            violations.append(
                Violation(
                    "expectations",
                    f"planted {instance.pattern} instance was not rewritten ({len(kept)} of "
                    f"{len(judged)} compute nodes left)",
                    kept,
                )
            )
        elif instance.must_match is False and gone:
            violations.append(
                Violation(
                    "expectations",
                    f"near miss ({instance.reason}) of {instance.pattern} was rewritten; it must not match",
                    tuple(gone),
                )
            )
    return violations
