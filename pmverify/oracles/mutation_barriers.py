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
- any other rewrite (a hand-written pass) is seen in the graph difference: a value that erased
  nodes read (a node kept by the pass) and that the nodes the pass inserted now read must not be
  read across an in-place op that writes its storage (the same graph input or allocation, through
  views and in-place results). A replacement placed on the other side of such an op than the nodes
  it replaces reads the value before (or after) the mutation where the original read it after (or
  before): a stale or too new value. Rewrites that each stay in their region (say, every ``neg``
  rewritten in place, on both sides of an ``add_``), reads moved across in-place ops on other
  tensors, and dead code removed are not findings. (Graph inputs are taken not to alias each
  other, as Inductor's post-grad graphs guarantee.)
"""

from __future__ import annotations

from typing import Any

import torch

from .._execution import RunPair
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


def _written_node(node: torch.fx.Node) -> torch.fx.Node | None:
    """The tensor a mutating node writes (its first written argument), when it is a node."""
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        for i, argument in enumerate(schema.arguments):
            if argument.alias_info is not None and argument.alias_info.is_write:
                value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
                return value if isinstance(value, torch.fx.Node) else None
    value = node.kwargs.get("out", node.args[0] if node.args else None)
    return value if isinstance(value, torch.fx.Node) else None


def _written(node: torch.fx.Node) -> str:
    """The name of the tensor a mutating node writes."""
    written = _written_node(node)
    return written.name if written is not None else "?"


def _storage(node: torch.fx.Node, mutating: set[str]) -> torch.fx.Node:
    """The node whose storage ``node`` lives in: through views (``is_view``) and in-place ops (which
    return the tensor they write) back to a graph input or to the op that allocated it."""
    from .._fx import is_view

    while node.op == "call_function":
        if node.name in mutating:
            base = _written_node(node)
        elif is_view(node.target) and node.args and isinstance(node.args[0], torch.fx.Node):
            base = node.args[0]
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


def _after_regions(after: torch.fx.Graph, mutators: list[torch.fx.Node], before: set[str]) -> dict[str, int]:
    """Region of each node of the graph after the pass, counting the original mutating nodes (by
    name) and the mutating nodes the pass inserted (a rebuilt ``add_``) that precede it, so that ids
    compare with those of the graph before the pass."""
    from torch._inductor.pattern_matcher import is_mutation_op

    original = {m.name for m in mutators}
    regions: dict[str, int] = {}
    region = 0
    for node in after.nodes:
        if node.name in original or (
            node.name not in before and node.op in ("call_function", "call_method") and is_mutation_op(node)
        ):
            region += 1
        regions[node.name] = region
    return regions


def _moved_reads(
    pair: Any, regions: dict[str, int], mutators: list[torch.fx.Node], covered: set[str]
) -> list[Violation]:
    """Values read by erased nodes and by inserted nodes in different regions (see the module docstring)."""
    before_names = set(regions)
    after_nodes = {node.name: node for node in pair.after.graph.nodes}
    after_regions = _after_regions(pair.after.graph, mutators, before_names)
    read_before: dict[str, dict[int, list[str]]] = {}
    for node in pair.before.graph.nodes:
        if node.name in after_nodes or node.name in covered or node.op not in ("call_function", "call_method"):
            continue
        for arg in node.all_input_nodes:
            if arg.name in after_nodes:
                read_before.setdefault(arg.name, {}).setdefault(regions[node.name], []).append(node.name)
    read_after: dict[str, dict[int, list[str]]] = {}
    for name, node in after_nodes.items():
        if name in before_names or node.op not in ("call_function", "call_method"):
            continue
        for arg in node.all_input_nodes:
            if arg.name in read_before:
                read_after.setdefault(arg.name, {}).setdefault(after_regions[name], []).append(name)
    mutating = {m.name for m in mutators}
    before_nodes = {node.name: node for node in pair.before.graph.nodes}
    violations = []
    for value, new in read_after.items():
        old = read_before[value]
        if set(old) == set(new):
            continue  # read in the same regions as before
        spanned = [*old, *new]
        low, high = min(spanned), max(spanned)
        storage = _storage(before_nodes[value], mutating)
        crossed = [
            m
            for m in mutators
            if low < regions[m.name] <= high
            and (written := _written_node(m)) is not None
            and _storage(written, mutating) is storage
        ]
        if not crossed:
            continue  # the in-place ops between write other tensors: the value read is the same
        shown = ", ".join(f"{m.name} ({getattr(m.target, '__name__', m.target)} writes {_written(m)})" for m in crossed)
        replaced = [name for region in sorted(old) for name in old[region]]
        inserted = [name for region in sorted(new) for name in new[region]]
        violations.append(
            Violation(
                "mutation_barriers",
                f"the pass moved the read of `{value}` across {shown}: the replaced node(s) "
                f"{', '.join(replaced)} read it in mutation region(s) {', '.join(map(str, sorted(old)))} of the "
                f"original graph, the inserted node(s) {', '.join(inserted)} in {', '.join(map(str, sorted(new)))}",
                (*replaced, *inserted),
            )
        )
    return violations


def check(pair: RunPair) -> list[Violation]:
    """Return the mutation-barrier violations of ``pair`` (a ``RunPair``)."""
    if pair.after is None:
        return []
    regions, mutators = mutation_regions(pair.before.graph)
    if not mutators:
        return []
    violations = []
    covered: set[str] = set()
    for record in pair.match_records:
        covered.update(record.nodes)
        names = [name for name in record.nodes if name in regions]
        if len({regions[name] for name in names}) > 1:
            violations.append(_crossing(f"match ({record.entry})", names, regions, mutators))
    return violations + _moved_reads(pair, regions, mutators, covered)
