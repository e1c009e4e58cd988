"""The version model of the mutation-barrier oracle (see :mod:`.mutation_barriers`): which
writes to which storage each read of a graph sees, with the storages, writes and reads as that
oracle defines them."""

from __future__ import annotations

import functools
from typing import Any

import torch

from .._fx import flat_nodes, is_view, unreshaped
from . import _layout

__all__ = ["COPY", "END", "HOPS", "Versions", "is_view_or_unsafe", "written_names"]


def is_view_or_unsafe(target: Any) -> bool:
    """Whether a node with this target returns a view of its first input (``is_view``), counting
    ``aten._unsafe_view``: its schema declares a new tensor, but it returns a view (of the ``mm``
    that a ``matmul`` decomposes into), so a write to one is a write to the other."""
    try:
        return _is_view_or_unsafe(target)
    except TypeError:  # an unhashable target
        return _is_view_or_unsafe.__wrapped__(target)


@functools.lru_cache(maxsize=4096)
def _is_view_or_unsafe(target: Any) -> bool:
    # Why cached: asked of every node several times a case (a tenth of the oracle's time)
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


def _replaced(node: torch.fx.Node) -> tuple[_layout.Layout, ...] | None:
    """The elements of its first argument a view scatter replaces by its source, and those the view
    scatters built on its result replace: a chain of them, each the only user of the one before and
    reading it once, as its first argument (AOT's write-back of several views of one tensor, vLLM's
    rotary embedding of q and k of a fused qkv), replaces those elements before anything else reads
    them. None for any other node, or where unknown."""
    from .._fx import flat_nodes

    base = _layout.layout(node.args[0]) if node.args and isinstance(node.args[0], torch.fx.Node) else None
    region = _layout.scattered(node, base)
    if region is None:
        return None
    regions = [region]
    while len(node.users) == 1:
        (user,) = node.users
        if not (user.op == "call_function" and user.args and user.args[0] is node):
            break
        if node in flat_nodes((user.args[1:], user.kwargs)) or (later := _layout.scattered(user, base)) is None:
            break  # (a scatter's result has its first argument's sizes: its region, in that argument)
        regions.append(later)
        node = user
    return tuple(regions)


def written_names(node: torch.fx.Node) -> str:
    """The names of the tensors a mutating node writes (an ``auto_functionalized`` node: in its tuple)."""
    if node.target in HOPS:
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
        elif is_view_or_unsafe(node.target) and node.args and isinstance(node.args[0], torch.fx.Node):
            base = node.args[0]
            if _copies(node, base):
                break
        else:
            break
        if base is None:
            break
        node = base
    return node


COPY = torch.ops.aten.copy_.default
HOPS = (torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2)
END = "the caller"  # the reader of every graph input's final value


class Versions:
    """Which writes to which storage each read of a graph sees.

    ``writes[storage]``: the names of the nodes writing it, in graph order; ``reads[(reader,
    storage)]``: the writes to ``storage`` that precede the reader, in order (the version of the
    storage it reads). A write is a mutating node (``is_mutation_op``, as Inductor numbers regions),
    except a ``copy_`` of a tensor into itself, maybe through views of another shape (it reads
    nothing and leaves the value as it is: what
    ``reinplace_inplaceable_ops`` leaves of a write-back it made redundant). A read is an input of a
    node that computes from values: views and ``getitem`` read nothing (their users do, at their own
    place), a ``copy_`` reads its source, not the destination it overwrites, an op does not read its
    ``out`` argument. The output node reads what it returns, and the caller (``END``) reads the final
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
        from .._compat import is_mutation_op

        calls = [n for n in graph.nodes if n.op in ("call_function", "call_method")]
        self.mutating = {n.name for n in calls if is_mutation_op(n)}
        self.merged = merged or {}  # storage -> the storage it is taken for (see _merged_clones)
        self.nodes = {n.name: n for n in graph.nodes}
        self.order = {name: i for i, name in enumerate(self.nodes)}
        self.writes: dict[str, list[str]] = {}
        self.reads: dict[tuple[str, str], tuple[str, ...]] = {}
        self.via: dict[tuple[str, str], set[tuple[str, ...]]] = {}  # reads of copies, see below
        #: per ``via`` read of a copied value, the value's node (a second read of a storage: None)
        self.via_values: dict[tuple[str, str], set[str | None]] = {}
        self.written: set[str] = set()  # names of the nodes that write
        unread = self._reads_and_writes(graph, calls)
        copies, final = self._write_backs(graph)
        written_back = self._chains(graph)
        self._functionalized_writes(graph, before, functional, written_back, copies)
        self._reads_of_copies(graph, copies, final, unread)

    def _reads_and_writes(self, graph: torch.fx.Graph, calls: list[torch.fx.Node]) -> set[tuple[str, str]]:
        """Phase 1: ``writes`` and ``reads`` (see the class docstring), the caller's reads of every
        graph input included; returns the ``(reader, value)`` pairs that read no version (a scatter's
        first argument replaced whole, a value with no element)."""
        # a value overwritten whole before anything reads it (a clone passed as ``out``): what it
        # read is dead, and a pass may move that read freely
        dead = {
            n for n in calls if n.name not in self.mutating and not is_view_or_unsafe(n.target) and _dead(n, self.order)
        }
        unread: set[tuple[str, str]] = set()  # (a scatter, its first argument): replaced whole, not read
        for node in graph.nodes:
            if node.op not in ("call_function", "call_method", "output") or node in dead or _identity_copy(node):
                continue
            if not (node.op == "call_function" and is_view_or_unsafe(node.target)):
                skipped = set()
                if node.target is COPY and node.args:
                    skipped.add(node.args[0])
                if isinstance(node.kwargs.get("out"), torch.fx.Node):
                    skipped.add(node.kwargs["out"])
                schema = getattr(node.target, "_schema", None)
                for i, argument in enumerate(schema.arguments if schema is not None else ()):
                    if argument.name == "out" and i < len(node.args) and isinstance(node.args[i], torch.fx.Node):
                        skipped.add(node.args[i])  # an ``out`` argument passed by position
                skipped.update(_v2_out_bases(node))
                region = _replaced(node) if node.op == "call_function" else None
                if region is not None and isinstance(node.args[0], torch.fx.Node):
                    whole = _layout.layout(node.args[0])
                    if whole is not None and any(_layout.covers(r, whole) for r in region):
                        skipped.add(node.args[0])  # replaced whole: its values are never read
                        unread.add((node.name, node.args[0].name))
                for i, value in enumerate(flat_nodes((node.args, node.kwargs))):
                    if _empty(value):
                        unread.add((node.name, value.name))  # no element: it reads no version
                    elif value not in skipped:
                        self._read(node.name, self.storage(value), region if i == 0 else None)
            for storage in self._writes(node):
                self.writes.setdefault(storage, []).append(node.name)
                self.written.add(node.name)
        for node in graph.nodes:
            if node.op in ("placeholder", "get_attr"):
                self._read(END, node.name)
        return unread

    def _write_backs(
        self, graph: torch.fx.Graph
    ) -> tuple[dict[str, tuple[str, tuple[str, ...]]], dict[str, tuple[str, tuple[str, ...]]]]:
        """Phase 2: the values ``copy_`` writes into a storage, each with (that storage, its version
        after the copy) (``copies``), and (the value's own storage, its writes before the copy)
        (``final``)."""
        # A value that a ``copy_`` writes into a storage (a write-back) is that storage's version
        # after the copy, as long as nothing writes the value's own storage: its readers read that
        # version too (the functional graph's reader of ``slice_scatter`` reads what the in-place
        # graph's reader of the input reads after the write).
        copies: dict[str, tuple[str, tuple[str, ...]]] = {}
        # The value's own storage may have been written before the copy (computed in place, as a
        # reinplaced op computes it): then only its readers that see every one of those writes
        # read the copy's version (``final``).
        final: dict[str, tuple[str, tuple[str, ...]]] = {}
        for node in graph.find_nodes(op="call_function", target=COPY):
            if len(node.args) > 1 and isinstance(node.args[1], torch.fx.Node) and node.name in self.written:
                source = node.args[1]
                own = self.writes.get(self.storage(source), [])
                if all(self.order[w] < self.order[node.name] for w in own) and source.name not in copies:
                    storage = self.storage(node.args[0])
                    writes = self.writes[storage]
                    copies[source.name] = (storage, tuple(writes[: writes.index(node.name) + 1]))
                    final[source.name] = (self.storage(source), tuple(own))
        return copies, final

    def _chains(self, graph: torch.fx.Graph) -> dict[str, set[str]]:
        """Phase 3: ``chains`` (a write-back ``copy_`` of a chain of auto_functionalized nodes -> the
        chain's nodes); returns, per auto_functionalized node, the ``copy_`` nodes writing back what
        it wrote (a chain's, or a chain of view scatters')."""
        # A write-back ``copy_`` of the last element of a chain of auto_functionalized nodes on its
        # own storage (see _chain; nothing else writes the storage from the chain's first node to
        # the copy_) writes what the chain computed: its version is the chain's nodes (``expand``),
        # each a write seen by its elements' readers, and in-place ops replacing them stand for them.
        self.chains: dict[str, tuple[str, ...]] = {}
        written_back: dict[str, set[str]] = {}  # chain node -> its copy_ (one per tensor it writes)
        for node in graph.find_nodes(op="call_function", target=COPY):
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
        # A write-back ``copy_`` of a chain of view scatters on its destination, each placing an
        # element of an ``auto_functionalized`` node where the view it mutated lies (AOT's form of
        # an op writing several views of one tensor: vLLM's rotary embedding of q and k of a fused
        # qkv), writes back what those nodes wrote, as the ``copy_`` of a chain does.
        for node in graph.find_nodes(op="call_function", target=COPY):
            if node.name in self.written:
                for hop in _scattered_back(node):
                    written_back.setdefault(hop.name, set()).add(node.name)
        return written_back

    def _functionalized_writes(
        self,
        graph: torch.fx.Graph,
        before: bool,
        functional: frozenset[str],
        written_back: dict[str, set[str]],
        copies: dict[str, tuple[str, tuple[str, ...]]],
    ) -> None:
        """Phase 4: ``virtual`` (storage -> the auto_functionalized nodes "writing" it) and
        ``scatters``; the elements that hold a storage's new value join ``copies``."""
        # An ``auto_functionalized`` element holding the new value of a mutated argument whose
        # storage nothing writes afterwards (a buffer, no ``copy_`` back) is that storage as the in-place op
        # replacing the node leaves it: the node counts as a write for its elements' readers (and an
        # inserted write may stand for it), not for the storage's other readers. So is the result of
        # a functional op that reinplacing turns into a write of its first argument (a view scatter,
        # ``index_put``: ``select_scatter(x, v)`` -> ``x[i].copy_(v)``). Such a node whose argument is
        # an element of an earlier one writes that element's storage after it (a chain of functional
        # writes to one buffer).
        self.virtual: dict[str, list[str]] = {}  # storage -> auto_functionalized nodes "writing" it
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

    def _reads_of_copies(
        self,
        graph: torch.fx.Graph,
        copies: dict[str, tuple[str, tuple[str, ...]]],
        final: dict[str, tuple[str, tuple[str, ...]]],
        unread: set[tuple[str, str]],
    ) -> None:
        """Phase 5: ``via``, the versions a reader of a copied value (or of a view of it) reads."""
        for node in graph.nodes:
            if node.op in ("call_function", "call_method", "output") and not (
                node.op == "call_function" and is_view_or_unsafe(node.target)
            ):
                for value in flat_nodes((node.args, node.kwargs)):
                    if (node.name, value.name) in unread:
                        continue
                    while value.name not in copies and value.op == "call_function" and is_view_or_unsafe(value.target):
                        if not (value.args and isinstance(value.args[0], torch.fx.Node)):
                            break
                        value = value.args[0]  # a view of a copied value reads it too
                    if value.name in copies and node.target is not COPY:
                        own, seen = final.get(value.name, ("", ()))
                        if seen and self.reads.get((node.name, own)) != seen:
                            continue  # reads the value before it was finished
                        storage, version = copies[value.name]
                        self.via.setdefault((node.name, storage), set()).add(version)
                        self.via_values.setdefault((node.name, storage), set()).add(value.name)

    def expand(self, seen: tuple[str, ...], storage: str | None = None) -> tuple[str, ...]:
        """``seen`` with each write-back ``copy_`` of a chain replaced by the chain's nodes, and
        (given the storage) without the writes a later one in ``seen`` overwrites whole (a ``copy_``
        into memory covering all they wrote there): what they wrote is no more in the version."""
        seen = tuple(w for write in seen for w in self.chains.get(write, (write,)))
        if storage is None:
            return seen
        return tuple(w for i, w in enumerate(seen) if not any(self._overwrites(c, w, storage) for c in seen[i + 1 :]))

    def _read(self, reader: str, storage: str, region: tuple[_layout.Layout, ...] | None = None) -> None:
        """``reader`` reads ``storage`` where it is; ``region``: the elements a scatter replaces in
        what it reads (its first argument; see :func:`_replaced`), whose writes it does not see. A second read of one
        storage by one node that sees other writes (a scatter's source) is kept in ``via``."""
        seen = tuple(w for w in self.writes.get(storage, ()) if not self._within(w, storage, region))
        if self.reads.setdefault((reader, storage), seen) != seen:
            self.via.setdefault((reader, storage), set()).add(seen)
            self.via_values.setdefault((reader, storage), set()).add(None)

    def _regions(self, write: str, storage: str) -> list[_layout.Layout] | None:
        """The memory of ``storage`` the node ``write`` writes (None where unknown)."""
        node = self.nodes.get(write)
        if node is None:
            return None
        if node.target in HOPS:
            tensors = list(dict.fromkeys(_functionalized_elements(node).values()))
        elif write in getattr(self, "scatters", ()):
            return [r] if (r := _layout.scattered(node)) is not None else None
        else:
            tensors = _written_nodes(node)
        found = [_layout.layout(t) for t in tensors if self.storage(t) == storage]
        return found if found and all(r is not None for r in found) else None

    def _within(self, write: str, storage: str, region: tuple[_layout.Layout | None, ...] | None) -> bool:
        """Whether all ``write`` writes in ``storage`` lies in ``region`` (each memory it writes in one
        of its layouts; False unknown)."""
        regions = self._regions(write, storage) if region is not None else None
        return regions is not None and all(any(_layout.covers(outer, r) for outer in region) for r in regions)

    def _overwrites(self, later: str, write: str, storage: str) -> bool:
        """Whether the write ``later`` overwrites, without reading it, all ``write`` wrote in ``storage``."""
        node = self.nodes.get(later)
        if node is None:
            return False
        return any(
            self._within(write, storage, (_layout.layout(d),)) for d in _overwritten(node) if self.storage(d) == storage
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
                f"{name} ({getattr(node.target, '__name__', node.target)} writes {written_names(node)})"
                if node
                else name
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


def _empty(node: torch.fx.Node) -> bool:
    """Whether ``node``'s value holds no element (a zero-length slice): reading it reads nothing."""
    found = _layout.layout(node)
    return found is not None and 0 in found[2]


def _scattered_back(copy: torch.fx.Node) -> list[torch.fx.Node]:
    """The ``auto_functionalized`` / ``_v2`` nodes whose elements ``copy`` (a ``copy_``) writes back
    into its destination ``x`` through a chain of view scatters on ``x`` itself, each scatter placing
    one element exactly where the view of ``x`` it holds the new value of lies:
    ``x.copy_(slice_scatter(slice_scatter(x, af[1], ...), af[2], ...))``; empty otherwise."""
    if len(copy.args) < 2 or not all(isinstance(a, torch.fx.Node) for a in copy.args[:2]):
        return []
    destination, value = copy.args[0], copy.args[1]
    root = _layout.layout(destination)
    hops: list[torch.fx.Node] = []
    while value is not destination:
        if not (
            isinstance(value, torch.fx.Node)
            and value.op == "call_function"
            and value.target in _VIEW_SCATTERS
            and len(value.args) > 1
            and isinstance(value.args[1], torch.fx.Node)
        ):
            return []
        source = value.args[1]
        hop = source.args[0] if source.args and isinstance(source.args[0], torch.fx.Node) else None
        base = _functionalized_elements(hop).get(source) if hop is not None else None
        region, where = _layout.scattered(value, root), _layout.layout(base) if base is not None else None
        if region is None or where is None or not (_layout.covers(region, where) and _layout.covers(where, region)):
            return []
        hops.append(hop)
        value = value.args[0]
    return hops


_VIEW_SCATTERS = (torch.ops.aten.slice_scatter.default, torch.ops.aten.select_scatter.default)


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
        or (u.op == "call_function" and is_view_or_unsafe(u.target) and _whole(u, node) and _dead(u, order))
    ]
    if not overwriting:
        return False
    first = min(order[name] for name in overwriting)
    return all(order[u.name] >= first for u in node.users)


def _identity_copy(node: torch.fx.Node) -> bool:
    """Whether ``node`` copies a tensor into itself (maybe through views of another shape): it
    reads and writes nothing that matters (what reinplacing leaves of a write-back)."""
    return node.target is COPY and len(node.args) > 1 and unreshaped(node.args[0]) is unreshaped(node.args[1])


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
    if node.target is COPY:
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
