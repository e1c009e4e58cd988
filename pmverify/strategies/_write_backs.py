"""Write-backs for :func:`~pmverify.strategies.with_mutations`: ``copy_(graph_input, v)`` of a value
``v`` computed inside a planted instance, as functionalization writes a mutated input back.

A functionalized graph (what Inductor's post-grad passes and vLLM's passes see) ends with
``copy_(input, new_value)`` for every input the program mutated, and the new value is often
computed by the very ops a pattern matches: a fused add + RMSNorm writes ``x + residual`` back into
``residual``. A pass that rewrites such an instance must keep the write-back reading the right
value, and must not move a read of the written input across the ``copy_``.

A write-back reads ``v`` (an output or an intermediate of a planted instance: a floating tensor of
at least one dim and element) and writes a graph input of ``v``'s shape and dtype that ``v`` does
not alias (one the instance reads, as ``x.mul_(w)`` is written back, or another), or a new input
made with ``v``'s shape and dtype (the input a functionalized program mutates). It goes where
functionalization and Inductor's passes put write-backs: at the end of the graph (just before the
output), or at any node of the case after ``v`` (right after ``v`` the first among them).
Optionally the written input is read again later (``neg`` of it, of its float32 upcast where
``neg`` does not run on its dtype; placed after the ``copy_`` and returned as a new graph output):
that reader sees the new value.

Ground truth, as Inductor's matcher decides it:

- a write-back reading an *intermediate* of a must-match instance (a node whose other users all lie
  inside the instance and that the graph does not return) gives it a user outside the instance:
  ``fx_to_pattern`` records every pattern node's user count, outputs excepted, so
  ``register_replacement``'s pattern no longer matches: ``must_match=False, reason="extra_user"``,
  as the ``extra_user`` near miss of :func:`~pmverify.strategies.planted`. Functionalization keeps
  that user (the write-back stays a ``copy_`` or becomes a returned mutated input), so this holds
  under ``torch.compile`` too. A write-back reading an *output* adds a user that outputs are
  allowed: the instance still matches;
- the ``copy_`` is a mutation (``is_mutation_op``): placed strictly inside a must-match instance's
  span it splits the instance into two mutation regions, ``PatternMatcherPass.apply`` discards the
  match, and :func:`~pmverify.strategies._mutations.mark_mutations_inside` makes it
  ``reason="mutation_inside"`` (whatever the ``copy_`` writes: Inductor numbers regions by graph
  order alone). After the instance (the usual place) it changes nothing.

Every choice is drawn from what applies at the drawn position, so nothing is rejected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st

from .._case import MutationSite, PlantedInstance
from .._fx import flat_nodes, is_view
from ._dtype_support import add_reader

if TYPE_CHECKING:
    from ._mutations import Editor

__all__ = ["WRITE_BACK", "EXTRA_USER", "write_back_sources", "add_write_back", "mark_write_back_readers"]

#: The tag of a write-back in a case's label, and its mutation kind in :func:`with_mutations`.
WRITE_BACK = "write_back"
#: ``PlantedInstance.reason`` of a must-match instance whose intermediate a write-back reads.
EXTRA_USER = "extra_user"

aten = torch.ops.aten


def _source_value(node: torch.fx.Node) -> bool:
    """Whether ``node`` computes a value a write-back may copy: a floating tensor of at least one
    dim and element (a view too: ``copy_`` reads any strides)."""
    value = node.meta.get("val")
    return (
        node.op == "call_function"
        and isinstance(value, torch.Tensor)
        and value.is_floating_point()
        and value.dim() >= 1
        and value.numel() > 0
    )


def _storage_root(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose storage ``node`` lives in, through view ops and ``getitem``."""
    while node.op == "call_function" and is_view(node.target) and node.args and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def write_back_sources(editor: Editor) -> list[tuple[int, list[torch.fx.Node]]]:
    """``(instance index, nodes a write-back may read)`` for each planted instance with any: its
    outputs first (nodes read outside it, returned, or read by nothing), then its intermediates."""
    returned = set(flat_nodes(editor.graph.output_node().args))
    found = []
    for index, nodes in enumerate(editor.instances):
        members = set(nodes)
        candidates = [node for node in nodes if _source_value(node)]
        outputs = [node for node in candidates if _is_output(node, members, returned, editor.write_backs)]
        intermediates = [node for node in candidates if node not in outputs]
        if candidates:
            found.append((index, outputs + intermediates))
    return found


def _is_output(
    node: torch.fx.Node, members: set[torch.fx.Node], returned: set[torch.fx.Node], write_backs: set[torch.fx.Node]
) -> bool:
    """Whether ``node`` is an output of the instance made of ``members``: returned, read by nothing,
    or read by a node outside it that is not a write-back (a write-back's read is what would make
    an intermediate an extra user)."""
    users = [user for user in node.users if user not in write_backs]
    return node in returned or not users or any(user not in members for user in users)


def add_write_back(draw: Any, editor: Editor) -> None:
    """Add one write-back to ``editor`` (which must have :func:`write_back_sources`): see the module
    docstring for what is drawn."""
    index, sources = draw(st.sampled_from(write_back_sources(editor)))
    source = draw(st.sampled_from(sources))
    value = source.meta["val"]
    root = _storage_root(source)
    targets = [
        node
        for node in editor.inputs_at()
        if node is not root and node.meta["val"].shape == value.shape and node.meta["val"].dtype == value.dtype
    ]
    members = set(editor.instances[index])
    read = {arg for node in members for arg in node.all_input_nodes if arg not in members}
    pools = {"new input": [None], "input it reads": [n for n in targets if n in read]}
    pools["input"] = [n for n in targets if n not in read]
    made = draw(st.sampled_from([kind for kind, pool in pools.items() if pool]))
    target = draw(st.sampled_from(pools[made]))
    if target is None:
        target = editor.new_input("act", tuple(value.shape), value.dtype)
    order = editor.order()
    original = set(editor.original)
    output = editor.graph.output_node()
    later = [node for node in editor.graph.nodes if node in original and node.op != "placeholder"]
    later = [node for node in later if order[node] > order[source]]
    slot = draw(st.sampled_from([output, *later]))
    with editor.graph.inserting_before(slot):
        node = editor.graph.create_node("call_function", aten.copy_.default, (target, source), name="copy_")
    editor.write_backs.add(node)
    editor.mutations.append(MutationSite(node.name, str(aten.copy_.default), target.name))
    where = "at the end" if slot is output else f"before {slot.name}"
    tag = f"{WRITE_BACK} of {source.name} into {made} {target.name} {where}"
    if draw(st.booleans()):
        order = editor.order()
        readers_at = [n for n in editor.graph.nodes if order[n] > order[node] and (n in original or n is output)]
        reader_slot = draw(st.sampled_from([output, *[n for n in readers_at if n is not output]]))
        with editor.graph.inserting_before(reader_slot):
            reader = add_reader(editor.graph, target, target.meta.get("val"))
        _return_too(editor.graph, reader)
        tag += f", read again by {reader.name}"
    editor.tags.append(tag)


def _return_too(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Append ``node`` to the graph's outputs (a tuple or list of them; a single returned value
    becomes a tuple with it)."""
    output = graph.output_node()
    (returned,) = output.args
    if isinstance(returned, (tuple, list)):
        output.args = (type(returned)([*returned, node]),)
    else:
        output.args = ((returned, node),)


def mark_write_back_readers(
    graph: torch.fx.Graph, planted: Sequence[PlantedInstance], write_backs: set[str]
) -> tuple[PlantedInstance, ...]:
    """``planted`` with each must-match instance whose intermediate a write-back (a node named in
    ``write_backs``) reads turned into ``must_match=False, reason="extra_user"`` (see the module
    docstring); others are kept."""
    by_name = {node.name: node for node in graph.nodes}
    returned = set(flat_nodes(graph.output_node().args))
    backs = {by_name[name] for name in write_backs if name in by_name}
    result = []
    for instance in planted:
        members = {by_name[name] for name in instance.nodes if name in by_name}
        if instance.must_match is True:
            read = [
                node
                for node in graph.nodes
                if node in members and set(node.users) & backs and not _is_output(node, members, returned, backs)
            ]
            if read:
                detail = f"its intermediate {read[0].name} is written back into a graph input, a user outside it"
                instance = dataclasses.replace(instance, must_match=False, reason=EXTRA_USER, detail=detail)
        result.append(instance)
    return tuple(result)
