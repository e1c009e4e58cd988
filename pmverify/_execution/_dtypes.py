"""Dtypes few kernels take (the float8 types): which ops run on a dtype, learned from the dispatcher,
and values of such a dtype read through an upcast.

On CPU (torch 2.13) a ``float8_e4m3fn`` / ``float8_e5m2`` tensor can be made, copied, viewed,
cast and compared for equality, but ``neg``, ``add_``, ``mul_``, ``sum``, ``max``, ``clamp`` and
``isfinite`` (e4m3fn) have no kernel for it. So:

- :func:`runs_on` says whether an op runs on a dtype and device, by calling it once on tiny real
  tensors of that dtype (no public dispatcher query knows: the dtype switch is inside each kernel);
  the answer is cached per (op, dtype, device) for the process. Strategies draw only ops that run
  on the value they append them to.
- :func:`inspectable` widens a float8 tensor to float32 (exactly: every float8 value is a float32
  one); anything that inspects values (``isfinite``, comparisons, ``abs().max()``) reads it so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["runs_on", "inspectable", "finite", "is_narrow_float", "SampleCall"]

#: A function ``(dtype, device) -> (args, kwargs)`` making a call of an op on tiny tensors.
SampleCall = Callable[[torch.dtype, torch.device], tuple[tuple[Any, ...], dict[str, Any]]]

_LOCK = threading.Lock()
_RUNS: dict[tuple[Any, torch.dtype, str], bool] = {}
#: Sides of the tiny tensors a call is tried on: 2-d and square (ops taking square matrices run).
_SIDE = 2


def is_narrow_float(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` is a floating dtype of one byte (the float8 types), whose values are read
    through :func:`inspectable`."""
    return dtype.is_floating_point and dtype.itemsize == 1


def inspectable(value: torch.Tensor) -> torch.Tensor:
    """``value`` as a tensor any op can inspect: a float8 tensor widened to float32 (exactly), any
    other tensor as it is."""
    return value.float() if is_narrow_float(value.dtype) else value


def finite(value: torch.Tensor) -> bool:
    """Whether every element of ``value`` is finite (a float8 one read through :func:`inspectable`);
    True for integer and bool tensors."""
    if not value.is_floating_point():
        return True
    return bool(torch.isfinite(inspectable(value)).all())


def _sample_argument(argument: Any, dtype: torch.dtype, device: torch.device) -> Any:
    """A value for one schema argument of a call on tiny tensors of ``dtype`` (``_SIDE`` x
    ``_SIDE``): tensors of ``dtype`` (a list of indices for ``Tensor?[]``), 2.0 for numbers, 0 for ints."""
    kind = str(argument.type)  # as the schema's type prints: "Tensor", "List[Optional[Tensor]]", "number"...
    if kind.startswith("Optional[") and kind.endswith("]"):
        kind = kind[len("Optional[") : -1]
    if kind == "Tensor":
        return torch.ones(_SIDE, _SIDE, dtype=dtype, device=device)
    if kind == "List[Tensor]":
        return [torch.ones(_SIDE, _SIDE, dtype=dtype, device=device)] * 2
    if kind == "List[Optional[Tensor]]":  # indices (index_put_): every row once
        return [torch.arange(_SIDE, device=device)]
    if kind in ("number", "float"):
        return 2.0  # not 1: no identity shortcut
    if kind in ("int", "SymInt"):
        return 0
    if kind == "bool":
        return False
    raise ValueError(f"no sample value for an argument of type {kind}")


def _schema_sample(op: Any, dtype: torch.dtype, device: torch.device) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call of ``op`` on tiny tensors of ``dtype``, from its schema: every argument without a
    default given (see :func:`_sample_argument`), the others left to their defaults."""
    args, kwargs = [], {}
    for argument in op._schema.arguments:
        if argument.has_default_value():
            continue
        value = _sample_argument(argument, dtype, device)
        if argument.kwarg_only:
            kwargs[argument.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def runs_on(op: Any, dtype: torch.dtype, device: str | torch.device = "cpu", sample: SampleCall | None = None) -> bool:
    """Whether ``op`` (an ``OpOverload``, aten or custom) runs on tensors of ``dtype`` on
    ``device``: learned once per (op, dtype, device) by calling it on tiny real tensors of that
    dtype (``sample``, or from its schema: every tensor argument a 2x2 tensor of ``dtype``, a
    ``Tensor?[]`` the row indices, numbers 2.0, ints 0; defaults kept) and cached for the process
    (thread-safe). An op that raises there does not run; so does one whose schema has an argument
    the sample cannot fill (give ``sample``)."""
    device = torch.device(device)
    key = (op, dtype, str(device))
    with _LOCK:
        known = _RUNS.get(key)
    if known is not None:
        return known
    try:
        args, kwargs = (sample or (lambda d, v: _schema_sample(op, d, v)))(dtype, device)
        with torch.no_grad():
            op(*args, **kwargs)
        runs = True
    except Exception:  # noqa: BLE001 - whatever the kernel raises: it does not run on that dtype
        runs = False
    with _LOCK:
        _RUNS.setdefault(key, runs)
        return _RUNS[key]
