"""``like``: inputs shaped like a pattern's example inputs, with declared dimensions varying.

``register_replacement(search_fn, replace_fn, example_inputs, ...)`` traces its pattern on example
inputs; a pass that uses it should rewrite graphs of other sizes too. :func:`like` draws input tuples
with the example's dtypes and ranks, and sizes drawn along the dimensions the caller names, keeping
the sizes that must stay equal equal (like ``torch.export``'s ``Dim``).

Nothing is filtered: 0 % of draws are rejected (tests/strategies/test_rejections.py). Strided
example tensors (permuted, padded, expanded) are drawn in their layout family (:func:`layout_strides`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._validation import short_repr, validate_int, validate_optional_int, validate_order
from ._broadcast import BroadcastForm, allows, apply_shape, candidate_forms, validate_broadcast, validate_position
from ._device import tuples_on, validated
from ._like_dynamic import LikeDynamic, dynamic_spec, hinted_symbols, not_at_hints
from ._public import public_call
from ._scales import scale_tensors
from ._tensors import TENSOR_DTYPES, tensors

__all__ = ["like", "Dim", "TensorLike", "StridedLike"]

_DEFAULT_MAX_SIDE = 16


@dataclasses.dataclass(frozen=True)
class Dim:
    """A named size that varies between ``min`` and ``max`` elements (both inclusive), as
    ``torch.export.Dim``; None takes :func:`like`'s ``min_side`` / ``max_side``.

    Raises ``hypothesis.errors.InvalidArgument`` for an empty or non-str ``name``, a bound that is
    not an int or is negative, and ``min > max``.
    """

    name: str
    min: int | None = None
    max: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgument(f"Dim name={self.name!r} must be a non-empty str")
        validate_optional_int(f"Dim({self.name!r}).min", self.min, minimum=0)
        validate_optional_int(f"Dim({self.name!r}).max", self.max, minimum=0)
        validate_order(f"Dim({self.name!r}).min", self.min, f"Dim({self.name!r}).max", self.max)


@dataclasses.dataclass(frozen=True)
class Symbol:
    name: str
    low: int
    high: int
    positions: tuple[tuple[int, int], ...]  # (input index, non-negative dim)


def _duck(example: Sequence[Any]) -> dict[Dim, list[tuple[int, int]]]:
    """Duck sizing, as torch.compile's ``ShapeEnv``: one symbol per distinct size above 1, drawn
    from 2 up (ShapeEnv specialises sizes 0 and 1, and a trace may change shape there)."""
    vary: dict[Dim, list[tuple[int, int]]] = {}
    for i, item in enumerate(example):
        if isinstance(item, torch.Tensor):
            for d, size in enumerate(item.shape):
                if size > 1:
                    vary.setdefault(Dim(f"s{size}", min=2), []).append((i, d))
    return vary


def _positions(name: str, value: Any, example: Sequence[Any]) -> tuple[tuple[int, int], ...]:
    """Validate the positions of symbol ``name``; return them with non-negative dims."""
    where = f"vary[{name!r}]={value!r}"
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise InvalidArgument(f"{where} must be a non-empty list of (input index, dim) pairs")
    positions = [validate_position(where, position, example) for position in value]
    sizes = {example[i].shape[d] for i, d in positions}
    if len(sizes) > 1:
        raise InvalidArgument(f"{where} ties dims of different sizes {sorted(sizes)} in example_inputs")
    return tuple(positions)


def _symbols(example: Sequence[Any], vary: Any, min_side: int, max_side: int) -> tuple[Symbol, ...]:
    if vary is None:
        return ()
    if isinstance(vary, str):
        if vary != "duck":
            raise InvalidArgument(f"vary={vary!r} must be None, 'duck', or a mapping of names (or Dims) to positions")
        vary = _duck(example)
    if not isinstance(vary, Mapping):
        raise InvalidArgument(f"vary={vary!r} must be None, 'duck', or a mapping of names (or Dims) to positions")
    symbols: list[Symbol] = []
    owner: dict[tuple[int, int], str] = {}
    for key, value in vary.items():
        dim = Dim(key) if isinstance(key, str) else key
        if not isinstance(dim, Dim):
            raise InvalidArgument(f"vary key {key!r} must be a str or a Dim")
        if any(symbol.name == dim.name for symbol in symbols):
            raise InvalidArgument(f"vary names {dim.name!r} twice")
        low = min_side if dim.min is None else dim.min
        high = max_side if dim.max is None else dim.max
        validate_order(f"{dim.name} min", low, f"{dim.name} max", high)
        positions = _positions(dim.name, value, example)
        for position in positions:
            if position in owner:
                raise InvalidArgument(f"position {position!r} is in both {owner[position]!r} and {dim.name!r}")
            owner[position] = dim.name
        symbols.append(Symbol(dim.name, low, high, positions))
    return tuple(symbols)


def layout_strides(
    example_shape: Sequence[int], example_stride: Sequence[int], shape: Sequence[int]
) -> tuple[int, ...]:
    """The strides of a tensor of ``shape`` in the layout family of one of ``example_shape`` and
    ``example_stride``: its dims in the example's stride order (innermost first), each stride the
    dense stride at ``shape`` times the example's ratio to its own dense stride, plus the remainder
    (a gap between rows, a step of 2 in the innermost dim), and stride 0 where the example is
    expanded (stride 0 along a dim of size above 1). Dims of example size 0 or 1 go outermost,
    dense. At the example's own sizes these are the example's strides (size-1 dims aside)."""
    rank = len(shape)
    expanded = {d for d in range(rank) if example_stride[d] == 0 and example_shape[d] > 1}
    ordered = sorted(
        (d for d in range(rank) if d not in expanded and example_shape[d] > 1),
        key=lambda d: (example_stride[d], -d),
    )
    ordered += sorted((d for d in range(rank) if example_shape[d] <= 1), reverse=True)
    strides = [0] * rank
    example_dense = dense = 1
    for d in ordered:
        if example_shape[d] > 1:
            ratio, extra = divmod(example_stride[d], example_dense)
            strides[d] = dense * ratio + extra if ratio else example_stride[d]
        else:
            strides[d] = dense
        example_dense = (
            max(example_dense, example_stride[d] * example_shape[d]) if example_shape[d] > 1 else example_dense
        )
        dense = max(dense, strides[d] * shape[d])
    return tuple(strides)


def _strided(values: torch.Tensor, shape: tuple[int, ...], strides: tuple[int, ...]) -> torch.Tensor:
    """``values`` (contiguous; size 1 along the expanded dims) laid out with ``strides`` and expanded
    to ``shape``: a zero-filled storage just large enough, the values copied in, then ``expand``."""
    base = tuple(1 if stride == 0 else size for size, stride in zip(shape, strides, strict=True))
    base_strides = tuple(stride or 1 for stride in strides)
    length = (
        1 + sum((size - 1) * stride for size, stride in zip(base, base_strides, strict=True)) if values.numel() else 0
    )
    out = torch.zeros(length, dtype=values.dtype).as_strided(base, base_strides)
    out.copy_(values.reshape(base))
    return out.expand(shape)


@dataclasses.dataclass(frozen=True)
class TensorLike:
    """What :func:`like` keeps of a contiguous example tensor: its shape, dtype and whether it
    requires grad (a ``joint_fwd_bwd`` trace differentiates those inputs only: a floating tensor
    only), never its values (the strategy's repr keys the example database: ``torch.empty`` garbage
    must not enter it)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    requires_grad: bool = False

    def __repr__(self) -> str:
        stride = self.strides_at(self.shape)
        layout = "" if stride is None else f"@stride{list(stride)}"
        grad = ":requires_grad" if self.requires_grad else ""
        return f"tensor{list(self.shape)}:{str(self.dtype).removeprefix('torch.')}{layout}{grad}"

    @classmethod
    def of(cls, value: Any) -> Any:
        """The description of a tensor (:class:`StridedLike` for a non-contiguous one); any other
        value as it is."""
        if not isinstance(value, torch.Tensor):
            return value
        grad = bool(value.requires_grad and value.is_floating_point())
        if value.is_contiguous():
            return TensorLike(tuple(value.shape), value.dtype, grad)
        return StridedLike(tuple(value.shape), value.dtype, grad, tuple(value.stride()))

    def strides_at(self, shape: Sequence[int]) -> tuple[int, ...] | None:
        """The strides of this layout at ``shape`` (None: contiguous)."""
        return None

    def drawn_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The shape whose values are drawn for a tensor of ``shape``: 1 along the dims this layout
        expands (``expand`` reads one value there), ``shape`` elsewhere."""
        strides = self.strides_at(shape)
        return (
            tuple(shape)
            if strides is None
            else tuple(1 if st == 0 else n for n, st in zip(shape, strides, strict=True))
        )

    def laid_out(self, values: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        """``values`` (contiguous, of :meth:`drawn_shape`) as a tensor of ``shape`` in this layout,
        requiring grad where the example does."""
        strides = self.strides_at(shape)
        out = values if strides is None else _strided(values, tuple(shape), strides)
        return out.requires_grad_(self.requires_grad)

    def zeros(self) -> torch.Tensor:
        return self.laid_out(torch.zeros(self.drawn_shape(self.shape), dtype=self.dtype), self.shape)

    def resized(self, shape: Sequence[int]) -> TensorLike:
        """This description at another ``shape`` of the same rank, in the same layout family."""
        return TensorLike(tuple(shape), self.dtype, self.requires_grad)


@dataclasses.dataclass(frozen=True, repr=False)
class StridedLike(TensorLike):
    """A non-contiguous example tensor: also its strides (its layout family, :func:`layout_strides`)."""

    stride: tuple[int, ...] = ()

    def strides_at(self, shape: Sequence[int]) -> tuple[int, ...] | None:
        return layout_strides(self.shape, self.stride, shape)

    def resized(self, shape: Sequence[int]) -> TensorLike:
        return StridedLike(tuple(shape), self.dtype, self.requires_grad, layout_strides(self.shape, self.stride, shape))


def _validate_dtypes(dtypes: Any) -> tuple[torch.dtype, ...]:
    where = f"dtypes={dtypes!r}"
    if isinstance(dtypes, (str, bytes, torch.dtype)) or not isinstance(dtypes, Sequence) or not dtypes:
        raise InvalidArgument(f"{where} must be a non-empty list of floating dtypes")
    for dtype in dtypes:
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point or dtype not in TENSOR_DTYPES:
            raise InvalidArgument(f"{where} holds {dtype!r}, not a floating dtype tensors() draws")
    return tuple(dict.fromkeys(dtypes))


def _like_in_dtypes(
    example_inputs: Sequence[Any], dtypes: tuple[torch.dtype, ...], options: dict, broadcast: Any, pattern: Any
) -> st.SearchStrategy[tuple[Any, ...]]:
    """:func:`like` with ``dtypes``: one branch per dtype (the floating example tensors cast to it),
    keeping what :func:`planted` reads: the example inputs as given and the hook that gives the
    search function to every branch."""

    def branches(search: Any) -> list[st.SearchStrategy]:
        return [
            like(
                [t.to(d) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in example_inputs],
                broadcast=broadcast,
                pattern=search,
                **options,
            )
            for d in dtypes
        ]

    first = branches(pattern)  # validates every argument now, in each dtype
    strategy = public_call(
        like,
        st.one_of(first),
        tuple(map(TensorLike.of, example_inputs)),
        **options,
        broadcast=broadcast,
        pattern=pattern,
        dtypes=list(dtypes),
    )
    strategy.pmverify_example_inputs = tuple(example_inputs)
    if all(hasattr(b, "pmverify_with_pattern") for b in first):
        strategy.pmverify_with_pattern = lambda search: like(
            example_inputs, **options, broadcast=broadcast, pattern=search, dtypes=list(dtypes)
        )
    return strategy


class _Broadcasts:
    """The broadcast forms :func:`like` may draw (:mod:`._broadcast`): those at the named
    ``positions`` (None: every dim of a contiguous example tensor), where ``pattern`` (when known)
    runs on them at the example's sizes; found on first use, as that runs the pattern."""

    def __init__(self, described: tuple[Any, ...], positions: frozenset[tuple[int, int]] | None, pattern: Any) -> None:
        self.described, self.positions, self.pattern = described, positions, pattern
        self._forms: tuple[BroadcastForm, ...] | None = None

    def forms(self) -> tuple[BroadcastForm, ...]:
        if self._forms is None:
            forms = candidate_forms(self.described, self.positions)
            if self.pattern is not None:
                shapes = {i: item.shape for i, item in enumerate(self.described) if isinstance(item, TensorLike)}
                if not getattr(self.pattern, "pmverify_from_planted", False):
                    self._check_runs(shapes)
                forms = tuple(form for form in forms if self.runs(form, shapes))
            self._forms = forms
        return self._forms

    def _zeros(self, shapes: Mapping[int, Sequence[int]]) -> tuple[Any, ...]:
        """The example tuple at ``shapes``: zeros for its tensors, its other items as they are."""
        return tuple(
            torch.zeros(tuple(shapes[i]), dtype=item.dtype) if isinstance(item, TensorLike) else item
            for i, item in enumerate(self.described)
        )

    def _check_runs(self, shapes: Mapping[int, Sequence[int]]) -> None:
        """InvalidArgument when the pattern raises on the example inputs themselves (zeros): no
        broadcast form could ever be drawn, silently (a pattern taking a scalar the tuple lacks)."""
        plain = self._zeros(shapes)
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                self.pattern(*plain)
        except Exception as exc:  # noqa: BLE001 - whatever it raises, said in the error
            raise InvalidArgument(
                f"like(pattern={self.pattern!r}) raises on example_inputs ({type(exc).__name__}: {exc}); "
                "give a function of the drawn tuple (functools.partial fixes a scalar the tuple lacks), "
                "or broadcast=False"
            ) from exc

    def runs(self, form: BroadcastForm, shapes: Mapping[int, Sequence[int]]) -> bool:
        """Whether the pattern (if any) broadcasts input ``form.index`` in ``form`` at ``shapes``."""
        if self.pattern is None:
            return True
        plain = self._zeros(shapes)
        formed = list(plain)
        shape, values = apply_shape(form, shapes[form.index])
        formed[form.index] = torch.zeros(values, dtype=plain[form.index].dtype).expand(shape)
        return allows(self.pattern, plain, formed)

    def __repr__(self) -> str:
        return f"broadcasts({self.positions!r}, {self.pattern!r})"


#: One draw in this many is a broadcast form, where the example allows one.
_BROADCAST_SHARE = 4


def _draw_form(draw: Any, broadcasts: _Broadcasts | None, shapes: Mapping[int, Sequence[int]]) -> BroadcastForm | None:
    """The broadcast form of this draw (one draw in :data:`_BROADCAST_SHARE`; shrinks to none),
    kept where the pattern broadcasts it at the drawn sizes too."""
    forms = () if broadcasts is None else broadcasts.forms()
    if not forms or draw(st.integers(0, _BROADCAST_SHARE - 1)) < _BROADCAST_SHARE - 1:
        return None
    form = draw(st.sampled_from(forms))
    return form if broadcasts.runs(form, shapes) else None


@st.composite
def _inputs(
    draw: Any,
    example: tuple[Any, ...],
    symbols: tuple[Symbol, ...],
    dynamic: LikeDynamic | None = None,
    fixed: bool = False,
    scales: frozenset[int] = frozenset(),
    broadcasts: _Broadcasts | None = None,
) -> tuple[Any, ...]:
    shapes = {i: list(item.shape) for i, item in enumerate(example) if isinstance(item, TensorLike)}
    hinted = hinted_symbols(draw, dynamic)
    for symbol in symbols:
        if symbol.name in hinted:
            size = hinted[symbol.name]
        elif fixed:
            continue  # vary=None: the example's size
        elif dynamic is None:
            size = draw(st.integers(symbol.low, symbol.high))
        else:
            size = draw(st.sampled_from(not_at_hints(symbol.low, symbol.high)))
        for index, dim in symbol.positions:
            shapes[index][dim] = size
    form = _draw_form(draw, broadcasts, shapes)
    drawn = []
    for i, item in enumerate(example):
        if not isinstance(item, TensorLike):
            drawn.append(item)
            continue
        values = scale_tensors if i in scales else tensors
        if form is not None and form.index == i:
            shape, value_shape = apply_shape(form, shapes[i])
            tensor = draw(values(item.dtype, value_shape)).expand(shape).requires_grad_(item.requires_grad)
            tensor.pmverify_broadcast = form.kind  # planted's ground truth reads it
            drawn.append(tensor)
        else:
            drawn.append(item.laid_out(draw(values(item.dtype, item.drawn_shape(shapes[i]))), shapes[i]))
    return tuple(drawn)


def _scales_spec(example: tuple[Any, ...], scales: Any) -> frozenset[int]:
    """Validate ``scales`` (positions of floating example tensors); return them as a set."""
    if isinstance(scales, (str, bytes)) or not isinstance(scales, Sequence):
        raise InvalidArgument(f"scales={scales!r} must be a sequence of input positions")
    for position in scales:
        validate_int(f"scales={tuple(scales)!r}: position", position, 0, len(example) - 1)
        item = example[position]
        if not isinstance(item, torch.Tensor) or not item.is_floating_point():
            raise InvalidArgument(
                f"scales={tuple(scales)!r}: example_inputs[{position}]={short_repr(item)} is not a floating tensor"
            )
    return frozenset(scales)


def like(
    example_inputs: Sequence[Any],
    *,
    vary: Mapping[str | Dim, Sequence[tuple[int, int]]] | str | None = None,
    min_side: int = 1,
    max_side: int = _DEFAULT_MAX_SIDE,
    dynamic: bool | str | Sequence[str] = False,
    scales: Sequence[int] = (),
    broadcast: Sequence[tuple[int, int]] | bool | None = None,
    pattern: Any = None,
    dtypes: Sequence[torch.dtype] | None = None,
    device: str | torch.device | None = None,
) -> st.SearchStrategy[tuple[Any, ...]]:
    """Return a strategy for input tuples like ``example_inputs``: the same length, dtypes and
    ranks, sizes drawn along the dimensions ``vary`` names, values from
    :func:`~pmverify.strategies.tensors` (CPU; floats at scales 2**-24 .. 2**16 per tensor, with
    zero, all-equal, tiny and outlier rows; ints in [0, 8)), in the layout family of each example
    tensor: contiguous for a contiguous one; for a permuted, padded (``empty_strided``) or expanded
    one, its stride order, the ratio of each stride to the dense one (gaps) and its stride-0 dims, at
    the drawn sizes (at the example's sizes, its strides; the storage offset is 0, gaps hold zeros).
    Inductor's tracer emits another graph for another layout (``matmul`` copies a permuted operand
    only where a view cannot express it), so a pattern traced on strided examples matches strided
    inputs only.
    A floating tensor is a leaf that requires grad where the example's does (a ``joint_fwd_bwd``
    trace differentiates those only).

    - ``example_inputs``: a tuple or list of tensors and other items (Python scalars...), as given to
      ``register_replacement``. Items that are not tensors are passed through unchanged.
    - ``vary``: which sizes vary; a dim that no symbol names keeps the example's size.

      * ``None`` (default): nothing varies; only values are drawn. Example inputs of a pattern often
        encode relations other than equality (split sizes, head counts), so varying is opt-in.
      * a mapping from a symbol to the positions it sizes, each an ``(input index, dim)`` pair
        (negative dims count from the end). A symbol is a name (sizes ``min_side`` .. ``max_side``)
        or a :class:`Dim` with its own bounds. All positions of one symbol get the same drawn size.
      * ``"duck"``: duck sizing, as torch.compile's ``ShapeEnv`` does it: every dim of size above 1
        varies (from 2 to ``max_side``), dims with equal example sizes together; sizes 0 and 1 stay.

    - ``min_side`` / ``max_side``: default bounds on a symbol's size, in elements (default 1..16).
      At size 1 (or 0) Inductor's tracer may emit another graph (``x @ w`` with a contracted size of
      1 traces as a broadcasting ``mul``); :func:`planted` marks such instances ``must_match=None``.

    - ``dynamic``: inputs for a symbolic case (see :func:`~pmverify.strategies.fx_graphs`). ``like``
      draws input tuples, not cases: with ``dynamic`` some symbols are drawn *at a hint* (11, then
      13), and the case strategy that consumes the inputs (``planted(..., dynamic=...)``) makes every
      size at a hint symbolic (duck sizing by the hint's value). ``False`` (default): nothing at a
      hint, drawn exactly as without it. A symbol name or list of names of ``vary`` (``"tokens"``
      for ``vary={"tokens": [(0, 0)]}``): those symbols always at a hint (``"tokens"`` at 11, the
      others in order; at most two; each one's bounds must hold 11 and 13). ``True``: each symbol
      whose bounds hold the hints is drawn at one or not (static first), two at most; with
      ``vary=None``, each duck group (dims of equal example size above 1) is, and the others keep
      the example's sizes. A symbol drawn static then takes no size a hint divides.

    - ``scales``: positions of floating example tensors that are quantization scales (default
      none): drawn positive and finite (:func:`~pmverify.strategies._scales.scale_tensors`: one
      power of two 2**-8 .. 2**4 everywhere, 1 first, or each element log-uniform in that range),
      never 0 (a zero scale makes the float64 reference NaN: a void case). ``planted`` of a
      recorded rewrite finds them itself (:func:`~pmverify.strategies._scales.scale_positions`).

    - ``broadcast``: which broadcast forms are drawn (:mod:`._broadcast`), one draw in four, one
      input in one form: a size-1 dim where the example's is above 1 (``w[1]``, ``y[T, 1]``), a
      missing leading dim (``w`` 0-d, ``y[H]`` for ``y[T, H]``), or stride 0 along a dim (an expanded
      input, its size kept); contiguous example tensors only, and only where ``pattern`` runs on the
      form and its outputs keep their shapes and dtypes, none stride 0 (it broadcasts that input), checked on zeros
      at the example's sizes and again at each draw's. ``None`` (default): every position, when the
      pattern is known (``pattern=``, or :func:`planted` consuming these inputs gives its search
      function), else none; a sequence of ``(input index, dim)`` pairs: those positions only (a
      missing leading dim where the dim is 0), drawn without a check when no pattern is known;
      ``False``: none. Not with ``dynamic``. :func:`planted` records a plain pattern's instance
      in a broadcast form ``must_match=None, reason="broadcast"``.
    - ``pattern``: the search function the inputs are for (it takes the drawn tuple), to find the
      broadcast forms; default None. It must run on ``example_inputs`` (a pattern taking a scalar
      the tuple lacks: ``functools.partial(rms_pattern, eps=1e-6)``), else InvalidArgument when the
      first tuple is drawn.
    - ``dtypes``: the floating dtypes your users run (``[torch.float32, torch.bfloat16]``): each
      tuple is drawn with every floating example tensor cast to one of them, the first shrinking
      simplest; integer and bool tensors keep theirs. Default None: the example's dtypes. Unlike
      ``st.one_of(like(...), like(...))`` it keeps :func:`planted`'s search function, so the
      broadcast forms are drawn, and the example inputs ``planted`` traces are the ones given.
    - ``device``: where the drawn tensors live (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a
      ``torch.device``; default None: CPU). Each tuple is drawn on CPU exactly as without it, then
      its tensors are copied there together (:func:`pmverify.device.inputs_on`: strides, values and
      any storage they share kept). :func:`planted` consuming such inputs traces on CPU and moves
      its cases there.

    Shrinks toward no broadcast form, every symbol at its lower bound (with ``dynamic``, none at a hint beyond those
    named) and all-zero tensors.

    Raises ``hypothesis.errors.InvalidArgument`` when ``example_inputs`` is not a tuple or list,
    holds no tensor, or holds a tensor of an unsupported dtype (see :data:`TENSOR_DTYPES`), ``vary`` is not one of the
    forms above, a position is not an ``(int, int)`` pair, its input index is out of range or not a
    tensor, its dim out of range, a position belongs to two symbols, one symbol ties dims of
    different example sizes, a symbol is named twice, or a bound is not an int, negative, or below
    its lower bound; and with ``dynamic``: a value that is not a bool, a symbol name or a
    non-empty list of them, more than two names, a named symbol whose bounds do not hold 11 and 13,
    a symbol whose every size is a multiple of 11 or 13, or a static example size that is; and
    ``scales`` that is not a sequence of positions of floating example tensors; ``broadcast`` that is
    not None, False or a sequence of ``(input index, dim)`` pairs of tensors of rank 1 or more, or
    is a sequence given with ``dynamic``; a ``pattern`` that is not callable, or raises on
    ``example_inputs`` (when drawing); ``dtypes`` that is not a non-empty sequence of floating dtypes
    that :func:`~pmverify.strategies.tensors` draws; a ``device`` that is not a CPU or CUDA device;
    :class:`pmverify.DeviceUnavailable` when drawing on a device this machine lacks.

    Example: for a norm pattern on ``(x[8, 16], weight[16], 1e-6)``::

        like(example, vary={"tokens": [(0, 0)], Dim("hidden", min=4, max=64): [(0, -1), (1, 0)]})

    draws ``(x[T, H], weight[H], 1e-6)`` with T in 1..16 and H in 4..64.
    """
    if not isinstance(example_inputs, (tuple, list)):
        raise InvalidArgument(f"example_inputs={short_repr(example_inputs)} must be a tuple or list")
    if not any(isinstance(item, torch.Tensor) for item in example_inputs):
        raise InvalidArgument(
            f"example_inputs={short_repr(example_inputs)} holds no tensor: there is nothing to draw like it"
        )
    target = validated(device)
    if dtypes is not None:
        options = dict(vary=vary, min_side=min_side, max_side=max_side, dynamic=dynamic, scales=scales)
        if device is not None:
            options["device"] = device
        return _like_in_dtypes(example_inputs, _validate_dtypes(dtypes), options, broadcast, pattern)
    example = tuple(example_inputs)
    for i, item in enumerate(example):
        if isinstance(item, torch.Tensor) and item.dtype not in TENSOR_DTYPES:
            raise InvalidArgument(f"example_inputs[{i}] has dtype {item.dtype}, which tensors() cannot draw")
    validate_int("min_side", min_side, minimum=0)
    validate_int("max_side", max_side, minimum=0)
    validate_order("min_side", min_side, "max_side", max_side)
    scale_set = _scales_spec(example, scales)
    symbols = _symbols(example, vary, min_side, max_side)
    described = tuple(map(TensorLike.of, example))
    positions = validate_broadcast(broadcast, example)
    if positions not in (None, False) and dynamic is not False:
        raise InvalidArgument(
            f"broadcast={broadcast!r} with dynamic={dynamic!r}: broadcast forms are drawn static only"
        )
    if pattern is not None and not callable(pattern):
        raise InvalidArgument(f"pattern={pattern!r} must be callable (the search function)")
    if dynamic is False and positions is not False and (pattern is not None or positions is not None):
        broadcasts = _Broadcasts(described, positions, pattern)
    else:
        broadcasts = None
    if dynamic is False:
        drawn = _inputs(described, symbols, scales=scale_set, broadcasts=broadcasts)
    else:
        fixed = vary is None
        candidates = (
            tuple(Symbol(d.name, 2, max_side, tuple(p)) for d, p in _duck(example).items()) if fixed else symbols
        )
        drawn = _inputs(described, candidates, dynamic_spec(example, candidates, dynamic, fixed), fixed, scale_set)
    strategy = public_call(
        like,
        drawn,
        described,
        vary=vary,
        min_side=min_side,
        max_side=max_side,
        dynamic=dynamic,
        scales=tuple(scales),
        broadcast=broadcast if positions is None or positions is False else tuple(broadcast),
        pattern=pattern,
        device=device,
    )
    tuples_on(strategy, target)
    # ``planted`` reads the example inputs to tell the traces a pass registered with them matches,
    # and gives its search function to draw the broadcast forms where it runs on them.
    strategy.pmverify_example_inputs = example
    if pattern is None and positions is not False and dynamic is False:
        strategy.pmverify_with_pattern = lambda search: like(
            example_inputs,
            vary=vary,
            min_side=min_side,
            max_side=max_side,
            scales=scales,
            broadcast=broadcast,
            pattern=search,
            device=device,
        )
    return strategy
