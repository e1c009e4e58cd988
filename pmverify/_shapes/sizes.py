"""Running a symbolic case at concrete sizes, and what a pass sees of it.

A case with :attr:`~pmverify.GraphCase.symbols` (see :func:`pmverify.symbolize`) runs at every
assignment :func:`size_points` gives (the hints, then each symbol at its other
:attr:`~pmverify.Symbol.sizes`); :func:`inputs_at` gives its inputs at other sizes (the drawn entries
repeated cyclically, index tensors kept in range) and :func:`case_at` the static case at those sizes
(the same symbolic graph). :func:`symbolic_inputs` makes fake inputs of symbolic sizes in a fresh
``ShapeEnv``, what torch.compile hands a pass with ``dynamic=True``; :func:`allowed_sizes` evaluates
a ``ShapeEnv``'s guards at sizes. :class:`CompileRange` is vLLM's ``Range(start, end)`` and
:func:`applies_at` asks a pass's ``is_applicable_for_range`` about one size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from .._case import GraphCase
from .._compat import FakeTensorMode

__all__ = [
    "CompileRange",
    "applies_at",
    "fake_input",
    "new_symbol",
    "symbolic_inputs",
    "evaluate_size",
    "allowed_sizes",
    "written_size",
    "size_points",
    "inputs_at",
    "case_at",
]


@dataclasses.dataclass(frozen=True)
class CompileRange:
    """A range of sizes of a graph's first symbol, both ends included: the shape of vLLM's
    ``Range(start, end)`` (``vllm.config.utils``), what a pass's ``is_applicable_for_range``
    receives (one graph compiled per range of token counts)."""

    start: int
    end: int

    def is_single_size(self) -> bool:
        """Whether the range holds one size (vLLM's compile sizes)."""
        return self.start == self.end

    def __contains__(self, size: object) -> bool:
        return isinstance(size, int) and self.start <= size <= self.end

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}]"


def applies_at(pass_: Any, size: int) -> bool:
    """Whether ``pass_`` says it applies to a graph compiled for exactly ``size`` (its
    ``is_applicable_for_range(CompileRange(size, size))``); True for a pass without the method, as
    vLLM runs such a pass on every range."""
    method = getattr(pass_, "is_applicable_for_range", None)
    return True if method is None else bool(method(CompileRange(size, size)))


def fake_input(real: torch.Tensor, sizes: Sequence[Any]) -> torch.Tensor:
    """A fake tensor (in the ambient ``FakeTensorMode``) with ``sizes`` and ``real``'s dtype,
    device and stride order (dense in that order; a stride of 0, an expanded dim, kept)."""
    order = sorted(range(real.dim()), key=lambda d: (real.stride(d), d))  # innermost first
    strides: list[Any] = [0] * real.dim()
    running: Any = 1
    for d in order:
        if real.stride(d) == 0 and real.shape[d] != 1:
            strides[d] = 0
            continue
        strides[d] = running
        running = running * sizes[d]
    fake = torch.empty_strided(sizes, strides, dtype=real.dtype, device=real.device)
    return fake.requires_grad_(real.requires_grad) if real.requires_grad else fake


def new_symbol(shape_env: ShapeEnv, name: str, hint: int) -> tuple[sympy.Symbol, torch.SymInt]:
    """A new dynamic symbol of ``shape_env`` for the case's symbol ``name`` at ``hint`` (its source
    a ``ConstantSource(name)``, which maps the env's symbol back to ``name``): the sympy symbol and
    its ``SymInt``."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic

    from .._compat import ConstantSource

    expr = shape_env.create_symbol(hint, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC)
    return expr, shape_env.create_symintnode(expr, hint=hint)


def symbolic_inputs(
    case: GraphCase, mode: FakeTensorMode | None = None, rank: int = 0
) -> tuple[FakeTensorMode, list[Any]]:
    """Fake inputs of ``case`` (rank ``rank``) with its symbolic sizes, in ``mode`` or a fresh
    ``FakeTensorMode`` with a fresh ``ShapeEnv``: one ``SymInt`` per :class:`Symbol`, its range
    constrained to ``[min, max]``, for each ``Sym`` placeholder, and each tensor input a fake tensor
    whose sizes are the expressions of :attr:`GraphCase.input_dims`. What a pass sees when
    torch.compile hands it the graph. Raises ``ValueError`` for a case without symbols."""
    if not case.symbols:
        raise ValueError(f"case={case!r} has no symbols (it was not drawn with dynamic=)")
    if mode is None:
        mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    by_name: dict[str, Any] = {}
    for symbol in case.symbols:
        expr, by_name[symbol.name] = new_symbol(mode.shape_env, symbol.name, symbol.hint)
        mode.shape_env.constrain_symbol_range(expr, compiler_min=symbol.min, compiler_max=symbol.max)
    fakes: list[Any] = []
    with mode:
        for value, dims in zip(case.inputs[rank], case.input_dims, strict=True):
            if isinstance(dims, str):
                fakes.append(by_name[dims])
            elif not isinstance(value, torch.Tensor):
                fakes.append(value)
            elif dims is None:
                fakes.append(fake_input(value, list(value.shape)))
            else:
                sizes = [
                    side if expr is None else evaluate_size(expr, by_name)
                    for side, expr in zip(value.shape, dims, strict=True)
                ]
                fakes.append(fake_input(value, sizes))
    return mode, fakes


def evaluate_size(expression: str, namespace: Mapping[str, Any]) -> Any:
    """``expression`` (a product of ints and symbol names, as :func:`symbolize` writes them) with the
    names bound to ``namespace``'s values (SymInts or ints). With ints only, any expression of the
    symbols (an index tensor's bound can be ``s0 - 1``) is evaluated."""
    parsed = sympy.sympify(expression)
    if all(isinstance(value, int) for value in namespace.values()):
        return int(parsed.subs({sympy.Symbol(name): value for name, value in namespace.items()}))
    result: Any = 1
    for factor in sympy.Mul.make_args(parsed):
        base, exponent = factor.as_base_exp()
        if isinstance(base, sympy.Symbol):
            for _ in range(int(exponent)):
                result = result * namespace[base.name]
        else:
            result = result * int(factor)
    return result


def allowed_sizes(
    guards: Sequence[sympy.Expr],
    names: Mapping[sympy.Symbol, str],
    hints: Mapping[str, int],
    name: str,
    sizes: Sequence[int],
) -> list[int]:
    """The sizes among ``sizes`` where every guard (sympy booleans over a ``ShapeEnv``'s symbols,
    ``[g.expr for g in shape_env.guards]``) holds with symbol ``name`` at that size and the others
    at their hints; ``names`` maps the env's symbols to the case's names."""
    guards = list(guards)
    allowed = []
    for size in sizes:
        values = {
            sym: sympy.Integer(size if case_name == name else hints[case_name]) for sym, case_name in names.items()
        }
        held = (guard.xreplace(values) for guard in guards)
        # a guard over symbols that are not the case's (none here) is not one of its sizes: it holds
        if all(value if value in (sympy.true, sympy.false) else True for value in held):
            allowed.append(size)
    return allowed


def written_size(size: Any, names: Mapping[sympy.Symbol, str]) -> str | None:
    if not isinstance(size, torch.SymInt):
        return None
    expr = size.node.expr
    if expr.is_number:
        return None
    return str(expr.xreplace({sym: sympy.Symbol(name, integer=True, positive=True) for sym, name in names.items()}))


def size_points(case: GraphCase) -> list[dict[str, int]]:
    """The size assignments the oracles run ``case`` at: the hints, then each symbol at each of its
    other :attr:`Symbol.sizes` with the others at their hints. ``[{}]`` for a static case."""
    if not case.symbols:
        return [{}]
    hints = {s.name: s.hint for s in case.symbols}
    points = [hints]
    for symbol in case.symbols:
        points.extend({**hints, symbol.name: size} for size in symbol.sizes if size != symbol.hint)
    return points


def _index_inputs(case: GraphCase) -> dict[int, str]:
    """Inputs used as indices into a symbolic dim: input position -> the dim's size expression."""
    index_args = {
        torch.ops.aten.gather.default: (2, 1),
        torch.ops.aten.index_select.default: (2, 1),
        torch.ops.aten.scatter.src: (2, 1),
        torch.ops.aten.scatter_add.default: (2, 1),
        torch.ops.aten.scatter.value: (2, 1),
        torch.ops.aten.embedding.default: (1, None),
        torch.ops.aten.index.Tensor: (1, None),  # a list of indices: the first indexes dim 0
        torch.ops.aten.index_put.default: (1, None),
        torch.ops.aten.index_put_.default: (1, None),
    }
    placeholders = case.gm.graph.find_nodes(op="placeholder")
    position = {node: i for i, node in enumerate(placeholders)}
    # the trace's ShapeEnv symbols (``s95``) by the case's names, read off the ``Sym`` placeholders
    names = {
        node.meta["val"].node.expr: node.name
        for node in placeholders[: len(case.symbols)]
        if isinstance(node.meta.get("val"), torch.SymInt)
    }
    found: dict[int, str] = {}
    for node in case.gm.graph.nodes:
        spec = index_args.get(node.target)
        if spec is None or len(node.args) <= spec[0]:
            continue
        index = node.args[spec[0]]
        if isinstance(index, (list, tuple)):
            index = index[0] if index else None
        if index not in position:
            continue
        source = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
        if not isinstance(source, torch.Tensor):
            continue
        dim = 0 if spec[1] is None else node.args[spec[1]] % max(source.dim(), 1)
        written = written_size(source.shape[dim], names)
        if written is not None:
            found[position[index]] = written
    return found


def inputs_at(case: GraphCase, sizes: Mapping[str, int], rank: int = 0) -> tuple[Any, ...]:
    """Rank ``rank``'s inputs of ``case`` with its symbols at ``sizes`` (name -> size): each ``Sym``
    input the size, each tensor input resized along its symbolic dims by repeating its drawn
    entries cyclically (``t.index_select(d, arange(n) % hint)``), an index tensor into a symbolic
    dim taken modulo that dim's new size. Raises ``ValueError`` for a size outside a symbol's range,
    or where an index tensor with entries would index a dim that is empty at ``sizes``."""
    for symbol in case.symbols:
        size = sizes.get(symbol.name, symbol.hint)
        if not symbol.min <= size <= symbol.max:
            raise ValueError(f"sizes={dict(sizes)!r}: {symbol.name}={size} is outside [{symbol.min}, {symbol.max}]")
    namespace = {s.name: sizes.get(s.name, s.hint) for s in case.symbols}
    index = _index_inputs(case)
    resized: list[Any] = []
    for i, (value, dims) in enumerate(zip(case.inputs[rank], case.input_dims, strict=True)):
        if isinstance(dims, str):
            resized.append(namespace[dims])
            continue
        if dims is not None and isinstance(value, torch.Tensor):
            for d, expr in enumerate(dims):
                if expr is not None:
                    n = evaluate_size(expr, namespace)
                    picks = (  # on the value's device: index_select takes no index from another device
                        torch.arange(n, device=value.device) % value.shape[d]
                        if value.shape[d]
                        else torch.zeros(0, dtype=torch.long, device=value.device)
                    )
                    value = value.index_select(d, picks)
            value = value.contiguous() if case.inputs[rank][i].is_contiguous() else value
        if i in index and isinstance(value, torch.Tensor):
            bound = evaluate_size(index[i], namespace)
            if bound == 0 and value.numel():
                raise ValueError(
                    f"sizes={dict(sizes)!r}: input {i} indexes a dim of size {index[i]} = 0 at these sizes"
                )
            value = value % max(bound, 1)
        resized.append(value)
    return tuple(resized)


def case_at(case: GraphCase, sizes: Mapping[str, int]) -> GraphCase:
    """``case`` run at ``sizes``: the same (symbolic) graph with every rank's inputs from
    :func:`inputs_at`, no symbols (a static case), its label naming the sizes."""
    inputs = [inputs_at(case, sizes, rank) for rank in range(case.tp_world)]
    where = ", ".join(f"{name}={size}" for name, size in sizes.items())
    return dataclasses.replace(case, inputs=inputs, symbols=(), input_dims=(), label=f"{case.label} at {where}")
