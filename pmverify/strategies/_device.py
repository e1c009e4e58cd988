"""``device=`` of the case strategies: draw, trace and judge on CPU, move the drawn value last.

Why last: the same choices make the same case, up to the move, on every device and machine (a
failure's choices found on a GPU replay on CPU; a derandomized search draws the same sequence:
the move adds no choice and no span, :attr:`PublicStrategy.finish`), and a strategy's ground truth
(matcher runs, eager checks, dtype probes) is CPU work. The move is :func:`pmverify.device.on_device` (a case) or
:func:`pmverify.device.inputs_on` (an input tuple, a tensor): strides, storage offsets, values and
aliasing kept.

A strategy that wraps another's cases (``with_mutations``, ``tp_cases``, ``planted``'s context
and inputs...) does its CPU work on the inner draw moved to CPU, then moves the result to its own
``device=`` when given, else back to the device the inner strategy drew on. (A case drawn under
:func:`pmverify.device.simulated` holds fake tensors: it cannot be moved back to CPU values, so
a wrapper's inner strategy draws on CPU there, and the wrapper takes ``device=``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from hypothesis.errors import InvalidArgument

from .._case import GraphCase
from ..device import case_device, inputs_on, on_device, validate_device
from ._public import PublicStrategy

__all__ = [
    "validated",
    "cases_on",
    "tuples_on",
    "tensor_strategy_on",
    "on_cpu",
    "on_cpu_inputs",
    "finished",
    "tuple_device",
]

_CPU = torch.device("cpu")
#: Attributes a drawn tensor carries for the strategies that read it (``like``'s broadcast form).
_KEPT_ATTRIBUTES = ("pmverify_broadcast",)


def validated(device: Any) -> torch.device | None:
    """``device`` checked (``InvalidArgument`` naming ``device``), as a ``torch.device``; None for None."""
    return validate_device("device", device)


def cases_on(strategy: PublicStrategy[GraphCase], device: torch.device | None) -> PublicStrategy[GraphCase]:
    """``strategy`` with each drawn case moved to ``device`` (unchanged for None)."""
    if device is not None:
        strategy.finish = lambda case: on_device(case, device)
    return strategy


def _moved(values: Sequence[Any], device: torch.device) -> tuple[Any, ...]:
    moved = inputs_on(values, device)
    for old, new in zip(values, moved, strict=True):
        for name in _KEPT_ATTRIBUTES:
            if new is not old and hasattr(old, name):
                setattr(new, name, getattr(old, name))
    return moved


def tuples_on(strategy: PublicStrategy[Any], device: torch.device | None) -> PublicStrategy[Any]:
    """``strategy`` (of input tuples) with each tuple's tensors moved to ``device`` together."""
    if device is not None:
        strategy.finish = lambda values: _moved(values, device)
    return strategy


def tensor_strategy_on(strategy: PublicStrategy[Any], device: torch.device | None) -> PublicStrategy[Any]:
    """``strategy`` (of tensors) with each tensor moved to ``device``."""
    if device is not None:
        strategy.finish = lambda tensor: _moved((tensor,), device)[0]
    return strategy


def tuple_device(values: Sequence[Any]) -> torch.device:
    """The device of the first tensor of ``values`` (CPU when it holds none)."""
    return next((v.device for v in values if isinstance(v, torch.Tensor)), _CPU)


def _check_real(values: Sequence[Any], what: str) -> None:
    from .._compat import FakeTensor

    if any(isinstance(v, FakeTensor) for v in values):
        raise InvalidArgument(
            f"{what} drew fake tensors (under pmverify.device.simulated()), which hold no values to work on: "
            "let the inner strategy draw on CPU and give device= to the strategy wrapping it"
        )


def on_cpu(case: GraphCase) -> tuple[GraphCase, torch.device]:
    """A wrapper's inner ``case`` on CPU, and the device it was drawn on. Raises
    ``InvalidArgument`` for a case of fake tensors (drawn under :func:`~pmverify.device.simulated`)."""
    device = case_device(case)
    if device != _CPU:
        _check_real([v for rank in case.inputs for v in rank], "cases")
    return on_device(case, _CPU), device


def on_cpu_inputs(values: Sequence[Any]) -> tuple[tuple[Any, ...], torch.device]:
    """An inner input tuple on CPU, and the device it was drawn on (``InvalidArgument`` as :func:`on_cpu`)."""
    device = tuple_device(values)
    if device == _CPU:
        return tuple(values), device
    _check_real(values, "inputs")
    return _moved(values, _CPU), device


def finished(case: GraphCase, device: torch.device | None, inner: torch.device) -> GraphCase:
    """A wrapper's result: on its own ``device`` when given, else on the ``inner`` draw's device."""
    target = device if device is not None else inner
    return case if target == _CPU else on_device(case, target)
