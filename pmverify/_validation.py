"""Eager argument validation shared by the strategies and the engine (``_record``, ``_gates``,
``_rewrite``): each ``validate_*`` raises ``hypothesis.errors.InvalidArgument`` naming the argument
and its value, as ``hypothesis.internal.validation`` does for Hypothesis' own strategies.

The bottom of the package: it imports nothing of pmverify. (``check_*`` names are the
verification entry points, ``check_case`` / ``check_rewrite``; these only validate arguments.)"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

__all__ = [
    "validate_bool",
    "validate_int",
    "validate_optional_int",
    "validate_order",
    "validate_strategy",
    "validate_choices",
    "validate_dtypes",
    "validate_all_reduce",
    "FLOAT_DTYPES",
    "short_repr",
]

#: Floating dtypes the strategies draw, simplest first.
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def validate_bool(name: str, value: Any) -> None:
    """``value`` must be a bool; InvalidArgument naming ``name`` otherwise."""
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be a bool")


def validate_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> None:
    """``value`` must be an int (not a bool) in [``minimum``, ``maximum``]; InvalidArgument naming
    ``name`` and the value otherwise."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be an int")
    if minimum is not None and value < minimum:
        raise InvalidArgument(f"{name}={value!r} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise InvalidArgument(f"{name}={value!r} must be at most {maximum}")


def validate_optional_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> None:
    """``value`` must be None or pass :func:`validate_int`."""
    if value is not None:
        validate_int(name, value, minimum, maximum)


def validate_order(low_name: str, low: Any, high_name: str, high: Any) -> None:
    """``low <= high`` when both are given (``min_nodes=5 is larger than max_nodes=2``)."""
    if low is not None and high is not None and low > high:
        raise InvalidArgument(f"{low_name}={low!r} is larger than {high_name}={high!r}")


def short_repr(value: Any) -> str:
    """``repr`` with tensors shown by shape and dtype, not by their values."""
    if isinstance(value, torch.Tensor):
        grad = ":requires_grad" if value.requires_grad else ""
        return f"tensor{list(value.shape)}:{str(value.dtype).removeprefix('torch.')}{grad}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(short_repr(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if isinstance(value, tuple) else f"[{inner}]"
    return repr(value)


def validate_strategy(name: str, value: Any) -> None:
    """``value`` must be a Hypothesis ``SearchStrategy``; InvalidArgument naming ``name`` otherwise."""
    if not isinstance(value, st.SearchStrategy):
        raise InvalidArgument(f"{name}={short_repr(value)} must be a Hypothesis strategy")


def validate_choices(name: str, value: Any, allowed: Iterable[Any]) -> tuple[Any, ...]:
    """``value`` must be a non-empty sequence (not a str) of members of ``allowed``; returns it as a
    tuple without repeats, in the caller's order."""
    allowed = tuple(allowed)
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, set, frozenset)):
        raise InvalidArgument(f"{name}={value!r} must be a sequence drawn from {allowed}")
    items = tuple(value)
    if not items:
        raise InvalidArgument(f"{name}={value!r} is empty")
    for item in items:
        if item not in allowed:
            raise InvalidArgument(f"{name}={value!r} holds {item!r}, not one of {allowed}")
    return tuple(dict.fromkeys(items))


def validate_dtypes(name: str, value: Any, allowed: Sequence[torch.dtype] = FLOAT_DTYPES) -> tuple[torch.dtype, ...]:
    """``None`` → ``allowed``; else a non-empty sequence of torch dtypes from ``allowed``."""
    if value is None:
        return tuple(allowed)
    if isinstance(value, torch.dtype):
        raise InvalidArgument(f"{name}={value!r} must be a sequence of torch dtypes, e.g. [{value!r}]")
    return validate_choices(name, value, allowed)


def _is_funcol_all_reduce(value: Any) -> bool:
    ops = torch.ops._c10d_functional
    return value is ops.all_reduce or value is ops.all_reduce.default


def validate_all_reduce(name: str, value: Any) -> torch._ops.OpOverload | None:
    """The all-reduce op a tensor-parallel case's graphs hold: None for the functional collective
    (``value`` None or ``torch.ops._c10d_functional.all_reduce``, followed by ``wait_tensor``), else
    ``value`` as an ``OpOverload`` (an ``OpOverloadPacket`` stands for its ``.default``) whose schema
    is functional ``(Tensor, str) -> Tensor``: the tensor summed over the group named, as vLLM's
    ``torch.ops.vllm.all_reduce``. InvalidArgument naming ``name`` and ``value`` otherwise."""
    if value is None or _is_funcol_all_reduce(value):
        return None
    op = value
    shown = f"torch.ops.{value}" if isinstance(value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) else None
    if isinstance(op, torch._ops.OpOverloadPacket):
        if "default" not in op.overloads():
            raise InvalidArgument(
                f"{name}={shown} has no default overload: give one of {shown}.{{{', '.join(op.overloads())}}}"
            )
        op = op.default
    if not isinstance(op, torch._ops.OpOverload):
        raise InvalidArgument(
            f"{name}={short_repr(value)} must be None, torch.ops._c10d_functional.all_reduce or a registered "
            f"op (Tensor, str) -> Tensor such as torch.ops.vllm.all_reduce.default"
        )
    schema = op._schema
    arguments = [str(a.type) for a in schema.arguments]
    returns = [str(r.type) for r in schema.returns]
    if arguments != ["Tensor", "str"] or returns != ["Tensor"]:
        raise InvalidArgument(
            f"{name}={shown} has schema {schema}: an all-reduce op must take (Tensor, str) (the tensor and "
            f"the group name) and return one Tensor"
        )
    if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
        raise InvalidArgument(
            f"{name}={shown} has schema {schema}: an all-reduce op must be functional (mutate and alias nothing)"
        )
    return op
