"""Mutation-barrier oracle: no rewrite spans an in-place op of the original graph.

Inductor splits a graph into *mutation regions* at every mutating node (``is_mutation_op``: an
op whose schema is mutable, a ``*_`` method, an ``out=`` call) and numbers them in graph order
(``compute_mutation_region_ids`` in ``torch/_inductor/pattern_matcher.py``). A rewrite whose
matched nodes lie in two regions reads, after the rewrite, values from one side of the mutation
only: a downstream op sees a stale (or a too new) value. ``PatternMatcherPass.apply`` discards
such matches ("pattern match crosses mutation barrier - discard"); hand-written passes must do
the same.

Regions are those of the graph *before* the pass. Rewrites are judged two ways:

- matches made through Inductor's pattern entries (``RunPair.match_records``, recorded while the pass
  ran): each match's nodes must lie in one region (this catches stale ``mutation_region_id``
  meta, which Inductor does not recompute when the first node carries one);
- every rewrite is judged by the value each read sees, the *version* of its storage (the same
  graph input or allocation, through views and in-place results): the writes to that storage
  that precede the read. Writes the pass kept are themselves; the writes it inserted stand, in
  order, for those it removed (an in-place op replacing a functional op and its write-back
  ``copy_`` stands for the ``copy_``; for a buffer no ``copy_`` writes, for the
  ``auto_functionalized`` node, or for the functional op it reinplaces: a view scatter,
  ``index_put``). A value a ``copy_`` writes back (or an ``auto_functionalized``
  element) is read as its storage after that write. A node the pass kept must read the same
  version, and so must the caller (each input's final value); the reads of the nodes the pass
  removed, inserted or rewired must see the same set of versions (a removed node's read of a value
  that a removed node computed and a kept ``copy_`` writes back is required of the inserted nodes
  only where one of them reads that value: a replacement may compute it itself). A read moved before or after a
  write to its storage is a finding; reads moved across writes to other tensors, a correct
  reinplacing, dead code removed and the read of a value overwritten whole before anything reads it
  (a clone passed as ``out``) are not. A clone (or a cast to the same dtype) the pass dropped for its source (``remove_noop_ops``)
  is taken for that source when nothing writes the source after the clone. A functional scatter
  is a write only where the pass reinplaced it (an inserted write stands for it); one the pass kept,
  rebuilt or dropped writes nothing, and one it dropped for an argument (a no-op scatter) is taken
  for that argument, as a dropped clone is. An
  ``auto_functionalized`` node is no write (as for Inductor's ``is_mutation_op``): it writes the
  arguments its op's schema marks mutable only in the tuple it returns, so only its elements'
  readers see that write; an ``auto_functionalized`` node the pass inserted stands for one it
  removed that wrote the same tensor (two fused into one); one writing a tensor that no removed one
  wrote, its element written back by no ``copy_``, returns a fresh value whose readers read no
  version of that tensor (:func:`_fresh_writes`); and a write-back ``copy_`` of the end
  of a chain of them on one tensor (each writing the element of the one before) is read as the
  chain, each in-place op replacing a node of it standing for that node (vLLM's
  defunctionalization of ``fused_add_rms_norm`` layer after layer), where the pass replaced the
  ``copy_`` (a ``copy_`` it kept is itself: what it copies is the functionalization oracle's).
  Two writes are dropped from a version by the memory they cover (replayed through views, see
  ``_layout``; the graph before the pass carries the fake values the direct mode propagated): a
  write that lies in the elements a ``slice_scatter`` / ``select_scatter`` replaces, or that the
  scatters chained on its result replace (each the only user of the one before), is not seen by the
  scatter's read of its first argument, and a write that a later ``copy_`` (or
  ``out``) in the same version overwrites whole is no more in it (vLLM's blind defunctionalization of
  ``fused_add_rms_norm`` on a slice of a graph input: the kept scatter of the new slice and the
  final ``copy_`` of the whole input). A ``copy_`` of such a chain on its destination, each
  scatter putting an ``auto_functionalized`` element where the view it holds the new value of lies
  (AOT's form of an op writing several views of one tensor: rotary embedding of q and k of a fused
  qkv), writes back what those nodes wrote, as a chain's ``copy_`` does. A write-back ``copy_`` of a node in chains on two tensors
  (input and residual) is matched per tensor, through the ``alias`` views functionalization
  inserts. ``aten._unsafe_view`` counts as the view it returns. The nodes of a match found crossing are not judged
  again; a kept node now reading a copy (the clone a decomposed ``auto_functionalized`` writes) is
  left to the functionalization oracle. (Graph inputs are taken not to alias each other, as
  Inductor's post-grad graphs guarantee.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from .._execution import RunPair
from . import _layout
from ._versions import COPY as _COPY
from ._versions import END as _END
from ._versions import HOPS as _HOPS
from ._versions import Versions as _Versions
from ._versions import is_view_or_unsafe as _is_view
from ._versions import written_names as _written
from ._violation import Violation

__all__ = ["applies", "check", "mutation_regions"]


def mutation_regions(graph: torch.fx.Graph) -> tuple[dict[str, int], list[torch.fx.Node]]:
    """(region id by node name, mutating nodes in graph order), as Inductor numbers them."""
    from .._compat import is_mutation_op

    regions: dict[str, int] = {}
    mutators: list[torch.fx.Node] = []
    region = 0
    for node in graph.nodes:
        if node.op in ("call_function", "call_method") and is_mutation_op(node):
            region += 1
            mutators.append(node)
        regions[node.name] = region
    return regions, mutators


def _crossing(what: str, names: list[str], regions: dict[str, int], mutators: list[torch.fx.Node]) -> Violation:
    ids = [regions[name] for name in names]
    low, high = min(ids), max(ids)
    crossed = [m for m in mutators if low < regions[m.name] <= high]
    shown = ", ".join(f"{m.name} ({getattr(m.target, '__name__', m.target)} writes {_written(m)})" for m in crossed)
    return Violation(
        "mutation_barriers",
        f"{what} spans mutation regions {low}..{high} of the original graph; it crosses {shown}",
        tuple(names),
    )


def _stand_ins(before: _Versions, after: _Versions) -> dict[tuple[str, str], str]:
    """``(storage, write in the graph after the pass) -> the write of the graph before it stands for``:
    a write kept by the pass stands for itself; per storage, the writes the pass inserted stand, in
    order, for the writes it removed (an in-place op that replaces a functional op and its write-back
    ``copy_`` stands for the ``copy_``). An inserted write with nothing to stand for stays itself."""
    mapping: dict[tuple[str, str], str] = {}
    for storage, writes in after.writes.items():
        removed = [
            w
            for write in before.writes.get(storage, ())
            if write not in after.written
            for w in before.chains.get(write, (write,))
            if w == write or w not in after.nodes
        ]
        inserted = [w for w in writes if w not in before.written]
        pairs = dict(zip(inserted, removed, strict=False))
        # the others stand for a functional node the pass removed ("virtual" writes), the one of
        # their kind first (an op for the auto_functionalized node of that op, a copy_ for a scatter)
        virtual = [w for w in before.virtual.get(storage, ()) if w not in after.nodes]
        for write in (w for w in inserted if w not in pairs):
            kind = [v for v in virtual if _stands_for(after.nodes[write], before.nodes[v])]
            if kind or virtual:
                pairs[write] = (kind or virtual)[0]
                virtual.remove(pairs[write])
        for write in writes:
            mapping[(storage, write)] = pairs.get(write, write)
    # an auto_functionalized node the pass inserted (two fused into one) writes, in the tuple it
    # returns, what one it removed wrote there and no inserted write stands for: it stands for it
    for storage, nodes in after.virtual.items():
        taken = {mapping[(storage, w)] for w in after.writes.get(storage, ())}
        removed = [
            w
            for w in before.virtual.get(storage, ())
            if w not in after.nodes and w not in taken and before.nodes[w].target in _HOPS
        ]
        inserted = [w for w in nodes if w not in before.nodes]
        for write, old in zip(inserted, removed, strict=False):
            mapping[(storage, write)] = old
    return mapping


def _fresh_writes(
    before: _Versions, after: _Versions, stand_in: dict[tuple[str, str], str], written_back: set[str]
) -> set[tuple[str, str]]:
    """``(storage, node)`` for each ``auto_functionalized`` node the pass inserted that writes
    ``storage`` in its tuple standing for no node it removed (no removed one wrote it) and whose
    element no ``copy_`` writes back, alone or as the end of a chain (``written_back``): a functional
    node, the storage is as it was; its elements are a fresh value (a modified copy), whose readers
    read no version of the storage (what they read is the semantics and functionalization oracles')."""
    return {
        (storage, node)
        for storage, nodes in after.virtual.items()
        for node in nodes
        if node not in before.nodes and stand_in.get((storage, node), node) == node and node not in written_back
    }


def _scatter_behind(before: _Versions, write: str) -> str | None:
    """The functional scatter ``write`` (of the graph before the pass) is, or the one the ``copy_``
    ``write`` writes back (None for any other write): the in-place write standing for it reads its
    storage as the scatter did."""
    if write in before.scatters:
        return write
    node = before.nodes.get(write)
    if node is None or node.target is not _COPY or len(node.args) < 2:
        return None
    source = node.args[1]
    while isinstance(source, torch.fx.Node) and source.op == "call_function" and _is_view(source.target):
        source = source.args[0]
    return source.name if isinstance(source, torch.fx.Node) and source.name in before.scatters else None


def _merged_clones(before: _Versions, after: _Versions, functional: frozenset[str]) -> dict[str, str]:
    """``{clone: its source's storage}`` for each ``clone`` of the graph before the pass that the
    pass dropped, keeping its source (``remove_noop_ops`` replaces a clone by what it copies), and
    for each ``functional`` scatter the pass dropped for one of its arguments (a no-op scatter:
    its readers now read that argument), when nothing writes the source's storage after the
    clone: the writes to the clone then stand for writes to the source, and its readers read the
    source (kept readers of the source that now see those writes are findings as before)."""
    merged = {}
    for name, node in before.nodes.items():
        if node.op != "call_function" or name in after.nodes:
            continue
        if _is_copy(node):
            source = node.args[0] if node.args else None
        elif name in functional:
            source = _replaced_by(node, after)
        else:
            continue
        if not isinstance(source, torch.fx.Node) or source.name not in after.nodes:
            continue
        storage = before.storage(source)
        if all(before.order[w] < before.order[name] for w in before.writes.get(storage, ())):
            merged[name] = storage
    return merged


def _is_copy(node: torch.fx.Node) -> bool:
    """Whether ``node`` makes a fresh copy of its first argument's values: a ``clone``, or a cast to
    the argument's own dtype (``prims.convert_element_type`` / ``aten._to_copy``), which
    ``remove_noop_ops`` drops for its source as it drops a clone."""
    if node.target is torch.ops.aten.clone.default:
        return True
    if node.target not in (torch.ops.prims.convert_element_type.default, torch.ops.aten._to_copy.default):
        return False
    source = node.args[0] if node.args else None
    value = node.meta.get("val")
    original = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and isinstance(original, torch.Tensor) and value.dtype == original.dtype


def _replaced_by(node: torch.fx.Node, after: _Versions) -> torch.fx.Node | None:
    """The argument of ``node`` (a node the pass removed) that a user the pass kept now reads in
    its place (the same position among its inputs), or None."""
    from .._fx import flat_nodes

    arguments = {a.name: a for a in flat_nodes((node.args, node.kwargs))}
    for user in node.users:
        kept = after.nodes.get(user.name)
        if kept is None:
            continue
        old, new = flat_nodes((user.args, user.kwargs)), flat_nodes((kept.args, kept.kwargs))
        if len(old) == len(new):
            for was, now in zip(old, new, strict=True):
                if was is node and now.name in arguments:
                    return arguments[now.name]
    return None


def _stands_for(write: torch.fx.Node, functional: torch.fx.Node) -> bool:
    """Whether the in-place ``write`` is of the kind that replaces ``functional``: the op an
    ``auto_functionalized`` node wraps, the in-place variant of a functional op (``index_put_``
    for ``index_put``), or a ``copy_`` (into a view) for a view scatter."""
    if functional.target in (torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2):
        return bool(functional.args) and write.target is functional.args[0]
    name = getattr(getattr(functional.target, "_schema", None), "name", "")
    if name.endswith("_scatter"):
        return write.target is _COPY
    return getattr(getattr(write.target, "_schema", None), "name", None) == name + "_"


_Reads = dict[tuple[str, str], frozenset[tuple[str, ...]]]


def _all_reads(
    graph: _Versions, name: Any, internal: frozenset[str] = frozenset(), kept: frozenset[str] = frozenset()
) -> tuple[_Reads, _Reads]:
    """Every version each node reads of each storage, directly or through a value copied into it,
    its writes renamed by ``name(storage, version)``; and the same less the reads through a copied
    value where the reader and the value's node are both in ``internal`` (the nodes the pass
    removed) and the ``copy_`` writing it back is in ``kept`` (the pass kept it): an edge inside the
    rewritten subgraph, whose value the rewrite may compute itself (it reads the storage no more
    than the value's own inputs say)."""
    reads: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    required: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for (reader, storage), seen in graph.reads.items():
        version = name(storage, graph.expand(seen, storage))
        reads.setdefault((reader, storage), set()).add(version)
        required.setdefault((reader, storage), set()).add(version)
    for (reader, storage), versions in graph.via.items():
        named = {name(storage, graph.expand(seen, storage)) for seen in versions}
        named.discard(None)
        if not named:
            continue
        reads.setdefault((reader, storage), set()).update(named)
        values = graph.via_values.get((reader, storage), {None})
        copies_kept = all(seen and seen[-1] in kept for seen in versions)
        if not (reader in internal and None not in values and values <= internal and copies_kept):
            required.setdefault((reader, storage), set()).update(named)
    return (
        {key: frozenset(versions) for key, versions in reads.items()},
        {key: frozenset(versions) for key, versions in required.items()},
    )


def _reads_copied_value(after: _Versions, storage: str, inserted: frozenset[str]) -> bool:
    """Whether a node the pass inserted reads (directly or through views) a value that a ``copy_``
    of the graph after the pass writes back into ``storage``: then it must read it as the replaced
    nodes did (finished, after its writes), and a replaced node's read of such a value is required
    of the replacement too."""
    for copy in after.nodes.values():
        if not (copy.target is _COPY and len(copy.args) > 1 and isinstance(copy.args[1], torch.fx.Node)):
            continue
        if after.storage(copy.args[0]) != storage:
            continue
        frontier = [copy.args[1]]
        while frontier:
            value = frontier.pop()
            for user in value.users:
                if user is copy:
                    continue
                if user.name in inserted:
                    return True
                if user.op == "call_function" and _is_view(user.target):
                    frontier.append(user)
    return False


def _version(seen: tuple[str, ...], stand_in: dict[str, str] | None = None) -> str:
    """``before any write`` or ``after w1, w2`` (an inserted write named with the write it stands for)."""
    if not seen:
        return "before any write"
    stand_in = stand_in or {}
    return "after " + ", ".join(w + (f" (standing for {stand_in[w]})" if stand_in.get(w, w) != w else "") for w in seen)


def _before(
    graph: torch.fx.Graph, after: _Versions, functional: frozenset[str]
) -> tuple[_Versions, dict[tuple[str, str], str]]:
    """The versions of the graph before the pass (its ``functional`` scatters writing nothing), and
    :func:`_stand_ins`. A write-back ``copy_`` the pass kept is itself in both graphs: what it copies
    is the functionalization oracle's (a chain is read as its nodes only where the pass replaced the
    ``copy_``)."""
    before = _Versions(graph, before=True, functional=functional)
    merged = _merged_clones(before, after, functional)
    if merged:
        before = _Versions(graph, before=True, merged=merged, functional=functional)
    kept = before.written & after.written
    before.chains = {copy: chain for copy, chain in before.chains.items() if copy not in kept}
    after.chains = {copy: chain for copy, chain in after.chains.items() if copy not in kept}
    return before, _stand_ins(before, after)


@contextlib.contextmanager
def _valued(pair: Any) -> Iterator[torch.fx.Graph]:
    """The graph before the pass, its nodes carrying the fake values the direct mode propagated
    before running the pass (``pair.before`` is the case's graph, untouched, without them), so that
    memory is laid out in it as in the graph after the pass; the graph itself where there are none.
    The values are put on the case's own nodes for the block and taken off again on leaving it (a
    copy of the graph cost as much as the rest of the oracle); only nodes that had none get one."""
    propagation = getattr(pair, "before_propagation", None)
    graph = pair.before.graph
    added = []
    if propagation is not None:
        for node in graph.nodes:
            if "val" not in node.meta and node.name in propagation.vals:
                node.meta["val"] = propagation.vals[node.name]
                added.append(node)
    try:
        yield graph
    finally:
        for node in added:
            node.meta.pop("val", None)


def _moved_reads(pair: Any, covered: set[str]) -> list[Violation]:
    """Reads that see another version of their storage after the pass (see the module docstring)."""
    after = _Versions(pair.after.graph)
    with _valued(pair) as graph:
        return _moved_reads_in(pair, graph, after, covered)


def _moved_reads_in(pair: Any, graph: torch.fx.Graph, after: _Versions, covered: set[str]) -> list[Violation]:
    """:func:`_moved_reads` with ``graph``, the graph before the pass carrying its fake values."""
    written_back = {w for chain in after.chains.values() for w in chain}
    before, stand_in = _before(graph, after, frozenset())
    # a functional scatter is a write only where the pass reinplaced it (an inserted write stands
    # for it): one it kept, dropped or rebuilt writes nothing
    functional = frozenset(before.scatters - {_scatter_behind(before, w) for w in stand_in.values()})
    if functional:
        before, stand_in = _before(graph, after, functional)
    fresh = _fresh_writes(before, after, stand_in, written_back)
    # an in-place write standing for a functional scatter reads what the scatter read: its storage as
    # it is before the write (the elements it leaves as they were)
    for (storage, write), stood_for in stand_in.items():
        if stood_for != write and _scatter_behind(before, stood_for) is not None:
            writes = after.writes[storage]
            after.reads.setdefault((write, storage), tuple(writes[: writes.index(write)]))

    def mapped(storage: str, seen: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
        """(the writes ``seen`` of the graph after the pass, named as in the graph before it; as it is said)"""
        seen = after.expand(seen, storage)
        mapping = {w: stand_in.get((storage, w), w) for w in seen}
        return tuple(mapping[w] for w in seen), _version(seen, mapping)

    def seen_after(reader: str, storage: str) -> tuple[tuple[str, ...], str]:
        return mapped(storage, after.reads[(reader, storage)])

    violations = []
    # a node the pass kept, reading the same storage, and the caller: they must see the same writes
    for (reader, storage), old in before.reads.items():
        if (reader, storage) not in after.reads or reader in covered:
            continue
        old = before.expand(old, storage)
        new, said = seen_after(reader, storage)
        if old != new:
            who = (
                f"the final value of `{storage}`"
                if reader == _END
                else f"the read of `{storage}` by the kept node `{reader}`"
            )
            moved = [w for w in old if w not in new] + [w for w in new if w not in old] or list(old)
            violations.append(
                Violation(
                    "mutation_barriers",
                    f"the pass moved {who} across {before.describe(moved) or 'a write to it'}: in the "
                    f"original graph it is read {_version(old)}, after the pass {said} (a stale or too new value)",
                    (reader,) if reader != _END else (),
                )
            )
    # the other reads of a storage that both graphs hold: those of nodes the pass removed, inserted
    # or rewired (to or away from the storage, or a value copied into it), compared as a whole
    # an auto_functionalized node counts as a write only where an in-place op stands for it (it
    # was reinplaced there); where it was not, what read its elements reads a copy
    stood_for = {(storage, old) for (storage, _), old in stand_in.items()}
    removed = frozenset(n for n in before.nodes if n not in after.nodes)

    def before_version(storage: str, seen: tuple[str, ...]) -> tuple[str, ...] | None:
        if any(
            w in before.virtual.get(storage, ()) and (storage, w) not in stood_for and w not in after.nodes
            for w in seen
        ):
            return None
        return seen

    # the reads the inserted nodes must make: less those of a removed node through a value a removed
    # node computed and a copy_ writes back (an edge inside the rewritten subgraph: a replacement may
    # compute that value itself, reading the storage no more than the value's own inputs say)
    before_all, before_required = _all_reads(before, before_version, removed, frozenset(after.nodes))
    after_all, _ = _all_reads(
        after,
        lambda storage, seen: (
            None if any((storage, w) in fresh for w in after.expand(seen)) else mapped(storage, seen)[0]
        ),
    )
    old_reads: dict[str, dict[tuple[str, ...], list[str]]] = {}
    required: dict[str, set[tuple[str, ...]]] = {}
    for (reader, storage), versions in before_all.items():
        if (
            reader == _END
            or reader in covered
            or storage not in after.nodes
            or ((reader, storage) in before.reads and (reader, storage) in after.reads)  # judged above
            or after_all.get((reader, storage)) == versions
            or (reader in after.nodes and (reader, storage) not in after_all)  # now reads a copy, or other
        ):
            continue
        for seen in versions:
            old_reads.setdefault(storage, {}).setdefault(seen, []).append(reader)
        required.setdefault(storage, set()).update(before_required.get((reader, storage), ()))
    new_reads: dict[str, dict[tuple[str, ...], list[str]]] = {}
    inserted_nodes = frozenset(n for n in after.nodes if n not in before.nodes)
    said: dict[tuple[str, ...], str] = {}
    for (reader, storage), versions in after_all.items():
        if (
            reader == _END
            or storage not in old_reads
            or ((reader, storage) in before.reads and (reader, storage) in after.reads)
            or before_all.get((reader, storage)) == versions
        ):
            continue
        for seen in sorted(versions):
            said[seen] = _version(seen)
            new_reads.setdefault(storage, {}).setdefault(seen, []).append(reader)
    for storage, new in new_reads.items():
        old = old_reads[storage]
        if set(old) == set(new):
            continue  # the inserted nodes read the versions the replaced nodes read
        if required[storage] <= set(new) <= set(old) and not _reads_copied_value(after, storage, inserted_nodes):
            continue  # less only reads inside the match, of a value no inserted node reads
        every = [set(v) for v in (*old, *new)]
        crossed = sorted(set.union(*every) - set.intersection(*every), key=lambda w: before.order.get(w, -1))
        replaced = [name for names in old.values() for name in names]
        inserted = [name for names in new.values() for name in names]
        old_said = "; ".join(f"{', '.join(old[v])} {_version(v)}" for v in sorted(old, key=len))
        new_said = "; ".join(f"{', '.join(new[v])} {said[v]}" for v in sorted(new, key=len))
        violations.append(
            Violation(
                "mutation_barriers",
                f"the pass moved the read of `{storage}` across {before.describe(crossed) or 'a write to it'}: "
                f"the replaced node(s) read it ({old_said}), the inserted node(s) ({new_said}) "
                "(a stale or too new value)",
                (*replaced, *inserted),
            )
        )
    return violations


def applies(pair: RunPair) -> bool:
    """Whether this oracle has something to judge on ``pair`` (whose pass ran): the graph before the
    pass has an in-place op (a mutation region boundary)."""
    return bool(mutation_regions(pair.before.graph)[1])


def check(pair: RunPair) -> list[Violation]:
    """Return the mutation-barrier violations of ``pair`` (a ``RunPair``)."""
    if pair.after is None:
        return []
    regions, mutators = mutation_regions(pair.before.graph)
    violations = []
    covered: set[str] = set()  # the nodes of matches found crossing (the reads they moved go unsaid)
    for record in pair.match_records:
        names = [name for name in record.nodes if name in regions]
        if len({regions[name] for name in names}) > 1:
            covered.update(record.nodes)
            violations.append(_crossing(f"match ({record.entry})", names, regions, mutators))
    with _layout.remembered():  # (the graphs do not change while it reads them)
        return violations + _moved_reads(pair, covered)
