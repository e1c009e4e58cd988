"""``with_mutations``: the in-place form of a case, as ``torch.fx.symbolic_trace`` and pre-grad
graphs have it.

A drawn case is extended by ``min_mutations``..``max_mutations`` mutations (default 0..2; the
presence of each drawn before it, so the shrinker drops those a failure does not need). Each is an in-place aten op (``add_``,
``mul_``, ``copy_``, ``index_put_``) on a graph input, a buffer (a node computing a fresh tensor) or
a view of either (``slice`` / ``select`` / ``view`` made just before the op), placed before, inside
or after a planted instance; or, where a planted instance computes a value, a write-back of that
value into a graph input (``copy_``, as functionalization writes a mutated input back:
:mod:`._write_backs`). Later uses read the mutated tensor through the *same node*: nothing but graph
order tells a reader that it sees the new value (the missing data edge that ``auto_functionalized``
exists to add). Ground truth: each op is a :class:`~pmverify.MutationSite`; a must-match instance
whose span (from its first to its last node, in graph order) holds a node that Inductor's
``is_mutation_op`` calls a mutation becomes ``must_match=False, reason="mutation_inside"``:
``PatternMatcherPass.apply`` discards a match whose nodes lie in two mutation regions; one whose
intermediate a write-back reads becomes ``reason="extra_user"``.

Every choice is drawn from what applies at the drawn position (shapes, dtypes, which nodes are
defined there and read later), so no draw is rejected: the rejection rate is 0%. The helpers here
(:class:`Editor`, :func:`mark_mutations_inside`) are shared with
:func:`~pmverify.strategies.with_mutating_custom_ops`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from .._case import GraphCase, MutationSite, PlantedInstance
from .._compat import is_non_overlapping_and_dense_or_false
from .._execution import propagate_fake
from .._fx import flat_nodes, is_view
from .._shapes.symbolic import MIN_SIZE, static_source
from .._validation import validate_int, validate_order, validate_strategy
from ._device import finished, on_cpu, validated
from ._drawn import validate_drawn_case
from ._dtype_support import running_on
from ._dynamic import Dynamic, resymbolize, validate_dynamic
from ._public import public_call
from ._write_backs import WRITE_BACK, add_write_back, mark_write_back_readers, write_back_sources

__all__ = [
    "with_mutations",
    "mark_mutations_inside",
    "Editor",
    "meta_val",
    "apply_view",
    "INPLACE_OPS",
    "POSITIONS",
    "TARGET_KINDS",
    "MUTATION_INSIDE",
    "MUTATION_KINDS",
]

aten = torch.ops.aten

#: Where a mutation goes relative to a planted instance, simplest first.
POSITIONS = ("before", "inside", "after")
#: What a mutation writes to, simplest first.
TARGET_KINDS = ("input", "buffer", "view")
#: Views made of an input or buffer for a mutation to write through.
VIEW_KINDS = ("slice", "select", "flatten")
#: In-place aten ops drawn by :func:`with_mutations`, simplest first.
INPLACE_OPS = ("add_.Scalar", "add_.Tensor", "mul_.Scalar", "mul_.Tensor", "copy_", "index_put_")
#: Kinds of mutation drawn by :func:`with_mutations`, simplest first: an in-place op of
#: :data:`INPLACE_OPS`, or a write-back (``copy_`` of a value computed inside a planted instance
#: into a graph input, see :mod:`._write_backs`).
MUTATION_KINDS = ("inplace", WRITE_BACK)
#: ``PlantedInstance.reason`` of an instance with a mutation inside its span.
MUTATION_INSIDE = "mutation_inside"

_ADDENDS = (1.0, -0.5, 0.25, -2.0)
_FACTORS = (-1.0, -0.5, -0.75)  # |factor| <= 1: values never grow; negative: a norm sees the sign
_OP = {
    "add_.Scalar": aten.add_.Scalar,
    "add_.Tensor": aten.add_.Tensor,
    "mul_.Scalar": aten.mul_.Scalar,
    "mul_.Tensor": aten.mul_.Tensor,
    "copy_": aten.copy_.default,
    "index_put_": aten.index_put_.default,
}
#: Ops whose output may share storage with an input although their schema does not say so.
_HIDDEN_ALIASES = frozenset({"aten::_unsafe_view", "aten::_reshape_alias", "aten::lift_fresh"})
#: Ops whose output holds uninitialised memory (fx_graphs' ``empty`` + ``fill``): never a buffer to
#: write or copy from.
_UNINITIALISED = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty"})


# ------------------------------------------------------------------------------------ ground truth


def mark_mutations_inside(graph: torch.fx.Graph, planted: Sequence[PlantedInstance]) -> tuple[PlantedInstance, ...]:
    """``planted`` with each must-match instance (``must_match is True``; others are kept) that has a mutation op (Inductor's
    ``is_mutation_op``) strictly between its first and last node turned into
    ``must_match=False, reason="mutation_inside"``. Writes nothing to the graph's node meta (a
    stale ``mutation_region_id`` there would mislead ``PatternMatcherPass.apply``)."""
    from .._compat import is_mutation_op

    nodes = list(graph.nodes)
    order = {node.name: i for i, node in enumerate(nodes)}
    barriers = [i for i, node in enumerate(nodes) if is_mutation_op(node)]
    result = []
    for instance in planted:
        positions = [order[name] for name in instance.nodes if name in order]
        if instance.must_match is True and positions:
            first, last = min(positions), max(positions)
            inside = [nodes[b] for b in barriers if first < b < last]
            if inside:
                detail = f"the in-place {inside[0].target} ({inside[0].name}) lies among its nodes"
                instance = dataclasses.replace(instance, must_match=False, reason=MUTATION_INSIDE, detail=detail)
        result.append(instance)
    return tuple(result)


# ------------------------------------------------------------------------------------------ editor


def meta_val(node: torch.fx.Node) -> Any:
    """The node's ``meta["val"]`` (its fake tensor), None when it has none."""
    return node.meta.get("val")


def _writable(value: Any) -> bool:
    """A floating tensor of at least one dim and element that an in-place op can write."""
    return (
        isinstance(value, torch.Tensor)
        and value.is_floating_point()
        and value.dim() >= 1
        and value.numel() > 0
        and is_non_overlapping_and_dense_or_false(value)
    )


def _meta_like(value: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")


def apply_view(tensor: torch.Tensor, view: tuple[Any, ...]) -> torch.Tensor:
    """``tensor`` seen through ``view`` = ``(kind, *args)`` (see :data:`VIEW_KINDS`)."""
    kind, *args = view
    if kind == "slice":
        dim, start, end = args
        return tensor[(slice(None),) * dim + (slice(start, end),)]
    if kind == "select":
        return tensor.select(*args)
    return tensor.view(-1)


def _view_node(graph: torch.fx.Graph, base: torch.fx.Node, view: tuple[Any, ...]) -> torch.fx.Node:
    kind, *args = view
    if kind == "slice":
        return graph.call_function(aten.slice.Tensor, (base, *args))
    if kind == "select":
        return graph.call_function(aten.select.int, (base, *args))
    return graph.call_function(aten.view.default, (base, [-1]))


class Editor:
    """A drawn case being extended: a copy of its graph (fake-propagated in one mode), its inputs
    per rank, and what the mutations added so far."""

    def __init__(self, case: GraphCase, seed: int) -> None:
        self.case = case
        self.gm = copy.deepcopy(case.gm)
        self.graph = self.gm.graph
        if type(self.graph._codegen) is not torch.fx.graph.CodeGen:
            self.graph.set_codegen(torch.fx.graph.CodeGen())  # flat inputs, as GraphCase holds them
        propagate_fake(self.gm, case.inputs[0])
        self.inputs = [list(rank) for rank in case.inputs]
        self.placements = None if case.placements is None else list(case.placements)
        self.generator = torch.Generator().manual_seed(seed)
        by_name = {node.name: node for node in self.graph.nodes}
        self.instances = [[by_name[n] for n in inst.nodes if n in by_name] for inst in case.planted]
        self.instance_nodes = {node for nodes in self.instances for node in nodes}
        self.instance_inputs = {
            arg for node in self.instance_nodes for arg in node.all_input_nodes if arg not in self.instance_nodes
        }
        self.original = list(self.graph.nodes)
        self.mutations: list[MutationSite] = []
        self.mutated: set[torch.fx.Node] = set()  # bases a functional op already rewrote
        self.protected: set[torch.fx.Node] = set()  # inputs no op may write
        self.tags: list[str] = []
        #: write-backs (``copy_`` of a planted instance's value into a graph input) added so far
        self.write_backs: set[torch.fx.Node] = set()
        #: whether the result is symbolized: index_put_ then writes rows every size of a symbolic
        #: dim has (its index input is not resized with it)
        self.symbolic = False

    def order(self) -> dict[torch.fx.Node, int]:
        return {node: i for i, node in enumerate(self.graph.nodes)}

    # -- where

    def slot_options(self) -> dict[str, list[tuple[int, list[torch.fx.Node]]]]:
        """For each placement with room: ``(instance index, slots)`` pairs, where a slot is the node
        of the case the mutation is inserted before. Without planted instances: ``{"anywhere": ...}``."""
        order = self.order()
        # Slots are the case's own nodes: what an earlier mutation added stays in one piece.
        original = set(self.original)
        body = [node for node in self.graph.nodes if node.op != "placeholder" and node in original]
        spans = [(i, [order[n] for n in nodes]) for i, nodes in enumerate(self.instances) if nodes]
        if not spans:
            return {"anywhere": [(-1, body)]}
        options: dict[str, list[tuple[int, list[torch.fx.Node]]]] = {p: [] for p in POSITIONS}
        for i, positions in spans:
            first, last = min(positions), max(positions)
            options["before"].append((i, [n for n in body if order[n] <= first]))
            inside = [n for n in body if first < order[n] <= last]
            if inside:
                options["inside"].append((i, inside))
            options["after"].append((i, [n for n in body if order[n] > last]))
        return {p: v for p, v in options.items() if v}

    def draw_slot(self, draw: Any) -> tuple[str, int, torch.fx.Node]:
        """(placement, instance index or -1, slot)."""
        options = self.slot_options()
        placement = draw(st.sampled_from(list(options)))
        index, slots = draw(st.sampled_from(options[placement]))
        return placement, index, draw(st.sampled_from(slots))

    # -- what

    def inputs_at(self) -> list[torch.fx.Node]:
        """Graph inputs an op may write (any position is after them)."""
        return [
            n
            for n in self.original
            if n.op == "placeholder" and n not in self.mutated and n not in self.protected and _writable(meta_val(n))
        ]

    def views_read_from(self, base: torch.fx.Node, slot: torch.fx.Node) -> bool:
        """Whether a view of ``base`` (through aten view ops and getitem) is read at or after
        ``slot``: a write there would show through it."""
        order = self.order()
        pending, seen = [base], set()
        while pending:
            node = pending.pop()
            for user in node.users:
                if user in seen or user.op != "call_function":
                    continue
                seen.add(user)
                if is_view(user.target):
                    if any(order[reader] >= order[slot] for reader in user.users):
                        return True
                    pending.append(user)
        return False

    def aliased_inputs(self) -> set[torch.fx.Node]:
        """Graph inputs a graph output is a view of (through aten view ops and getitem)."""
        found = set()
        for node in flat_nodes(self.graph.output_node().args[0]):
            while node.op == "call_function" and is_view(node.target):
                node = node.args[0]
            if node.op == "placeholder":
                found.add(node)
        return found

    def buffers_at(self, slot: torch.fx.Node, *, read_later: bool) -> list[torch.fx.Node]:
        """Nodes defined before ``slot`` that compute a fresh tensor, outside every planted
        instance (a new user of an instance's intermediate would itself block the match); with
        ``read_later``, only those read at or after ``slot`` (or returned)."""
        order = self.order()
        at = order[slot]
        found = []
        for node in self.original:
            target = node.target
            if (
                node.op != "call_function"
                or node in self.instance_nodes
                or node in self.mutated
                or order[node] >= at
                or not isinstance(target, torch._ops.OpOverload)
                or target.is_view
                or target._schema.is_mutable
                or target._schema.name in _HIDDEN_ALIASES
                or target._schema.name in _UNINITIALISED
                or not _writable(meta_val(node))
            ):
                continue
            if read_later and not any(order[user] >= at for user in node.users):
                continue
            found.append(node)
        return found

    def draw_target(
        self, draw: Any, slot: torch.fx.Node, *, read_later: bool, instance: int = -1, accepts: Any = None
    ) -> tuple[str, torch.fx.Node, tuple[Any, ...] | None, torch.Tensor]:
        """``(kind, base, view or None, meta tensor of what is written)`` for a mutation at ``slot``;
        a new graph input when nothing else is writable there. What the placed-at ``instance``
        reads comes first, then what other instances read: writes to what a pattern reads.
        ``accepts``: a predicate on dtypes (default all): only tensors of a dtype it accepts (one
        that some op to draw runs on) are written."""
        own = set()
        if instance >= 0:
            nodes = set(self.instances[instance])
            own = {arg for node in nodes for arg in node.all_input_nodes if arg not in nodes}

        def first_read(candidates: list[torch.fx.Node]) -> list[torch.fx.Node]:
            return sorted(candidates, key=lambda n: (n not in own, n not in self.instance_inputs))

        def accepted(candidates: list[torch.fx.Node]) -> list[torch.fx.Node]:
            return candidates if accepts is None else [n for n in candidates if accepts(meta_val(n).dtype)]

        inputs = first_read(accepted(self.inputs_at()))
        buffers = first_read(accepted(self.buffers_at(slot, read_later=read_later)))
        pools = {"input": inputs, "buffer": buffers, "view": first_read(inputs + buffers)}
        kinds = [kind for kind in TARGET_KINDS if pools[kind]]
        if not kinds:
            base = self.new_input("act", (1, 4), torch.float32)
            return "input", base, None, torch.empty(1, 4, device="meta")
        kind = draw(st.sampled_from(kinds))
        base = draw(st.sampled_from(pools[kind]))
        value = _meta_like(meta_val(base))
        if kind != "view":
            return kind, base, None, value
        view = draw(_views(value))
        return kind, base, view, apply_view(value, view)

    def same_like(self, slot: torch.fx.Node, like: torch.Tensor, exclude: set[torch.fx.Node]) -> list[torch.fx.Node]:
        """Inputs and buffers defined before ``slot`` with ``like``'s shape and dtype, for operands."""
        return [
            n
            for n in self.inputs_at() + self.buffers_at(slot, read_later=False)
            if n not in exclude and meta_val(n).shape == like.shape and meta_val(n).dtype == like.dtype
        ]

    # -- new graph inputs

    def new_input(self, kind: str, shape: Sequence[int], dtype: torch.dtype, *, high: int = 0) -> torch.fx.Node:
        """Append a placeholder and its value, the same on every rank (``Replicate()`` in
        ``placements`` of a tensor-parallel case): ``"act"`` uniform in [-2, 2), ``"factor"`` in
        [0.5, 1), ``"index"`` distinct int64 indices in [0, ``high``)."""
        names = {node.name for node in self.graph.nodes} | {str(node.target) for node in self.graph.nodes}
        name = next(f"mut_{kind}{i}" for i in range(len(names) + 1) if f"mut_{kind}{i}" not in names)
        placeholders = self.graph.find_nodes(op="placeholder")
        where = (
            self.graph.inserting_after(placeholders[-1])
            if placeholders
            else self.graph.inserting_before(next(iter(self.graph.nodes)))
        )
        with where:
            node = self.graph.placeholder(name)
        if kind == "index":
            value = torch.randperm(high, generator=self.generator)[: shape[0]]
        else:
            noise = torch.rand(tuple(shape), generator=self.generator)
            value = (noise * 4 - 2 if kind == "act" else noise * 0.5 + 0.5).to(dtype)
        for rank in self.inputs:
            rank.append(value.clone())
        if self.placements is not None:
            from torch.distributed.tensor import Replicate

            self.placements.append(Replicate())
        node.meta["val"] = value
        return node

    # -- done

    def finish(self, form: str) -> GraphCase:
        """The extended case: graph linted, recompiled and re-propagated under FakeTensorProp."""
        self.graph.lint()
        self.gm.recompile()
        propagate_fake(self.gm, tuple(self.inputs[0]))
        # A write-back's extra user first: it outlasts functionalization, a barrier does not.
        planted = mark_write_back_readers(self.graph, self.case.planted, {n.name for n in self.write_backs})
        planted = mark_mutations_inside(self.graph, planted)
        label = ", ".join(self.tags)
        if self.case.label:
            label = f"{self.case.label} + {label}" if label else self.case.label
        return dataclasses.replace(
            self.case,
            gm=self.gm,
            inputs=[tuple(rank) for rank in self.inputs],
            form=form,
            planted=planted,
            mutations=tuple(self.case.mutations) + tuple(self.mutations),
            label=label,
            **({} if self.placements is None else {"placements": tuple(self.placements)}),
        )


@st.composite
def _views(draw: Any, value: torch.Tensor) -> tuple[Any, ...]:
    """A view of ``value`` (a meta tensor) that keeps at least one dim and element."""
    kinds = ["slice"]
    if value.dim() >= 2:
        kinds.append("select")
        if value.is_contiguous():
            kinds.append("flatten")
    kind = draw(st.sampled_from(kinds))
    if kind == "flatten":
        return ("flatten",)
    dim = draw(st.integers(0, value.dim() - 1))
    size = value.shape[dim]
    if kind == "select":
        return ("select", dim, draw(st.integers(0, size - 1)))
    start = draw(st.integers(0, size - 1))
    return ("slice", dim, start, draw(st.integers(start + 1, size)))


# ------------------------------------------------------------------------------------------ in-place


def _operands(draw: Any, editor: Editor, name: str, slot: torch.fx.Node, base: torch.fx.Node, target: torch.Tensor):
    """The args after ``self`` of in-place op ``name`` writing ``target`` (a meta tensor)."""
    shape, dtype = tuple(target.shape), target.dtype
    if name == "add_.Scalar":
        return (draw(st.sampled_from(_ADDENDS)),)
    if name == "mul_.Scalar":
        return (draw(st.sampled_from(_FACTORS)),)
    if name == "add_.Tensor":
        broadcast = draw(st.booleans())
        return (editor.new_input("act", shape[-1:] if broadcast else shape, dtype),)
    if name == "mul_.Tensor":
        return (editor.new_input("factor", shape, dtype),)
    if name == "copy_":
        sources = [None, *editor.same_like(slot, target, {base})]
        source = draw(st.sampled_from(sources))
        return (editor.new_input("act", shape, dtype) if source is None else source,)
    high = shape[0]
    if editor.symbolic:  # rows valid at every size >= 2 of a dim that may be symbolic (s0, s0 - 1...)
        high = min(high, MIN_SIZE)
    rows = draw(st.integers(1, high))  # index_put_: distinct rows, so the write order is moot
    index = editor.new_input("index", (rows,), torch.int64, high=high)
    return ([index], editor.new_input("act", (rows, *shape[1:]), dtype), False)


def _inplace_ops_on(dtype: torch.dtype) -> tuple[str, ...]:
    """The ops of :data:`INPLACE_OPS` that run on ``dtype``, in order."""
    return running_on([(name, _OP[name]) for name in INPLACE_OPS], dtype)


def _add_inplace(draw: Any, editor: Editor) -> None:
    placement, index, slot = editor.draw_slot(draw)
    kind, base, view, target = editor.draw_target(draw, slot, read_later=True, instance=index, accepts=_inplace_ops_on)
    name = draw(st.sampled_from(_inplace_ops_on(target.dtype)))  # those that run on it (float8: copy_, index_put_)
    operands = _operands(draw, editor, name, slot, base, target)
    with editor.graph.inserting_before(slot):
        written = base if view is None else _view_node(editor.graph, base, view)
        node = editor.graph.create_node("call_function", _OP[name], (written, *operands), name=name.split(".")[0])
    editor.mutations.append(MutationSite(node.name, str(_OP[name]), base.name))
    editor.tags.append(f"{name}@{placement}({kind if view is None else view[0] + ' of ' + base.op})")


def _add_mutation(draw: Any, editor: Editor) -> None:
    """One mutation of a drawn kind (:data:`MUTATION_KINDS`; a write-back only where a planted
    instance computes a value to write back)."""
    kinds = MUTATION_KINDS if write_back_sources(editor) else MUTATION_KINDS[:1]
    if draw(st.sampled_from(kinds)) == WRITE_BACK:
        add_write_back(draw, editor)
    else:
        _add_inplace(draw, editor)


#: Booleans drawn for the first mutation, any of which draws it: absent in 1 of 2**3 cases
#: nominally. One boolean or an integer whose 0 means none is not enough: Hypothesis' generation
#: favours the simplest choice (a fixed ``integers(0, 7) > 0`` left half of the cases without a
#: mutation), while the shrinker still lowers these one by one to none.
_FIRST_COINS = 3


def another_follows(draw: Any, count: int, low: int, high: int) -> bool:
    """Whether mutation ``count + 1`` (of ``low``..``high``) is drawn: always below ``low``, never at
    ``high``; else the first where any of :data:`_FIRST_COINS` booleans is True, each later one on
    one boolean. Drawn *before* the mutation, and even where ``low`` forces the answer, so that every
    mutation's span of choices looks alike; False, what the shrinker tries, is no (further) mutation."""
    if count >= high:
        return False
    coins = [draw(st.booleans()) for _ in range(_FIRST_COINS if count == 0 else 1)]
    return any(coins) or count < low


@st.composite
def mutation_chain(draw: Any, add: Any, count: int, low: int, high: int) -> int:
    """Mutations ``count + 1`` and on, as a linked list (``add(draw)`` adds one; returns how many
    were added in all): each one's span holds the mutation, whether another follows, and the rest
    nested inside, so that the shrinker drops a mutation the failure does not need by putting the
    rest in its place (as :func:`~pmverify.strategies.planted` drops an instance)."""
    add(draw)
    count += 1
    if another_follows(draw, count, low, high):
        return draw(mutation_chain(add, count, low, high))
    return count


@st.composite
def _inplace_cases(
    draw: Any, cases: st.SearchStrategy, min_mutations: int, max_mutations: int, dynamic: Dynamic | None, device: Any
) -> GraphCase:
    case = draw(cases)
    validate_drawn_case("cases", case)
    case, drawn_on = on_cpu(case)
    editor = Editor(static_source(case), draw(st.integers(0, 2**32 - 1)))
    editor.symbolic = bool(case.symbols) if dynamic is None else bool(dynamic)
    if another_follows(draw, 0, min_mutations, max_mutations):
        draw(mutation_chain(lambda d: _add_mutation(d, editor), 0, min_mutations, max_mutations))
    # without a mutation, the drawn case as it was (its form too); where ``cases`` drew it, or on ``device``
    return finished(
        resymbolize(draw, editor.finish("inplace" if editor.mutations else case.form), case, dynamic), device, drawn_on
    )


def with_mutations(
    cases: st.SearchStrategy[GraphCase],
    *,
    min_mutations: int = 0,
    max_mutations: int = 2,
    dynamic: bool | str | Sequence[str] | None = None,
    device: str | torch.device | None = None,
) -> st.SearchStrategy[GraphCase]:
    """Return a strategy for the in-place form (``form="inplace"``) of cases drawn from ``cases``.

    Each case gets ``min_mutations``..``max_mutations`` in-place aten ops (by default one or more
    in 7 of 8 cases nominally, about 6 in 10 as Hypothesis generates, which favours the simplest
    choices; a case that gets none is the drawn case, its form unchanged): ``add_`` (a scalar in {1, -0.5, 0.25,
    -2}, or a new input in [-2, 2) of the written shape or its last dim), ``mul_`` (a scalar in
    {-1, -0.5, -0.75}, or a new input in [0.5, 1)), ``copy_`` (from a new input in [-2, 2) or
    from an input or buffer of the same shape and dtype) and ``index_put_`` (distinct int64 row
    indices and values in [-2, 2), both new inputs): no op makes a value grow by more than 2, so
    values stay finite for any ``max_mutations``. Each op is drawn among those that run on the
    written tensor's dtype (learned from the dispatcher: on a float8 tensor, ``copy_`` and
    ``index_put_`` only), so the case's graph runs. An op writes a graph input, a buffer (a node
    outside every planted instance that computes a fresh floating tensor and is read later or
    returned) or a view (``slice``, ``select``, ``view(-1)``) of either; what the instance it is
    placed at reads comes first. It is placed before, inside (strictly between the first and last
    node) or after a planted instance (anywhere when there is none). Later readers keep reading
    the written node. New inputs are appended, with the same value on every rank (``Replicate()``
    in ``placements`` of a tensor-parallel case). Every case runs eagerly, lints and re-propagates
    under FakeTensorProp.

    Where a planted instance computes a floating tensor, a mutation may instead be a *write-back*
    (half the draws), as functionalization writes a mutated input back: ``copy_(input, v)`` of a
    node ``v`` of the instance (an output first, or an intermediate) into a graph input of ``v``'s
    shape and dtype that ``v`` does not alias, or into a new input of that shape and dtype; placed
    at the end of the graph or at a node of the case after ``v``, and maybe read again after it
    (``neg`` of the input, returned): see :mod:`pmverify.strategies._write_backs`.

    Ground truth: ``case.mutations`` gains a :class:`~pmverify.MutationSite` per op (``mutated`` is
    the written input or buffer, not the view); a must-match instance with a mutation inside its
    span becomes ``must_match=False, reason="mutation_inside"`` (see
    :func:`mark_mutations_inside`); one whose intermediate (a node read only inside it, not
    returned) a write-back reads becomes ``must_match=False, reason="extra_user"`` (Inductor's
    matcher counts an intermediate's users; a write-back of an output leaves it a match).

    Shrinks toward no mutation (``min_mutations`` of them), and a mutation toward an ``add_`` of a
    scalar to a graph input, before the first instance: whether a mutation follows is drawn before
    it, and each mutation's choices are nested in the one before, so the shrinker drops every
    mutation a failure does not need (a semantics bug unrelated to mutation shrinks to a case with
    none; one that needs a mutation inside an instance, to a case with that one).

    - ``cases``: a strategy of :class:`~pmverify.GraphCase` in the functional form, e.g.
      :func:`~pmverify.fusions.qk_norm.testing.qk_norm_cases`; its instance nodes may be interleaved with context.
    - ``min_mutations``: fewest in-place ops per case (an int >= 0; default 0); 1 keeps every case
      in the in-place form.
    - ``max_mutations``: most in-place ops per case (an int >= 1 and >= ``min_mutations``; default 2).
    - ``dynamic``: symbolic sizes (see :func:`~pmverify.strategies.fx_graphs`). ``None`` (default):
      as the drawn case: a symbolic case is extended in its concrete form (its ``source``) and
      symbolized again with the same symbols (new inputs of a written shape share its symbols, an
      ``index_put_`` writes rows 0 or 1, valid at every size); a static one stays
      static. ``False``: static (a symbolic case's concrete form). ``True``: symbolized in every
      hint (11 as ``s0``, 13 as ``s1``) an input size holds, sizes drawn afresh; ``"tokens"``: in
      11 only (``s0``). A static case drawn without ``dynamic=`` holds no size at a hint, so only
      ``None`` and ``False`` matter for it.
    - ``device``: the cases' device (``"cuda"``, ``"cuda:1"``, ``"cpu"``, a ``torch.device``;
      default None: where ``cases`` drew them); mutations are drawn and run on CPU (the drawn case
      copied there), the result moved whole (:func:`pmverify.device.on_device`).

    Raises ``hypothesis.errors.InvalidArgument`` for a ``cases`` that is not a strategy, a
    ``min_mutations`` that is not an int >= 0, a ``max_mutations`` that is not an int >= 1, a
    ``min_mutations`` above ``max_mutations``, a ``dynamic`` that is not None, a bool,
    ``"tokens"`` or a non-empty list of it, or a ``device`` that is not a CPU or CUDA device.

    Example::

        @given(with_mutations(qk_norm_cases()))
        def test_pass_respects_mutation_regions(case):
            result = pmverify.check_case(QKNormFusionPass, case)
            assert result.ok and result.rewrite_count == case.expected_matches, result.violations
    """
    validate_strategy("cases", cases)
    validate_int("min_mutations", min_mutations, 0)
    validate_int("max_mutations", max_mutations, 1)
    validate_order("min_mutations", min_mutations, "max_mutations", max_mutations)
    canonical = validate_dynamic("dynamic", dynamic, follow=True)
    target = validated(device)
    return public_call(
        with_mutations,
        _inplace_cases(cases, min_mutations, max_mutations, canonical, target),
        cases,
        min_mutations=min_mutations,
        max_mutations=max_mutations,
        dynamic=dynamic,
        device=device,
    )
