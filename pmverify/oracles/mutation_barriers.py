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
  removed, inserted or rewired must see the same set of versions. A read moved before or after a
  write to its storage is a finding; reads moved across writes to other tensors, a correct
  reinplacing, dead code removed and the read of a value overwritten whole before anything reads it
  (a clone passed as ``out``) are not. A clone the pass dropped for its source (``remove_noop_ops``)
  is taken for that source when nothing writes the source after the clone. A functional scatter
  is a write only where the pass reinplaced it (an inserted write stands for it); one the pass kept,
  rebuilt or dropped writes nothing, and one it dropped for an argument (a no-op scatter) is taken
  for that argument, as a dropped clone is. An
  ``auto_functionalized`` node is no write (as for Inductor's ``is_mutation_op``): it writes the
  arguments its op's schema marks mutable only in the tuple it returns, so only its elements'
  readers see that write; an ``auto_functionalized`` node the pass inserted stands for one it
  removed that wrote the same tensor (two fused into one), and a write-back ``copy_`` of the end
  of a chain of them on one tensor (each writing the element of the one before) is read as the
  chain, each in-place op replacing a node of it standing for that node (vLLM's
  defunctionalization of ``fused_add_rms_norm`` layer after layer), where the pass replaced the
  ``copy_`` (a ``copy_`` it kept is itself: what it copies is the functionalization oracle's).
  Two writes are dropped from a version by the memory they cover (replayed through views, see
  ``_layout``): a write that lies in the elements a ``slice_scatter`` / ``select_scatter`` replaces
  is not seen by the scatter's read of its first argument, and a write that a later ``copy_`` (or
  ``out``) in the same version overwrites whole is no more in it (vLLM's blind defunctionalization of
  ``fused_add_rms_norm`` on a slice of a graph input: the kept scatter of the new slice and the
  final ``copy_`` of the whole input). A write-back ``copy_`` of a node in chains on two tensors
  (input and residual) is matched per tensor, through the ``alias`` views functionalization
  inserts. ``aten._unsafe_view`` counts as the view it returns. The nodes of a match found crossing are not judged
  again; a kept node now reading a copy (the clone a decomposed ``auto_functionalized`` writes) is
  left to the functionalization oracle. (Graph inputs are taken not to alias each other, as
  Inductor's post-grad graphs guarantee.)
"""

from __future__ import annotations

from typing import Any

import torch

from .._execution import RunPair
from .._fx import unreshaped
from . import _layout
from ._violation import Violation

__all__ = ["check", "mutation_regions"]


def mutation_regions(graph: torch.fx.Graph) -> tuple[dict[str, int], list[torch.fx.Node]]:
    """(region id by node name, mutating nodes in graph order), as Inductor numbers them."""
    from torch._inductor.pattern_matcher import is_mutation_op

    regions: dict[str, int] = {}
    mutators: list[torch.fx.Node] = []
    region = 0
    for node in graph.nodes:
        if node.op in ("call_function", "call_method") and is_mutation_op(node):
            region += 1
            mutators.append(node)
        regions[node.name] = region
    return regions, mutators


def _is_view(target: Any) -> bool:
    """Whether a node with this target returns a view of its first input (``is_view``), counting
    ``aten._unsafe_view``: its schema declares a new tensor, but it returns a view (of the ``mm``
    that a ``matmul`` decomposes into), so a write to one is a write to the other."""
    from .._fx import is_view

    return is_view(target) or target is torch.ops.aten._unsafe_view.default


def _written_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The tensors a mutating node writes: every argument its schema marks written (``Tensor(a!)``,
    lists of them included), else its ``out=`` keyword, else its first argument (a ``*_`` method)."""
    from .._fx import flat_nodes

    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        written = []
        for i, argument in enumerate(schema.arguments):
            if argument.alias_info is not None and argument.alias_info.is_write:
                value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
                written.extend(flat_nodes(value))
        if written or any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            return written
    value = node.kwargs.get("out", node.args[0] if node.args else None)
    return flat_nodes(value)


def _written(node: torch.fx.Node) -> str:
    """The names of the tensors a mutating node writes (an ``auto_functionalized`` node: in its tuple)."""
    if node.target in _HOPS:
        bases = dict.fromkeys(_functionalized_elements(node).values())
        return f"{', '.join(b.name for b in bases) or '?'} in its tuple"
    return ", ".join(w.name for w in _written_nodes(node)) or "?"


def _copies(node: torch.fx.Node, base: torch.fx.Node) -> bool:
    """Whether ``node``, an ``aten.to`` (its schema says it may alias ``base``), returns a copy: its
    value has another dtype or device than ``base``'s (``to(torch.bool)``)."""
    if getattr(node.target, "overloadpacket", None) is not torch.ops.aten.to:
        return False
    value, source = node.meta.get("val"), base.meta.get("val")
    if not (isinstance(value, torch.Tensor) and isinstance(source, torch.Tensor)):
        return False
    return value.dtype != source.dtype or value.device != source.device


def _storage(node: torch.fx.Node, mutating: set[str]) -> torch.fx.Node:
    """The node whose storage ``node`` lives in: through views (``is_view``) and in-place ops (which
    return the tensor they write) back to a graph input or to the op that allocated it."""
    while node.op == "call_function":
        if node.name in mutating:
            returns = getattr(getattr(node.target, "_schema", None), "returns", None)
            if returns is not None and not (returns and returns[0].alias_info is not None):
                break  # the op's result is a new tensor, not the one it writes
            written = _written_nodes(node)
            base = written[0] if written else None
        elif _is_view(node.target) and node.args and isinstance(node.args[0], torch.fx.Node):
            base = node.args[0]
            if _copies(node, base):
                break
        else:
            break
        if base is None:
            break
        node = base
    return node


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


_COPY = torch.ops.aten.copy_.default
_HOPS = (torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2)
_END = "the caller"  # the reader of every graph input's final value


class _Versions:
    """Which writes to which storage each read of a graph sees.

    ``writes[storage]``: the names of the nodes writing it, in graph order; ``reads[(reader,
    storage)]``: the writes to ``storage`` that precede the reader, in order (the version of the
    storage it reads). A write is a mutating node (``is_mutation_op``, as Inductor numbers regions),
    except a ``copy_`` of a tensor into itself, maybe through views of another shape (it reads
    nothing and leaves the value as it is: what
    ``reinplace_inplaceable_ops`` leaves of a write-back it made redundant). A read is an input of a
    node that computes from values: views and ``getitem`` read nothing (their users do, at their own
    place), a ``copy_`` reads its source, not the destination it overwrites, an op does not read its
    ``out`` argument. The output node reads what it returns, and the caller (``_END``) reads the final
    value of every graph input. ``before``: whether this is the graph before the pass, whose
    functional ops that Inductor's reinplacing turns into writes then count as ``auto_functionalized``
    nodes do, except those named in ``functional`` (the pass did not reinplace them)."""

    def __init__(
        self,
        graph: torch.fx.Graph,
        before: bool = False,
        merged: dict[str, str] | None = None,
        functional: frozenset[str] = frozenset(),
    ) -> None:
        from torch._inductor.pattern_matcher import is_mutation_op

        from .._fx import flat_nodes

        calls = [n for n in graph.nodes if n.op in ("call_function", "call_method")]
        self.mutating = {n.name for n in calls if is_mutation_op(n)}
        self.merged = merged or {}  # storage -> the storage it is taken for (see _merged_clones)
        self.nodes = {n.name: n for n in graph.nodes}
        self.order = {name: i for i, name in enumerate(self.nodes)}
        self.writes: dict[str, list[str]] = {}
        self.reads: dict[tuple[str, str], tuple[str, ...]] = {}
        self.via: dict[tuple[str, str], set[tuple[str, ...]]] = {}  # reads of copies, see below
        self.written: set[str] = set()  # names of the nodes that write
        # a value overwritten whole before anything reads it (a clone passed as ``out``): what it
        # read is dead, and a pass may move that read freely
        dead = {n for n in calls if n.name not in self.mutating and not _is_view(n.target) and _dead(n, self.order)}
        for node in graph.nodes:
            if node.op not in ("call_function", "call_method", "output") or node in dead or _identity_copy(node):
                continue
            if not (node.op == "call_function" and _is_view(node.target)):
                skipped = set()
                if node.target is _COPY and node.args:
                    skipped.add(node.args[0])
                if isinstance(node.kwargs.get("out"), torch.fx.Node):
                    skipped.add(node.kwargs["out"])
                schema = getattr(node.target, "_schema", None)
                for i, argument in enumerate(schema.arguments if schema is not None else ()):
                    if argument.name == "out" and i < len(node.args) and isinstance(node.args[i], torch.fx.Node):
                        skipped.add(node.args[i])  # an ``out`` argument passed by position
                skipped.update(_v2_out_bases(node))
                region = _layout.scattered(node) if node.op == "call_function" else None
                for i, value in enumerate(flat_nodes((node.args, node.kwargs))):
                    if value not in skipped:
                        self._read(node.name, self.storage(value), region if i == 0 else None)
            for storage in self._writes(node):
                self.writes.setdefault(storage, []).append(node.name)
                self.written.add(node.name)
        for node in graph.nodes:
            if node.op in ("placeholder", "get_attr"):
                self._read(_END, node.name)
        # A value that a ``copy_`` writes into a storage (a write-back) is that storage's version
        # after the copy, as long as nothing writes the value's own storage: its readers read that
        # version too (the functional graph's reader of ``slice_scatter`` reads what the in-place
        # graph's reader of the input reads after the write).
        copies: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.virtual: dict[str, list[str]] = {}  # storage -> auto_functionalized nodes "writing" it
        # The value's own storage may have been written before the copy (computed in place, as a
        # reinplaced op computes it): then only its readers that see every one of those writes
        # read the copy's version (``final``).
        final: dict[str, tuple[str, tuple[str, ...]]] = {}
        for node in graph.find_nodes(op="call_function", target=_COPY):
            if len(node.args) > 1 and isinstance(node.args[1], torch.fx.Node) and node.name in self.written:
                source = node.args[1]
                own = self.writes.get(self.storage(source), [])
                if all(self.order[w] < self.order[node.name] for w in own) and source.name not in copies:
                    storage = self.storage(node.args[0])
                    writes = self.writes[storage]
                    copies[source.name] = (storage, tuple(writes[: writes.index(node.name) + 1]))
                    final[source.name] = (self.storage(source), tuple(own))
        # An ``auto_functionalized`` element holding the new value of a mutated argument whose
        # storage nothing writes afterwards (a buffer, no ``copy_`` back) is that storage as the in-place op
        # replacing the node leaves it: the node counts as a write for its elements' readers (and an
        # inserted write may stand for it), not for the storage's other readers. So is the result of
        # a functional op that reinplacing turns into a write of its first argument (a view scatter,
        # ``index_put``: ``select_scatter(x, v)`` -> ``x[i].copy_(v)``). Such a node whose argument is
        # an element of an earlier one writes that element's storage after it (a chain of functional
        # writes to one buffer).
        # A write-back ``copy_`` of the last element of a chain of auto_functionalized nodes on its
        # own storage (see _chain; nothing else writes the storage from the chain's first node to
        # the copy_) writes what the chain computed: its version is the chain's nodes (``expand``),
        # each a write seen by its elements' readers, and in-place ops replacing them stand for them.
        self.chains: dict[str, tuple[str, ...]] = {}
        written_back: dict[str, set[str]] = {}  # chain node -> its copy_ (one per tensor it writes)
        for node in graph.find_nodes(op="call_function", target=_COPY):
            chain, base = _chain(node)
            if not chain or node.name not in self.written:
                continue
            storage = self.storage(node.args[0])
            first, last = self.order[chain[0].name], self.order[node.name]
            if self.storage(base) == storage and not any(
                first < self.order[w] < last for w in self.writes.get(storage, ())
            ):
                self.chains[node.name] = tuple(n.name for n in chain)
                for n in chain:
                    written_back.setdefault(n.name, set()).add(node.name)
        elements_of: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.scatters: set[str] = set()  # the reinplaceable functional ops among them
        for node in graph.nodes:
            elements = _functionalized_elements(node)
            if before and node.name not in functional:  # what a reinplacing may have written
                elements = elements or _reinplaceable(node, self.mutating)
            back = written_back.get(node.name, set())
            for element, base in elements.items():
                if element is node:
                    self.scatters.add(node.name)
                if unreshaped(base).name in elements_of:
                    storage, prior = elements_of[unreshaped(base).name]
                    latest = all(w in prior or w in back for w in self.writes.get(storage, ()))
                else:
                    storage = self.storage(base)
                    writes = [w for w in self.writes.get(storage, []) if w not in back]
                    prior = tuple(w for w in writes if self.order[w] < self.order[node.name])
                    latest = len(prior) == len(writes)
                if back and latest and node.name not in self.virtual.setdefault(storage, []):
                    self.virtual[storage].append(node.name)
                if element.name not in copies and latest:
                    copies[element.name] = elements_of[element.name] = (storage, (*prior, node.name))
                    if node.name not in self.virtual.setdefault(storage, []):
                        self.virtual[storage].append(node.name)
        for node in graph.nodes:
            if node.op in ("call_function", "call_method", "output") and not (
                node.op == "call_function" and _is_view(node.target)
            ):
                for value in flat_nodes((node.args, node.kwargs)):
                    while value.name not in copies and value.op == "call_function" and _is_view(value.target):
                        if not (value.args and isinstance(value.args[0], torch.fx.Node)):
                            break
                        value = value.args[0]  # a view of a copied value reads it too
                    if value.name in copies and node.target is not _COPY:
                        own, seen = final.get(value.name, ("", ()))
                        if seen and self.reads.get((node.name, own)) != seen:
                            continue  # reads the value before it was finished
                        storage, version = copies[value.name]
                        self.via.setdefault((node.name, storage), set()).add(version)

    def expand(self, seen: tuple[str, ...], storage: str | None = None) -> tuple[str, ...]:
        """``seen`` with each write-back ``copy_`` of a chain replaced by the chain's nodes, and
        (given the storage) without the writes a later one in ``seen`` overwrites whole (a ``copy_``
        into memory covering all they wrote there): what they wrote is no more in the version."""
        seen = tuple(w for write in seen for w in self.chains.get(write, (write,)))
        if storage is None:
            return seen
        return tuple(w for i, w in enumerate(seen) if not any(self._overwrites(c, w, storage) for c in seen[i + 1 :]))

    def _read(self, reader: str, storage: str, region: _layout.Layout | None = None) -> None:
        """``reader`` reads ``storage`` where it is; ``region``: the elements a scatter replaces in
        what it reads (its first argument), whose writes it does not see. A second read of one
        storage by one node that sees other writes (a scatter's source) is kept in ``via``."""
        seen = tuple(w for w in self.writes.get(storage, ()) if not self._within(w, storage, region))
        if self.reads.setdefault((reader, storage), seen) != seen:
            self.via.setdefault((reader, storage), set()).add(seen)

    def _regions(self, write: str, storage: str) -> list[_layout.Layout] | None:
        """The memory of ``storage`` the node ``write`` writes (None where unknown)."""
        node = self.nodes.get(write)
        if node is None:
            return None
        if node.target in _HOPS:
            tensors = list(dict.fromkeys(_functionalized_elements(node).values()))
        elif write in getattr(self, "scatters", ()):
            return [r] if (r := _layout.scattered(node)) is not None else None
        else:
            tensors = _written_nodes(node)
        found = [_layout.layout(t) for t in tensors if self.storage(t) == storage]
        return found if found and all(r is not None for r in found) else None

    def _within(self, write: str, storage: str, region: _layout.Layout | None) -> bool:
        """Whether all ``write`` writes in ``storage`` lies in ``region`` (False unknown)."""
        regions = self._regions(write, storage) if region is not None else None
        return regions is not None and all(_layout.covers(region, r) for r in regions)

    def _overwrites(self, later: str, write: str, storage: str) -> bool:
        """Whether the write ``later`` overwrites, without reading it, all ``write`` wrote in ``storage``."""
        node = self.nodes.get(later)
        if node is None:
            return False
        return any(
            self._within(write, storage, _layout.layout(d)) for d in _overwritten(node) if self.storage(d) == storage
        )

    def storage(self, node: torch.fx.Node) -> str:
        name = _storage(node, self.mutating).name
        while name in self.merged:
            name = self.merged[name]
        return name

    def _writes(self, node: torch.fx.Node) -> list[str]:
        """The storages ``node`` writes (none when it is no write)."""
        if node.name not in self.mutating:
            return []
        if _identity_copy(node):
            return []
        return list(dict.fromkeys(self.storage(w) for w in _written_nodes(node)))

    def describe(self, names: list[str] | tuple[str, ...]) -> str:
        """The writes ``names`` as ``name (op writes tensors)``."""
        shown = []
        for name in names:
            node = self.nodes.get(name)
            shown.append(
                f"{name} ({getattr(node.target, '__name__', node.target)} writes {_written(node)})" if node else name
            )
        return ", ".join(shown)


def _chain(copy: torch.fx.Node) -> tuple[list[torch.fx.Node], Any]:
    """``([A1, ..., An], the tensor A1 writes)`` when ``copy`` (a ``copy_``) writes back an element
    of an ``auto_functionalized`` node ``An`` whose mutated argument is an element of ``An-1``, and
    so on back to ``A1``, whose mutated argument is a tensor of the graph; ``([], None)`` otherwise."""
    chain: list[torch.fx.Node] = []
    value = unreshaped(copy.args[1]) if len(copy.args) > 1 else None
    while isinstance(value, torch.fx.Node) and value.args and isinstance(value.args[0], torch.fx.Node):
        base = _functionalized_elements(value.args[0]).get(value)
        if base is None:
            break
        chain.insert(0, value.args[0])
        value = unreshaped(base)  # through the ``alias`` functionalization puts between them
    return chain, value


def _v2_out_bases(node: torch.fx.Node) -> set[torch.fx.Node]:
    """The bases an ``auto_functionalized_v2`` node passes only as its op's ``out`` argument
    (``_out_base_index``, no other ``_*_base_index`` on the same base): the op does not read them,
    as ``auto_functionalized`` does not read its ``out=`` keyword (empty for any other node)."""
    if node.op != "call_function" or node.target is not torch.ops.higher_order.auto_functionalized_v2:
        return set()
    bases = node.kwargs.get("_all_bases", ())
    indices = {k: v for k, v in node.kwargs.items() if k.startswith("_") and k.endswith("_base_index")}
    out = indices.pop("_out_base_index", None)
    if not isinstance(out, int) or not 0 <= out < len(bases) or out in indices.values():
        return set()
    return {bases[out]} if isinstance(bases[out], torch.fx.Node) else set()


#: Functional ops that Inductor's reinplacing turns into a write of their first argument
#: (``inplaceable_ops`` and the view scatters of ``torch/_inductor/fx_passes/reinplace.py``); their
#: result is laid out as that argument.
_REINPLACEABLE = frozenset(
    f"aten::{name}"
    for name in (
        "select_scatter",
        "slice_scatter",
        "diagonal_scatter",
        "as_strided_scatter",
        "index_put",
        "_unsafe_index_put",
    )
)


def _reinplaceable(node: torch.fx.Node, mutating: set[str]) -> dict[torch.fx.Node, torch.fx.Node]:
    """``{node: its first argument}`` when ``node`` is a functional op that Inductor's reinplacing
    turns into a write of that argument (a view scatter, ``index_put``); empty otherwise."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or node.name in mutating or not node.args:
        return {}
    base = node.args[0]
    return {node: base} if schema.name in _REINPLACEABLE and isinstance(base, torch.fx.Node) else {}


def _dead(node: torch.fx.Node, order: dict[str, int]) -> bool:
    """Whether ``node``'s value is overwritten whole (:func:`_overwritten`) by a user that passes it
    once, or through a view covering all of it, before any other user touches it."""
    from .._fx import flat_nodes

    overwriting = [
        u.name
        for u in node.users
        if (node in _overwritten(u) and flat_nodes((u.args, u.kwargs)).count(node) == 1)
        or (u.op == "call_function" and _is_view(u.target) and _whole(u, node) and _dead(u, order))
    ]
    if not overwriting:
        return False
    first = min(order[name] for name in overwriting)
    return all(order[u.name] >= first for u in node.users)


def _identity_copy(node: torch.fx.Node) -> bool:
    """Whether ``node`` copies a tensor into itself (maybe through views of another shape): it
    reads and writes nothing that matters (what reinplacing leaves of a write-back)."""
    return node.target is _COPY and len(node.args) > 1 and unreshaped(node.args[0]) is unreshaped(node.args[1])


def _whole(view: torch.fx.Node, base: torch.fx.Node) -> bool:
    """Whether ``view`` covers every element of ``base`` (by their ``meta["val"]``; False unknown)."""
    new, old = view.meta.get("val"), base.meta.get("val")
    if not (isinstance(new, torch.Tensor) and isinstance(old, torch.Tensor)):
        return False
    return new.numel() == old.numel() and old.is_contiguous() and new.is_contiguous()


def _overwritten(node: torch.fx.Node) -> set[torch.fx.Node]:
    """The arguments ``node`` writes whole without reading them: a ``copy_``'s destination, an
    ``out`` argument (by keyword, by position, or an ``auto_functionalized_v2`` base passed whole as
    ``out``)."""
    if node.op != "call_function":
        return set()
    if node.target is _COPY:
        return {node.args[0]} if node.args and isinstance(node.args[0], torch.fx.Node) else set()
    found = {node.kwargs["out"]} if isinstance(node.kwargs.get("out"), torch.fx.Node) else set()
    schema = getattr(node.target, "_schema", None)
    for i, argument in enumerate(schema.arguments if schema is not None else ()):
        if argument.name == "out" and i < len(node.args) and isinstance(node.args[i], torch.fx.Node):
            found.add(node.args[i])
    view_keys = [k for k in node.kwargs if k.startswith("_out_") and k != "_out_base_index"]
    if not view_keys:  # the base itself, not a view of it
        found.update(_v2_out_bases(node))
    return found


def _functionalized_elements(node: torch.fx.Node) -> dict[torch.fx.Node, torch.fx.Node]:
    """``getitem`` user -> the mutated argument (the base, for ``auto_functionalized_v2``) whose new
    value it holds, for an ``auto_functionalized`` / ``_v2`` node (empty for any other node). The
    elements are ``(op outputs..., new values of the mutated args / bases...)``
    (``torch/_higher_order_ops/auto_functionalize.py``)."""
    import operator

    v1, v2 = torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2
    if node.op != "call_function" or node.target not in (v1, v2) or not node.args:
        return {}
    schema = getattr(node.args[0], "_schema", None)
    if schema is None:
        return {}
    if node.target is v1:
        mutated = [
            node.kwargs.get(a.name) for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write
        ]
    else:
        mutated = list(node.kwargs.get("_all_bases", ()))
    outputs = len(schema.returns) or 1  # an op returning nothing has a None element
    elements = {}
    for user in node.users:
        if user.target is operator.getitem and isinstance(user.args[1], int) and user.args[1] >= outputs:
            index = user.args[1] - outputs
            if index < len(mutated) and isinstance(mutated[index], torch.fx.Node):
                elements[user] = mutated[index]
    return elements


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


def _scatter_behind(before: _Versions, write: str) -> bool:
    """Whether ``write`` (of the graph before the pass) is a functional scatter, or the ``copy_``
    writing one back: the in-place write standing for it reads its storage as the scatter did."""
    if write in before.scatters:
        return True
    node = before.nodes.get(write)
    if node is None or node.target is not _COPY or len(node.args) < 2:
        return False
    source = node.args[1]
    while isinstance(source, torch.fx.Node) and source.op == "call_function" and _is_view(source.target):
        source = source.args[0]
    return isinstance(source, torch.fx.Node) and source.name in before.scatters


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
        if node.target is torch.ops.aten.clone.default:
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


def _all_reads(graph: _Versions, name: Any) -> dict[tuple[str, str], frozenset[tuple[str, ...]]]:
    """Every version each node reads of each storage, directly or through a value copied into it,
    its writes renamed by ``name(storage, version)``."""
    reads: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for (reader, storage), seen in graph.reads.items():
        reads.setdefault((reader, storage), set()).add(name(storage, graph.expand(seen, storage)))
    for (reader, storage), versions in graph.via.items():
        named = {name(storage, graph.expand(seen, storage)) for seen in versions}
        named.discard(None)
        if named:
            reads.setdefault((reader, storage), set()).update(named)
    return {key: frozenset(versions) for key, versions in reads.items()}


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


def _moved_reads(pair: Any, covered: set[str]) -> list[Violation]:
    """Reads that see another version of their storage after the pass (see the module docstring)."""
    after = _Versions(pair.after.graph)
    before, stand_in = _before(pair.before.graph, after, frozenset())
    # a functional scatter is a write only where the pass reinplaced it (an inserted write stands
    # for it): one it kept, dropped or rebuilt writes nothing
    functional = frozenset(before.scatters - set(stand_in.values()))
    if functional:
        before, stand_in = _before(pair.before.graph, after, functional)
    # an in-place write standing for a functional scatter reads what the scatter read: its storage as
    # it is before the write (the elements it leaves as they were)
    for (storage, write), stood_for in stand_in.items():
        if stood_for != write and _scatter_behind(before, stood_for):
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
    before_all = _all_reads(
        before,
        lambda storage, seen: (
            None
            if any(
                w in before.virtual.get(storage, ()) and (storage, w) not in stood_for and w not in after.nodes
                for w in seen
            )
            else seen
        ),
    )
    after_all = _all_reads(after, lambda storage, seen: mapped(storage, seen)[0])
    old_reads: dict[str, dict[tuple[str, ...], list[str]]] = {}
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
    new_reads: dict[str, dict[tuple[str, ...], list[str]]] = {}
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
    return violations + _moved_reads(pair, covered)
