"""Splicing ``planted``'s instances into a context graph: each instance's steps (its nodes, late
producers of its inputs, consumers of its outputs, an extra user), laid out at random positions
among the context's nodes (:func:`layout`), copied into one graph with its ground truth records
(:func:`splice`).

Instances share no value with the context or each other, so every interleaving is a topological
order and the spliced graph is valid by construction."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from hypothesis import strategies as st

from .._case import GraphCase, PlantedInstance
from .._fx import GRADIENT_OUTPUTS, flat_nodes
from .._shapes.symbolic import HINTS
from ._dtype_support import add_reader
from ._joint import detached, gradient_outputs
from ._traced import Traced

__all__ = ["PRODUCERS", "keeping_layout", "layout", "splice"]

#: How an instance input reaches the instance, simplest first.
PRODUCERS = (None, "clone", "view")


@dataclasses.dataclass
class _Step:
    """One node to create in the spliced graph: ``source`` is the node's graph ("ctx" or an
    instance index), ``node`` the node to copy (or None for producers/consumers/extra users)."""

    source: Any
    node: torch.fx.Node | None
    kind: str = "copy"  # copy | producer | consumer | extra_user
    arg: Any = None  # producer: (placeholder node, how, shape); consumer/extra user: the node it reads


def _instance_steps(draw: Any, i: int, inst: Traced, dynamic: bool = False) -> tuple[list[_Step], list[torch.fx.Node]]:
    """The steps of instance ``i`` in order, and its output nodes (before splicing). In a
    ``dynamic`` case an input with a size at a hint is never a ``view`` of a flat input (its size,
    a multiple of the hint, would be a static size divisible by it)."""
    graph = inst.gm.graph
    values = dict(zip(graph.find_nodes(op="placeholder"), inst.args, strict=True))
    how = {
        ph: keeping_layout(draw(st.sampled_from(PRODUCERS)), value, dynamic)
        for ph, value in values.items()
        if isinstance(value, torch.Tensor) and ph.users
    }
    output = next(iter(graph.find_nodes(op="output")))
    outputs = list(dict.fromkeys(n for n in flat_nodes(output.args[0]) if n.op != "placeholder"))
    consumed = {} if inst.unused else {out: draw(st.booleans()) for out in outputs}
    steps: list[_Step] = []
    produced: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        for ph in node.all_input_nodes:
            if how.get(ph) and ph not in produced:
                produced.add(ph)
                steps.append(_Step(i, None, "producer", (ph, how[ph], list(values[ph].shape))))
        steps.append(_Step(i, node))
        if node.name == inst.extra_user:
            steps.append(_Step(i, None, "extra_user", node))
        if consumed.get(node):
            steps.append(_Step(i, None, "consumer", node))
    return steps, ([] if inst.unused else outputs)


def keeping_layout(how: str | None, value: torch.Tensor, dynamic: bool = False) -> str | None:
    """``how``, when its producer gives a tensor of ``value``'s strides (a view of a flat input is
    contiguous; a clone keeps a permuted dense layout, not gaps nor expanded dims); else None (the
    input used directly): Inductor's matcher re-traces on the strides it sees."""
    if how == "view" and (not value.is_contiguous() or (dynamic and any(side in HINTS for side in value.shape))):
        return None
    if how == "clone" and torch.empty_like(value).stride() != value.stride():
        return None
    return how


def layout(draw: Any, context_steps: list[_Step], sequences: list[list[_Step]]) -> list[_Step]:
    """Insert each sequence, in order, among the steps placed so far; offsets shrink to 0."""
    merged = list(context_steps)
    for seq in sequences:
        pos = draw(st.integers(0, len(merged))) if merged else 0
        for step in seq:
            merged.insert(pos, step)
            pos += 1
            if pos < len(merged):
                pos += draw(st.integers(0, len(merged) - pos))
    return merged


def splice(
    draw: Any, name: str, context: GraphCase | None, instances: list[Traced], dynamic: bool = False
) -> tuple[Any, ...]:
    """Build the spliced graph: returns (graph module, inputs, planted records)."""
    graph = torch.fx.Graph()
    env: dict[Any, dict[torch.fx.Node, Any]] = {}
    values: list[Any] = []
    ctx_out: list[torch.fx.Node] = []
    context_steps: list[_Step] = []
    if context is not None:
        env["ctx"] = {}
        for ph, value in zip(context.gm.graph.find_nodes(op="placeholder"), context.inputs[0], strict=True):
            env["ctx"][ph] = graph.placeholder(ph.name)
            values.append(value)
        for node in context.gm.graph.nodes:
            if node.op == "output":
                ctx_out = flat_nodes(node.args[0])
            elif node.op != "placeholder":
                context_steps.append(_Step("ctx", node))

    sequences, outputs = [], []
    for i, inst in enumerate(instances):
        env[i] = {}
        steps, outs = _instance_steps(draw, i, inst, dynamic)
        flat = {s.arg[0] for s in steps if s.kind == "producer" and s.arg[1] == "view"}
        for ph, value in zip(inst.gm.graph.find_nodes(op="placeholder"), inst.args, strict=True):
            if not isinstance(value, torch.Tensor):
                env[i][ph] = value
                continue
            if not ph.users:
                continue
            env[i][ph] = graph.placeholder(f"{name}{i}_{ph.name}")
            value = detached(value)  # a joint trace computes its gradients itself
            values.append(value.reshape(-1).clone() if ph in flat else value)
        sequences.append(steps)
        outputs.append(outs)

    finals: dict[tuple[int, torch.fx.Node], torch.fx.Node] = {}
    extra_outputs: list[torch.fx.Node] = []
    for step in layout(draw, context_steps, sequences):
        local = env[step.source]
        if step.kind == "copy":
            new = graph.node_copy(step.node, lambda n, local=local: local[n])
            local[step.node] = new
            if step.source != "ctx":
                finals[(step.source, step.node)] = new
        elif step.kind == "producer":
            ph, how, shape = step.arg
            source = local[ph]
            target = torch.ops.aten.view.default if how == "view" else torch.ops.aten.clone.default
            local[ph] = graph.call_function(target, (source, shape) if how == "view" else (source,))
        elif step.kind == "consumer":  # neg (of a float32 upcast where neg does not run: float8)
            finals[(step.source, step.arg)] = add_reader(graph, local[step.arg], step.arg.meta.get("val"))
        else:  # extra_user
            extra_outputs.append(graph.call_function(torch.ops.aten.clone.default, (local[step.arg],)))

    returned = [env["ctx"][n] for n in ctx_out] if context is not None else []
    gradients = []  # positions of a joint instance's gradients (GRADIENT_OUTPUTS)
    for i, outs in enumerate(outputs):
        grads = gradient_outputs(instances[i].gm, instances[i].primals) if instances[i].primals is not None else ()
        gradients += [len(returned) + j for j, out in enumerate(outs) if out in grads]
        returned += [finals[(i, out)] for out in outs]
    returned += extra_outputs
    output = graph.output(tuple(returned))
    if gradients:
        output.meta[GRADIENT_OUTPUTS] = tuple(gradients)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)

    return gm, tuple(values), _records(name, context, instances, env)


def _records(
    name: str, context: GraphCase | None, instances: list[Traced], env: dict[Any, dict[torch.fx.Node, Any]]
) -> tuple[PlantedInstance, ...]:
    """The ground truth of the spliced graph: the context's planted instances (renamed), then one
    record per instance, under the node names ``env`` gave its nodes."""
    records = []
    if context is not None:
        rename = {node.name: env["ctx"][node].name for node in env["ctx"]}
        records += [dataclasses.replace(p, nodes=tuple(rename[n] for n in p.nodes)) for p in context.planted]
    for i, inst in enumerate(instances):
        names = tuple(env[i][n].name for n in inst.gm.graph.nodes if n.op == "call_function")
        records.append(
            PlantedInstance(
                name, names, inst.must_match, inst.reason, inst.detail, inst.truth_from, tuple(inst.applicable)
            )
        )
    return tuple(records)
