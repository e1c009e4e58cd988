"""Symbolic sizes: a case's graph as torch.compile traces it with ``dynamic=True`` (vLLM's token dim).

:func:`symbolize` turns a :class:`~pmverify.GraphCase` drawn with concrete sizes into the graph
torch.compile would give a pass for the same program with some sizes symbolic: the graph is traced
again by ``make_fx`` in a ``FakeTensorMode`` with a ``ShapeEnv``, from one ``Sym`` placeholder per
symbol (first, as in Inductor's post-grad graphs: ``s0: "Sym(s0)"``) and the tensor inputs with
symbolic sizes, and every size argument the program wrote as a number (a ``SymInt`` or ``SymInt[]``
argument of the op's schema: ``view``, ``reshape``, ``expand``, ``full``, ``slice``, ``narrow``,
``split``..., and ``arange``'s bounds) becomes the expression of the symbols it stands for, so the
new graph holds real ``SymInt`` arguments (``view(x, [s0, 2, 4])``, ``full([2*s0], ...)``) and
every ``meta["val"]`` is a fake tensor of symbolic shape.

Which number stands for which size is read from its prime factors: a symbol's hint is a prime
larger than every static size of the inputs (:data:`HINTS`, 11 and 13), so a size argument
``c * 11**k`` is ``c * s0**k`` and one without the factor 11 is static. A static size that happens
to carry the factor (a ``cat`` of 8 and 3 rows) gives a size the trace guards equal to the hint:
the symbol is then dropped (the case stays static in it) rather than kept specialised.

The range a symbol is valid for comes from the ``ShapeEnv``'s guards (a literal ``slice`` end of 9
guards ``s0 >= 9``): :attr:`Symbol.min` / :attr:`Symbol.max` is the widest interval around the
hint, within ``[2, MAX_SIZE]``, where every guard holds. Running a symbolic case at sizes, and
the fake inputs a pass sees, are :mod:`pmverify._shapes.sizes`' (its names are re-exported here).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from .._case import GraphCase, Symbol
from .._compat import FakeTensorMode, python_dispatcher
from ..errors import SymbolizeError
from .sizes import allowed_sizes, fake_input, new_symbol, written_size

__all__ = [
    "HINTS",
    "MAX_SIZE",
    "MIN_SIZE",
    "SymbolizeError",
    "symbolize",
    "lift",
    "static_source",
    "symbolize_like",
]


#: The hints symbols get, in order (``s0`` 11, ``s1`` 13): primes above every static size a drawn
#: input has (at most 8 a side), so that a size argument's factors say which symbols it holds.
HINTS = (11, 13)
#: The range a symbol is looked for in: sizes 0 and 1 are specialised by ``ShapeEnv`` (as torch.compile
#: does), and larger sizes than ``MAX_SIZE`` only make runs slower.
MIN_SIZE = 2
MAX_SIZE = 64
#: What dynamo and make_fx write for an omitted slice end: never a size expression.
_INT64_MAX = 9223372036854775807


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % p for p in range(2, math.isqrt(n) + 1))


def lift(value: Any, symbols: Mapping[int, Any]) -> Any:
    """``value`` (an int, or a list / tuple of them) with each int written as the expression of the
    symbols whose hints divide it: ``22 -> 2 * s0`` for ``symbols={11: s0}``. Bools, zeros,
    ``sys.maxsize`` and anything not an int are returned as they are."""
    if isinstance(value, (list, tuple)):
        return type(value)(lift(item, symbols) for item in value)
    if isinstance(value, bool) or not isinstance(value, int) or value == 0 or abs(value) == _INT64_MAX:
        return value
    rest, expression = value, None
    for hint, symbol in symbols.items():
        while rest % hint == 0:
            rest //= hint
            expression = symbol if expression is None else expression * symbol
    return value if expression is None else (expression if rest == 1 else rest * expression)


@functools.lru_cache(maxsize=512)
def _size_arguments(op: torch._ops.OpOverload) -> frozenset[str]:
    """Names of ``op``'s arguments that hold sizes: typed ``SymInt``, ``SymInt?`` or ``SymInt[]`` in
    its schema (the Python schema shows them as ``int``; the schema's text keeps the type), and
    ``arange``'s bounds."""
    from torchgen.model import FunctionSchema

    try:
        arguments = FunctionSchema.parse(str(op._schema)).arguments.flat_all
    except Exception:  # noqa: BLE001 - a schema torchgen does not read (a custom op's): no size arguments
        return frozenset()
    names = {a.name for a in arguments if str(a.type).startswith("SymInt")}
    if op.overloadpacket is torch.ops.aten.arange:
        names |= {"start", "end", "step"}
    return frozenset(names)


_SCATTER_VIEWS = {
    torch.ops.aten.slice_scatter.default: torch.ops.aten.slice.Tensor,
    torch.ops.aten.select_scatter.default: torch.ops.aten.select.int,
    torch.ops.aten.diagonal_scatter.default: torch.ops.aten.diagonal.default,
    torch.ops.aten.as_strided_scatter.default: torch.ops.aten.as_strided.default,
}


def _guard_scatter(target: Any, args: tuple, kwargs: dict) -> None:
    """Guard that a ``*_scatter``'s ``src`` has the shape of the view it is written into: the metas
    of ``slice_scatter`` and its kind do not check it, so a symbolic trace would record no guard and
    the graph would fail (or write elsewhere) at other sizes. Runs the view untraced."""
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    self, src, *rest = args
    if not isinstance(self, torch.Tensor) or not isinstance(src, torch.Tensor):
        return
    with disable_proxy_modes_tracing():
        view = _SCATTER_VIEWS[target](self, *rest, **kwargs)
    if view.dim() != src.dim():
        return
    for a, b in zip(view.shape, src.shape, strict=True):
        if a != b:  # evaluating the SymBool records the guard (a != b: the op fails at the hint too)
            return


def _guard_extent(self: Any, size: Sequence[Any], stride: Sequence[Any], storage_offset: Any = None) -> None:
    """Guard that an ``as_strided`` of a contiguous tensor stays within its elements: its meta does
    not check the storage's bounds, so a symbolic trace would record no guard."""
    if not isinstance(self, torch.Tensor) or not self.is_contiguous() or any(n == 0 for n in size):
        return
    last = (storage_offset or 0) + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if last >= self.storage_offset() + self.numel():  # evaluating the SymBool records the guard
        return


class _Lifting(torch.fx.Interpreter):
    """Runs a graph with every size argument lifted (:func:`lift`) to the symbols' expressions,
    remembering which traced node each of the graph's nodes became."""

    def __init__(self, gm: torch.fx.GraphModule, symbols: Mapping[int, Any]) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.symbols = symbols
        self.results: dict[str, Any] = {}
        self.traced: dict[str, str] = {}  # node name -> the traced node's name

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        if isinstance(target, torch._ops.OpOverload):
            names = _size_arguments(target)
            if names:
                schema = target._schema.arguments
                args = tuple(
                    lift(arg, self.symbols) if i < len(schema) and schema[i].name in names else arg
                    for i, arg in enumerate(args)
                )
                kwargs = {key: lift(arg, self.symbols) if key in names else arg for key, arg in kwargs.items()}
            if target in _SCATTER_VIEWS:
                _guard_scatter(target, args, kwargs)
            elif target is torch.ops.aten.as_strided.default:
                _guard_extent(*args, **kwargs)
        return super().call_function(target, args, kwargs)

    def run_node(self, n: torch.fx.Node) -> Any:
        from torch.fx.experimental.proxy_tensor import get_innermost_proxy_mode

        result = super().run_node(n)
        self.results[n.name] = result
        mode = get_innermost_proxy_mode()
        traced = None if mode is None else _traced_node(result, mode.tracer)
        if traced is not None:  # now: an in-place op later moves its tensor's proxy to its own node
            self.traced[n.name] = traced.name
        return result


def _traced_node(value: Any, tracer: Any) -> torch.fx.Node | None:
    from torch.fx.experimental.proxy_tensor import get_proxy_slot

    if isinstance(value, torch.Tensor):
        slot = get_proxy_slot(value, tracer, None)
        return None if slot is None else slot.proxy.node
    return None


def _expression(size: Any) -> sympy.Expr:
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))


def _dims_of(real: torch.Tensor, symbols: Mapping[int, Any], allowed: Sequence[bool] | None) -> list[Any]:
    return [lift(side, symbols) if allowed is None or allowed[d] else side for d, side in enumerate(real.shape)]


def _interval(allowed: Sequence[int], hint: int) -> tuple[int, int]:
    """The widest run of consecutive sizes in ``allowed`` that holds ``hint``."""
    present = set(allowed)
    low = high = hint
    while low - 1 in present:
        low -= 1
    while high + 1 in present:
        high += 1
    return low, high


@dataclasses.dataclass
class _Trace:
    gm: torch.fx.GraphModule
    names: dict[str, str]  # original node name -> traced node name
    shape_env: ShapeEnv
    symbols: dict[str, Any]  # case symbol name -> the env's sympy symbol


def _trace(case: GraphCase, hints: Mapping[str, int], inputs_allowed: Sequence[Sequence[bool] | None]) -> _Trace:
    shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    syms, exprs = {}, {}
    for name, hint in hints.items():
        exprs[name], syms[name] = new_symbol(shape_env, name, hint)
    by_hint = {hints[name]: syms[name] for name in hints}
    with mode:
        fakes = [
            fake_input(value, _dims_of(value, by_hint, allowed)) if isinstance(value, torch.Tensor) else value
            for value, allowed in zip(case.inputs[0], inputs_allowed, strict=True)
        ]
    interpreter: dict[str, _Lifting] = {}

    def program(*args: Any) -> Any:
        sym_args, tensor_args = args[: len(hints)], args[len(hints) :]
        lifting = _Lifting(case.gm, dict(zip((hints[n] for n in hints), sym_args, strict=True)))
        interpreter["run"] = lifting
        return lifting.run(*tensor_args)

    from torch.fx.experimental.proxy_tensor import get_innermost_proxy_mode

    tracers: dict[str, Any] = {}
    names: dict[str, str] = {}

    def recording(*args: Any) -> Any:
        out = program(*args)
        tracers["t"] = get_innermost_proxy_mode().tracer
        names.update(interpreter["run"].traced)
        return out

    # the Python dispatcher, as make_fx's "symbolic" mode enables it: without it a meta that expands
    # with SymInts (baddbmm's, addcmul's broadcast self) fails with "expected concrete integers"
    with mode, python_dispatcher():
        traced = make_fx(recording, tracing_mode="fake")(*syms.values(), *fakes)
    return _Trace(traced, names, shape_env, exprs)


def symbolize(
    case: GraphCase,
    symbols: Mapping[str, int] | None = None,
    *,
    dims: Sequence[Sequence[bool] | None] | None = None,
    max_size: int = MAX_SIZE,
) -> GraphCase:
    """``case`` with symbolic sizes, as torch.compile would trace its program with ``dynamic=True``.

    - ``symbols``: symbol name -> hint (default ``{"s0": 11}``): every input dim whose size is the
      hint (duck sizing, as ``ShapeEnv`` does) becomes that symbol, one whose size is a multiple of
      it the multiple of the symbol (``352 -> 32*s0``: a flattened ``[s0, 32]``), and every size
      argument is lifted as the module docstring says. Hints must be distinct primes, larger than
      every size of the inputs that does not stand for a symbol.
    - ``dims``: per input, which dims may be symbolic (a sequence of bools, or None for all); by
      default all.
    - ``max_size``: the largest size a range may reach (default :data:`MAX_SIZE`).

    The result has one ``Sym`` placeholder per symbol, first (its inputs: the hint on every rank),
    then the case's own placeholders under their names; ``symbols`` the :class:`Symbol` records
    (range from the guards, ``sizes`` the hint and the range's ends), ``input_dims`` the size
    expressions; planted instances and mutation sites renamed to the traced nodes. A symbol the trace
    specialised (guarded equal to its hint) is dropped and the trace made again without it; a case
    where none stays symbolic is returned unchanged. Raises :class:`SymbolizeError` for a case that
    is already symbolic, a hint that is not a distinct prime, or ``dims`` of the wrong length."""
    if case.symbols:
        raise SymbolizeError(f"case={case!r} is already symbolic")
    symbols = dict({"s0": HINTS[0]} if symbols is None else symbols)
    if dims is None:
        dims = [None] * len(case.inputs[0])
    if len(dims) != len(case.inputs[0]):
        raise SymbolizeError(f"dims={dims!r} must have one entry per input ({len(case.inputs[0])})")
    hints = list(symbols.values())
    for name, hint in symbols.items():
        if not name.isidentifier() or not isinstance(hint, int) or not _is_prime(hint) or hints.count(hint) > 1:
            raise SymbolizeError(f"symbols={symbols!r}: {name}'s hint {hint!r} must be a distinct prime")
    if not isinstance(max_size, int) or max_size < max(hints, default=0):
        raise SymbolizeError(f"max_size={max_size!r} must be an int at least the largest hint")
    live = dict(symbols)
    while live:
        traced = _trace(case, live, dims)
        specialised = {
            name
            for name, expr in traced.symbols.items()
            if traced.shape_env.replacements.get(expr) is not None and traced.shape_env.replacements[expr].is_number
        }
        if not specialised:
            break
        live = {name: hint for name, hint in live.items() if name not in specialised}
    else:
        return case
    return _finish(case, traced, live, max_size)


def _finish(case: GraphCase, traced: _Trace, hints: Mapping[str, int], max_size: int) -> GraphCase:
    env_names = {expr: name for name, expr in traced.symbols.items()}
    records = []
    for name, hint in hints.items():
        guards = [guard.expr for guard in traced.shape_env.guards]
        allowed = allowed_sizes(guards, env_names, hints, name, range(MIN_SIZE, max_size + 1))
        low, high = _interval(allowed, hint)
        records.append(Symbol(name, hint, low, high, tuple(dict.fromkeys((hint, low, high)))))
    # the traced graph, its placeholders renamed: the symbols', then the case's own
    old = traced.gm.graph
    graph = torch.fx.Graph()
    placeholders = old.find_nodes(op="placeholder")
    own = [n.name for n in case.gm.graph.find_nodes(op="placeholder")]
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node, name in zip(placeholders, [*hints, *own], strict=True):
        env[node] = graph.placeholder(name)
        env[node].meta = dict(node.meta)
    kept = set(traced.names.values())
    for node in old.nodes:
        if node.op == "placeholder":
            continue
        if node.target is operator.getitem and not node.users and node.name not in kept:
            continue  # make_fx's getitem of every output of a split or an auto_functionalized: dead, not in the case
        env[node] = graph.node_copy(node, lambda n: env[n])
    names = {
        name: env[next(n for n in old.nodes if n.name == traced_name)].name
        for name, traced_name in traced.names.items()
    }
    originals = {n.name: n for n in case.gm.graph.nodes}
    for name, new_name in names.items():  # meta a pass or strategy set (not what tracing computes)
        new = next(n for n in graph.nodes if n.name == new_name)
        for key, value in originals[name].meta.items():
            new.meta.setdefault(key, value)
    # make_fx makes later readers of a tensor an in-place op wrote read the op's result; where the
    # case's own op had no readers (with_mutations: nothing but graph order says a reader sees the
    # new value), they read the written tensor again
    for name, new_name in names.items():
        new = next(n for n in graph.nodes if n.name == new_name)
        if new.users and not originals[name].users and _writes_and_returns_self(new.target):
            new.replace_all_uses_with(new.args[0])
    for node in graph.nodes:
        # make_fx records a higher-order op's inputs in the trace's ShapeEnv; no later propagation
        # refreshes them, and decompose_auto_functionalized retraces with them (node counts differ)
        node.meta.pop("eager_input_vals", None)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    input_dims: list[Any] = list(hints)
    for node in graph.find_nodes(op="placeholder")[len(hints) :]:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in val.shape):
            input_dims.append(tuple(written_size(s, env_names) for s in val.shape))
        else:
            input_dims.append(None)
    rename = lambda n: names.get(n, n)  # noqa: E731
    planted = tuple(dataclasses.replace(p, nodes=tuple(rename(n) for n in p.nodes)) for p in case.planted)
    mutations = tuple(dataclasses.replace(m, node=rename(m.node), mutated=rename(m.mutated)) for m in case.mutations)
    inputs = [(*hints.values(), *rank_inputs) for rank_inputs in case.inputs]
    placements = None if case.placements is None else (*([None] * len(hints)), *case.placements)
    return dataclasses.replace(
        case,
        source=case,
        gm=gm,
        inputs=inputs,
        planted=planted,
        mutations=mutations,
        placements=placements,
        symbols=tuple(records),
        input_dims=tuple(input_dims),
    )


def _writes_and_returns_self(target: Any) -> bool:
    """Whether ``target`` is an in-place aten op (``add_``, ``copy_``, ``index_put_``...): it writes
    its first argument and returns it."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if not schema.arguments or len(schema.returns) != 1:
        return False
    first, ret = schema.arguments[0].alias_info, schema.returns[0].alias_info
    return first is not None and first.is_write and ret is not None and ret.before_set == first.before_set


def static_source(case: GraphCase) -> GraphCase:
    """The case with concrete sizes ``case`` was symbolized from (``case.source``); ``case`` itself
    when it has no symbols."""
    return case.source if case.symbols and case.source is not None else case


def symbolize_like(case: GraphCase, symbolic: GraphCase, *, max_size: int = MAX_SIZE) -> GraphCase:
    """``case`` (concrete sizes, e.g. ``static_source(symbolic)`` after a strategy rewrote it)
    symbolized with the symbols of ``symbolic`` (same names and hints); ``case`` itself when
    ``symbolic`` has none. The drawn extra sizes of ``symbolic``'s symbols are kept where they
    still lie in the new ranges."""
    if not symbolic.symbols:
        return case
    result = symbolize(case, {s.name: s.hint for s in symbolic.symbols}, max_size=max_size)
    drawn = {s.name: s.sizes for s in symbolic.symbols}
    symbols = tuple(
        dataclasses.replace(
            s, sizes=tuple(dict.fromkeys((*s.sizes, *(n for n in drawn.get(s.name, ()) if s.min <= n <= s.max))))
        )
        for s in result.symbols
    )
    return dataclasses.replace(result, symbols=symbols)
