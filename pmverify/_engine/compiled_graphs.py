"""The post-grad graphs the compiled mode captures, as the oracles read them (see
:mod:`._compiled`): copied node by node (:func:`copy_graph_module`), with the case's placeholders
in place of the inputs dynamo lifted (:func:`alignment`, :func:`symbolic_alignment`)."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Any

import torch

from .._case import GraphCase

__all__ = ["Alignment", "alignment", "copy_graph_module", "symbolic_alignment"]


@dataclasses.dataclass
class Alignment:
    """How to give a captured graph the case's placeholders: ``names`` / ``metas`` of the case's
    placeholders, ``index`` the case input of each captured placeholder (None: a lifted constant,
    whose value is in ``constants``; ``(i, d)``: the size of dim ``d`` of case input ``i``, a
    symbolic size dynamo lifted, computed with ``aten.sym_size.int``)."""

    names: list[str]
    metas: list[dict[str, Any]]
    index: list[int | tuple[int, int] | None]
    constants: dict[int, Any]


def _fetch_attr(module: Any, target: str) -> Any:
    for atom in target.split("."):
        module = getattr(module, atom)
    return module


def copy_graph_module(gm: torch.fx.GraphModule, align: Alignment | None = None) -> torch.fx.GraphModule:
    """Copy ``gm`` node by node, in its order even when it is not topologically sorted (forward
    references are filled in afterwards; ``deepcopy`` cannot copy such a graph); a use of a node
    that is no longer in the graph becomes None. Attributes are shared with ``gm``, node metas
    copied shallowly. With ``align``, the placeholders are replaced as it says."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    attrs: dict[str, Any] = {}
    if align is not None:
        fresh = []
        for name, meta in zip(align.names, align.metas, strict=True):
            node = graph.placeholder(name)
            node.meta = dict(meta)
            fresh.append(node)
        old = list(gm.graph.find_nodes(op="placeholder"))
        for k, node in enumerate(old):
            where = align.index[k]
            if isinstance(where, int):
                env[node] = fresh[where]
                env[node].meta = dict(node.meta)
        for k, node in enumerate(old):
            where = align.index[k]
            if isinstance(where, tuple):
                env[node] = graph.call_function(torch.ops.aten.sym_size.int, (fresh[where[0]], where[1]))
                env[node].meta = dict(node.meta)
        for k, node in enumerate(old):
            if align.index[k] is None:
                target = f"_pmverify_lifted_{k}"
                attrs[target] = align.constants[k]
                env[node] = graph.get_attr(target)
                env[node].meta = dict(node.meta)
    forward: list[tuple[torch.fx.Node, torch.fx.Node]] = []
    for node in gm.graph.nodes:
        if node in env:
            continue
        if node.op in ("get_attr", "call_module"):
            attrs[node.target] = _fetch_attr(gm, node.target)
        if node.op == "output":
            new = graph.output(torch.fx.map_arg(node.args[0], env.get), type_expr=node.type)
            new.meta = dict(node.meta)
        else:
            new = env[node] = graph.node_copy(node, env.get)
        if any(arg not in env for arg in node.all_input_nodes):
            forward.append((node, new))
    for node, new in forward:
        new.args = torch.fx.map_arg(node.args, env.get)
        new.kwargs = torch.fx.map_arg(node.kwargs, env.get)
    copied = torch.fx.GraphModule(attrs, graph, class_name=type(gm).__name__)
    with contextlib.suppress(Exception):  # a graph with a cycle cannot be compiled: kept for the oracles
        copied.recompile()
    return copied


def alignment(case: GraphCase, captured: torch.fx.GraphModule, examples: Any, args: list[Any]) -> Alignment | None:
    """How the captured graph's placeholders map to the case's inputs; None when dynamo's graph
    inputs and the post-grad graph's do not line up one to one."""
    placeholders = list(captured.graph.find_nodes(op="placeholder"))
    if examples is None or len(examples) != len(placeholders):
        return None
    index: list[int | None] = []
    constants: dict[int, Any] = {}
    for k, (example, node) in enumerate(zip(examples, placeholders, strict=True)):
        j = next((i for i, arg in enumerate(args) if arg is example), None)
        val = node.meta.get("val")
        if not isinstance(example, torch.Tensor) or (
            isinstance(val, torch.Tensor) and (val.shape != example.shape or val.dtype != example.dtype)
        ):
            return None
        if j is None:
            constants[k] = example
        index.append(j)
    names = [node.name for node in case.gm.graph.find_nodes(op="placeholder")]
    metas = [dict(node.meta) for node in case.gm.graph.find_nodes(op="placeholder")]
    return Alignment(names, metas, index, constants)


_ARG = re.compile(r"L\['args'\]\[(\d+)\]")
_SIZE = re.compile(r"L\['args'\]\[(\d+)\]\.size\(\)\[(\d+)\]")


def symbolic_alignment(case: GraphCase, captured: torch.fx.GraphModule, sources: list[str | None]) -> Alignment | None:
    """:func:`alignment` for a case with symbols, from the sources of dynamo's graph inputs: an
    argument (``L['args'][i]``: a tensor input or a ``Sym`` input, an int dynamo made symbolic) is
    the case's placeholder ``i``, a size (``L['args'][i].size()[d]``) is ``sym_size(input i, d)``;
    None when another kind of input (a stride, a global) is among them."""
    placeholders = list(captured.graph.find_nodes(op="placeholder"))
    if len(sources) != len(placeholders):
        return None
    index: list[int | tuple[int, int] | None] = []
    for source in sources:
        argument, size = _ARG.fullmatch(source or ""), _SIZE.fullmatch(source or "")
        if argument is not None and int(argument[1]) < len(case.inputs[0]):
            index.append(int(argument[1]))
        elif size is not None and int(size[1]) < len(case.inputs[0]):
            index.append((int(size[1]), int(size[2])))
        else:
            return None
    names = [node.name for node in case.gm.graph.find_nodes(op="placeholder")]
    metas = [dict(node.meta) for node in case.gm.graph.find_nodes(op="placeholder")]
    return Alignment(names, metas, index, {})
