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

Ops whose writes do not follow their reads (``x`` of any shape with at least one dim, rows along dim
0; written row by row, in order, straight into ``out``, without a temporary, as a fused kernel
would): called on aliased arguments, ``op(x, out=x)``, a row is read after it was written, so the
result differs from that into a fresh ``out``. Their values stay in [-2, 2] for inputs in [-2, 2],
aliased or not.

- ``reverse_into(x, out!) -> None``: ``out = x.flip(0)`` (row ``i`` from row ``n-1-i``).
- ``roll_into(x, out!) -> None``: ``out = x.roll(1, 0)`` (row ``i`` from row ``i-1``, row 0 from the last).
- ``cummean_into(x, out!) -> None``: the running mean ``out[i] = x[:i+1].mean(0)`` (a running sum
  over the rows, divided by the count).
- ``transpose_into(x, out!) -> None``: ``out = x.t()`` for a square 2-d ``x`` (row ``i`` from column
  ``i``).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

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
    - ``shapes``: the shapes the op takes: ``"any"`` (every shape the strategies write: at least one
      dim) or ``"square"`` (2-d with two equal sizes).
    - ``order_dependent``: whether the op writes ``out`` while still reading ``x`` in another
      order, so that ``op(x, out=x)`` computes other values than ``op(x, out=fresh)``.
    """

    name: str
    mutated: tuple[str, ...]
    operands: tuple[str, ...]
    scalars: tuple[str, ...]
    returns_tensor: bool
    args: tuple[str, ...]
    shapes: str = "any"
    order_dependent: bool = False

    def takes(self, shape: tuple[int, ...]) -> bool:
        """Whether the op takes tensors of ``shape``."""
        if self.shapes == "square":
            return len(shape) == 2 and shape[0] == shape[1]
        return len(shape) >= 1


#: The ops, simplest first (one mutated arg first).
CUSTOM_OPS = (
    CustomOpSpec("add_into", ("x",), ("y",), (), True, ("x", "y")),
    CustomOpSpec("scale_shift", ("a", "b"), (), ("scale",), False, ("a", "b", "scale")),
    CustomOpSpec("mix3", ("a", "b", "c"), (), (), False, ("a", "b", "c")),
    CustomOpSpec("tanh_out", ("out",), ("x",), (), False, ("x", "out")),
    CustomOpSpec("reverse_into", ("out",), ("x",), (), False, ("x", "out"), order_dependent=True),
    CustomOpSpec("roll_into", ("out",), ("x",), (), False, ("x", "out"), order_dependent=True),
    CustomOpSpec("cummean_into", ("out",), ("x",), (), False, ("x", "out"), order_dependent=True),
    CustomOpSpec("transpose_into", ("out",), ("x",), (), False, ("x", "out"), "square", True),
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


def _rows(name: str, x: Tensor, out: Tensor, square: bool = False) -> int:
    _same(name, x, out)
    if x.dim() < 1:
        raise ValueError(f"{NAMESPACE}::{name}: x must have at least one dim; got a 0-d tensor")
    if square and (x.dim() != 2 or x.shape[0] != x.shape[1]):
        raise ValueError(f"{NAMESPACE}::{name}: x must be square 2-d; got {tuple(x.shape)}")
    return x.shape[0]


def _define_rows(name: str, row: Any, square: bool = False) -> None:
    """Define ``name(x, out!)``: ``out[i] = row(x, i)`` for i = 0, 1, ... in order, each row written
    into ``out`` before the next is read from ``x``."""

    def impl(x: Tensor, out: Tensor) -> None:
        for i in range(_rows(name, x, out, square)):
            out[i].copy_(row(x, i))

    defined = torch.library.custom_op(f"{NAMESPACE}::{name}", mutates_args=("out",))(impl)

    @defined.register_fake
    def _(x, out):
        _rows(name, x, out, square)


_DEFINE = {
    "add_into": _define_add_into,
    "scale_shift": _define_scale_shift,
    "mix3": _define_mix3,
    "tanh_out": _define_tanh_out,
    "reverse_into": lambda: _define_rows("reverse_into", lambda x, i: x[x.shape[0] - 1 - i]),
    "roll_into": lambda: _define_rows("roll_into", lambda x, i: x[i - 1]),
    "cummean_into": lambda: _define_rows("cummean_into", lambda x, i: x[: i + 1].mean(0)),
    "transpose_into": lambda: _define_rows("transpose_into", lambda x, i: x[:, i], square=True),
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
