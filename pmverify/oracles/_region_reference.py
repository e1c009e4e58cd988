"""The float64 reference *from the rewrite's inputs*: the graph before the pass run as it is up to
the nodes the pass rewrote, and in float64 from there on.

Why: the semantics oracle's main reference runs the whole graph in float64, so it also skips the
rounding of every low-precision op *upstream* of the rewrite (say a bf16 ``mul_`` that
``with_mutations`` put before a planted instance, or an fp32 product a fused multiply-add then
recomputes exactly). Both graphs, before and after the pass, read those rounded values; a
replacement more accurate than the pattern on its own inputs can then land farther from the
whole-graph reference than the pattern did, by an ulp, and be flagged. Measured from the rewrite's
inputs (the values both graphs really read), the error of each graph is its own. The semantics
oracle accepts an element that either reference accepts, so this reference only ever removes
findings of that kind.

The rewritten region is every ``call_function`` node of the graph before the pass that the pass
erased, gave other arguments, or left dead (read by nothing live); the region and everything
downstream of it run in float64, the rest in the graph's own dtypes, exactly as the run before the
pass. None (no such reference) for a graph whose in-place ops come at or after the region (their
writes would not reach the float64 copies), for tensor-parallel and compiled cases, and where the
float64 run fails.
"""

from __future__ import annotations

from typing import Any

import torch

from .._compat import pytree

__all__ = ["rewritten_region", "region_reference"]


def _signature(node: torch.fx.Node) -> tuple[str, str]:
    names = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.name)
    return str(node.target), repr(names)


def _live(graph: torch.fx.Graph) -> set[str]:
    stack = [node for node in graph.nodes if node.op == "output" or node.is_impure()]
    live: set[str] = set()
    while stack:
        node = stack.pop()
        if node.name not in live:
            live.add(node.name)
            stack.extend(node.all_input_nodes)
    return live


def rewritten_region(before: torch.fx.GraphModule, after: torch.fx.GraphModule) -> set[str]:
    """Names of the ``call_function`` nodes of ``before`` that ``after`` erased, calls with other
    arguments, or leaves dead."""
    kept = {node.name: node for node in after.graph.nodes}
    live = _live(after.graph)
    region = set()
    for node in before.graph.nodes:
        if node.op != "call_function":
            continue
        other = kept.get(node.name)
        if other is None or _signature(other) != _signature(node) or node.name not in live:
            region.add(node.name)
    return region


def _writes(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _to64(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.double()
    return value


def region_reference(
    before: torch.fx.GraphModule, float64: torch.fx.GraphModule, region: set[str], inputs: tuple[Any, ...]
) -> tuple[list[Any], list[Any]] | None:
    """Run ``before`` on clones of ``inputs`` up to ``region`` and ``float64`` (its float64 twin,
    :func:`~pmverify._execution.float64_module`) from there on; return (flat outputs, final
    inputs), float64 where the region reaches them, or None (see the module docstring). The caller
    sets deterministic fill. (A slack of one float32 eps of the largest operand the region read was
    dropped: under a 0/-1e9 padding mask it excused any error; the noise floor, :mod:`._noise`,
    covers the cancellations it was for.)"""
    if not region:
        return None
    nodes, twins = list(before.graph.nodes), list(float64.graph.nodes)
    tainted: set[torch.fx.Node] = set()
    for node in nodes:
        if node.name in region or any(arg in tainted for arg in node.all_input_nodes):
            tainted.add(node)
        if tainted and node.op == "call_function" and _writes(node):
            return None  # an in-place op at or after the region
    args = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    real: dict[torch.fx.Node, Any] = {}
    wide: dict[torch.fx.Node, Any] = {}
    placeholders = iter(args)
    original = dict(zip(twins, nodes, strict=True))

    def value_of(twin: torch.fx.Node) -> Any:
        node = original[twin]
        return wide[node] if node in tainted else _to64(real[node])

    try:
        with torch.no_grad():
            for node, twin in zip(nodes, twins, strict=True):
                if node.op == "placeholder":
                    real[node] = next(placeholders)
                elif node.op == "call_function" and node not in tainted:
                    call_args, call_kwargs = torch.fx.node.map_arg((node.args, node.kwargs), real.__getitem__)
                    real[node] = node.target(*call_args, **call_kwargs)
                elif node.op == "call_function":
                    call_args, call_kwargs = torch.fx.node.map_arg((twin.args, twin.kwargs), value_of)
                    wide[node] = twin.target(*call_args, **call_kwargs)
                elif node.op == "output":
                    outputs = torch.fx.node.map_arg(node.args[0], lambda n: wide[n] if n in tainted else _to64(real[n]))
                    return pytree.tree_leaves(outputs), [_to64(x) for x in args]
                else:
                    return None  # get_attr, call_module...: not the graphs pmverify draws
    except Exception:  # noqa: BLE001 - no float64 run of this graph: only the whole-graph reference
        return None
    return None
