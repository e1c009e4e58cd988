"""The shapes one call of :func:`~._expr_instances.expr_cases` wants of its tensor arguments
(:class:`Shaping`), from the shape its parent needs of it, and the tensor leaves drawn before their
call is emitted (:class:`Pending`)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st

from ._dynamic import hinted_shape
from ._expr_targets import base_name
from ._ops_core import refactored

if TYPE_CHECKING:
    from ._expr_instances import _Instance

__all__ = ["CONTRACTIONS", "CONVOLUTIONS", "FIRST_ARGS", "MAX_SIDE", "Pending", "Shaping", "arg_name", "filled"]

MAX_SIDE = 6

CONTRACTIONS = {
    "mm",
    "bmm",
    "addmm",
    "baddbmm",
    "matmul",
    "linear",
    "_linear_pointwise",
    "addmv",
    "mv",
    "dot",
    "_int_mm",
}
CONVOLUTIONS = {"convolution", "conv2d", "conv1d", "_convolution", "_convolution_pointwise"}
FIRST_ARGS = ("self", "input", "a", "x", "inp", "0")


def arg_name(schema: Any, index: int) -> str:
    if schema is not None and index < len(schema.arguments):
        return schema.arguments[index].name
    return str(index)


class Shaping:
    """The shapes one call needs of its tensor arguments, from the shape its parent needs of it
    (``want``, None where a dim is free): matmul sides sharing their inner size, convolution weights
    matching the input's channels, the input of a permute, expand or view shaped so that the
    result is ``want``; the others get ``want`` itself where it applies."""

    def __init__(self, instance: _Instance, fn: Any, want: tuple[int | None, ...] | None) -> None:
        self.instance = instance
        self.op = base_name(fn)
        self.pointwise = torch.Tag.pointwise in getattr(fn, "tags", ())
        self.want = want
        self.dims: dict[str, int] = {}
        self.fixed: dict[str, Any] = {}
        self.input_want: tuple[int | None, ...] | None = want
        draw = instance.draw
        if want is None:
            return
        rank = len(want)
        if self.op in CONTRACTIONS and rank >= 2:
            self.dims.update({k: v for k, v in zip("mn", want[-2:], strict=True) if v is not None})
            if rank == 3 and want[0] is not None:
                self.dims["b"] = want[0]
        elif self.op in CONVOLUTIONS and rank >= 3:
            self.dims.update({k: v for k, v in zip("NO", want[:2], strict=True) if v is not None})
        elif self.op == "permute":
            perm = draw(st.permutations(range(rank)))
            self.fixed["dims"] = list(perm)
            self.input_want = tuple(want[perm.index(i)] for i in range(rank))
        elif self.op in ("expand", "broadcast_to"):
            self.input_want = tuple(w if draw(st.integers(0, 2)) else 1 for w in want)
            self.fixed["size"] = list(want)
        elif self.op in ("view", "reshape", "_unsafe_view") and all(w is not None for w in want):
            self.input_want = tuple(draw(refactored(math.prod(want))))  # type: ignore[arg-type]
            self.fixed["size"] = self.fixed["shape"] = list(want)  # (view: size, reshape: shape)

    def dim(self, key: str) -> int:
        if key not in self.dims:
            size = self.instance.draw(st.integers(1, 4 if key in "NCO" else MAX_SIDE))
            if key in "mb" and self.instance.dynamic:  # a matmul's rows: the token count under dynamic=
                size = hinted_shape(self.instance.draw, (size,), self.instance.dynamic)[0]
            self.dims[key] = size
        return self.dims[key]

    def want_of(self, name: str) -> tuple[int | None, ...] | None:
        op, d = self.op, self.dim
        if op in CONTRACTIONS:
            batched = op in ("bmm", "baddbmm") or (self.want is not None and len(self.want) == 3)
            lead = (d("b"),) if batched else ()
            table = {
                "mat1": (d("m"), d("k")),
                "mat2": (*lead, d("k"), d("n")),
                "batch1": (d("b"), d("m"), d("k")),
                "batch2": (d("b"), d("k"), d("n")),
                "other": (*lead, d("k"), d("n")),
                "weight": (d("n"), d("k")),
                "bias": (d("n"),),
                "b": (d("k"), d("n")),
            }
            if name in ("self", "input", "a", "x", "0"):
                if op == "addmm":
                    return self.instance.draw(st.sampled_from([(d("m"), d("n")), (d("n"),), (1, d("n"))]))
                if op == "baddbmm":
                    return (d("b"), d("m"), d("n"))
                return (*lead, d("m"), d("k"))
            return table.get(name)
        if op in CONVOLUTIONS:
            spatial = self.__dict__.setdefault("spatial", self.instance.draw(st.integers(1, 2)))
            if name in ("input", "self", "x", "0"):
                return (d("N"), d("C"), *(self.instance.draw(st.integers(2, 5)) for _ in range(spatial)))
            if name == "weight":
                return (d("O"), d("C"), *(self.instance.draw(st.integers(1, 2)) for _ in range(spatial)))
            if name == "bias":
                return (d("O"),)
            return None
        if name in FIRST_ARGS:
            return self.input_want
        return self.want if self.op not in ("permute", "expand", "view", "reshape", "_unsafe_view") else None

    def built(self, name: str, node: Any) -> None:
        """Take the sizes a built argument fixes (a matmul side's, a convolution input's; a
        pointwise op's first tensor, which its other tensors then get: ``add(mm(a, b), mm(c, d))``)."""
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor):
            return
        shape = [int(s) for s in value.shape]
        if self.pointwise and self.want is None and name in FIRST_ARGS:
            self.want = self.input_want = tuple(shape)
        elif self.op in CONTRACTIONS and len(shape) >= 2:
            if name in ("self", "input", "a", "x", "0", "mat1", "batch1") and self.op not in ("addmm", "baddbmm"):
                self.dims.update(m=shape[-2], k=shape[-1], **({"b": shape[0]} if len(shape) == 3 else {}))
            elif name in ("mat1", "batch1"):
                self.dims.update(m=shape[-2], k=shape[-1], **({"b": shape[0]} if len(shape) == 3 else {}))
            elif name in ("mat2", "batch2", "other", "b"):
                self.dims.update(k=shape[-2], n=shape[-1], **({"b": shape[0]} if len(shape) == 3 else {}))
            elif name == "weight":
                self.dims.update(n=shape[0], k=shape[1])
        elif self.op in CONVOLUTIONS and len(shape) >= 3:
            if name in ("input", "self", "x", "0"):
                self.dims.update(N=shape[0], C=shape[1])
                self.spatial = len(shape) - 2
            elif name == "weight":
                self.dims.update(O=shape[0], C=shape[1])
                self.spatial = len(shape) - 2


def filled(draw: Any, template: tuple[int | None, ...]) -> tuple[int, ...]:
    return tuple(t if t is not None else draw(st.integers(1, MAX_SIDE)) for t in template)


@dataclasses.dataclass(eq=False)
class Pending:
    """A tensor leaf drawn for a call not yet emitted: its shape and dtype (and index range)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    elements: Any = None  # a strategy of its values (index tensors, scales); None: random values
    node: torch.fx.Node | None = None

    def dim(self) -> int:
        return len(self.shape)
