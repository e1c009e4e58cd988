"""Broadcast forms of :func:`~pmverify.strategies.like`'s example inputs.

A pattern traced on ``x[T, H]`` and ``w[H]`` also runs on ``w[1]``, a 0-d ``w`` or a ``w`` expanded
from one element, and gives the same output shapes: a replacement that handles ``w`` as if it had
its example shape is wrong there only. A *form* changes one input at one dim:

- ``"one"``: that dim's size is 1 (the example's is above 1);
- ``"drop"``: the leading dim (dim 0) is missing;
- ``"expand"``: stride 0 along that dim (one value read, ``expand``), its size kept.

A form is drawn only where the pattern (the search function) runs on it and its outputs keep the
shapes and dtypes of the inputs without the form, and gain no stride-0 dim (:func:`allows`): where
the pattern broadcasts the input. Contiguous example tensors only (a strided one keeps its layout family).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis.errors import InvalidArgument

from .._compat import pytree
from .._validation import short_repr, validate_int

__all__ = [
    "BroadcastForm",
    "FORM_KINDS",
    "candidate_forms",
    "allows",
    "apply_shape",
    "broadcast_kind",
    "validate_broadcast",
]

#: The form kinds, simplest first.
FORM_KINDS = ("one", "drop", "expand")


@dataclasses.dataclass(frozen=True)
class BroadcastForm:
    """Input ``index`` drawn in form ``kind`` along ``dim`` (non-negative; 0 for ``"drop"``)."""

    index: int
    dim: int
    kind: str


def validate_broadcast(broadcast: Any, example: Sequence[Any]) -> frozenset[tuple[int, int]] | bool | None:
    """Canonical ``broadcast=`` of :func:`like`: None (automatic), False (none), or the set of
    ``(input index, non-negative dim)`` positions named. InvalidArgument naming the argument and
    value for anything else, a position out of range or on an input that is not a tensor."""
    if broadcast is None or broadcast is False:
        return broadcast
    where = f"broadcast={broadcast!r}"
    if broadcast is True or isinstance(broadcast, (str, bytes)) or not isinstance(broadcast, Sequence):
        raise InvalidArgument(f"{where} must be None, False, or a sequence of (input index, dim) pairs")
    return frozenset(validate_position(where, position, example) for position in broadcast)


def validate_position(where: str, position: Any, example: Sequence[Any]) -> tuple[int, int]:
    """An ``(input index, dim)`` position of ``example`` (``like``'s ``vary=`` and ``broadcast=``),
    its dim made non-negative. InvalidArgument, starting with ``where``, for anything else: not a
    pair, an index out of range, an item that is not a tensor of rank >= 1, a dim out of range."""
    if not isinstance(position, (tuple, list)) or len(position) != 2:
        raise InvalidArgument(f"{where} holds {position!r}, not an (input index, dim) pair")
    index, dim = position
    validate_int(f"{where}: input index", index, 0, len(example) - 1)
    item = example[index]
    if not isinstance(item, torch.Tensor) or item.dim() == 0:
        raise InvalidArgument(f"{where}: example_inputs[{index}]={short_repr(item)} is not a tensor of rank >= 1")
    validate_int(f"{where}: dim", dim, -item.dim(), item.dim() - 1)
    return index, dim % item.dim()


def candidate_forms(
    described: Sequence[Any], positions: frozenset[tuple[int, int]] | None
) -> tuple[BroadcastForm, ...]:
    """The forms of the contiguous example tensors in ``described`` (:class:`TensorLike`
    descriptions), at ``positions`` only when given, simplest kind first."""
    from ._like import TensorLike

    forms = []
    for kind in FORM_KINDS:
        for i, item in enumerate(described):
            if type(item) is not TensorLike:
                continue
            for d, size in enumerate(item.shape):
                if positions is not None and (i, d) not in positions:
                    continue
                if kind == "drop" and d == 0 and size > 0:
                    forms.append(BroadcastForm(i, 0, kind))
                elif kind != "drop" and size > 1:
                    forms.append(BroadcastForm(i, d, kind))
    return tuple(forms)


def apply_shape(form: BroadcastForm, shape: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shape input ``form.index`` has in ``form`` at drawn ``shape``, and the shape of the
    values drawn for it (1 along an expanded dim)."""
    shape = list(shape)
    if form.kind == "drop":
        return tuple(shape[1:]), tuple(shape[1:])
    if form.kind == "one":
        shape[form.dim] = 1
        return tuple(shape), tuple(shape)
    values = list(shape)
    values[form.dim] = 1
    return tuple(shape), tuple(values)


def _outputs(pattern: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, ...] | None:
    """The (shape, dtype, whether stride 0) of each tensor output of ``pattern`` run eagerly on
    ``args`` themselves (throwaway zeros: a clone would make an expanded input dense; an in-place op
    on an expanded one raises), no grad, a forked CPU RNG; None when it raises."""
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = pattern(*args)
    except Exception:  # noqa: BLE001 - whatever the pattern raises: it does not run on these inputs
        return None
    return tuple(
        (tuple(t.shape), t.dtype, any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride(), strict=True)))
        for t in pytree.tree_leaves(out)
        if isinstance(t, torch.Tensor)
    )


def allows(pattern: Callable[..., Any], plain: Sequence[Any], formed: Sequence[Any]) -> bool:
    """Whether ``pattern`` runs on both input tuples and its tensor outputs have the same shapes,
    dtypes and no new stride-0 dim: it broadcasts the input the form changed (an output that is a
    view of an expanded input passes the layout on, a question of strides, not of broadcasting)."""
    before = _outputs(pattern, plain)
    return before is not None and before == _outputs(pattern, formed)


def broadcast_kind(args: Sequence[Any]) -> str | None:
    """The form :func:`like` drew one of ``args`` in (it marks that tensor), or None."""
    return next((a.pmverify_broadcast for a in args if hasattr(a, "pmverify_broadcast")), None)
