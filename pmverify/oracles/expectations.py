"""Expectations oracle: the pass rewrote what it must and left alone what it must not.

For each planted instance of the case (``GraphCase.planted``): a must-match instance is matched
when none of its nodes is left in the rewritten graph; a must-not-match instance is untouched when
all of its nodes are. "Silently never matches" is a finding, as is a match on a near miss.
"""

from __future__ import annotations

from typing import Any

from ._violation import Violation

__all__ = ["check", "matched_instances"]


def matched_instances(pair: Any) -> list[bool]:
    """For each planted instance, whether the pass rewrote it (no node of it left)."""
    if pair.after is None:
        return [False] * len(pair.case.planted)
    left = {node.name for node in pair.after.graph.nodes}
    return [not (set(instance.nodes) & left) for instance in pair.case.planted]


def check(pair: Any) -> list[Violation]:
    """Return the expectation violations of ``pair`` (a ``RunPair``)."""
    if pair.after is None:
        return []
    left = {node.name for node in pair.after.graph.nodes}
    violations = []
    for instance in pair.case.planted:
        gone = [name for name in instance.nodes if name not in left]
        if instance.must_match and len(gone) != len(instance.nodes):
            kept = tuple(name for name in instance.nodes if name in left)
            violations.append(
                Violation(
                    "expectations",
                    f"planted {instance.pattern} instance was not rewritten ({len(kept)} of "
                    f"{len(instance.nodes)} nodes left)",
                    kept,
                )
            )
        elif not instance.must_match and gone:
            violations.append(
                Violation(
                    "expectations",
                    f"near miss ({instance.reason}) of {instance.pattern} was rewritten; it must not match",
                    tuple(gone),
                )
            )
    return violations
