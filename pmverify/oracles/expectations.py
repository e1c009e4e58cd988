"""Expectations oracle: the pass rewrote what it must and left alone what it must not.

For each planted instance of the case (``GraphCase.planted``), judged on the rewritten graph after
dead-code elimination (nodes neither the output nor an impure node reads are dropped: a
replacement may leave matched nodes dead, as Inductor's own passes do, relying on its DCE):

- the instance's *outputs* are its nodes read outside it (or by the graph's output), or read by
  nothing at all; view nodes (``getitem``, ``split``, ``slice``, ``view``... any aten overload
  whose schema aliases its input) among them are not judged, unless all are views: a correct
  replacement may keep or rebuild them (e.g. the slice that yields v);
- an output is *rewritten* when it is no longer computed (its users now read what the pass
  inserted, or another node), or when it is still there but reads, through the instance's own
  nodes, a node the pass inserted in place of one of the instance's nodes (a pattern covering the
  head of the instance);
- a must-match instance is matched when every judged output is rewritten; a pattern covering only
  part of the planted function (the tail ``c -> d`` of ``a -> b -> c -> d``, reading ``b``) still
  rewrites its outputs, and the nodes it keeps are not held against it. An output that is also an
  intermediate (read by the instance's own nodes as well as outside it) may be kept for its other
  readers when another output was rewritten: Inductor's matcher matches such an instance where
  its pattern reads that node more than once (``x.float()`` of a bfloat16 GELU), replaces the rest
  and keeps the node; duplicated work, not a missed match, so the instance is matched and
  :func:`kept_intermediate_notes` says so (``CaseResult.notes``). An instance with
  ``must_match=None`` (either is correct) is not judged;
- a must-not-match instance (a near miss) is rewritten when a judged output is rewritten by a
  replacement that computes it from the instance's inputs or view nodes (the whole instance), or
  that leaves one of the instance's compute nodes computed beside it (neither feeding the
  replacement nor fed by it: computed twice, what Inductor's matcher refuses for an intermediate
  with an extra user). A replacement starting from the near miss's own compute nodes and leaving
  nothing beside (a pattern covering its tail or its head) rewrote only a part of it, which need
  not hold what makes it a near miss: not a finding here; if that part did hold it, the values
  tell (semantics oracle).

"Silently never matches" is a finding, as is a match on a near miss where the pass's own matcher
says it should not match. A near miss rewritten as a whole is *not* a finding, and
:func:`near_miss_notes` says why (``CaseResult.notes``), when:

- its reason is ``"extra_user"``: fusing anyway and keeping the intermediate for its other reader is
  duplicated work, not a wrong rewrite; a rewrite that loses or miscomputes that value is the
  semantics oracle's (or structure's, when the graph's outputs change);
- its reason is ``"tokens"``, the case is static and the pass has vLLM's
  ``is_applicable_for_range``: the pass itself answers for ``Range(T, T)`` (T the leading size of the
  instance's first input of rank >= 2): False, vLLM never runs it on such a graph; True, it claims
  those rows. Either is right, judged by the semantics oracle;
- the pattern entries of the pass that matched its nodes (``pair.match_records``, each recorded with
  its anchor and entry) match them on the graph before the pass too: the entry's pattern at the
  anchor, one mutation region (Inductor's numbering of the original graph) and the entry's
  ``extra_check``, run on a copy of that graph carrying the fake values the pass was given. The
  pass's own matcher, not the planted function, decides: a pattern covering part of the planted
  function, or taking one of its constants as a wildcard (``scalar_workaround``), rightly rewrites
  such a near miss. An entry that cannot be asked there (nodes the pass made itself, a symbolic
  case, an entry that raises) leaves the match it made standing; an entry that does not match
  there (it matched only what the pass changed first, or across a mutation) is a finding naming it;
- no pattern entry of the pass made the rewrite and its ground truth comes from the planted
  function (``PlantedInstance.truth_from == "pattern"``: ``planted()`` derived it from Inductor's
  matcher for that function, not the pass's): the pass's matcher is unknown, either is right,
  judged by the semantics oracle. A near miss declared by whoever built the case
  (``truth_from=None``) or derived from the pass's own registration (``"matcher"``: a recorded
  rewrite, or ``scalar_workaround`` / ``exclusive_arg_names`` given to ``planted``) stays a finding.

Ground truth is computed on the original graph, so it cannot know what the pass's own earlier
rewrites did to an instance. When the graph after the pass holds a mutating node (Inductor's
``is_mutation_op``) strictly between the first and the last of a must-match instance's nodes (in
graph order) that the pass put there, inserted (a name the graph before did not have) or moved (a
node of the graph before that did not lie between those nodes there), the instance is "either is
right" for that run, as if planted with ``must_match=None``: Inductor's matcher rightly refuses a
match across mutation regions, so a pass whose first entry moves an input's write-back ``copy_``
into an instance may leave it alone. It is then judged by the semantics and mutation_barriers
oracles only, and :func:`pass_put_barriers` says why (``CaseResult.notes``). A mutation the pass
put elsewhere changes nothing for the other instances.

In compiled mode (``pair.mode == "compiled"``) the graphs are Inductor's post-grad graphs,
re-traced by dynamo and AOT autograd: the planted node names no longer apply, so the oracle judges
the pass's own match count (``pair.matched_count``) instead. Fewer rewrites than the case's
must-match instances is a violation (the pass silently never matches under torch.compile); more
than its must-match plus may-match (``must_match=None``) instances is one too (it matched a near
miss, or matched twice). A near miss whose reason is ``"mutation_inside"`` counts as may-match
there: functionalization turns the in-place op into a functional one plus a trailing ``copy_``,
so the mutation barrier that made it a near miss is gone; so does a near miss that is not a
finding when rewritten (above: ``extra_user``, ``truth_from == "pattern"``, ``tokens`` for a pass with
``is_applicable_for_range``), which the count cannot tell apart. For the same reason a must-match
instance of an in-place case (``form="inplace"``) counts as may-match: functionalization may also
put a barrier inside it (the ``copy_`` back into a mutated graph input lands among the nodes of a
pattern that reads the input's new value, and Inductor then discards the match). A pass that reports no count
(``matched_count``) is counted by the matches recorded through Inductor's pattern entries, else as 0
when it left the post-grad graph unchanged; a pass that changed the graph by hand and reports no
count is not judged in compiled mode. The "either is right" rule above cannot place instances
there: each mutating node of Inductor's post-grad graph that the pass moved, or inserted other than
in the replacement of a match of computation (a recorded match whose nodes are not all mutating:
a fused in-place op replacing what it computes splits no instance), turns one must-match instance
into a may-match one for the count.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any

import torch

from .._execution import (
    RunPair,
    compiled_expectation,
    instance_outputs,
    must_match_rewritten,
    partial_rewrite,
    quiet_fake_tensor_errors,
    rewrite_count,
    rewritten_outputs,
)
from .._findings.summary import KEPT_FOR_READERS
from .._shapes.sizes import CompileRange
from ._violation import Violation
from .mutation_barriers import mutation_regions

__all__ = [
    "applies",
    "check",
    "pass_put_barriers",
    "near_miss_notes",
    "kept_intermediate_notes",
]


def _mutating(node: Any) -> bool:
    """Whether ``node`` is a mutation for Inductor's matcher (``is_mutation_op``)."""
    from .._compat import is_mutation_op

    return node.op in ("call_function", "call_method") and is_mutation_op(node)


def _put_there(node: Any, before: dict[str, Any]) -> str | None:
    """``"inserted"`` when the pass made the mutating ``node`` (a name the graph before did not
    have, or a node that did not mutate there), else None."""
    return "inserted" if node.name not in before or not _mutating(before[node.name]) else None


def _op_name(node: Any) -> str:
    return str(getattr(node.target, "__name__", node.target))


def _direct_barriers(pair: Any) -> dict[int, str]:
    """Direct mode of :func:`pass_put_barriers`: per must-match instance, the first mutating node
    of the graph after the pass strictly between its first and last node there, inserted by the
    pass or moved there (outside that span in the graph before); not one a recorded match of the
    instance's own nodes inserted (a mutating replacement of a part of it)."""
    before = {node.name: node for node in pair.before.graph.nodes}
    before_at = {name: i for i, name in enumerate(before)}
    after_nodes = list(pair.after.graph.nodes)
    after_at = {node.name: i for i, node in enumerate(after_nodes)}
    mutators = [node for node in after_nodes if _mutating(node)]
    notes: dict[int, str] = {}
    if not mutators:
        return notes
    for index, instance in enumerate(pair.case.planted):
        if instance.must_match is not True:
            continue
        kept = sorted((name for name in instance.nodes if name in after_at and name in before), key=after_at.get)
        if len(kept) < 2:
            continue
        low, high = after_at[kept[0]], after_at[kept[-1]]
        was_low, was_high = min(before_at[name] for name in kept), max(before_at[name] for name in kept)
        members = set(instance.nodes)
        own = {name for record in pair.match_records if members & set(record.nodes) for name in record.replacement}
        for node in mutators:
            if not low < after_at[node.name] < high or node.name in own:
                continue  # outside, or the replacement of (a part of) this instance: its own rewrite
            how = _put_there(node, before) or ("moved" if not was_low < before_at[node.name] < was_high else None)
            if how is None:
                continue  # a mutation the graph before had there already: the ground truth knows it
            above = max((name for name in kept if after_at[name] < after_at[node.name]), key=after_at.get)
            below = min((name for name in kept if after_at[name] > after_at[node.name]), key=after_at.get)
            notes[index] = (
                f"planted {instance.pattern} instance ({', '.join(instance.nodes)}) is 'either is right' in this run: "
                f"the pass {how} the mutation {node.name} ({_op_name(node)}) between its nodes {above} and {below}, "
                "and Inductor's matcher does not match across a mutation; it is judged by the semantics and "
                "mutation_barriers oracles only"
            )
            break
    return notes


def _compiled_put(pair: Any) -> list[str]:
    """Compiled mode: the mutating nodes of Inductor's post-grad graph after the pass that the
    pass moved (the nodes of the graph before that precede it are not the same), or inserted other
    than in the replacement of a recorded match of computation, as ``"name (op, inserted|moved)"``."""
    before = {node.name: node for node in pair.before.graph.nodes}
    replacing = {
        name
        for record in pair.match_records
        if any(name in before and not _mutating(before[name]) for name in record.nodes)
        for name in record.replacement
    }
    after_nodes = list(pair.after.graph.nodes)
    common = [node.name for node in after_nodes if node.name in before]
    shared = set(common)
    before_seq = [name for name in before if name in shared]
    before_at = {name: i for i, name in enumerate(before_seq)}
    put = []
    common_at = {name: i for i, name in enumerate(common)}
    for node in after_nodes:
        if not _mutating(node):
            continue
        how = _put_there(node, before)
        if how is not None and node.name in replacing:
            continue  # the replacement of matched computation: where the match was, not inside another
        if how is None:
            if set(common[: common_at[node.name]]) != set(before_seq[: before_at[node.name]]):
                how = "moved"
        if how is not None:
            put.append(f"{node.name} ({_op_name(node)}, {how})")
    return put


def pass_put_barriers(pair: RunPair) -> dict[int, str]:
    """The must-match instances of ``pair.case.planted`` that are "either is right" in this run
    because the pass itself put a mutation among their nodes (see the module docstring), by index,
    each with a note saying which mutation, where, and how it got there (inserted or moved).

    In compiled mode node names do not survive re-tracing: when the pass moved a mutating node of
    the post-grad graph, or inserted one other than in the replacement of matched computation,
    every must-match instance is listed (its note names those nodes; the count's lower bound drops
    by one per such node, see the module docstring). Empty when the pass raised (``pair.after`` is
    None)."""
    if pair.after is None:
        return {}
    if getattr(pair, "mode", "direct") != "compiled":
        return _direct_barriers(pair)
    put = _compiled_put(pair)
    must = [
        i
        for i, instance in enumerate(pair.case.planted)
        if compiled_expectation(instance, pair.case, getattr(pair, "pass_", None)) is True
    ]
    if not put or not must:
        return {}
    where = ", ".join(put)
    return {
        index: (
            f"planted {pair.case.planted[index].pattern} instance may be 'either is right' under torch.compile: "
            f"the pass put the mutation(s) {where} in Inductor's post-grad graph, and its matcher does not match "
            f"across a mutation, so up to {min(len(put), len(must))} of the {len(must)} must-match instance(s) "
            "count as may-match"
        )
        for index in must
    }


def applies(pair: RunPair) -> bool:
    """Whether this oracle has something to judge on ``pair`` (whose pass ran): an instance is
    planted with a verdict (``must_match`` True or False); in compiled mode, an instance is planted
    and the pass's rewrites can be counted (:func:`~pmverify._execution.rewrite_count`)."""
    if getattr(pair, "mode", "direct") == "compiled":
        return bool(pair.case.planted) and rewrite_count(pair) is not None
    return any(instance.must_match is not None for instance in pair.case.planted)


def check(pair: RunPair) -> list[Violation]:
    """Return the expectation violations of ``pair`` (a ``RunPair``)."""
    if pair.after is None:
        return []
    if getattr(pair, "mode", "direct") == "compiled":
        return _check_count(pair)
    violations = []
    either = _direct_barriers(pair)
    for index, instance in enumerate(pair.case.planted):
        if instance.must_match is None or index in either:
            continue
        if instance.must_match is True:
            matched, left, _ = must_match_rewritten(pair, instance)
            if not matched:
                judged = instance_outputs({node.name: node for node in pair.before.graph.nodes}, instance)
                violations.append(
                    Violation(
                        "expectations",
                        f"planted {instance.pattern} instance was not rewritten: {len(left)} of its {len(judged)} "
                        f"output(s) still computed by its own nodes after dead-code elimination{_symbolic_hint(pair)}",
                        tuple(left),
                    )
                )
            continue
        judged, rewritten = rewritten_outputs(pair, instance)
        if instance.must_match is False and rewritten and not partial_rewrite(pair, instance, rewritten):
            own = _own_entries(pair, instance)
            if _excuse(pair, instance, own) is None:
                violations.append(Violation("expectations", _near_miss_message(instance, own), tuple(rewritten)))
    return violations


def _rewritten_near_misses(pair: Any) -> list[tuple[int, Any]]:
    """Direct mode: the near misses (``must_match=False``) the pass rewrote as a whole, by index."""
    found = []
    for index, instance in enumerate(pair.case.planted):
        if instance.must_match is False:
            _, rewritten = rewritten_outputs(pair, instance)
            if rewritten and not partial_rewrite(pair, instance, rewritten):
                found.append((index, instance))
    return found


def _before_as_the_pass_saw_it(pair: Any) -> dict[str, Any]:
    """The nodes of a copy of the graph before the pass, by name, carrying the fake values the pass
    was given (``pair.before_propagation``: one ``FakeTensorMode``, where the case's own graph may
    carry values of several, which an ``extra_check`` that re-traces cannot mix)."""
    gm = copy.deepcopy(pair.before)  # node.meta is copied shallowly: setting a value here is local
    vals = pair.before_propagation.vals if pair.before_propagation is not None else {}
    for node in gm.graph.nodes:
        if node.name in vals:
            node.meta["val"] = vals[node.name]
    return {node.name: node for node in gm.graph.nodes}


def _entry_matches(pair: Any, record: Any, regions: dict[str, int], before: dict[str, Any]) -> bool | None:
    """Whether the pattern entry that made ``record`` matches the same nodes on the graph before the
    pass (``before``: its nodes by name), as ``PatternMatcherPass.apply`` accepts a match there (its
    pattern, one mutation region, its ``extra_check``); None when it cannot be asked (the entry or its
    anchor not recorded, nodes the pass itself made, a symbolic case, or the entry raised): the match
    the pass made stands."""
    from .._compat import is_match

    if record.pattern_entry is None or record.anchor not in before or any(n not in before for n in record.nodes):
        return None
    if len({regions[name] for name in record.nodes}) != 1:
        return False
    if pair.case.symbols:  # the pass matched on symbolic fake values under the Python dispatcher
        return None
    try:
        with quiet_fake_tensor_errors():
            match = record.pattern_entry.pattern.match(before[record.anchor])
            if not is_match(match) or {node.name for node in match.nodes} != set(record.nodes):
                return False
            return bool(record.pattern_entry.extra_check(match))
    except Exception:  # noqa: BLE001 - the entry cannot be asked here: its match stands
        return None


#: Per pair, each match record's :func:`_entry_matches` verdict, by its index in
#: ``pair.match_records``: asked once (a re-trace, 25-50 ms) for the oracle and for the notes.
_VERDICTS: weakref.WeakKeyDictionary[Any, dict[int, bool | None]] = weakref.WeakKeyDictionary()


def _own_entries(pair: Any, instance: Any) -> list[tuple[Any, bool | None]]:
    """The rewrites of ``pair.match_records`` that matched nodes of ``instance``, each with whether
    its entry matches them on the graph before the pass (:func:`_entry_matches`)."""
    members = set(instance.nodes)
    indices = [i for i, record in enumerate(pair.match_records) if members & set(record.nodes)]
    if not indices:
        return []
    verdicts = _VERDICTS.setdefault(pair, {})
    missing = [i for i in indices if i not in verdicts]
    if missing:
        regions, before = mutation_regions(pair.before.graph)[0], _before_as_the_pass_saw_it(pair)
        verdicts.update({i: _entry_matches(pair, pair.match_records[i], regions, before) for i in missing})
    return [(pair.match_records[i], verdicts[i]) for i in indices]


def _token_count(pair: Any, instance: Any) -> int | None:
    """The token count T of ``instance``: the leading size of its first input of rank >= 2 (read by
    its first node that reads one), when a concrete int."""
    members = set(instance.nodes)
    before = {node.name: node for node in pair.before.graph.nodes}
    for name in instance.nodes:
        for node in before[name].all_input_nodes if name in before else ():
            val = node.meta.get("val")
            if node.name not in members and isinstance(val, torch.Tensor) and val.dim() >= 2:
                return val.shape[0] if isinstance(val.shape[0], int) else None
    return None


def _excuse(pair: Any, instance: Any, own: list[tuple[Any, bool | None]]) -> str | None:
    """Why a near miss the pass rewrote as a whole is not an expectations finding, as a note; None
    when it is one (see the module docstring)."""
    what = f"{_outcome_words(instance)} of {instance.pattern} ({', '.join(instance.nodes)})"
    if instance.reason == "extra_user":
        return (
            f"{what} was rewritten despite an intermediate read outside it: duplicated work where that "
            "intermediate is kept for its reader, not a wrong rewrite; the semantics and structure oracles judge "
            "what the reader gets"
        )
    method = getattr(pair.pass_, "is_applicable_for_range", None)
    if instance.reason == "tokens" and callable(method) and not pair.case.symbols:
        rows = _token_count(pair, instance)
        if rows is not None:
            try:
                applies = bool(method(CompileRange(rows, rows)))
            except Exception:  # noqa: BLE001 - its label stands; compile_ranges reports a raising method
                applies = None
            if applies is not None:
                said = (
                    "True: the pass claims those rows"
                    if applies
                    else "False: vLLM would not run the pass on a graph of that size"
                )
                return (
                    f"{what} was rewritten; the pass's is_applicable_for_range(Range({rows}, {rows})) is {said}: "
                    "either is right, judged by the semantics oracle"
                )
    if own and all(verdict is not False for _, verdict in own):
        entries = ", ".join(dict.fromkeys(record.entry for record, _ in own))
        return (
            f"{what} was rewritten by the pass's own pattern entry ({entries}), which matches it on the graph "
            "before the pass: the pass's matcher, not the planted function, decides; either is right, judged by "
            "the semantics oracle"
        )
    if not own and getattr(instance, "truth_from", None) == "pattern":
        return (
            f"{what} was rewritten; its ground truth comes from the planted function and no pattern entry of the "
            "pass made this rewrite (its matcher is unknown): either is right, judged by the semantics oracle"
        )
    return None


def _outcome_words(instance: Any) -> str:
    detail = f": {instance.detail}" if getattr(instance, "detail", None) else ""
    return f"near miss ({instance.reason}{detail})"


def near_miss_notes(pair: RunPair) -> dict[int, str]:
    """The near misses of ``pair.case.planted`` the pass rewrote that are not findings (see the
    module docstring), by index, each with a note saying why: an ``extra_user`` near miss whose
    intermediate is kept (duplicated work), a ``tokens`` one on a static case the pass's
    ``is_applicable_for_range`` answers for, one the pass's own pattern entry matches on the graph
    before the pass, and one whose ground truth comes from the planted function where no pattern
    entry of the pass made the rewrite. Empty in compiled mode and when the pass raised."""
    if pair.after is None or getattr(pair, "mode", "direct") == "compiled":
        return {}
    notes = {}
    for index, instance in _rewritten_near_misses(pair):
        note = _excuse(pair, instance, _own_entries(pair, instance))
        if note is not None:
            notes[index] = note
    return notes


def kept_intermediate_notes(pair: RunPair) -> dict[int, str]:
    """The must-match instances of ``pair.case.planted`` the pass rewrote while keeping an
    intermediate of theirs for its readers outside them (see the module docstring), by index, each
    with a note naming those intermediates. Empty in compiled mode and when the pass raised."""
    if pair.after is None or getattr(pair, "mode", "direct") == "compiled":
        return {}
    notes = {}
    for index, instance in enumerate(pair.case.planted):
        if instance.must_match is not True:
            continue
        matched, _, kept = must_match_rewritten(pair, instance)
        if matched and kept:
            notes[index] = (
                f"planted {instance.pattern} instance ({', '.join(instance.nodes)}) was {KEPT_FOR_READERS}: "
                f"{', '.join(kept)}, read outside it too, still computed beside the replacement (duplicated work, as "
                "Inductor's matcher leaves a node its pattern reads more than once); the semantics and structure "
                "oracles judge what those readers get"
            )
    return notes


def _symbolic_hint(pair: RunPair) -> str:
    """For a case with symbols, what usually makes a matcher miss an instance there."""
    if not pair.case.symbols:
        return ""
    names = ", ".join(s.name for s in pair.case.symbols)
    return (
        f" (the graph has symbolic sizes {names}: a matcher that compares a size argument or a "
        "meta['val'] size with an int never matches a Sym node or a SymInt)"
    )


#: What to do about a rewritten near miss, by ``PlantedInstance.reason``: fix the pass, or tell
#: the strategy what the pass rightly treats as a wildcard.
_REMEDIES = {
    "constant": "Inductor's matcher compares this literal exactly unless register_replacement's scalar_workaround "
    "makes its argument a wildcard: if the pass registers it so, give planted(..., scalar_workaround={name: "
    "example value}) or plant the recorded rewrite (planted(recorded)); otherwise the pass ignores a constant it "
    "must compare",
    "dim": "the pass must check this dim; if it is meant to match at any dim, leave 'dim' out of "
    "planted(near_misses=...)",
    "split_sizes": "the pass must check the split sizes; if it is meant to match any split, leave 'split_sizes' "
    "out of planted(near_misses=...)",
    "mutation_inside": "an in-place op between the instance's nodes changes what its later nodes read "
    "(Inductor's matcher refuses a match across mutation regions)",
    "extra_check": "the pattern's extra_check rejects these inputs",
    "optional_arg": "Inductor's matcher compares a node's positional arguments (and the keywords its pattern holds), "
    "so it leaves this call alone: the pass must compare the argument the pattern's trace leaves at its default, or "
    "leave 'optional_arg' out of planted(near_misses=...) if it is meant to match any value of it",
    "overload": "Inductor's matcher compares the op overload (aten.add.Tensor is not aten.add.Scalar) and a literal "
    "is not a tensor input: the pass must check node.target and its argument kinds, or leave 'overload' out of "
    "planted(near_misses=...) if it is meant to match both forms (the semantics oracle still judges its rewrite)",
    "reduction_dim": "the same ops over another dim compute something else: the pass must check the dims of the "
    "instance's reductions (a softmax over dim -1 is not one over dim 0); if it is meant to match at any dim, leave "
    "'reduction_dim' out of planted(near_misses=...)",
}


def _near_miss_message(instance: Any, own: list[tuple[Any, bool | None]] = ()) -> str:
    """The finding for a rewritten near miss: what it changed (``instance.detail``), the pattern
    entries of the pass that do not match it on the graph before the pass, and the remedy."""
    what = f"{instance.reason}: {instance.detail}" if getattr(instance, "detail", None) else instance.reason
    remedy = _REMEDIES.get(
        instance.reason, f"leave {instance.reason!r} out of planted(near_misses=...) if the pass is meant to match it"
    )
    wrong = ", ".join(dict.fromkeys(record.entry for record, verdict in own if verdict is False))
    entries = f" (by the pattern entry {wrong}, which does not match it on the graph before the pass)" if wrong else ""
    return (
        f"near miss ({what}) of {instance.pattern} was rewritten{entries}; it must not match. "
        f"{remedy[0].upper()}{remedy[1:]}"
    )


def _check_count(pair: Any) -> list[Violation]:
    """Compiled mode: judge the pass's match count against the planted instances (module docstring)."""
    count = rewrite_count(pair)
    if count is None:
        return []
    planted = pair.case.planted
    must = sum(compiled_expectation(instance, pair.case, getattr(pair, "pass_", None)) is True for instance in planted)
    may = sum(compiled_expectation(instance, pair.case, getattr(pair, "pass_", None)) is None for instance in planted)
    moved = min(must, len(_compiled_put(pair)))  # "either is right" (module docstring)
    must, may = must - moved, may + moved
    if count < must:
        patterns = ", ".join(sorted({p.pattern for p in planted if p.must_match is True}))
        return [
            Violation(
                "expectations",
                f"the pass made {count} rewrite(s) under torch.compile where {must} planted "
                f"instance(s) of {patterns} must match: it silently never matches under torch.compile",
            )
        ]
    if count > must + may:
        misses = sorted(
            {
                p.reason or "?"
                for p in planted
                if compiled_expectation(p, pair.case, getattr(pair, "pass_", None)) is False
            }
        )
        near = f"; near misses: {', '.join(misses)}" if misses else ""
        return [
            Violation(
                "expectations",
                f"the pass made {count} rewrite(s) under torch.compile where at most "
                f"{must + may} planted instance(s) may match ({must} must, {may} may{near})",
            )
        ]
    return []
