"""The layer model both QK-norm case strategies build on (:mod:`.cases`, :mod:`.tp_cases`).

A case is planned as a sequence of planted layers. Each layer's activation comes from a
:class:`Source` (a fresh graph input, or the previous layer's outputs), goes through elementwise
context ops (:func:`apply_ops`), is normalised inside a ``torch.fx.traceback.annotate`` block marking
it as planted instance ``i``, and its outputs go through more context ops. The planned function is
run once eagerly to create the inputs (:class:`Inputs` hands them out in a fixed order) and traced
with ``torch._inductor.pattern_matcher.fwd_only`` (:func:`trace`); the annotated nodes are the
instances' ground truth (:func:`instance_nodes`).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pmverify import GraphCase
from pmverify.symbolic import HINTS, MIN_SIZE, symbolize

__all__ = [
    "EPS",
    "HEAD_DIMS",
    "ANNOTATION",
    "Source",
    "Inputs",
    "fill",
    "apply_ops",
    "source",
    "other_eps",
    "draw_layers",
    "draw_near_miss",
    "draw_context",
    "draw_max_tokens",
    "draw_plan",
    "MAX_PRE_OPS",
    "MAX_POST_OPS",
    "trace",
    "instance_nodes",
    "as_public_call",
    "TOKEN_HINT",
    "validate_dynamic",
    "validate_dynamic_tokens",
    "hint_free",
    "symbolize_tokens",
]

#: Norm eps values, simplest first.
EPS = (1e-6, 1e-5, 1e-8, 1e-2)
#: Head sizes in elements, simplest first; few values keep the pass's per-config pattern cache warm.
HEAD_DIMS = (4, 8, 6, 16, 5, 12, 32, 24)
#: Context ops at most before a norm (on its source) and after it (on each output).
MAX_PRE_OPS = 3
MAX_POST_OPS = 2
#: The ``torch.fx.traceback.annotate`` key that marks a planted instance's nodes.
ANNOTATION = "pmverify_instance"
#: The hint of the symbolic token count ``s0``: a dynamic case's planted layers are drawn with
#: T at it, and no static size of the case is a multiple of it (see :mod:`pmverify.symbolic`).
TOKEN_HINT = HINTS[0]
#: The dims ``dynamic=`` may name: the token count is the only size of a QK norm that varies in a
#: model (head sizes are the pass's config).
_DYNAMIC_DIMS = ("tokens",)


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a norm's input comes from: a fresh graph input, or the previous layer's outputs
    (``chain``: cat + tile + tanh); then ``pre`` elementwise ops (names from :func:`apply_ops`)."""

    chain: bool = False
    pre: tuple[str, ...] = ()


def fill(noise: torch.Tensor, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """A graph input of ``dtype`` from uniform ``noise`` in [0, 1): an activation (``kind="act"``)
    uniform in [-2, 2), a norm weight (any other kind) in [0.875, 1.125), like trained weights."""
    value = noise * 4 - 2 if kind == "act" else 1 + (noise - 0.5) * 0.25
    return value.to(dtype)


class Inputs:
    """Hands out graph inputs in a fixed order: creates them (from ``seed``, see :func:`fill`) or
    replays ``given`` (the traced function's arguments)."""

    def __init__(self, seed: int = 0, given: Sequence[torch.Tensor] | None = None) -> None:
        self.created: list[torch.Tensor] = []
        self._given = None if given is None else iter(given)
        self._generator = torch.Generator().manual_seed(seed)

    def take(self, kind: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """The next input: ``kind`` is ``"act"`` or ``"weight"``; ``shape`` in elements."""
        if self._given is not None:
            return next(self._given)
        value = fill(torch.rand(shape, generator=self._generator), kind, dtype)
        self.created.append(value)
        return value


_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "neg": torch.neg,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "abs": torch.abs,
    "exp_tanh": lambda x: torch.exp(torch.tanh(x)),
}


def apply_ops(x: torch.Tensor, ops: Sequence[str], dtype: torch.dtype, inputs: Inputs) -> torch.Tensor:
    """Apply elementwise context ``ops`` to ``x``, computed in the activation ``dtype``: a unary
    op (neg, tanh, sigmoid, abs, exp_tanh), ``add_input`` / ``mul_input`` (a second activation
    input of ``x``'s shape), ``add:<float>`` or ``mul:<float>``. Raises ``ValueError`` for another."""
    if ops and x.dtype != dtype:
        x = x.to(dtype)
    for op in ops:
        if op in _UNARY:
            x = _UNARY[op](x)
        elif op in ("add_input", "mul_input"):
            other = inputs.take("act", tuple(x.shape), x.dtype)
            x = x + other if op == "add_input" else x * other
        elif op.startswith("add:"):
            x = x + float(op[4:])
        elif op.startswith("mul:"):
            x = x * float(op[4:])
        else:
            raise ValueError(f"unknown context op {op!r}")
    return x


def source(
    src: Source, rows: int, width: int, dtype: torch.dtype, pool: list[torch.Tensor], inputs: Inputs
) -> torch.Tensor:
    """A contiguous ``[rows, width]`` activation of ``dtype`` for a norm or a qkv: chained from
    ``pool`` (the previous layer's outputs) when ``src.chain`` and there is one, else a fresh input;
    then ``src.pre``."""
    if src.chain and pool:
        parts = []
        for part in pool:
            part = part.to(dtype)
            if part.shape[0] != rows:  # after a "tokens" near miss: repeat or cut rows
                part = torch.cat([part] * math.ceil(rows / part.shape[0]), dim=0)[:rows]
            parts.append(part)
        total = sum(part.shape[-1] for part in parts)
        x = torch.cat(parts * math.ceil(width / total), dim=-1)
        if x.shape[-1] != width:
            x = x[:, :width]
        x = torch.tanh(x)  # an elementwise op: contiguous, and bounded whatever the previous layer gave
    else:
        x = inputs.take("act", (rows, width), dtype)
    return apply_ops(x, src.pre, dtype, inputs)


def other_eps(eps: float) -> list[float]:
    """The eps values of an ``"eps"`` near miss of a norm with ``eps``, simplest first: the other
    values of :data:`EPS`, then the next float up."""
    return [e for e in EPS if e != eps] + [math.nextafter(eps, math.inf)]


def draw_layers(
    draw: Any,
    min_instances: int,
    max_instances: int,
    layers: Callable[[bool, bool], st.SearchStrategy],
    must_match: Callable[[Any], bool],
) -> list[Any]:
    """Draw ``min_instances``..``max_instances`` planted layers, one more while ``draw(booleans())``
    says so (shrinks toward fewer). ``layers(guard, chain)`` is the strategy of one layer: ``guard``
    when it is the last and no earlier layer holds a must-match instance (``must_match(layer)``),
    so that every case keeps one; ``chain`` when it may take the previous layer's outputs."""
    drawn: list[Any] = []
    any_must_match = False
    while True:
        count = len(drawn) + 1
        more = count < min_instances or (count < max_instances and draw(st.booleans()))
        layer = draw(layers(not more and not any_must_match, bool(drawn)))
        any_must_match = any_must_match or must_match(layer)
        drawn.append(layer)
        if not more:
            return drawn


def draw_near_miss(draw: Any, layer: Any, options: dict[str, Sequence[Any]]) -> Any:
    """``layer``, or one of its near-miss variants ``options`` (kind -> variants, simplest first).
    One draw for the kind (None, no near miss, first), one for the variant: every kind costs the
    same number of choices, so shrinking prefers the earlier kinds rather than those with fewer
    variants."""
    kind = draw(st.sampled_from([None, *options])) if options else None
    return layer if kind is None else options[kind][draw(st.integers(0, len(options[kind]) - 1))]


def draw_context(
    draw: Any, ops: Sequence[str], *, chain: bool, sources: int, outputs: int
) -> tuple[tuple[Source, ...], tuple[tuple[str, ...], ...]]:
    """A layer's context: ``sources`` :class:`Source` (each chained from the previous layer when
    ``chain`` allows it and a boolean says so, then up to :data:`MAX_PRE_OPS` of ``ops``), then up
    to :data:`MAX_POST_OPS` of ``ops`` on each of ``outputs`` outputs; shrinks toward none."""
    drawn = tuple(
        Source(chain and draw(st.booleans()), tuple(draw(st.lists(st.sampled_from(ops), max_size=MAX_PRE_OPS))))
        for _ in range(sources)
    )
    post = tuple(tuple(draw(st.lists(st.sampled_from(ops), max_size=MAX_POST_OPS))) for _ in range(outputs))
    return drawn, post


def draw_max_tokens(draw: Any, min_tokens: int, max_tokens: int, dynamic: bool = False) -> int:
    """A drawn config's ``max_tokens``: the strategy's ``max_tokens``, or (leaving room for
    "tokens" near misses) the middle of [``min_tokens``, ``max_tokens``]; with ``dynamic`` the
    middle of [:data:`TOKEN_HINT`, ``max_tokens``] (the symbolic T is drawn at the hint and must be
    fused)."""
    middle = (max(min_tokens, TOKEN_HINT) if dynamic else min_tokens) + max_tokens
    middle //= 2
    return draw(st.sampled_from(list(dict.fromkeys((max_tokens, middle)))))


def draw_plan(
    draw: Any,
    spec: Any,
    max_tokens: int,
    layers: Callable[[int, bool, bool], st.SearchStrategy],
    must_match: Callable[[Any], bool],
) -> tuple[list[Any], int]:
    """``(layers, seed)`` of a case: T drawn from ``spec.min_tokens`` to ``min(spec.max_tokens,
    max_tokens)`` (the config's), or :data:`TOKEN_HINT` when ``spec.dynamic``; the layers by :func:`draw_layers` (``layers(T, guard, chain)``
    is the strategy of one), then the inputs' seed."""
    if getattr(spec, "dynamic", False):
        tokens = TOKEN_HINT  # symbolic: drawn at the hint, its other sizes drawn by symbolize_tokens
    else:
        tokens = draw(st.integers(spec.min_tokens, min(spec.max_tokens, max_tokens)))
    drawn = draw_layers(
        draw,
        spec.min_instances,
        spec.max_instances,
        lambda guard, chain: layers(tokens, guard, chain),
        must_match,
    )
    return drawn, draw(st.integers(0, 2**32 - 1))


def trace(program: Callable[..., Any], args: Sequence[torch.Tensor], mode: Any = None) -> torch.fx.GraphModule:
    """``program`` traced on ``args`` with ``fwd_only`` (the tracer ``register_replacement`` uses),
    inside a tracing context holding ``mode`` (a ``FakeTensorMode``; default a new one).

    Why the context: ``fwd_only`` traces in real mode, where make_fx builds a new FakeTensorMode for
    the meta["val"] of every node unless one is found in the tracing context; providing one halves
    the tracing time and leaves the graph unchanged."""
    from torch._guards import TracingContext, tracing
    from torch._inductor.pattern_matcher import fwd_only
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = mode if mode is not None else FakeTensorMode(allow_fallback_kernels=True)
    with tracing(TracingContext(mode)):
        return fwd_only(program, args)


def instance_nodes(gm: torch.fx.GraphModule) -> dict[int, list[str]]:
    """The names of the nodes of each planted instance of ``gm`` (by :data:`ANNOTATION` id), in
    graph order; placeholders and the output excluded."""
    by_instance: dict[int, list[str]] = {}
    for node in gm.graph.nodes:
        instance = node.meta.get("custom", {}).get(ANNOTATION)
        if instance is not None and node.op not in ("placeholder", "output"):
            by_instance.setdefault(instance, []).append(node.name)
    return by_instance


def as_public_call(
    public: Callable[..., Any], arguments: dict[str, Any], body: Callable[[Any], Any]
) -> st.SearchStrategy:
    """A strategy that draws ``body(draw)`` and whose repr is the call of ``public`` with the
    ``arguments`` it was given (those that are not its defaults): ``qk_norm_cases(max_instances=3)``,
    not a private ``_cases(spec=...)``. The repr shows in Hypothesis' reports and keys the example
    database, so it must not change with the implementation."""
    parameters = inspect.signature(public).parameters
    shown = {name: value for name, value in arguments.items() if value is not parameters[name].default}

    def draw_case(draw: Any, **_arguments: Any) -> Any:
        return body(draw)

    draw_case.__name__ = draw_case.__qualname__ = public.__name__
    return st.composite(draw_case)(**shown)


# ------------------------------------------------------------------------------------------ dynamic


def validate_dynamic(dynamic: Any) -> bool:
    """The canonical form of a QK-norm strategy's ``dynamic=`` argument: ``False`` (static sizes),
    or ``True`` for ``True``, ``"tokens"`` or a sequence of dim names that is ``("tokens",)``.
    Raises ``InvalidArgument`` naming ``dynamic`` and its value for anything else."""
    if isinstance(dynamic, bool):
        return dynamic
    names = (dynamic,) if isinstance(dynamic, str) else dynamic
    if isinstance(names, Sequence) and names and all(isinstance(n, str) for n in names):
        if set(names) <= set(_DYNAMIC_DIMS):
            return True
    raise InvalidArgument(
        f"dynamic={dynamic!r} must be False, True or {_DYNAMIC_DIMS[0]!r}: the token count is the only "
        "dim of a QK norm that may be symbolic"
    )


def validate_dynamic_tokens(min_tokens: int, max_tokens: int, config: Any) -> None:
    """Raise ``InvalidArgument`` unless a dynamic case can be drawn: T is drawn at
    :data:`TOKEN_HINT`, which must lie in [``min_tokens``, ``max_tokens``] and within
    ``config.max_tokens`` (a symbolic T must be fused), and no size of ``config`` (q, kv, qkv
    widths) may be a multiple of it."""
    if not min_tokens <= TOKEN_HINT <= max_tokens:
        raise InvalidArgument(
            f"min_tokens={min_tokens} and max_tokens={max_tokens} with dynamic=True: symbolic cases are drawn "
            f"at T={TOKEN_HINT} (the hint of s0), which must lie between them"
        )
    if config is None:
        return
    if config.max_tokens < TOKEN_HINT:
        raise InvalidArgument(
            f"config.max_tokens={config.max_tokens} with dynamic=True: symbolic cases are drawn at "
            f"T={TOKEN_HINT}, which the pass must fuse"
        )
    for name in ("q_size", "kv_size", "qkv_size"):
        if getattr(config, name) % TOKEN_HINT == 0:
            raise InvalidArgument(
                f"config.{name}={getattr(config, name)} with dynamic=True: a static size divisible by the "
                f"token hint {TOKEN_HINT} cannot be told from the symbolic token count"
            )


def hint_free(*sizes: int) -> bool:
    """Whether no size is a multiple of :data:`TOKEN_HINT` (what a static size of a dynamic case
    must be, see :func:`pmverify.symbolize`)."""
    return all(size % TOKEN_HINT for size in sizes)


def symbolize_tokens(draw: Any, case: GraphCase, min_tokens: int) -> GraphCase:
    """``case`` (drawn with T at :data:`TOKEN_HINT`) with its token count symbolic: traced again
    by :func:`pmverify.symbolize` (one ``Sym`` placeholder ``s0``, every dim of
    :data:`TOKEN_HINT` rows ``s0``), the range of ``s0`` what the trace's guards allow from the
    strategy's ``min_tokens`` up (past the config's ``max_tokens`` too: there the pass's
    ``is_applicable_for_range`` must decline, which the semantics and compile_ranges oracles
    check), its sizes the hint, the range's ends and one drawn size. Raises ``ValueError`` when the
    trace specialised T (a strategy bug: no size of a dynamic case's plan is a multiple of the hint
    but T)."""
    symbolic = symbolize(case, {"s0": TOKEN_HINT})
    if not symbolic.symbols:
        raise ValueError(f"the token count of {case.label!r} was specialised when traced symbolically")
    (symbol,) = symbolic.symbols
    low, high = max(symbol.min, min_tokens, MIN_SIZE), symbol.max
    drawn = draw(st.integers(low, high))
    symbol = dataclasses.replace(symbol, min=low, max=high, sizes=tuple(dict.fromkeys((symbol.hint, low, high, drawn))))
    label = f"{case.label} s0={TOKEN_HINT} in [{low}, {high}]"
    return dataclasses.replace(symbolic, symbols=(symbol,), label=label)
