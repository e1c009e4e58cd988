"""The functionalization oracle's check (c): a stand-in carries the new value. Every node present
(same name, op and target) in both graphs that, before the pass, read an element of an
auto_functionalized node must read the same value after it, by the one numeric rule (see
:mod:`pmverify.oracles.functionalization`)."""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import torch

from .._execution import (
    clone_inputs,
    compare,
    deterministic_fill,
    float64_module,
    float64_reference,
    random_calls,
    rank_pair,
    run_graph,
)
from ._functionalization_elements import af_getitem, checked_ranks, describe_element, in_world, on_rank
from ._violation import Violation

__all__ = ["check_stand_ins"]

logger = logging.getLogger(__name__)


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """``(path, leaf)`` for each leaf of an FX argument structure; a path is a tuple of indices and
    keys from ``(args, kwargs)``."""
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.fx.Node):
        for i, item in enumerate(value):
            yield from _paths(item, (*path, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    else:
        yield path, value


def _label(node: torch.fx.Node, path: tuple) -> str:
    where, first, *rest = path
    if node.op == "output" and where == 0 and first == 0 and rest:
        return f"graph output {rest[0]}" + "".join(f"[{p!r}]" for p in rest[1:])
    text = f"`{node.name}` argument {first}" if where == 0 else f"`{node.name}` argument `{first}`"
    return text + "".join(f"[{p!r}]" for p in rest)


def _lookup(structure: Any, path: tuple) -> Any:
    for key in path:
        structure = structure[key]
    return structure


class _Capture(torch.fx.Interpreter):
    """Runs a graph and keeps a clone of the value each wanted node reads at each wanted path, as
    it is when the node runs."""

    def __init__(self, gm: torch.fx.GraphModule, wanted: dict[torch.fx.Node, list[tuple]]) -> None:
        super().__init__(gm)
        self.wanted = wanted
        self.read: dict[tuple[str, tuple], Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        if n in self.wanted:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            for path in self.wanted[n]:
                try:
                    value = _lookup((args, kwargs), path)
                except (IndexError, KeyError, TypeError):
                    continue
                self.read[(n.name, path)] = value.clone() if isinstance(value, torch.Tensor) else value
        return super().run_node(n)


def _capture(gm: torch.fx.GraphModule, inputs: tuple[Any, ...], wanted: dict) -> dict:
    run = _Capture(gm, wanted)
    try:
        with torch.no_grad():
            run.run(*clone_inputs(inputs))
    except Exception as exc:  # noqa: BLE001 - what was read up to the failure still counts
        logger.debug("interpreter run failed: %r", exc)
    return run.read


def _reads(node: Any) -> str:
    found = af_getitem(node)
    if found is not None:
        af, index = found
        return f"{describe_element(af, index)} through `{node.name}`"
    if isinstance(node, torch.fx.Node):
        return f"`{node.name}` (not an element of an auto_functionalized node)"
    return f"the constant {node!r}"


def _snapshot(value: Any) -> Any:
    """What a node reads, as it is when the node runs (a later in-place op does not change it)."""
    return value.clone() if isinstance(value, torch.Tensor) else value


def _reads_module(gm: torch.fx.GraphModule, keys: list[tuple[str, tuple]]) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose outputs are what each ``(node name, path)`` of ``keys`` reads, taken
    just before that node runs, in that order; every node still runs. Its float64 reference, region
    reference and noise floor (the semantics oracle's machinery) are then those of the values read."""
    module = copy.deepcopy(gm)
    graph = module.graph
    nodes = {node.name: node for node in graph.nodes}
    snapshots = []
    for name, path in keys:
        reader = nodes[name]
        with graph.inserting_before(reader):
            snapshots.append(graph.call_function(_snapshot, (_lookup((reader.args, reader.kwargs), path),)))
    graph.output_node().args = (tuple(snapshots),)
    module.recompile()
    return module


class _Read:
    """What the graph before the pass read at each key (by position in ``keys``), its float64
    reference, and, asked for only when a value is flagged, the region reference and noise floor
    of those values (:func:`_reads_module`), each computed once."""

    def __init__(self, pair: Any, keys: list[tuple[str, tuple]], runs: tuple | None = None) -> None:
        """``runs``: ``(module, values, reference, drawn)`` as :func:`_reads_runs` made them (a
        tensor-parallel case's, in its world; then no slack is asked for: a rank alone cannot run
        the region reference and noise floor of a graph holding collectives), else made here."""
        self.pair, self.keys = pair, keys
        self.inputs = pair.case.inputs[0]
        if runs is None:
            module = _reads_module(pair.before, keys)
            runs = (module, *_reads_runs(module, self.inputs))
        self.module, values, reference, self.drawn = runs
        self.values = values[0]
        self.tp = len(checked_ranks(pair)) > 1
        self.reference = reference[0] if reference is not None else None
        self._reference_results = reference
        self._slack: tuple[Any, Any] | None = None

    def slack(self) -> tuple[Any, Any]:
        """(region reference outputs or None, (float32-level, own-dtype-level) noise outputs or None)."""
        if self._slack is None:
            from ._noise import noise_floor
            from ._region_reference import region_reference, rewritten_region

            pair, region, noise = self.pair, None, None
            with deterministic_fill():
                if pair.compiled is None and not random_calls(self.module):
                    region_run = region_reference(
                        self.module,
                        float64_module(self.module),
                        rewritten_region(pair.before, pair.after),
                        self.inputs,
                    )
                    region = region_run[0] if region_run is not None else None
                if self._reference_results is not None:
                    levels = noise_floor(self.module, self.inputs, self._reference_results, self.drawn)
                    noise = (levels[0][0], levels[1][0]) if levels is not None else None
            self._slack = (region, noise)
        return self._slack

    def difference(self, i: int, after: Any) -> str | None:
        """How ``after`` breaks the semantics rule against the value read before at key ``i``."""
        before = self.values[i]
        reference = self.reference[i] if self.reference is not None else None
        message = compare("the value", before, after, reference)
        if message is None or reference is None or self.tp:
            return message
        region, noise = self.slack()
        return compare(
            "the value",
            before,
            after,
            reference,
            region_reference=region[i] if region is not None else None,
            noise=(noise[0][i], noise[1][i]) if noise is not None else None,
        )


def _reads_runs(module: torch.fx.GraphModule, inputs: tuple[Any, ...]) -> tuple[Any, Any, dict]:
    """(the values ``module`` (:func:`_reads_module`) reads, their float64 reference, what it drew)."""
    drawn: dict[str, Any] = {}
    values = run_graph(module, inputs, drawn=drawn)
    return values, float64_reference(module, inputs, drawn=drawn), drawn


def _stand_in_runs(after: Any, wanted: dict, module: Any, inputs: tuple[Any, ...]) -> tuple[dict, tuple]:
    """One rank's runs of (c) in its world: what the rewritten graph's nodes read, and the runs of
    the graph before the pass that read them (:func:`_reads_runs`)."""
    return _capture(after, inputs, wanted), (module, *_reads_runs(module, inputs))


def _wanted(pair: Any, after: torch.fx.GraphModule) -> tuple[dict, list[tuple[str, tuple]]]:
    """The nodes of ``after`` to capture and the ``(node name, argument path)`` keys they read: the
    nodes that read an auto_functionalized element before the pass and are still there after it."""
    after_nodes = {node.name: node for node in after.graph.nodes}
    wanted_after: dict[torch.fx.Node, list[tuple]] = {}
    keys: list[tuple[str, tuple]] = []
    for node in pair.before.graph.nodes:
        paths = [path for path, leaf in _paths((node.args, node.kwargs)) if af_getitem(leaf) is not None]
        twin = after_nodes.get(node.name)
        if not paths or twin is None or twin.op != node.op or twin.target != node.target:
            continue
        wanted_after[twin] = paths
        keys += [(node.name, path) for path in paths]
    return wanted_after, keys


def check_stand_ins(pair: Any) -> list[Violation]:
    ranks = checked_ranks(pair)
    afters = [rank_pair(pair, rank).after for rank in ranks]
    wanted = [_wanted(pair, after) for after in afters]
    if len(ranks) == 1:
        wanted_after, keys = wanted[0]
        if not keys:
            return []
        return _stand_in_violations(pair, afters[0], keys, _capture(afters[0], pair.case.inputs[0], wanted_after))
    # a tensor-parallel case: every rank's graphs run in one world; the modules are built first
    modules = [_reads_module(pair.before, keys) if keys else None for _, keys in wanted]
    args = [
        (after, w, m, pair.case.inputs[r]) for r, after, (w, _), m in zip(ranks, afters, wanted, modules, strict=True)
    ]
    if not any(keys for _, keys in wanted):
        return []
    try:
        runs = in_world(pair, _stand_in_runs, args)
    except Exception as exc:  # noqa: BLE001 - a world that fails is the semantics oracle's finding
        logger.debug("the stand-ins' runs fail on the tensor-parallel world: %s", exc)
        return []
    for rank, after, (_, keys), (captured, reads) in zip(ranks, afters, wanted, runs, strict=True):
        if not keys:
            continue
        violations = _stand_in_violations(pair, after, keys, captured, reads)
        if violations:
            return [dataclasses.replace(v, message=on_rank(rank, pair, v.message)) for v in violations]
    return []


def _stand_in_violations(
    pair: Any, after_gm: Any, keys: list, after: dict, reads: tuple | None = None
) -> list[Violation]:
    after_nodes = {node.name: node for node in after_gm.graph.nodes}
    read = None
    before_nodes = {node.name: node for node in pair.before.graph.nodes}
    violations = []
    for i, key in enumerate(keys):
        if key not in after:
            continue
        read = _Read(pair, keys, reads) if read is None else read
        difference = read.difference(i, after[key])
        if difference is None:
            continue
        name, path = key
        node, twin = before_nodes[name], after_nodes[name]
        then = _lookup((node.args, node.kwargs), path)
        try:
            now = _lookup((twin.args, twin.kwargs), path)
        except (IndexError, KeyError, TypeError):
            continue
        violations.append(
            Violation(
                "functionalization",
                f"{_label(node, path)} now reads {_reads(now)}, where it read {_reads(then)}; {difference}",
                tuple(dict.fromkeys(n.name for n in (node, now, then) if isinstance(n, torch.fx.Node))),
            )
        )
    return violations
