"""Mutating custom ops for test graphs, registered once per process under ``pmverify_testing``.

Each op is a ``torch.library.custom_op`` with ``mutates_args`` and a ``register_fake`` impl, so that
functionalization turns a call into ``auto_functionalized`` / ``auto_functionalized_v2`` exactly as
it does for a real model's ops (vLLM's ``fused_add_rms_norm``, quantization ops...). Registration
runs on import and through :func:`register`; both are idempotent: an op already in the dispatcher
(registered by an earlier import, a reloaded copy of this module or another module) is reused, not
defined again. Under ``pytest -n auto`` every xdist worker is a process and registers its own.

The ops (every tensor argument of an op has the same shape and dtype; values stay bounded when
inputs are in [-2, 2]):

- ``add_into(x!, y) -> Tensor``: ``x += y``; returns ``tanh(x)`` (new x). One mutated arg, one output.
- ``scale_shift(a!, b!, scale) -> None``: ``a = a * scale + 0.5`` (affine: a scale-invariant pattern
  such as a norm still sees it); ``b += scale``. Two mutated args.
- ``mix3(a!, b!, c!) -> None``: ``a, b, c = a + b, b - c, tanh(a)``. Three mutated args.
- ``tanh_out(x, out!) -> None``: ``out = tanh(x)``. The mutated arg is named ``out``.
"""

from __future__ import annotations

import dataclasses
import threading

import torch
from torch import Tensor

__all__ = ["NAMESPACE", "CustomOpSpec", "CUSTOM_OPS", "register", "op"]

NAMESPACE = "pmverify_testing"


@dataclasses.dataclass(frozen=True)
class CustomOpSpec:
    """What a strategy needs to know to call one op.

    - ``name``: the op's name in :data:`NAMESPACE`.
    - ``mutated``: names of the mutated tensor args, in schema order.
    - ``operands``: names of the read-only tensor args (same shape and dtype as the mutated ones).
    - ``scalars``: names of the float args.
    - ``returns_tensor``: whether the op returns a tensor (of the mutated args' shape) or None.
    - ``args``: every arg name in schema order.
    """

    name: str
    mutated: tuple[str, ...]
    operands: tuple[str, ...]
    scalars: tuple[str, ...]
    returns_tensor: bool
    args: tuple[str, ...]


#: The ops, simplest first (one mutated arg first).
CUSTOM_OPS = (
    CustomOpSpec("add_into", ("x",), ("y",), (), True, ("x", "y")),
    CustomOpSpec("scale_shift", ("a", "b"), (), ("scale",), False, ("a", "b", "scale")),
    CustomOpSpec("mix3", ("a", "b", "c"), (), (), False, ("a", "b", "c")),
    CustomOpSpec("tanh_out", ("out",), ("x",), (), False, ("x", "out")),
)

_LOCK = threading.Lock()


def _same(name: str, *tensors: Tensor) -> None:
    first = tensors[0]
    for t in tensors[1:]:
        if t.shape != first.shape or t.dtype != first.dtype:
            raise ValueError(
                f"{NAMESPACE}::{name}: every tensor must be {tuple(first.shape)} {first.dtype}; "
                f"got {tuple(t.shape)} {t.dtype}"
            )


def _is_defined(name: str) -> bool:
    return hasattr(getattr(torch.ops, NAMESPACE), name)


def _define_add_into() -> None:
    @torch.library.custom_op(f"{NAMESPACE}::add_into", mutates_args=("x",))
    def add_into(x: Tensor, y: Tensor) -> Tensor:
        _same("add_into", x, y)
        x.add_(y)
        return torch.tanh(x)

    @add_into.register_fake
    def _(x, y):
        _same("add_into", x, y)
        return torch.empty_like(x)


def _define_scale_shift() -> None:
    @torch.library.custom_op(f"{NAMESPACE}::scale_shift", mutates_args=("a", "b"))
    def scale_shift(a: Tensor, b: Tensor, scale: float) -> None:
        _same("scale_shift", a, b)
        a.mul_(scale).add_(0.5)
        b.add_(scale)

    @scale_shift.register_fake
    def _(a, b, scale):
        _same("scale_shift", a, b)


def _define_mix3() -> None:
    @torch.library.custom_op(f"{NAMESPACE}::mix3", mutates_args=("a", "b", "c"))
    def mix3(a: Tensor, b: Tensor, c: Tensor) -> None:
        _same("mix3", a, b, c)
        old_a = a.clone()
        a.add_(b)
        b.sub_(c)
        c.copy_(torch.tanh(old_a))

    @mix3.register_fake
    def _(a, b, c):
        _same("mix3", a, b, c)


def _define_tanh_out() -> None:
    @torch.library.custom_op(f"{NAMESPACE}::tanh_out", mutates_args=("out",))
    def tanh_out(x: Tensor, out: Tensor) -> None:
        _same("tanh_out", x, out)
        out.copy_(torch.tanh(x))

    @tanh_out.register_fake
    def _(x, out):
        _same("tanh_out", x, out)


_DEFINE = {
    "add_into": _define_add_into,
    "scale_shift": _define_scale_shift,
    "mix3": _define_mix3,
    "tanh_out": _define_tanh_out,
}


def register() -> None:
    """Register every op of :data:`CUSTOM_OPS` that the dispatcher does not hold yet; a no-op when
    all are there. Safe to call from several modules and threads."""
    with _LOCK:
        for spec in CUSTOM_OPS:
            if not _is_defined(spec.name):
                _DEFINE[spec.name]()


def op(name: str) -> torch._ops.OpOverload:
    """The ``OpOverload`` of op ``name`` (registering the ops first if needed)."""
    register()
    return getattr(getattr(torch.ops, NAMESPACE), name).default


register()
