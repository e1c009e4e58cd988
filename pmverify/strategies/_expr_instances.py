"""Graphs holding an instance of a ``PatternExpr``, drawn from the expression itself.

:func:`expr_cases` builds, for any pattern of Inductor's pattern matcher (a ``GraphPatternEntry``'s,
a ``register_graph_pattern`` call's), graphs whose nodes are an instance of it:

- each ``CallFunction`` / ``CallMethod`` (``TorchSplit``, ``GetItem``... alike) becomes one node
  calling one of its targets (an ``OpOverload``, another overload of its packet now and then, a
  ``torch`` function, a method), its literal arguments kept;
- ``Arg``, ``KeywordArg`` and ``Ignored`` are drawn by the target's schema type at their position
  (``aten::NAME``'s schemas for a ``torch`` function or a method): tensors (placeholders with
  random values, shaped after the tensors they meet: the same shape, a broadcast one, the other
  side of a matmul or a convolution), ints (a dim within the tensor's rank, a split size, an
  index), size lists consistent with the tensor they size (its own shape, a refactoring of its
  numel, a permutation), dtypes, numbers (0, 1, negative, large), bools, and the defaults of the
  rest; a ``KeywordArg`` is one value wherever its name appears, a repeated expression one node;
- ``_users=MULTIPLE`` nodes are given another user (a graph output) one time in two;
  ``ListOf`` draws a list (the pieces of a split in order, mostly); ``MultiOutputPattern`` and
  ``RepeatedExpr`` their outputs and repeats; ``*VarArgs`` patterns a call drawn from the schema;
- near misses the matcher may still match: an optional argument the pattern does not bind set
  (``alpha=``, ``dtype=``), another overload, another dim or number (drawn as above).

A drawn call is kept only where it runs on fake tensors (FakeTensorMode): its shapes are valid by
construction up to a few retries per node; a node that runs on none of its tries rejects the case.
The ground truth of each case is Inductor's matcher itself: the pattern matched at its root node,
then its ``extra_check``; a handler decides on its own whether to rewrite, so the instance is
``must_match=None`` with ``reason`` ``"matched"``, ``"extra_check"`` or ``"pattern"`` (the
matcher refused the drawn instance).

Its parts: walking the expression, its targets and their schemas (:mod:`._expr_targets`); the
shapes a call wants of its arguments (:mod:`._expr_shapes`); drawing leaves and the optional
argument near miss (:mod:`._expr_leaves`); running and emitting calls (:mod:`._expr_calls`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._case import GraphCase, PlantedInstance
from .._execution import torch_level
from ..device import on_device
from ._device import validated
from ._dynamic import symbolize_drawn, validate_dynamic
from ._expr_calls import Calls
from ._expr_leaves import EXPR_DTYPES, ArgPosition, Leaves, draw_order, drawn_again
from ._expr_shapes import Shaping, arg_name
from ._expr_targets import (
    ExprUnsupported,
    Retry,
    base_name,
    children,
    getitem_parent,
    is_sub_pattern,
    op_schemas,
    overloads,
    pattern_targets,
    undrawable,
)
from ._ops_core import Builder

__all__ = ["EXPR_DTYPES", "ExprUnsupported", "expr_cases", "ground_truth", "pattern_targets", "undrawable"]

#: Tries of one node's arguments before the case is rejected.
TRIES = 12


class _Instance(Calls, Leaves):
    """The instance under construction: the graph (a :class:`~._ops_core.Builder`) and its memos."""

    def __init__(self, draw: Any, dtype: torch.dtype, near_misses: bool) -> None:
        self.draw = draw
        self.dtype = dtype
        self.b = Builder(draw, EXPR_DTYPES + (torch.float64, torch.int64, torch.int32, torch.bool), "any")
        self.nodes: dict[int, Any] = {}  # id(pattern) -> node (repeated expressions: one node)
        self.keywords: dict[str, Any] = {}  # KeywordArg name -> value
        self.order: list[torch.fx.Node] = []
        self.extra_users: list[torch.fx.Node] = []
        self.near_misses = near_misses
        self.dynamic: Any = False  # symbolic sizes (dynamic=): the canonical value of validate_dynamic
        self.force_optional = False  # every call with a free optional argument sets one (near_miss=)
        self.optional_candidates = False  # some call had an optional argument the pattern does not bind
        self.changed: list[str] = []
        self.getitem_next: dict[torch.fx.Node, int] = {}
        self.tries = 0
        #: frozen parameters (get_attr constants, as config.freezing makes them): name -> tensor
        self.constants: dict[str, torch.Tensor] = {}
        self.frozen: bool | str = False
        self.qdtype: torch.dtype | None = None  # the quantized dtype of the call being drawn
        self.shaping: Shaping | None = None  # the shapes the call being drawn needs
        self.recorded: dict[Any, Any] | None = None  # leaves drawn, by (call pattern, position)
        self.replay: dict[Any, Any] | None = None  # leaves to draw again as recorded
        self.pattern: Any = None  # the call pattern being drawn
        self.real: dict[torch.fx.Node, Any] = {}  # each call's result on zeros (see run)
        self._last_real: Any = None

    # -- patterns ------------------------------------------------------------------------------

    def build(self, p: Any, want: tuple[int | None, ...] | None = None) -> Any:
        """The node(s) of ``p``; ``want``: the shape its parent needs of it (None where a dim is
        free), a hint the leaves and size arguments below follow where they can."""
        from .._compat import pattern_matcher as pm

        if isinstance(p, pm.MultiOutputPattern):
            return [self.build(o) for o in p.outputs if o is not None]
        if isinstance(p, pm.RepeatedExpr):
            first = self.build(p.inner_pattern, want)
            for _ in range(self.draw(st.integers(1, 2))):
                self.build_fresh(p.inner_pattern)
            return first
        if isinstance(p, pm.ListOf):
            return self.build_list(p)
        if isinstance(p, pm._TargetExpr):
            if id(p) in self.nodes:
                return self.nodes[id(p)]
            node = self.call(p, want)
            self.nodes[id(p)] = node
            return node
        raise ExprUnsupported(f"{type(p).__name__} ({p!r}) is not drawn")

    def build_fresh(self, p: Any) -> Any:
        """``p`` built again: its nodes new, except those of ``_users=MULTIPLE`` sub-patterns (as
        the matcher's ``ListOf`` and ``RepeatedExpr`` keep those across their elements)."""
        from .._compat import pattern_matcher as pm

        kept = {}
        for key, node in self.nodes.items():
            pattern = self._by_id.get(key)
            if pattern is not None and getattr(pattern, "users", 1) is pm.MULTIPLE:
                kept[key] = node
        saved, self.nodes = self.nodes, kept
        try:
            return self.build(p)
        finally:
            self.nodes = {**self.nodes, **saved}

    @property
    def _by_id(self) -> dict[int, Any]:
        return self.__dict__.setdefault("_patterns", {})

    def build_list(self, p: Any) -> list[Any]:
        """A ``ListOf``: its element built once, then again with the leaves it drew (sizes, dims,
        numbers; new values), as the inputs of a ``cat`` or ``stack`` agree; getitem indices
        excepted (the pieces of a split: all of them, in order, mostly)."""
        outer, self.recorded = self.recorded, {}
        try:
            first = self.build_fresh(p.pattern)
            recorded = self.recorded
        finally:
            self.recorded = outer
        count = self.draw(st.integers(1, 3))
        parent = getitem_parent(first)
        if parent is not None:
            pieces = len(parent.meta["val"])
            count = pieces - 1 if self.draw(st.integers(0, 3)) else self.draw(st.integers(0, max(0, pieces - 1)))
        rest = []
        for _ in range(count):
            outer_replay, self.replay = self.replay, recorded if self.draw(st.integers(0, 5)) else None
            try:
                rest.append(self.build_fresh(p.pattern))
            finally:
                self.replay = outer_replay
        return [first, *rest]

    def call(self, p: Any, want: tuple[int | None, ...] | None = None) -> torch.fx.Node:
        from .._compat import pattern_matcher as pm

        self._register(p)
        fns = overloads(p.fns)
        fn = self.draw(st.sampled_from(fns))
        varargs = isinstance(p, pm._TargetExprVarArgs)
        held_args = () if varargs else tuple(p.args)
        held_kwargs = {} if varargs else dict(p.kwargs)
        schema = None if fn is operator.getitem else self.schema_for(fn, len(held_args), set(held_kwargs), varargs)
        shaping = Shaping(self, fn, want)
        # sub-patterns first, each to the shape this call needs of it: what the leaves are drawn after
        names = [arg_name(schema, i) for i in range(len(held_args))]
        built_args = []
        for name, held in zip(names, held_args, strict=True):
            built_args.append(self.build_sub(held, name, shaping))
        built_kwargs = {k: self.build_sub(v, k, shaping) for k, v in held_kwargs.items()}
        for _ in range(TRIES):
            self.tries += 1
            try:
                node = self.emit(p, fn, schema, built_args, built_kwargs, varargs, shaping)
            except Retry:
                continue
            if getattr(p, "users", 1) is pm.MULTIPLE and self.draw(st.booleans()):
                self.extra_users.append(node)
            return node
        assume(False)
        raise AssertionError("unreachable")

    def build_sub(self, held: Any, name: str, shaping: Shaping) -> Any:
        if isinstance(held, (list, tuple)) and any(is_sub_pattern(x) for x in held):  # cat([cat(x), slice(...)])
            return type(held)(self.build_sub(x, name, shaping) for x in held)
        if not is_sub_pattern(held):
            return held
        node = self.build(held, shaping.want_of(name))
        shaping.built(name, node)
        return node

    def _register(self, p: Any) -> None:
        self._by_id[id(p)] = p
        for child in children(p):
            self._register(child)

    # -- one call ----------------------------------------------------------------------------

    def emit(
        self,
        p: Any,
        fn: Any,
        schema: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        varargs: bool,
        shaping: Shaping,
    ) -> torch.fx.Node:
        if fn is operator.getitem:
            return self.getitem(args)
        if varargs and base_name(fn) == "einsum" and not isinstance(fn, torch._ops.OpOverload):
            return self.einsum(p, fn)
        self.qdtype = None
        self.shaping = shaping
        self.pattern = p
        positions = self.positions(schema, args, kwargs, varargs)
        drawn: dict[int | str, Any] = {}
        keywords: dict[str, Any] = {}
        for position in sorted(positions, key=draw_order):
            drawn[position.key] = self.value(fn, position, drawn, positions, keywords)
        call_args = tuple(drawn[i] for i in range(sum(isinstance(p.key, int) for p in positions)))
        call_kwargs = {p.key: drawn[p.key] for p in positions if isinstance(p.key, str)}
        call_kwargs.update(self.optional_near_miss(fn, schema, positions, call_args, call_kwargs))
        fake = self.run(fn, call_args, call_kwargs, p.op)
        self.keywords.update(keywords)
        return self.add_node(p.op, fn, call_args, call_kwargs, fake)

    def schema_for(self, fn: Any, n_args: int, kwargs: set[str], varargs: bool) -> Any:
        candidates = []
        for s in op_schemas(fn):
            names = [a.name for a in s.arguments]
            positional = [a for a in s.arguments if not a.kwarg_only]
            if varargs or (n_args <= len(positional) and kwargs <= set(names)):
                required = [a for a in s.arguments if not a.has_default_value() and a.name not in kwargs]
                if varargs or all(i < n_args for i, a in enumerate(s.arguments) if a in required and not a.kwarg_only):
                    candidates.append(s)
        if not candidates:
            return None
        return candidates[self.draw(st.integers(0, len(candidates) - 1))]

    def positions(self, schema: Any, args: list[Any], kwargs: dict[str, Any], varargs: bool) -> list[ArgPosition]:
        if schema is None:
            if varargs:
                raise ExprUnsupported("a *VarArgs pattern of a target without a schema")
            return [ArgPosition(i, None, a) for i, a in enumerate(args)] + [
                ArgPosition(k, None, v) for k, v in kwargs.items()
            ]
        from .._compat import pattern_matcher as pm

        if varargs:  # every required argument drawn, positional ones positionally
            out = []
            for i, a in enumerate(a for a in schema.arguments if not a.kwarg_only):
                if a.has_default_value() and self.draw(st.integers(0, 2)):
                    break
                out.append(ArgPosition(i, a, pm.Ignored()))
            out += [
                ArgPosition(a.name, a, pm.Ignored())
                for a in schema.arguments
                if a.kwarg_only and not a.has_default_value()
            ]
            return out
        by_name = {a.name: a for a in schema.arguments}
        out = [ArgPosition(i, schema.arguments[i], a) for i, a in enumerate(args)]
        out += [ArgPosition(k, by_name.get(k), v) for k, v in kwargs.items()]
        return out

    def value(self, fn: Any, position: ArgPosition, drawn: dict, positions: list[ArgPosition], keywords: dict) -> Any:
        from .._compat import pattern_matcher as pm

        held = position.held
        if isinstance(held, torch.fx.Node) or (isinstance(held, list) and held and isinstance(held[0], torch.fx.Node)):
            return held
        if not isinstance(held, pm.PatternExpr):
            return held  # a literal the pattern holds
        name = getattr(held, "name", None)
        if isinstance(held, pm.KeywordArg) and name is not None:
            if name in self.keywords:
                return self.keywords[name]
            if name in keywords:
                return keywords[name]
        key = (id(self.pattern), position.key)
        if self.replay is not None and key in self.replay:
            value = drawn_again(self.replay[key])
        else:
            value = self.leaf(fn, position, drawn, positions)
        if self.recorded is not None:
            self.recorded[key] = value
        if isinstance(held, pm.KeywordArg) and name is not None:
            keywords[name] = value
        return value


def ground_truth(pattern: Any, root: torch.fx.Node, extra_check: Callable[[Any], bool] | None) -> tuple[str, Any]:
    """``("matched", match)`` when Inductor's matcher matches ``pattern`` at ``root`` and
    ``extra_check`` accepts; ``("extra_check", match)`` when it rejects; ``("pattern", None)``
    when the pattern does not match there (an ``extra_check`` that raises rejects)."""
    from .._compat import is_match

    match = pattern.match(root)
    if not is_match(match):
        return "pattern", None
    if extra_check is None:
        return "matched", match
    try:
        accepted = bool(extra_check(match))
    except Exception:  # noqa: BLE001 - Inductor's apply would raise too; judged as rejected here
        accepted = False
    return ("matched" if accepted else "extra_check"), match


def expr_cases(
    pattern: Any,
    *,
    name: str = "pattern",
    extra_check: Callable[[Any], bool] | None = None,
    near_misses: bool = True,
    frozen: bool | str | None = None,
    near_miss: str | None = None,
    dynamic: Any = False,
    device: Any = None,
) -> st.SearchStrategy[GraphCase]:
    """Graphs holding one instance of ``pattern`` (a ``PatternExpr``), drawn from the expression
    (see the module's docstring): the instance's inputs are placeholders holding random values in
    one float dtype of :data:`EXPR_DTYPES` mostly (index tensors int64 in range), its root (and
    each ``MultiOutputPattern`` output, and a ``_users=MULTIPLE`` node one time in two) an output.
    ``name`` names the instance (:attr:`PlantedInstance.pattern`), ``extra_check`` is the entry's
    (ground truth only: the pass under test decides what it rewrites), ``near_misses`` allows an
    optional argument the pattern does not bind to be set; ``frozen``: whether tensor leaves
    after the first may be frozen parameters (``get_attr`` constants, as
    ``torch._inductor.config.freezing`` makes weights; each but one in eight), ``"all"``: each of
    them, None: drawn per case. ``near_miss="optional_arg"``: each call that has an optional
    argument the pattern does not bind gets one set (else one call in four; the instance's
    ``applicable_near_misses`` says whether any call had one), its floating values none 0, and only
    instances the matcher and ``extra_check`` accept with one set are kept (the others rejected). Raises :class:`ExprUnsupported` (from
    the draw) for a pattern holding what is not drawn, ``InvalidArgument`` for another ``near_miss``.
    ``dynamic`` (False, True or ``"tokens"``, as the other case strategies take it): fresh tensors'
    dims and matmul rows drawn at a symbol's hint, then the case traced again with symbolic sizes
    (:func:`~pmverify.strategies._dynamic.symbolize_drawn`: ``SymInt`` size arguments, its symbols'
    sizes drawn); a case holding frozen parameters, or calling torch functions or methods (a
    pre-grad graph), stays static. ``InvalidArgument`` for another
    ``dynamic``. ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a ``torch.device``; default
    None: CPU): each case is drawn and its ground truth asked on CPU exactly as without it, then
    moved whole (:func:`pmverify.device.on_device`); ``InvalidArgument`` (at once) for a device
    that is not a CPU or CUDA device."""
    validated(device)
    return _expr_cases(
        pattern,
        name=name,
        extra_check=extra_check,
        near_misses=near_misses,
        frozen=frozen,
        near_miss=near_miss,
        dynamic=dynamic,
        device=device,
    )


def _drawn_case(
    draw: Any,
    pattern: Any,
    *,
    name: str = "pattern",
    extra_check: Callable[[Any], bool] | None = None,
    near_misses: bool = True,
    frozen: bool | str | None = None,
    near_miss: str | None = None,
    dynamic: Any = False,
    device: Any = None,
) -> GraphCase:
    """:func:`expr_cases`' draw (a composite named after it, so that its repr is the public call:
    the arguments given, those that are their defaults left out)."""
    if near_miss not in (None, "optional_arg"):
        raise InvalidArgument(f"near_miss={near_miss!r}: expr_cases draws None or 'optional_arg'")
    dynamic = validate_dynamic("dynamic", dynamic)
    why = undrawable(pattern)
    if why is not None:
        raise ExprUnsupported(why)
    dtype = draw(st.sampled_from(EXPR_DTYPES))
    instance = _Instance(draw, dtype, near_misses)
    instance.force_optional = near_miss == "optional_arg"
    instance.dynamic = dynamic
    instance.frozen = draw(st.booleans()) if frozen is None else frozen
    built = instance.build(pattern)
    roots = built if isinstance(built, list) else [built]
    roots = [r for r in roots if isinstance(r, torch.fx.Node)]
    if not roots:
        raise ExprUnsupported(f"{pattern!r} built no node")
    gm = _finished(draw, instance, roots)
    anchor = roots[0]
    reason, _ = ground_truth(pattern, anchor, extra_check)
    if near_miss is not None:  # the near miss's cases: instances the entry fires on, an optional argument set
        assume(reason == "matched" and bool(instance.changed))
    detail = "; ".join(instance.changed) or None
    planted = PlantedInstance(
        pattern=name,
        nodes=tuple(n.name for n in instance.order),
        must_match=None,
        reason=reason if not instance.changed else f"{reason}, optional_arg",
        detail=detail,
        truth_from="matcher",
        applicable_near_misses=("optional_arg",) if instance.optional_candidates else (),
    )
    label = f"{name} instance ({reason}{', ' + detail if detail else ''})"
    case = GraphCase(gm=gm, inputs=[tuple(instance.b.inputs)], planted=(planted,), label=label)
    # static where frozen parameters are get_attr constants, or where the graph calls torch functions
    # or methods (a pre-grad graph: the symbolic trace, make_fx's, would give ATen ops instead)
    if dynamic and not instance.constants and not torch_level(gm.graph):
        case = symbolize_drawn(draw, case, dynamic)
    return case if device is None else on_device(case, device)


_drawn_case.__name__ = _drawn_case.__qualname__ = "expr_cases"
_expr_cases = st.composite(_drawn_case)


def _finished(draw: Any, instance: _Instance, roots: list[torch.fx.Node]) -> torch.fx.GraphModule:
    """The instance's graph module: its outputs the roots (or a consumer of the first, one time in
    two), the extra users, the sinks, each piece of a split; its frozen parameters as buffers."""
    graph = instance.b.graph
    consumer = instance.consumer(roots[0]) if draw(st.booleans()) else None
    outputs = list(dict.fromkeys([*([consumer] if consumer is not None else roots), *instance.extra_users]))
    sinks = [n for n in instance.order if not n.users and n not in outputs]
    outputs += sinks
    outputs = [piece for node in outputs for piece in _pieces(instance, node)]
    outputs = [n for n in outputs if _is_tensor_value(n.meta.get("val"))]
    assume(outputs)
    out = graph.output(tuple(outputs))
    out.meta["val"] = tuple(n.meta["val"] for n in outputs)
    root = torch.nn.Module()
    for key, value in instance.constants.items():
        root.register_buffer(key, value)
    return torch.fx.GraphModule(root, graph)


def _pieces(instance: _Instance, node: torch.fx.Node) -> list[torch.fx.Node]:
    """``node``, or, for a node of several tensors (a split), a ``getitem`` of each piece no
    ``getitem`` reads yet (as a traced graph reads them)."""
    value = node.meta.get("val")
    if not isinstance(value, (list, tuple)):
        return [node]
    read = {user.args[1] for user in node.users if user.target is operator.getitem}
    pieces = []
    for index in range(len(value)):
        if index in read:
            continue
        with instance.b.graph.inserting_after(node):
            piece = instance.b.graph.create_node("call_function", operator.getitem, (node, index), {}, name="getitem")
        piece.meta["val"] = piece.meta["example_value"] = value[index]
        pieces.append(piece)
    return pieces


def _is_tensor_value(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, torch.Tensor) for v in value)
