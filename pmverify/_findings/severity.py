"""How severe a finding is: the order in which :func:`pmverify.verify` and ``pmverify fuzz`` report
distinct failures, and the key by which ``verify`` shrinks each to a case of its own. Torch-free.

Why: a search that stops at its first failure lets a minor finding (an output's strides, changed on
nearly every case) hide a major one (a wrong dtype on some cases). ``verify`` raises one exception
class per :func:`failure_key` inside its Hypothesis test, so that Hypothesis shrinks each distinct
failure separately, and reports them most severe first.

The tiers, most severe first (:data:`TIERS`): wrong values (semantics, tensor_parallel); an
output's dtype or shape, or a rewrite that specialises symbolic sizes (structure); a write moved
across a barrier or a wrongly routed alias (mutation_barriers, aliasing, functionalization); a
compiled program reused or applied where it should not be (cache_key, compile_ranges); a graph
not well formed (structure: lint, order, an erased input used, fake tensors do not propagate,
stale meta); a planted instance matched or left wrongly (expectations); an oracle of the user's;
an output's strides (structure); the pass raising (crash; a case that killed or hung ``pmverify
fuzz``'s worker), or an oracle that could not read the rewritten graph; last, a fuzz target whose
whole run rewrote nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["TIERS", "failure_key", "key_label", "most_severe", "severity"]

#: ``(oracle, kind)`` keys by tier, most severe first; ``kind`` None: every kind of that oracle.
TIERS: tuple[tuple[tuple[str | None, str | None], ...], ...] = (
    (("semantics", None), ("tensor_parallel", None)),
    (("structure", "dtype/shape"), ("structure", "device"), ("structure", "specialisation")),
    (("mutation_barriers", None), ("aliasing", None), ("functionalization", None)),
    (("cache_key", None), ("compile_ranges", None)),
    (("structure", "order"), ("structure", "meta"), ("structure", None)),
    (("expectations", None),),
    ((None, None),),  # an oracle of the user's
    (("structure", "strides"),),
    (("crash", None), ("timeout", None)),  # then any oracle that could not read the graph (UNREADABLE)
    (("never_matched", None),),  # pmverify fuzz: a target whose whole run rewrote nothing
)

#: The kind of a violation whose oracle raised instead of judging (``check_case`` reports "could not
#: check the rewritten graph").
UNREADABLE = "unreadable"


def failure_key(violation: Any) -> tuple[str, str]:
    """``(oracle, kind)`` of ``violation`` (a :class:`~pmverify.oracles.Violation`, or anything with
    ``oracle`` and ``message``, ``kind`` optional): what tells distinct failures apart. Not the message,
    which names nodes and values and would split one bug into many. A mapping (a violation as a
    job's report holds it) is read by those keys, ``kind`` under ``"oracle_kind"``."""
    if isinstance(violation, Mapping):
        read: Any = violation.get
        kind = violation.get("oracle_kind", "") or ""
    else:
        read = functools.partial(getattr, violation)
        kind = getattr(violation, "kind", "") or ""
    if not kind and str(read("message", "")).startswith("could not check the rewritten graph"):
        kind = UNREADABLE
    return (str(read("oracle", "")), kind)


def _rank(key: tuple[str, str]) -> tuple[int, int]:
    oracle, kind = key
    for exact in (True, False):  # ("structure", "strides") before ("structure", None)
        for tier, members in enumerate(TIERS):
            for position, (o, k) in enumerate(members):
                if o == oracle and (k == kind if exact else k is None):
                    return tier, position
    user = next(tier for tier, members in enumerate(TIERS) if members == ((None, None),))
    return user, 0


def severity(key: tuple[str, str]) -> tuple[int, int, str, str]:
    """A sort key of a :func:`failure_key`: lower is more severe (its tier, its place in the tier,
    then its name, so that the order is total)."""
    if key[1] == UNREADABLE:
        tier = _rank(("crash", ""))[0]
        return (tier, len(TIERS[tier]), *key)
    return (*_rank(key), *key)


def most_severe(violations: Iterable[Any]) -> tuple[str, str] | None:
    """The most severe :func:`failure_key` among ``violations``; None when there are none."""
    keys = [failure_key(v) for v in violations]
    return min(keys, key=severity) if keys else None


def key_label(key: tuple[str, str]) -> str:
    """``"structure (strides)"``, ``"semantics"``: a key in words."""
    oracle, kind = key
    return f"{oracle} ({kind})" if kind else oracle
