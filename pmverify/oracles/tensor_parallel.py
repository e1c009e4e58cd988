"""Tensor-parallel oracle: every rank rewrites its graph the same way, and the collectives the pass
removes are the ones its matches account for.

A tensor-parallel case runs one per-rank graph on ``tp_world`` ranks (SPMD); the pass runs on every
rank (direct mode applies it once per rank, built for that rank). Two properties, for
``tp_world > 1``:

- **Identical matches.** Every rank reports the same match count, records the same Inductor matches
  (the same matched and inserted nodes) and ends with the same graph, up to the values of int
  arguments: a fused collective takes ``tp_rank`` (vLLM's do), a shard offset ``tp_rank * size``,
  and whether each rank's values are right is judged by its results (the semantics oracle runs
  every rank). A pass that rewrites on some ranks only, or inserts other ops or collectives on
  some, leaves the ranks calling different collectives: they hang or reduce garbage.
- **Collective accounting.** On each rank, the all-reduce nodes (``_c10d_functional.all_reduce`` and
  its in-place and coalesced forms, and the case's own all-reduce op, ``GraphCase.all_reduce``, such
  as vLLM's ``torch.ops.vllm.all_reduce``) that disappear are exactly those the recorded matches account
  for: the all-reduces among a match's nodes minus those among the nodes its replacement inserted.
  A fused op that performs its collective inside (``pmverify.qk_norm_tp``) accounts for the one it
  replaced. A pass that drops, duplicates or leaves an all-reduce behind outside what its matches
  rewrote is flagged. Passes that rewrite by hand (no recorded matches) are not judged on this.

Whether each rank still computes what it did is the semantics oracle's job: it runs the ranks in a
real world (:mod:`pmverify.distributed`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from .._execution import RunPair
from ._violation import Violation

__all__ = ["applies", "check", "all_reduce_count", "ALL_REDUCE_TARGETS"]


def _targets() -> frozenset[Any]:
    ops = torch.ops._c10d_functional
    names = ("all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_")
    return frozenset(getattr(ops, name).default for name in names if hasattr(ops, name))


#: The all-reduce ops counted: ``_c10d_functional.all_reduce`` and its in-place / coalesced forms.
ALL_REDUCE_TARGETS = _targets()


def all_reduce_count(nodes: Iterable[torch.fx.Node], own: Any = None) -> int:
    """How many of ``nodes`` are all-reduce calls: of :data:`ALL_REDUCE_TARGETS` or of ``own`` (a
    project's all-reduce op, ``GraphCase.all_reduce``; None for none)."""
    return sum(
        node.op == "call_function" and (node.target in ALL_REDUCE_TARGETS or (own is not None and node.target == own))
        for node in nodes
    )


def _named(gm: torch.fx.GraphModule, names: Iterable[str]) -> list[torch.fx.Node]:
    by_name = {node.name: node for node in gm.graph.nodes}
    return [by_name[name] for name in names if name in by_name]


class _Int:
    """Where an int argument stood in a node's arguments (its value may differ across ranks)."""

    def __repr__(self) -> str:
        return "<int>"


_INT = _Int()


def _node_form(node: torch.fx.Node) -> tuple[Any, ...]:
    """``node`` less the values of its int arguments: kind, name, target, and the arguments with
    each int replaced by a marker, written out."""

    def mark(value: Any) -> Any:
        return _INT if isinstance(value, int) and not isinstance(value, bool) else value

    args = torch.fx.node.map_aggregate((node.args, node.kwargs), mark)
    return node.op, node.name, str(node.target), repr(args)


def _graph_difference(runs: list[Any]) -> str | None:
    """Where the graphs after the pass of ``runs`` (rank order) differ other than by the values of
    int arguments (the rank, or values computed from it); None when they do not."""
    forms = [[_node_form(node) for node in run.after.graph.nodes] for run in runs]
    for rank, nodes in enumerate(forms[1:], start=1):
        if len(nodes) != len(forms[0]):
            return f"the graph after the pass has {len(nodes)} nodes on rank {rank}, {len(forms[0])} on rank 0"
    for i, node in enumerate(runs[0].after.graph.nodes):
        for rank, nodes in enumerate(forms[1:], start=1):
            if nodes[i] != forms[0][i]:
                other = list(runs[rank].after.graph.nodes)[i].format_node()
                return (
                    f"the graph after the pass differs between rank {rank} and rank 0: {other} / {node.format_node()}"
                )
    return None


def _signature(run: Any) -> tuple[Any, ...]:
    matches = tuple((m.entry, m.nodes, m.replacement) for m in run.match_records)
    return run.matched_count, matches


def _difference(rank: int, run: Any, first: Any) -> str:
    count, matches = _signature(run)
    count0, matches0 = _signature(first)
    if count != count0:
        return f"rank {rank} reported {count} matches, rank 0 {count0}"
    if len(matches) != len(matches0):
        return f"rank {rank} made {len(matches)} Inductor matches, rank 0 {len(matches0)}"
    for (entry, nodes, inserted), (entry0, nodes0, inserted0) in zip(matches, matches0, strict=True):
        if (entry, nodes) != (entry0, nodes0):
            return f"rank {rank} matched {list(nodes)} ({entry}), rank 0 {list(nodes0)} ({entry0})"
        if inserted != inserted0:
            return f"the match of {list(nodes)} inserted {list(inserted)} on rank {rank}, {list(inserted0)} on rank 0"
    raise AssertionError("the signatures are equal")


def applies(pair: RunPair) -> bool:
    """Whether this oracle has something to judge on ``pair`` (whose pass ran): more than one rank
    (``tp_world > 1``, each rank's run applied)."""
    return pair.case.tp_world > 1 and bool(pair.ranks)


def check(pair: RunPair) -> list[Violation]:
    """Return the tensor-parallel violations of ``pair`` (a ``RunPair``); none for a single-rank
    case, in compiled mode, or when the pass raised (reported as a crash)."""
    if pair.case.tp_world == 1 or pair.after is None or not pair.ranks:
        return []
    violations = []
    runs = [pair, *pair.ranks]
    differing = next((rank for rank, run in enumerate(runs[1:], start=1) if _signature(run) != _signature(pair)), None)
    if differing is not None:
        violations.append(
            Violation(
                "tensor_parallel", f"matches differ across ranks: {_difference(differing, runs[differing], pair)}"
            )
        )
    else:
        graphs = _graph_difference(runs)
        if graphs is not None:
            violations.append(Violation("tensor_parallel", f"matches differ across ranks: {graphs}"))
    own = pair.case.all_reduce
    for rank, run in enumerate(runs):
        if not run.match_records:
            continue
        dropped = all_reduce_count(run.before.graph.nodes, own) - all_reduce_count(run.after.graph.nodes, own)
        accounted = sum(
            all_reduce_count(_named(run.before, m.nodes), own) - all_reduce_count(_named(run.after, m.replacement), own)
            for m in run.match_records
        )
        if dropped != accounted:
            where = f"rank {rank}: " if rank else ""
            violations.append(
                Violation(
                    "tensor_parallel",
                    f"{where}the pass removed {dropped} all-reduce(s) from the graph; its {len(run.match_records)} "
                    f"match(es) account for {accounted}",
                )
            )
            break
    return violations
