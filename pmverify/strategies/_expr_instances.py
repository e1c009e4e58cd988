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
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch.fx.experimental.proxy_tensor import snapshot_fake

from .._case import GraphCase, PlantedInstance
from .._execution import quiet_fake_tensor_errors, torch_level
from ._dynamic import hinted_shape, symbolize_drawn, validate_dynamic
from ._ops_core import Builder, refactored
from ._tensors import tensors

__all__ = ["EXPR_DTYPES", "ExprUnsupported", "expr_cases", "ground_truth", "pattern_targets", "undrawable"]

#: The float dtypes an instance's tensors are drawn in (one per case, mostly).
EXPR_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Tries of one node's arguments before the case is rejected.
TRIES = 12
_MAX_SIDE = 6
_NUMBERS = (0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1e-3, 7.0)
#: The values of the floating leaves of a case drawn for the near miss ``optional_arg`` (none is 0).
_NONZERO = st.floats(0.25, 2.0) | st.floats(-2.0, -0.25)
_STR_CHOICES = {
    "approximate": ("none", "tanh"),
    "rounding_mode": (None, "trunc", "floor"),
    "reduce": ("sum", "prod", "mean", "amax", "amin"),
    "reduction": ("sum", "mean"),
    "attr": ("none", "relu"),
    "algorithm": ("",),
    "binary_attr": ("sum", "add"),
    "unary_attr": ("none", "relu"),
}
#: Equations of the einsums drawn (a batched matmul, a pointwise product and reduction, a transpose...).
_EINSUM = ("bcn,bcnm->bcm", "ij,jk->ik", "bij,bjk->bik", "ij,ij->ij", "bhd,d->bhd", "ij->ji", "i,i->", "bij,j->bi")
#: Bool arguments that must stay False on a CPU-only machine (pinned memory needs an accelerator).
_HOST_ONLY_FALSE = ("pin_memory",)
_CONTRACTIONS = {
    "mm",
    "bmm",
    "addmm",
    "baddbmm",
    "matmul",
    "linear",
    "_linear_pointwise",
    "addmv",
    "mv",
    "dot",
    "_int_mm",
}
#: The dtype the kernels of these calls take their tensor operands in (``_int_mm``: int8 only).
_OPERAND_DTYPES = {"_int_mm": torch.int8}
_CONVOLUTIONS = {"convolution", "conv2d", "conv1d", "_convolution", "_convolution_pointwise"}


_NOT_DRAWN = object()


def _is_quantize(fn: Any) -> bool:
    return (
        isinstance(fn, torch._ops.OpOverload) and fn.namespace == "quantized_decomposed" and "quantize_per" in str(fn)
    )


class ExprUnsupported(Exception):
    """A pattern pmverify cannot draw instances of (message: what and why)."""


class _Retry(Exception):
    """One try of a node's arguments failed; draw them again."""


def pattern_targets(pattern: Any) -> list[str]:
    """The targets of ``pattern``'s calls, outermost first (``["aten.add.Tensor", "aten.mm.default"]``)."""
    from torch._inductor import pattern_matcher as pm

    out: list[str] = []
    seen: set[int] = set()

    def walk(p: Any) -> None:
        if id(p) in seen:
            return
        seen.add(id(p))
        if isinstance(p, pm._TargetExpr):
            out.append(_name(p.fns[0]))
        for child in _children(p):
            walk(child)

    walk(pattern)
    return out


#: Ops whose CPU kernels trust their arguments (prepacked weights, matching RNN weight shapes): a
#: drawn call may crash the process rather than raise, so pmverify draws none.
_UNCHECKED_NAMESPACES = ("mkldnn", "onednn")


def undrawable(pattern: Any) -> str | None:
    """Why pmverify draws no instance of ``pattern`` (one line), or None when it does: a target of
    :data:`_UNCHECKED_NAMESPACES` (``onednn.qlinear_pointwise`` wants weights prepacked by
    ``onednn.qlinear_prepack``; ``aten.mkldnn_rnn_layer`` does not check its weights' shapes)."""
    from torch._inductor import pattern_matcher as pm

    seen: set[int] = set()
    stack = [pattern]
    while stack:
        p = stack.pop()
        if id(p) in seen:
            continue
        seen.add(id(p))
        if isinstance(p, pm._TargetExpr):
            for fn in p.fns:
                if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                    name = str(fn)
                    if name.split(".")[0] in _UNCHECKED_NAMESPACES or "mkldnn" in name.split(".")[1]:
                        return (
                            f"its pattern calls {name}, whose CPU kernel trusts its arguments (prepacked "
                            "weights, matching shapes): a drawn call may crash the process, so pmverify draws none"
                        )
        stack.extend(_children(p))
    return None


def _children(p: Any) -> list[Any]:
    from torch._inductor import pattern_matcher as pm

    if isinstance(p, pm.MultiOutputPattern):
        return [o for o in p.outputs if o is not None]
    if isinstance(p, pm.RepeatedExpr):
        return [p.inner_pattern]
    if isinstance(p, pm.ListOf):
        return [p.pattern]
    if isinstance(p, pm._TargetArgsExpr):
        return [a for a in p.flat_args_kwargs[0] if isinstance(a, pm.PatternExpr)]
    return []


def _name(fn: Any) -> str:
    if isinstance(fn, str):
        return f"Tensor.{fn}"
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(fn)
    module = getattr(fn, "__module__", None) or ""
    return f"{module.replace('_operator', 'operator')}.{getattr(fn, '__name__', repr(fn))}".lstrip(".")


def _base_name(fn: Any) -> str:
    if isinstance(fn, str):
        return fn
    if isinstance(fn, torch._ops.OpOverload):
        return fn._schema.name.split("::")[-1]
    if isinstance(fn, torch._ops.OpOverloadPacket):
        return fn._qualified_op_name.split("::")[-1]
    return getattr(fn, "__name__", "")


def _schemas(fn: Any) -> list[Any]:
    """The schemas a call of ``fn`` may follow: its own (an overload), else ``aten::NAME``'s."""
    if isinstance(fn, torch._ops.OpOverload):
        return [fn._schema]
    if fn is operator.getitem:
        return []
    name = _base_name(fn)
    try:
        schemas = list(torch._C._jit_get_schemas_for_operator(f"aten::{name}"))
    except RuntimeError:
        return []
    return [
        s
        for s in schemas
        if s.arguments
        and _kind(s.arguments[0]).startswith("Tensor")
        and not s.overload_name.endswith("out")
        and "Dimname" not in str(s)
        and not any(a.alias_info is not None and a.alias_info.is_write for a in s.arguments)
        or isinstance(fn, torch._ops.OpOverload)
    ]


def _overloads(fns: Sequence[Any]) -> list[Any]:
    """The targets a node may have: the overloads and plain callables of ``fns`` (an op packet only
    where its pattern lists nothing else); of an op's overloads, those on tensors (a first argument
    that is a ``Tensor``, no ``out=``), as a traced graph holds them."""
    chosen = [fn for fn in fns if not isinstance(fn, torch._ops.OpOverloadPacket)]
    on_tensors = [fn for fn in chosen if not isinstance(fn, torch._ops.OpOverload) or _on_tensors(fn)]
    return on_tensors or chosen or list(fns)


def _on_tensors(op: torch._ops.OpOverload) -> bool:
    arguments = op._schema.arguments
    if not arguments or any(a.alias_info is not None and a.alias_info.is_write and a.kwarg_only for a in arguments):
        return False
    return _kind(arguments[0]).startswith("Tensor") and "complex" not in str(op._schema)


@dataclasses.dataclass
class _Arg:
    """One argument position of a call: its schema argument (None: unknown) and what the pattern holds."""

    key: int | str
    schema: Any
    held: Any  # a PatternExpr leaf, a sub-pattern, or a literal


class _Instance:
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
        self.shaping: _Shaping | None = None  # the shapes the call being drawn needs
        self.recorded: dict[Any, Any] | None = None  # leaves drawn, by (call pattern, position)
        self.replay: dict[Any, Any] | None = None  # leaves to draw again as recorded
        self.pattern: Any = None  # the call pattern being drawn
        self.real: dict[torch.fx.Node, Any] = {}  # each call's result on zeros (see run)
        self._last_real: Any = None

    # -- patterns ------------------------------------------------------------------------------

    def build(self, p: Any, want: tuple[int | None, ...] | None = None) -> Any:
        """The node(s) of ``p``; ``want``: the shape its parent needs of it (None where a dim is
        free), a hint the leaves and size arguments below follow where they can."""
        from torch._inductor import pattern_matcher as pm

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
        from torch._inductor import pattern_matcher as pm

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
        parent = _getitem_parent(first)
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
        from torch._inductor import pattern_matcher as pm

        self._register(p)
        fns = _overloads(p.fns)
        fn = self.draw(st.sampled_from(fns))
        varargs = isinstance(p, pm._TargetExprVarArgs)
        held_args = () if varargs else tuple(p.args)
        held_kwargs = {} if varargs else dict(p.kwargs)
        schema = None if fn is operator.getitem else self.schema_for(fn, len(held_args), set(held_kwargs), varargs)
        shaping = _Shaping(self, fn, want)
        # sub-patterns first, each to the shape this call needs of it: what the leaves are drawn after
        names = [_arg_name(schema, i) for i in range(len(held_args))]
        built_args = []
        for name, held in zip(names, held_args, strict=True):
            built_args.append(self.build_sub(held, name, shaping))
        built_kwargs = {k: self.build_sub(v, k, shaping) for k, v in held_kwargs.items()}
        for _ in range(TRIES):
            self.tries += 1
            try:
                node = self.emit(p, fn, schema, built_args, built_kwargs, varargs, shaping)
            except _Retry:
                continue
            if getattr(p, "users", 1) is pm.MULTIPLE and self.draw(st.booleans()):
                self.extra_users.append(node)
            return node
        assume(False)
        raise AssertionError("unreachable")

    def build_sub(self, held: Any, name: str, shaping: _Shaping) -> Any:
        if isinstance(held, (list, tuple)) and any(_is_sub(x) for x in held):  # cat([cat(x), slice(...)])
            return type(held)(self.build_sub(x, name, shaping) for x in held)
        if not _is_sub(held):
            return held
        node = self.build(held, shaping.want_of(name))
        shaping.built(name, node)
        return node

    def _register(self, p: Any) -> None:
        self._by_id[id(p)] = p
        for child in _children(p):
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
        shaping: _Shaping,
    ) -> torch.fx.Node:
        if fn is operator.getitem:
            return self.getitem(args)
        if varargs and _base_name(fn) == "einsum" and not isinstance(fn, torch._ops.OpOverload):
            return self.einsum(p, fn)
        self.qdtype = None
        self.shaping = shaping
        self.pattern = p
        positions = self.positions(schema, args, kwargs, varargs)
        drawn: dict[int | str, Any] = {}
        keywords: dict[str, Any] = {}
        for position in sorted(positions, key=_draw_order):
            drawn[position.key] = self.value(fn, position, drawn, positions, keywords)
        call_args = tuple(drawn[i] for i in range(sum(isinstance(p.key, int) for p in positions)))
        call_kwargs = {p.key: drawn[p.key] for p in positions if isinstance(p.key, str)}
        call_kwargs.update(self.optional_near_miss(fn, schema, positions, call_args, call_kwargs))
        fake = self.run(fn, call_args, call_kwargs, p.op)
        self.keywords.update(keywords)
        return self.add_node(p.op, fn, call_args, call_kwargs, fake)

    def schema_for(self, fn: Any, n_args: int, kwargs: set[str], varargs: bool) -> Any:
        candidates = []
        for s in _schemas(fn):
            names = [a.name for a in s.arguments]
            positional = [a for a in s.arguments if not a.kwarg_only]
            if varargs or (n_args <= len(positional) and kwargs <= set(names)):
                required = [a for a in s.arguments if not a.has_default_value() and a.name not in kwargs]
                if varargs or all(i < n_args for i, a in enumerate(s.arguments) if a in required and not a.kwarg_only):
                    candidates.append(s)
        if not candidates:
            return None
        return candidates[self.draw(st.integers(0, len(candidates) - 1))]

    def positions(self, schema: Any, args: list[Any], kwargs: dict[str, Any], varargs: bool) -> list[_Arg]:
        if schema is None:
            if varargs:
                raise ExprUnsupported("a *VarArgs pattern of a target without a schema")
            return [_Arg(i, None, a) for i, a in enumerate(args)] + [_Arg(k, None, v) for k, v in kwargs.items()]
        from torch._inductor import pattern_matcher as pm

        if varargs:  # every required argument drawn, positional ones positionally
            out = []
            for i, a in enumerate(a for a in schema.arguments if not a.kwarg_only):
                if a.has_default_value() and self.draw(st.integers(0, 2)):
                    break
                out.append(_Arg(i, a, pm.Ignored()))
            out += [
                _Arg(a.name, a, pm.Ignored()) for a in schema.arguments if a.kwarg_only and not a.has_default_value()
            ]
            return out
        by_name = {a.name: a for a in schema.arguments}
        out = [_Arg(i, schema.arguments[i], a) for i, a in enumerate(args)]
        out += [_Arg(k, by_name.get(k), v) for k, v in kwargs.items()]
        return out

    def value(self, fn: Any, position: _Arg, drawn: dict, positions: list[_Arg], keywords: dict) -> Any:
        from torch._inductor import pattern_matcher as pm

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
            value = _again(self.replay[key])
        else:
            value = self.leaf(fn, position, drawn, positions)
        if self.recorded is not None:
            self.recorded[key] = value
        if isinstance(held, pm.KeywordArg) and name is not None:
            keywords[name] = value
        return value

    def run(self, fn: Any, args: tuple, kwargs: dict, op: str) -> Any:
        """The call's fake result, once it ran on fake tensors and on real ones (zeros of the drawn
        shapes and dtypes, and the real results of the nodes before): a fake kernel lets through
        what the CPU kernel refuses (an ``mm`` of two dtypes). Raises :class:`_Retry` otherwise."""
        fake = self._call(fn, op, *_mapped(args, kwargs, lambda v: _faked(self, v)), mode=self.b.mode)
        real = self._call(fn, op, *_mapped(args, kwargs, self._real), mode=contextlib.nullcontext())
        self._last_real = real
        return fake

    def _call(self, fn: Any, op: str, args: tuple, kwargs: dict, *, mode: Any) -> Any:
        try:
            with mode, quiet_fake_tensor_errors(), torch.no_grad():
                if op == "call_method":
                    return getattr(args[0], fn)(*args[1:], **kwargs)
                return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure of the drawn call: draw again
            raise _Retry(str(exc)) from None

    def _real(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self._real(v) for v in value]
        if isinstance(value, torch.fx.Node):
            if value in self.real:
                return self.real[value]
            meta = value.meta["val"]
            return torch.zeros(meta.shape, dtype=meta.dtype)
        if isinstance(value, _Pending):
            if value.node is not None:
                return self._real(value.node)
            return torch.zeros(value.shape, dtype=value.dtype)
        return value

    def add_node(self, op: str, fn: Any, args: tuple, kwargs: dict, fake: Any) -> torch.fx.Node:
        args = tuple(self.materialise(a) for a in args)
        kwargs = {k: self.materialise(v) for k, v in kwargs.items()}
        name = _base_name(fn) or "call"
        node = self.b.graph.create_node(op, fn, args, kwargs, name=name)
        value = [snapshot_fake(r) for r in fake] if isinstance(fake, (list, tuple)) else snapshot_fake(fake)
        node.meta["val"] = value
        node.meta["example_value"] = value
        self.real[node] = self._last_real
        self.order.append(node)
        return node

    def consumer(self, root: torch.fx.Node) -> torch.fx.Node | None:
        """A user of the instance's root, as a model has: ``root + root`` (``operator.add`` in a
        graph of ``torch`` calls, ``aten.add.Tensor`` in an aten graph); None for a root that is not
        one tensor."""
        value = root.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dtype == torch.bool:
            return None
        aten_graph = isinstance(root.target, torch._ops.OpOverload)
        target = torch.ops.aten.add.Tensor if aten_graph else operator.add
        with self.b.mode, quiet_fake_tensor_errors():
            fake = target(value, value)
        node = self.b.graph.create_node("call_function", target, (root, root), {}, name="add")
        node.meta["val"] = node.meta["example_value"] = snapshot_fake(fake)
        return node

    def einsum(self, p: Any, fn: Any) -> torch.fx.Node:
        """``torch.einsum(equation, *operands)`` as a traced graph holds it, the operands sized by
        the equation's letters."""
        equation = self.draw(st.sampled_from(_EINSUM))
        sizes: dict[str, int] = {}
        operands = []
        for term in equation.split("->")[0].split(","):
            shape = tuple(sizes.setdefault(c, self.draw(st.integers(1, 4))) for c in term)
            operands.append(_Pending(shape, self.dtype))
        args = (equation, *operands)
        fake = self.run(fn, args, {}, p.op)
        return self.add_node(p.op, fn, args, {}, fake)

    def getitem(self, args: list[Any]) -> torch.fx.Node:
        parent = args[0]
        if not isinstance(parent, torch.fx.Node) or not isinstance(parent.meta.get("val"), (list, tuple)):
            raise ExprUnsupported("getitem of a value that is not a tuple")
        pieces = len(parent.meta["val"])
        if not pieces:
            raise _Retry("no pieces")
        index = args[1]
        from torch._inductor import pattern_matcher as pm

        if isinstance(index, pm.PatternExpr):
            index = self.getitem_next.get(parent, 0)
            if index >= pieces or not self.draw(st.integers(0, 5)):
                index = self.draw(st.integers(0, pieces - 1))
            self.getitem_next[parent] = index + 1
        node = self.b.graph.create_node("call_function", operator.getitem, (parent, index), {}, name="getitem")
        node.meta["val"] = node.meta["example_value"] = parent.meta["val"][index]
        if parent in self.real:
            self.real[node] = self.real[parent][index]
        self.order.append(node)
        return node

    # -- leaves ------------------------------------------------------------------------------

    def leaf(self, fn: Any, position: _Arg, drawn: dict, positions: list[_Arg]) -> Any:
        arg = position.schema
        if arg is None:
            return self.tensor_like(fn, position, drawn, positions)
        if _is_quantize(fn):
            value = self.quantize_argument(fn, arg, drawn)
            if value is not _NOT_DRAWN:
                return value
        kind = _kind(arg)
        optional = kind.endswith("?")
        base = kind.removesuffix("?")
        # a factory's dtype is never None in a traced graph (torch.full(...) records the default dtype)
        concrete = base == "ScalarType" and _is_factory(fn)
        if (
            optional
            and arg.has_default_value()
            and arg.default_value is None
            and not concrete
            and not self.draw(st.integers(0, 3))
        ):
            return None
        if base == "Tensor":
            if arg.name in ("other", "exponent") and self.draw(st.integers(0, 2)) == 0 and _has_tensor(drawn):
                return self.draw(st.sampled_from(_NUMBERS))
            return self.tensor_like(fn, position, drawn, positions)
        if base in ("Tensor[]", "Tensor?[]"):
            return self.tensor_list(fn, position, drawn, positions)
        if base in ("Scalar?[]", "Scalar[]", "str?[]", "str[]"):
            return []
        anchor = _anchor(drawn)
        if base in ("int", "SymInt"):
            return self.integer(arg.name, anchor, drawn)
        if base in ("int[]", "SymInt[]") or base.startswith("int[") or base.startswith("SymInt["):
            return self.int_list(fn, arg.name, anchor, drawn)
        if base in ("float", "Scalar", "number"):
            return self.draw(st.sampled_from(_NUMBERS))
        if base == "bool":
            return False if arg.name in _HOST_ONLY_FALSE else self.draw(st.booleans())
        if base == "ScalarType":
            return self.draw(st.sampled_from((*EXPR_DTYPES, torch.float64, torch.int64, torch.int32)))
        if base == "Layout":
            return torch.strided
        if base == "Device":
            return torch.device("cpu")
        if base == "MemoryFormat":
            return torch.contiguous_format
        if base == "Generator":
            return None
        if base == "str" and not arg.has_default_value():
            return self.draw(st.sampled_from(_STR_CHOICES.get(arg.name, ("none", ""))))
        if base == "str" and arg.name in _STR_CHOICES:
            return self.draw(st.sampled_from(_STR_CHOICES[arg.name]))
        if arg.has_default_value():
            return arg.default_value
        raise ExprUnsupported(f"{_name(fn)}'s argument {arg.name} of type {kind} is not drawn")

    def quantize_argument(self, fn: Any, arg: Any, drawn: dict) -> Any:
        """An argument of ``quantized_decomposed``'s (de)quantize ops, consistent with the others:
        one quantized dtype per call (uint8 or int8), its full range as ``quant_min``/``quant_max``,
        a quantized input for a dequantize, positive scales, zero points in range, per-channel
        scales and zero points along ``axis`` 0."""
        if self.qdtype is None:  # per-channel (weights): int8, as PT2E quantizes weights; else either
            per_channel = "per_channel" in str(fn)
            self.qdtype = torch.int8 if per_channel else self.draw(st.sampled_from((torch.uint8, torch.int8)))
        qdtype = self.qdtype
        info = torch.iinfo(qdtype)
        name, kind = arg.name, _kind(arg).removesuffix("?")
        anchor = _anchor(drawn)
        channels = int(anchor.shape[0]) if anchor is not None and anchor.dim() else 1
        dequantize = _base_name(fn).startswith("dequantize")
        if name in ("dtype",):
            return qdtype
        if name == "quant_min":
            return info.min
        if name == "quant_max":
            return info.max
        if name == "axis":
            return 0
        if name == "input" and dequantize:
            template = self.shaping.want_of(name) if self.shaping is not None else None
            shape = _filled(self.draw, template) if template is not None else self.related_shape(None)
            return _Pending(shape, qdtype, st.integers(info.min, info.max))
        positive = st.sampled_from((0.01, 0.02, 0.05, 0.1, 0.25))
        points = st.integers(max(info.min, -8), min(info.max, 8)) if qdtype == torch.int8 else st.integers(0, 255)
        if name == "scale":
            return _Pending((), torch.float32, positive) if kind == "Tensor" else self.draw(positive)
        if name == "zero_point":
            return _Pending((), torch.int64, points) if kind == "Tensor" else self.draw(points)
        if name == "scales":
            return _Pending((channels,), torch.float32, positive)
        if name == "zero_points":
            return _Pending((channels,), torch.int64, points)
        return _NOT_DRAWN

    def integer(self, name: str, anchor: Any, drawn: dict) -> int:
        rank = anchor.dim() if anchor is not None else 1
        if "dim" in name or name == "axis":
            return self.draw(st.integers(-max(rank, 1), max(rank - 1, 0)))
        size = _dim_size(anchor, drawn)
        if name in ("split_size", "chunks", "sections"):
            return self.draw(st.integers(1, max(size, 1)))
        if name in ("start", "end", "index", "length", "step"):
            return self.draw(st.integers(0 if name != "step" else 1, max(size, 1)))
        if name == "groups":
            return 1
        return self.draw(st.integers(0, 4))

    def int_list(self, fn: Any, name: str, anchor: Any, drawn: dict) -> list[int]:
        shape = list(anchor.shape) if anchor is not None else [self.draw(st.integers(1, _MAX_SIDE))]
        fixed = self.shaping.fixed.get(name) if self.shaping is not None else None
        if fixed is not None:  # what makes this call's result the shape its parent needs
            rank = len(fixed)
            padded = [None] * max(rank - len(shape), 0) + [int(s) for s in shape][-rank:]
            return [f if f is not None else (p if p is not None else 1) for f, p in zip(fixed, padded, strict=True)]
        rank = len(shape)
        op = _base_name(fn)
        if name in ("dims", "perm") or op == "permute":
            return self.draw(st.permutations(range(rank)))
        if name in ("dim", "reduced_dims") or "dim" in name:
            dims = self.draw(st.lists(st.integers(0, max(rank - 1, 0)), min_size=1, max_size=max(rank, 1), unique=True))
            return sorted(dims) if rank else []
        if name in ("split_sizes", "split_size", "sections", "split_size_or_sections"):
            size = _dim_size(anchor, drawn)
            return _partition(self.draw, size)
        if name in ("size", "shape") and anchor is not None:
            choice = self.draw(st.integers(0, 3))
            if op in ("expand", "broadcast_to"):
                return [*([self.draw(st.integers(1, 3))] if choice == 0 else []), *shape]
            if choice <= 1:
                return shape
            return list(self.draw(refactored(math.prod(shape))))
        if name in ("size", "shape"):
            return list(self.draw(st.lists(st.integers(1, _MAX_SIDE), min_size=1, max_size=3)))
        if name in ("stride", "dilation"):
            return [1] * max(rank - 2, 1) if self.draw(st.integers(0, 2)) else [2] * max(rank - 2, 1)
        if name in ("padding", "output_padding"):
            return [0] * max(rank - 2, 1) if self.draw(st.integers(0, 2)) else [1] * max(rank - 2, 1)
        return list(self.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)))

    def tensor_like(self, fn: Any, position: _Arg, drawn: dict, positions: list[_Arg]) -> Any:
        """A tensor leaf: a provisional fake tensor (made a placeholder once its call runs)."""
        op = _base_name(fn)
        name = position.schema.name if position.schema is not None else str(position.key)
        anchor = _anchor(drawn)
        dtype = self.dtype if not self.draw(st.integers(0, 7)) == 0 else self.draw(st.sampled_from(EXPR_DTYPES))
        if anchor is not None and anchor.dtype.is_floating_point and self.draw(st.integers(0, 3)):
            dtype = anchor.dtype
        dtype = _OPERAND_DTYPES.get(op, dtype)
        if name in ("index", "indices", "selector"):
            dim = next((v for k, v in drawn.items() if isinstance(v, int) and _is_dim_key(positions, k)), 0)
            size = anchor.shape[dim] if anchor is not None and anchor.dim() else 1
            shape = tuple(anchor.shape) if anchor is not None else (self.draw(st.integers(1, _MAX_SIDE)),)
            return _Pending(shape, torch.int64, st.integers(0, max(size - 1, 0)))
        template = self.shaping.want_of(name) if self.shaping is not None else None
        if template is not None and (op in _CONTRACTIONS or op in _CONVOLUTIONS or name in _FIRST or anchor is None):
            shape = _filled(self.draw, template)
            if name in _FIRST and op not in _CONTRACTIONS | _CONVOLUTIONS and not self.draw(st.integers(0, 3)):
                shape = tuple(1 if self.draw(st.booleans()) else s for s in shape)  # the other side broadcasts
        elif template is not None and self.draw(st.integers(0, 2)):
            shape = self.related_shape(_Pending(_filled(self.draw, template), dtype))
        else:
            shape = self.related_shape(anchor)
            if anchor is None and template is None:  # a fresh tensor: its symbolic dims at their hints
                shape = hinted_shape(self.draw, shape, self.dynamic)
        return _Pending(shape, dtype, None)

    def related_shape(self, anchor: Any) -> tuple[int, ...]:
        if anchor is None:
            return tuple(self.draw(st.lists(st.integers(1, _MAX_SIDE), min_size=1, max_size=4)))
        shape = tuple(anchor.shape)
        choice = self.draw(st.integers(0, 6))
        if choice <= 2 or not shape:
            return shape
        if choice == 6 and len(shape) >= 2:  # per channel (dim 1), as a bias or a batch-norm scale is
            return (
                (shape[1], *([1] * (len(shape) - 2)))
                if self.draw(st.booleans())
                else (1, shape[1], *([1] * (len(shape) - 2)))
            )
        if choice == 3:  # a broadcast form: size-1 dims
            return tuple(1 if self.draw(st.booleans()) else s for s in shape)
        if choice == 4:  # a trailing suffix
            return shape[self.draw(st.integers(1, len(shape))) :]
        return tuple(self.draw(st.lists(st.integers(1, _MAX_SIDE), min_size=1, max_size=4)))

    def tensor_list(self, fn: Any, position: _Arg, drawn: dict, positions: list[_Arg]) -> list[Any]:
        anchor = _anchor(drawn)
        if position.schema.name == "indices" and anchor is not None and anchor.dim():
            length = self.draw(st.integers(1, _MAX_SIDE))
            return [_Pending((length,), torch.int64, st.integers(0, max(anchor.shape[0] - 1, 0)))]
        first = self.tensor_like(fn, position, drawn, positions)
        return [first] + [_Pending(first.shape, first.dtype, None) for _ in range(self.draw(st.integers(0, 2)))]

    def optional_near_miss(self, fn: Any, schema: Any, positions: list[_Arg], args: tuple, kwargs: dict) -> dict:
        """One optional argument the pattern does not bind, set (a near miss the matcher ignores):
        one call in four, each call that has one when ``near_miss="optional_arg"``."""
        if not self.near_misses or schema is None or not isinstance(fn, torch._ops.OpOverload):
            return {}
        bound = {p.key for p in positions} | {schema.arguments[i].name for i in range(len(args))}
        free = [a for a in schema.arguments[len(args) :] if a.has_default_value() and a.name not in bound]
        free = [
            a
            for a in free
            if _kind(a).removesuffix("?") in ("Scalar", "ScalarType", "bool", "int", "float", "MemoryFormat")
            and a.name not in _HOST_ONLY_FALSE
        ]
        self.optional_candidates = self.optional_candidates or bool(free)
        if self.draw(st.integers(0, 3)) and not self.force_optional:
            return {}
        if not free:
            return {}
        arg = free[self.draw(st.integers(0, len(free) - 1))]
        base = _kind(arg).removesuffix("?")
        value: Any
        if base == "ScalarType":
            value = self.draw(st.sampled_from((torch.float64, torch.float32, torch.float16)))
        elif base == "MemoryFormat":  # (channels_last on a 4-d tensor; a call it does not run on is redrawn)
            value = self.draw(st.sampled_from((torch.channels_last, torch.contiguous_format)))
        elif base == "bool":
            value = not bool(arg.default_value)
        elif base == "int":
            value = self.draw(st.integers(1, 2))
        else:
            value = self.draw(st.sampled_from((2.0, 0.5, -1.0)))
        if value == arg.default_value:
            return {}
        self.changed.append(f"{_name(fn)} given {arg.name}={value!r}, which the pattern does not bind")
        return {arg.name: value}

    def materialise(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.materialise(v) for v in value]
        if isinstance(value, _Pending):
            if value.node is None:
                elements = value.elements
                if elements is None and self.force_optional and value.dtype.is_floating_point:
                    elements = _NONZERO  # an alpha= set on zeros shows nothing: the near miss is judged on values
                if self.frozen and self.b.inputs and (self.frozen == "all" or self.draw(st.integers(0, 7))):
                    value.node = self.constant(value.shape, value.dtype, elements)
                elif elements is not None:
                    value.node = self.b.new_input(value.shape, value.dtype, elements=elements).node
                else:
                    value.node = self.b.new_input(value.shape, value.dtype).node
                value.node.meta["example_value"] = value.node.meta["val"]
            return value.node
        return value

    def constant(self, shape: tuple[int, ...], dtype: torch.dtype, elements: Any) -> torch.fx.Node:
        """A frozen parameter: a ``get_attr`` of a constant drawn as an input is (after the inputs)."""
        real = self.draw(tensors(dtype, shape, elements=elements) if elements is not None else tensors(dtype, shape))
        name = f"_frozen_param{len(self.constants)}"
        self.constants[name] = real
        first_op = next((n for n in self.b.graph.nodes if n.op != "placeholder"), None)
        with self.b.graph.inserting_before(first_op) if first_op is not None else contextlib.nullcontext():
            node = self.b.graph.get_attr(name)
        node.meta["val"] = self.b.mode.from_tensor(real, static_shapes=True)
        return node


_FIRST = ("self", "input", "a", "x", "inp", "0")


def _arg_name(schema: Any, index: int) -> str:
    if schema is not None and index < len(schema.arguments):
        return schema.arguments[index].name
    return str(index)


class _Shaping:
    """The shapes one call needs of its tensor arguments, from the shape its parent needs of it
    (``want``, None where a dim is free): matmul sides sharing their inner size, convolution weights
    matching the input's channels, the input of a permute, expand or view shaped so that the
    result is ``want``; the others get ``want`` itself where it applies."""

    def __init__(self, instance: _Instance, fn: Any, want: tuple[int | None, ...] | None) -> None:
        self.instance = instance
        self.op = _base_name(fn)
        self.pointwise = torch.Tag.pointwise in getattr(fn, "tags", ())
        self.want = want
        self.dims: dict[str, int] = {}
        self.fixed: dict[str, Any] = {}
        self.input_want: tuple[int | None, ...] | None = want
        draw = instance.draw
        if want is None:
            return
        rank = len(want)
        if self.op in _CONTRACTIONS and rank >= 2:
            self.dims.update({k: v for k, v in zip("mn", want[-2:], strict=True) if v is not None})
            if rank == 3 and want[0] is not None:
                self.dims["b"] = want[0]
        elif self.op in _CONVOLUTIONS and rank >= 3:
            self.dims.update({k: v for k, v in zip("NO", want[:2], strict=True) if v is not None})
        elif self.op == "permute":
            perm = draw(st.permutations(range(rank)))
            self.fixed["dims"] = list(perm)
            self.input_want = tuple(want[perm.index(i)] for i in range(rank))
        elif self.op in ("expand", "broadcast_to"):
            self.input_want = tuple(w if draw(st.integers(0, 2)) else 1 for w in want)
            self.fixed["size"] = list(want)
        elif self.op in ("view", "reshape", "_unsafe_view") and all(w is not None for w in want):
            self.input_want = tuple(draw(refactored(math.prod(want))))  # type: ignore[arg-type]
            self.fixed["size"] = self.fixed["shape"] = list(want)  # (view: size, reshape: shape)

    def dim(self, key: str) -> int:
        if key not in self.dims:
            size = self.instance.draw(st.integers(1, 4 if key in "NCO" else _MAX_SIDE))
            if key in "mb" and self.instance.dynamic:  # a matmul's rows: the token count under dynamic=
                size = hinted_shape(self.instance.draw, (size,), self.instance.dynamic)[0]
            self.dims[key] = size
        return self.dims[key]

    def want_of(self, name: str) -> tuple[int | None, ...] | None:
        op, d = self.op, self.dim
        if op in _CONTRACTIONS:
            batched = op in ("bmm", "baddbmm") or (self.want is not None and len(self.want) == 3)
            lead = (d("b"),) if batched else ()
            table = {
                "mat1": (d("m"), d("k")),
                "mat2": (*lead, d("k"), d("n")),
                "batch1": (d("b"), d("m"), d("k")),
                "batch2": (d("b"), d("k"), d("n")),
                "other": (*lead, d("k"), d("n")),
                "weight": (d("n"), d("k")),
                "bias": (d("n"),),
                "b": (d("k"), d("n")),
            }
            if name in ("self", "input", "a", "x", "0"):
                if op == "addmm":
                    return self.instance.draw(st.sampled_from([(d("m"), d("n")), (d("n"),), (1, d("n"))]))
                if op == "baddbmm":
                    return (d("b"), d("m"), d("n"))
                return (*lead, d("m"), d("k"))
            return table.get(name)
        if op in _CONVOLUTIONS:
            spatial = self.__dict__.setdefault("spatial", self.instance.draw(st.integers(1, 2)))
            if name in ("input", "self", "x", "0"):
                return (d("N"), d("C"), *(self.instance.draw(st.integers(2, 5)) for _ in range(spatial)))
            if name == "weight":
                return (d("O"), d("C"), *(self.instance.draw(st.integers(1, 2)) for _ in range(spatial)))
            if name == "bias":
                return (d("O"),)
            return None
        if name in _FIRST:
            return self.input_want
        return self.want if self.op not in ("permute", "expand", "view", "reshape", "_unsafe_view") else None

    def built(self, name: str, node: Any) -> None:
        """Take the sizes a built argument fixes (a matmul side's, a convolution input's; a
        pointwise op's first tensor, which its other tensors then get: ``add(mm(a, b), mm(c, d))``)."""
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor):
            return
        shape = [int(s) for s in value.shape]
        if self.pointwise and self.want is None and name in _FIRST:
            self.want = self.input_want = tuple(shape)
        elif self.op in _CONTRACTIONS and len(shape) >= 2:
            if name in ("self", "input", "a", "x", "0", "mat1", "batch1") and self.op not in ("addmm", "baddbmm"):
                self.dims.update(m=shape[-2], k=shape[-1], **({"b": shape[0]} if len(shape) == 3 else {}))
            elif name in ("mat1", "batch1"):
                self.dims.update(m=shape[-2], k=shape[-1], **({"b": shape[0]} if len(shape) == 3 else {}))
            elif name in ("mat2", "batch2", "other", "b"):
                self.dims.update(k=shape[-2], n=shape[-1], **({"b": shape[0]} if len(shape) == 3 else {}))
            elif name == "weight":
                self.dims.update(n=shape[0], k=shape[1])
        elif self.op in _CONVOLUTIONS and len(shape) >= 3:
            if name in ("input", "self", "x", "0"):
                self.dims.update(N=shape[0], C=shape[1])
                self.spatial = len(shape) - 2
            elif name == "weight":
                self.dims.update(O=shape[0], C=shape[1])
                self.spatial = len(shape) - 2


def _filled(draw: Any, template: tuple[int | None, ...]) -> tuple[int, ...]:
    return tuple(t if t is not None else draw(st.integers(1, _MAX_SIDE)) for t in template)


@dataclasses.dataclass(eq=False)
class _Pending:
    """A tensor leaf drawn for a call not yet emitted: its shape and dtype (and index range)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    elements: Any = None  # a strategy of its values (index tensors, scales); None: random values
    node: torch.fx.Node | None = None

    def dim(self) -> int:
        return len(self.shape)


def _mapped(args: tuple, kwargs: dict, fn: Callable[[Any], Any]) -> tuple[tuple, dict]:
    return tuple(fn(a) for a in args), {k: fn(v) for k, v in kwargs.items()}


def _again(value: Any) -> Any:
    """A leaf drawn again as recorded: a tensor of the same shape, dtype and value range (a new
    one), any other value as it was."""
    if isinstance(value, list):
        return [_again(v) for v in value]
    if isinstance(value, _Pending):
        return _Pending(value.shape, value.dtype, value.elements)
    return value


def _faked(instance: _Instance, value: Any) -> Any:
    if isinstance(value, list):
        return [_faked(instance, v) for v in value]
    if isinstance(value, torch.fx.Node):
        return value.meta["val"]
    if isinstance(value, _Pending):
        if value.node is not None:
            return value.node.meta["val"]
        with instance.b.mode:
            if value.dtype == torch.int64:
                return torch.zeros(value.shape, dtype=value.dtype)
            return torch.empty(value.shape, dtype=value.dtype)
    return value


def _kind(arg: Any) -> str:
    """A schema argument's type as the schema writes it: ``Tensor``, ``Tensor?``, ``int[]``,
    ``Tensor?[]``, ``ScalarType?``, ``Scalar``."""

    def spell(text: str) -> str:
        if text.startswith("Optional[") and text.endswith("]"):
            return spell(text[len("Optional[") : -1]) + "?"
        if text.startswith("List[") and text.endswith("]"):
            return spell(text[len("List[") : -1]) + "[]"
        return {"number": "Scalar"}.get(text, text)

    return spell(str(getattr(arg, "real_type", arg.type)))


def _is_factory(fn: Any) -> bool:
    """Whether ``fn`` is an op that takes no tensor (``aten.full``, ``aten.arange``...): a factory."""
    schema = getattr(fn, "_schema", None)
    return schema is not None and not any("Tensor" in str(a.type) for a in schema.arguments)


def _is_sub(value: Any) -> bool:
    from torch._inductor import pattern_matcher as pm

    return isinstance(value, (pm._TargetExpr, pm.ListOf, pm.MultiOutputPattern, pm.RepeatedExpr))


def _draw_order(position: _Arg) -> tuple[int, int]:
    """Tensors first (what the rest is drawn after), then dims, then the rest, each in position order."""
    name = position.schema.name if position.schema is not None else ""
    kind = _kind(position.schema) if position.schema is not None else "Tensor"
    index = position.key if isinstance(position.key, int) else 100
    if kind.startswith("Tensor") and name not in ("index", "indices"):
        return (0, index)
    if "dim" in name:
        return (1, index)
    return (2, index)


def _anchor(drawn: dict) -> Any:
    """The first tensor drawn for the call (a fake value or a pending one), or None."""
    for value in drawn.values():
        if isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), torch.Tensor):
            return value.meta["val"]
        if isinstance(value, _Pending):
            return value
        if isinstance(value, list) and value and isinstance(value[0], torch.fx.Node):
            val = value[0].meta.get("val")
            if isinstance(val, torch.Tensor):
                return val
    return None


def _has_tensor(drawn: dict) -> bool:
    return _anchor(drawn) is not None


def _dim_size(anchor: Any, drawn: dict) -> int:
    if anchor is None or not anchor.dim():
        return 1
    dims = [v for k, v in drawn.items() if isinstance(v, int) and not isinstance(v, bool) and k in ("dim", 2)]
    dim = dims[0] if dims else 0
    if -anchor.dim() <= dim < anchor.dim():
        return int(anchor.shape[dim])
    return int(anchor.shape[0])


def _is_dim_key(positions: list[_Arg], key: Any) -> bool:
    return any(p.key == key and p.schema is not None and p.schema.name == "dim" for p in positions)


def _partition(draw: Any, size: int) -> list[int]:
    if size <= 1:
        return [size]
    cuts = sorted(draw(st.lists(st.integers(1, size - 1), max_size=3, unique=True)))
    edges = [0, *cuts, size]
    return [b - a for a, b in itertools.pairwise(edges)]


def _getitem_parent(node: Any) -> Any:
    if isinstance(node, torch.fx.Node) and node.target is operator.getitem:
        return node.args[0]
    return None


def ground_truth(pattern: Any, root: torch.fx.Node, extra_check: Callable[[Any], bool] | None) -> tuple[str, Any]:
    """``("matched", match)`` when Inductor's matcher matches ``pattern`` at ``root`` and
    ``extra_check`` accepts; ``("extra_check", match)`` when it rejects; ``("pattern", None)``
    when the pattern does not match there (an ``extra_check`` that raises rejects)."""
    from torch._inductor.pattern_matcher import is_match

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


@st.composite
def expr_cases(
    draw: Any,
    pattern: Any,
    *,
    name: str = "pattern",
    extra_check: Callable[[Any], bool] | None = None,
    near_misses: bool = True,
    frozen: bool | str | None = None,
    near_miss: str | None = None,
    dynamic: Any = False,
) -> GraphCase:
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
    ``dynamic``."""
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
    gm = torch.fx.GraphModule(root, graph)
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
    return case


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
