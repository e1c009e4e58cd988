"""What a pass rewrote, as facts of one :class:`~pmverify._execution.RunPair`: read by the
expectations oracle (which judges them against the planted ground truth) and by ``check_case``
(``CaseResult.rewrite_count``, ``planted_matched``, ``rewritten``).

- :func:`rewrite_count`: the rewrites the pass made (its own count, else its recorded matches);
- :func:`changed`: whether the graph after the pass differs from the one before;
- :func:`matched_instances`: per planted instance, whether the pass rewrote it; in direct mode from
  the instance's outputs after dead-code elimination (:func:`rewritten_outputs`,
  :func:`must_match_rewritten`, :func:`partial_rewrite`), in compiled mode a guess from the count.

What each rule means, and why, is told in :mod:`pmverify.oracles.expectations`.
"""

from __future__ import annotations

from typing import Any

from .._fx import is_view

__all__ = [
    "changed",
    "compiled_expectation",
    "instance_outputs",
    "matched_instances",
    "must_match_rewritten",
    "partial_rewrite",
    "rewrite_count",
    "rewritten_outputs",
]


def instance_outputs(before: dict[str, Any], instance: Any) -> list[str]:
    """The instance's judged outputs (see :mod:`pmverify.oracles.expectations`)."""
    members = set(instance.nodes)
    outputs = [
        name
        for name in instance.nodes
        if name in before and (not before[name].users or any(user.name not in members for user in before[name].users))
    ]
    judged = [name for name in outputs if not is_view(before[name].target)]
    return judged or outputs or list(instance.nodes)


def _fed_by_rewrite(name: str, before: dict[str, Any], live: dict[str, Any], members: set[str]) -> bool:
    """Whether ``name`` (an instance node still live) reads, through the instance's live nodes, a
    node the pass inserted in place of one of the instance's nodes."""
    stack, seen = [name], set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        was = {node.name for node in before[current].all_input_nodes} & members
        now = {node.name for node in live[current].all_input_nodes}
        if was - now and any(other not in before for other in now):
            return True
        stack.extend(other for other in now & members if other in before)
    return False


def rewritten_outputs(pair: Any, instance: Any) -> tuple[list[str], list[str]]:
    """(the instance's judged outputs, those rewritten), in direct mode (see :mod:`pmverify.oracles.expectations`)."""
    before = {node.name: node for node in pair.before.graph.nodes}
    live = pair.live_after()
    members = {name for name in instance.nodes if name in before}
    judged = instance_outputs(before, instance)
    rewritten = [
        name for name in judged if name not in live or (name in before and _fed_by_rewrite(name, before, live, members))
    ]
    return judged, rewritten


def _kept_intermediates(pair: Any, instance: Any, judged: list[str], rewritten: list[str]) -> list[str] | None:
    """For a must-match instance some of whose judged outputs were not rewritten: those outputs when
    each is an intermediate (read by the instance's own nodes too) kept for its readers outside it
    and another output was rewritten (see :mod:`pmverify.oracles.expectations`), else None."""
    if not rewritten:
        return None
    before = {node.name: node for node in pair.before.graph.nodes}
    members = set(instance.nodes)
    kept = [name for name in judged if name not in rewritten]
    if all(name in before and any(user.name in members for user in before[name].users) for name in kept):
        return kept
    return None


def must_match_rewritten(pair: Any, instance: Any) -> tuple[bool, list[str], list[str] | None]:
    """(whether the must-match ``instance`` is matched, its judged outputs left computed by its own
    nodes, the intermediates kept for their other readers when that is why some were left)."""
    judged, rewritten = rewritten_outputs(pair, instance)
    if len(rewritten) == len(judged):
        return True, [], None
    kept = _kept_intermediates(pair, instance, judged, rewritten)
    return kept is not None, [name for name in judged if name not in rewritten], kept


def _closure(start: set[str], step: Any) -> set[str]:
    """``start`` and everything ``step(name)`` reaches from it, transitively."""
    seen: set[str] = set()
    stack = list(start)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(step(name))
    return seen


def partial_rewrite(pair: Any, instance: Any, rewritten: list[str]) -> bool:
    """Whether the replacement of the instance's ``rewritten`` outputs starts from the instance's
    own nodes (a pattern covering its tail, or its head) and leaves none of its compute nodes
    computed beside it: a part of the instance, which may not hold a near miss's difference (see
    :mod:`pmverify.oracles.expectations`)."""
    before = {node.name: node for node in pair.before.graph.nodes}
    live = pair.live_after()
    members = {name for name in instance.nodes if name in before}
    kept = {name for name in members if name in live}
    inserted = {name for name in live if name not in before}

    def inputs(name: str) -> set[str]:
        return {node.name for node in live[name].all_input_nodes}

    # the inserted nodes computing the rewritten outputs: read by their users outside the
    # instance, or by the instance's own nodes still computed (a pattern covering its head)
    users = {user.name for name in rewritten for user in before[name].users if user.name not in members}
    seeds = {name for reader in (users | kept) & live.keys() for name in inputs(reader) & inserted}
    replacement = _closure(seeds, lambda name: inputs(name) & inserted) or inserted
    boundary = {name for node in replacement for name in inputs(node) & kept if not is_view(before[name].target)}
    if not boundary:  # it computes them from the instance's inputs (or views of them): the whole instance
        return False
    upstream = _closure(boundary, lambda name: inputs(name) & kept)
    downstream = _closure(
        {name for name in kept if inputs(name) & replacement},
        lambda name: {user.name for user in live[name].users if user.name in kept},
    )
    beside = [name for name in kept - upstream - downstream if not is_view(before[name].target)]
    return not beside


#: Near misses of the in-place form only (see :mod:`pmverify.oracles.expectations`), by ``PlantedInstance.reason``.
_INPLACE_ONLY = ("mutation_inside",)


def compiled_expectation(instance: Any, case: Any, pass_: Any = None) -> bool | None:
    """``must_match`` of ``instance`` under torch.compile (see :mod:`pmverify.oracles.expectations`)."""
    if instance.must_match is False and instance.reason in _INPLACE_ONLY:
        return None
    if instance.must_match is False and (
        instance.reason == "extra_user"
        or getattr(instance, "truth_from", None) == "pattern"
        or (instance.reason == "tokens" and callable(getattr(pass_, "is_applicable_for_range", None)))
    ):
        return None  # "either is right" when rewritten (:mod:`pmverify.oracles.expectations`): what the count cannot tell apart
    if instance.must_match is True and getattr(case, "form", "functional") == "inplace":
        return None
    return instance.must_match


def changed(pair: Any) -> bool:
    """Whether the pass changed the graph: a node inserted, erased, moved or given other arguments
    (a pass that only reorders nodes, sinking each to its first user, rewrote the graph). False
    when the pass raised."""
    if pair.after is None:
        return False

    def signature(gm: Any) -> list[tuple[str, str, str]]:
        return [(node.name, str(node.target), repr((node.args, node.kwargs))) for node in gm.graph.nodes]

    return signature(pair.before) != signature(pair.after)


def rewrite_count(pair: Any) -> int | None:
    """Rewrites the pass made: its own ``matched_count``, else the matches recorded through
    Inductor's pattern entries, else 0 in compiled mode for a graph left unchanged; None when
    unknown (a hand-written pass reporting no count)."""
    if pair.matched_count is not None:
        return pair.matched_count
    if pair.match_records:
        return len(pair.match_records)
    if pair.after is not None and getattr(pair, "mode", "direct") == "compiled" and not changed(pair):
        return 0
    return None


def _compiled_guess(pair: Any) -> list[bool]:
    """Compiled mode: a guess from the count alone. The first ``matched_count`` rewrites are
    credited to the must-match instances, then to the may-match ones (``mutation_inside`` near
    misses included), then to the near misses, each group in planted order; all False when the
    pass reports no count."""
    planted = pair.case.planted
    left = rewrite_count(pair) or 0
    matched = [False] * len(planted)
    for group in (True, None, False):
        for i, instance in enumerate(planted):
            if compiled_expectation(instance, pair.case, getattr(pair, "pass_", None)) is group and left > 0:
                matched[i], left = True, left - 1
    return matched


def matched_instances(pair: Any) -> list[bool]:
    """For each planted instance, whether the pass rewrote it: every judged output of a must-match
    instance rewritten; another rewritten as a near miss is judged, a partial rewrite aside (see
    :mod:`pmverify.oracles.expectations`).

    In compiled mode node names do not survive re-tracing: this is a best effort from the pass's
    match count (see :func:`_compiled_guess`), exact when the count equals the must-match
    instances and there is no may-match instance; all False when the pass reports no count.
    """
    if pair.after is None:
        return [False] * len(pair.case.planted)
    if getattr(pair, "mode", "direct") == "compiled":
        return _compiled_guess(pair)
    matched = []
    for instance in pair.case.planted:
        if instance.must_match is True:
            matched.append(must_match_rewritten(pair, instance)[0])
            continue
        judged, rewritten = rewritten_outputs(pair, instance)
        matched.append(bool(rewritten) and not partial_rewrite(pair, instance, rewritten))
    return matched
