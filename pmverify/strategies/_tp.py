"""``tp_cases``: a single-rank case spread over a tensor-parallel world, one input tuple per rank.

Tensor parallelism runs the same per-rank graph on every rank (SPMD); only the values differ. Each
graph input gets a placement from ``torch.distributed.tensor`` (``Replicate()``: the same values on
every rank, as activations entering a column-parallel layer; ``Shard(dim)``: each rank holds its
own slice of a full tensor along ``dim``, as sharded weights or split activations). Rank 0 keeps the
drawn case's inputs; a sharded input gets fresh values of the same shape and dtype on every other
rank (no larger in magnitude than rank 0's, or 2), so the full tensor is the concatenation of the
rank slices along ``dim``. Nothing is filtered:
0 % of draws are rejected (tests/strategies/test_rejections.py).

A symbolic case (``GraphCase.symbols``) stays symbolic: the ranks are drawn for its concrete
source (:func:`~pmverify._shapes.symbolic.static_source`) and every rank gets the ``Sym`` inputs (the
hints) first; the graph is not traced again. ``Shard`` of a symbolic dim is allowed: every rank
holds ``s0`` rows of a full tensor of ``tp_world * s0`` (sequence parallelism); at another size each
rank's rows are resized alike (:func:`~pmverify._shapes.sizes.inputs_at`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch.distributed.tensor import Replicate, Shard

from .._case import GraphCase
from .._execution import inspectable
from .._shapes.symbolic import SymbolizeError, static_source
from .._validation import short_repr, validate_all_reduce, validate_strategy
from ._device import finished, on_cpu, validated
from ._drawn import validate_drawn_case
from ._dynamic import DYNAMIC_DIMS, symbolize_drawn, validate_dynamic
from ._public import Shown, public_call
from ._tensors import DEFAULT_BOUND, tensors, tp_sizes

__all__ = ["tp_cases", "Replicate", "Shard"]

Placements = Sequence[Replicate | Shard]


def _check_kinds(placements: Any) -> tuple[Any, ...]:
    """``placements`` must be a sequence of ``Replicate()`` / ``Shard(dim)``."""
    if isinstance(placements, (str, bytes)) or not isinstance(placements, Sequence):
        raise InvalidArgument(f"placements={placements!r} must be None, a sequence or a function of the case")
    for i, placement in enumerate(placements):
        if not isinstance(placement, (Replicate, Shard)):
            raise InvalidArgument(f"placements[{i}]={placement!r} must be Replicate() or Shard(dim)")
    return tuple(placements)


def _check_placements(placements: Any, inputs: Sequence[Any], where: str) -> tuple[Any, ...]:
    """``placements`` must also hold one entry per input, each ``Shard`` of a dim the input has."""
    placements = _check_kinds(placements)
    if len(placements) != len(inputs):
        raise InvalidArgument(
            f"placements={placements!r} holds {len(placements)} entries; {where} has {len(inputs)} inputs"
        )
    for i, (placement, value) in enumerate(zip(placements, inputs, strict=True)):
        if isinstance(placement, Shard) and (
            not isinstance(value, torch.Tensor) or not -value.dim() <= placement.dim < value.dim()
        ):
            raise InvalidArgument(f"placements[{i}]={placement!r} does not fit input {i}: {short_repr(value)}")
    return placements


def _drawn_placement(draw: Any, value: Any) -> Any:
    """Replicate (simplest) or Shard along a drawn dim, for a floating tensor input."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() == 0:
        return Replicate()
    if not draw(st.booleans()):
        return Replicate()
    return Shard(draw(st.integers(0, value.dim() - 1)))


def _magnitude(value: torch.Tensor) -> float | None:
    """The largest magnitude of a floating shard on another rank: rank 0's finite values', at least
    2, so that bounds a case's graph computed from rank 0's inputs (fx_graphs') hold on every rank
    (an inf or NaN rank 0 holds, a near miss's value say, is no bound)."""
    if not value.is_floating_point():
        return None
    magnitudes = inspectable(value).abs()
    finite = magnitudes[torch.isfinite(magnitudes)]
    return max(float(finite.max()) if finite.numel() else 0.0, DEFAULT_BOUND)


def _own_placements(given: Any, case: GraphCase) -> Any:
    """Placements given for a symbolic ``case``'s inputs, ``Sym`` inputs included, less those
    (``Replicate()`` each: an int is the same on every rank); ``given`` itself otherwise."""
    symbols = len(case.symbols)
    if symbols and _check_kinds(given) and len(given) == len(case.inputs[0]):
        for i, placement in enumerate(given[:symbols]):
            if not isinstance(placement, Replicate):
                raise InvalidArgument(f"placements[{i}]={placement!r}: the Sym input {case.input_dims[i]} is an int")
        return tuple(given)[symbols:]
    return given


@st.composite
def _tp_cases(
    draw: Any,
    cases: st.SearchStrategy,
    placements: Any,
    tp_world: st.SearchStrategy,
    dynamic: Any,
    all_reduce: Any,
    device: torch.device | None = None,
) -> GraphCase:
    drawn = draw(cases)
    validate_drawn_case("cases", drawn)
    if drawn.tp_world != 1:
        raise InvalidArgument(f"cases drew {drawn!r}; it must draw GraphCases with tp_world=1")
    drawn, drawn_on = on_cpu(drawn)
    return finished(_spread(draw, drawn, placements, tp_world, dynamic, all_reduce), device, drawn_on)


def _spread(
    draw: Any, drawn: GraphCase, placements: Any, tp_world: st.SearchStrategy, dynamic: Any, all_reduce: Any
) -> GraphCase:
    """The single-rank CPU case ``drawn`` spread over a drawn world."""
    case = static_source(drawn)
    world = draw(tp_world)
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise InvalidArgument(f"tp_world drew {world!r}; it must draw positive ints")
    rank0 = case.inputs[0]
    if placements is None:
        chosen = tuple(_drawn_placement(draw, value) for value in rank0)
    else:
        given = _own_placements(placements(drawn) if callable(placements) else placements, drawn)
        chosen = _check_placements(given, rank0, f"case {drawn.label!r}")
    ranks = [tuple(rank0)]
    for _ in range(1, world):
        ranks.append(
            tuple(
                draw(tensors(value.dtype, tuple(value.shape), max_magnitude=_magnitude(value)))
                if isinstance(placement, Shard)
                else (value.clone() if isinstance(value, torch.Tensor) else value)
                for value, placement in zip(rank0, chosen, strict=True)
            )
        )
    shown = ", ".join(repr(p) for p in chosen)
    label = f"{case.label} tp_world={world} [{shown}]"
    spread = dataclasses.replace(
        case, inputs=ranks, tp_world=world, placements=chosen, label=label, all_reduce=all_reduce or case.all_reduce
    )
    if drawn.symbols:  # the same symbolic graph on every rank, the Sym inputs first
        syms = drawn.inputs[0][: len(drawn.symbols)]
        return dataclasses.replace(
            drawn,
            inputs=[(*syms, *rank) for rank in ranks],
            tp_world=world,
            placements=(*[Replicate()] * len(syms), *chosen),
            label=label,
            source=spread,
            all_reduce=spread.all_reduce,
        )
    try:
        symbolic = symbolize_drawn(draw, spread, dynamic)
    except SymbolizeError as exc:  # a static size divisible by a hint (a flat view input of 88 entries)
        return dataclasses.replace(spread, label=f"{label} (static: {exc})")
    if symbolic.symbols:
        own = symbolic.placements[len(symbolic.symbols) :]
        symbolic = dataclasses.replace(symbolic, placements=(*[Replicate()] * len(symbolic.symbols), *own))
    return dataclasses.replace(symbolic, all_reduce=spread.all_reduce)


def tp_cases(
    cases: st.SearchStrategy[GraphCase],
    *,
    placements: Placements | Callable[[GraphCase], Placements] | None = None,
    tp_world: st.SearchStrategy[int] | None = None,
    dynamic: bool | str | Sequence[str] = False,
    all_reduce: Any = None,
    device: str | torch.device | None = None,
) -> st.SearchStrategy[GraphCase]:
    """Return a strategy for :class:`~pmverify.GraphCase` cases run by a tensor-parallel world:
    the drawn single-rank case's graph is the per-rank graph, with one input tuple per rank.

    - ``cases``: a strategy of cases with ``tp_world=1`` whose input shapes are per-rank shapes
      (e.g. ``planted(pattern, like(per_rank_example_inputs))``); rank 0 keeps its inputs.
    - ``placements``: one ``torch.distributed.tensor`` placement per graph input: ``Replicate()``
      (same values on every rank) or ``Shard(dim)`` (each rank its own slice of the full tensor
      along ``dim``, fresh values from :func:`tensors`); or a function of the drawn case returning
      them (cases with context inputs vary in length). Default: drawn per input, ``Replicate()``
      first; only floating tensors are sharded (index tensors keep their in-range values).
    - ``tp_world``: a strategy of world sizes (ranks), default :func:`tp_sizes` (1, 2, 4, 8).
    - ``dynamic``: a symbolic drawn case stays symbolic whatever this is (every rank gets its
      ``Sym`` inputs, the hints; ``placements`` given for it may hold a ``Replicate()`` for each, or
      leave them out); with ``True`` or dim names (``"tokens"``) a static drawn case whose inputs
      hold sizes at a symbol's hint (11, 13: e.g. drawn by ``like(..., dynamic=...)``) is made
      symbolic in them (:func:`pmverify._shapes.symbolic.symbolize`, one more size drawn per symbol; it
      stays static, its label saying why, where another input size is divisible by a hint);
      default False (it stays static). ``Shard`` of a symbolic dim gives every rank ``s0`` rows of
      a full tensor of ``tp_world * s0`` (sequence parallelism).
    - ``all_reduce``: the all-reduce op the drawn graphs hold, e.g. a project's own
      ``torch.ops.vllm.all_reduce.default`` (an ``OpOverload`` or its packet, schema
      ``(Tensor, str) -> Tensor``, functional: the tensor summed over the group named); recorded in
      ``GraphCase.all_reduce`` so that the oracles count its nodes as all-reduces. Default None:
      ``_c10d_functional.all_reduce`` + ``wait_tensor`` (always counted). The op runs as its
      project registered it, on every rank's thread of pmverify's world
      (:mod:`pmverify.distributed`, one default group named ``"0"``): its CPU kernel must reduce
      over that group (e.g. return ``wait_tensor(_c10d_functional.all_reduce(x, "sum", "0"))``,
      whatever the name), and a fake kernel (``register_fake``) lets ``planted`` trace it.
    - ``device``: the device of the cases (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a
      ``torch.device``; default None: the device ``cases`` drew on). The ranks are drawn on CPU
      (a case drawn elsewhere is copied to CPU first), then every rank's inputs are moved whole
      (:func:`pmverify.device.on_device`).

    The result keeps the graph, ground truth and ``pass_config`` of the drawn case and records the
    placements in ``GraphCase.placements``. Shrinks toward tp_world 1 and every input replicated.

    Raises ``hypothesis.errors.InvalidArgument`` for ``cases`` or ``tp_world`` not a strategy, or
    ``placements`` neither None, a sequence nor callable, ``dynamic`` not False, True, a dim name or
    a list of them, ``all_reduce`` neither None, ``_c10d_functional.all_reduce`` nor an op with schema
    ``(Tensor, str) -> Tensor``, ``device`` not a CPU or CUDA device; when drawing, for a case with
    ``tp_world != 1``, a world size below 1, and placements that do not fit the case's inputs
    (wrong count, ``Shard`` of a dim the input lacks, or of a non-tensor).

    Example::

        per_rank = planted(qk_norm_pattern, like((qkv, q_weight, k_weight), vary={"tokens": [(0, 0)]}))
        cases = tp_cases(per_rank, placements=lambda case: [Replicate()] * len(case.inputs[0]))
    """
    given_world = tp_world
    validate_strategy("cases", cases)
    if tp_world is None:
        tp_world = tp_sizes()
    validate_strategy("tp_world", tp_world)
    if placements is not None and not callable(placements):
        _check_kinds(placements)
    given_dynamic = dynamic
    dynamic = validate_dynamic("dynamic", dynamic, DYNAMIC_DIMS)
    op = validate_all_reduce("all_reduce", all_reduce)
    target = validated(device)
    drawn = _tp_cases(cases, placements, tp_world, dynamic, op, target)
    shown = None if all_reduce is None else Shown(f"torch.ops.{all_reduce}")
    given = dict(placements=placements, tp_world=given_world, dynamic=given_dynamic, all_reduce=shown, device=device)
    return public_call(tp_cases, drawn, cases, **given)
