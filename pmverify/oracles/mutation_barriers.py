"""Mutation-barrier oracle: no rewrite spans an in-place op of the original graph.

Inductor splits a graph into *mutation regions* at every mutating node (``is_mutation_op``: an
op whose schema is mutable, a ``*_`` method, an ``out=`` call) and numbers them in graph order
(``compute_mutation_region_ids`` in ``torch/_inductor/pattern_matcher.py``). A rewrite whose
matched nodes lie in two regions reads, after the rewrite, values from one side of the mutation
only: a downstream op sees a stale (or a too new) value. ``PatternMatcherPass.apply`` discards
such matches ("pattern match crosses mutation barrier - discard"); hand-written passes must do
the same.

Regions are those of the graph *before* the pass. The replaced regions are found two ways:

- matches made through Inductor's pattern entries (``RunPair.matches``, recorded while the pass
  ran): each match's nodes must lie in one region (this catches stale ``mutation_region_id``
  meta, which Inductor does not recompute when the first node carries one);
- every other erased node (a hand-written pass): erased nodes are grouped into connected
  components over the graph's data edges; a component whose value was used outside it (so
  something else now stands in for it) must lie in one region. A dead component (all its users
  erased with it) is dead-code elimination, not a rewrite, and is not judged.

A violation names the replaced nodes and the mutating nodes crossed, with the tensor each writes.
"""

from __future__ import annotations

from typing import Any

import torch

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


def _written(node: torch.fx.Node) -> str:
    """The name of the tensor a mutating node writes (its first written argument)."""
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        for i, argument in enumerate(schema.arguments):
            if argument.alias_info is not None and argument.alias_info.is_write:
                value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
                if isinstance(value, torch.fx.Node):
                    return value.name
    if node.kwargs.get("out") is not None:
        return str(node.kwargs["out"])
    first = node.args[0] if node.args else None
    return first.name if isinstance(first, torch.fx.Node) else "?"


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


def _components(nodes: list[torch.fx.Node]) -> list[list[torch.fx.Node]]:
    """Connected components of ``nodes`` over the data edges among them, in graph order."""
    parent = {node: node for node in nodes}

    def find(node: torch.fx.Node) -> torch.fx.Node:
        while parent[node] is not node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for node in nodes:
        for arg in node.all_input_nodes:
            if arg in parent:
                parent[find(arg)] = find(node)
    groups: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in nodes:
        groups.setdefault(find(node), []).append(node)
    return list(groups.values())


def check(pair: Any) -> list[Violation]:
    """Return the mutation-barrier violations of ``pair`` (a ``RunPair``)."""
    if pair.after is None:
        return []
    regions, mutators = mutation_regions(pair.before.graph)
    if not mutators:
        return []
    violations = []
    covered: set[str] = set()
    for record in pair.matches:
        covered.update(record.nodes)
        names = [name for name in record.nodes if name in regions]
        if len({regions[name] for name in names}) > 1:
            violations.append(_crossing(f"match ({record.entry})", names, regions, mutators))
    left = {node.name for node in pair.after.graph.nodes}
    erased = [
        node
        for node in pair.before.graph.nodes
        if node.op in ("call_function", "call_method") and node.name not in left and node.name not in covered
    ]
    for component in _components(erased):
        inside = set(component)
        if not any(set(node.users) - inside for node in component):
            continue  # dead code removed, nothing stands in for it
        if len({regions[node.name] for node in component}) > 1:
            names = [node.name for node in component]
            violations.append(_crossing("replaced region", names, regions, mutators))
    return violations
