"""Drawing the leaves of one call of :func:`~._expr_instances.expr_cases` (``Arg``,
``KeywordArg``, ``Ignored``) by the schema type at their position: tensors shaped after the ones
they meet, ints within range, size lists consistent with the tensor they size, dtypes, numbers,
bools; and the near miss of an optional argument the pattern does not bind (:class:`Leaves`, a
part of the instance under construction)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import torch
from hypothesis import strategies as st

from ._dynamic import hinted_shape
from ._expr_shapes import CONTRACTIONS, CONVOLUTIONS, FIRST_ARGS, MAX_SIDE, Pending, filled
from ._expr_targets import ExprUnsupported, base_name, is_factory, is_quantize, schema_kind, target_name
from ._ops_core import refactored

__all__ = ["ArgPosition", "EXPR_DTYPES", "Leaves", "NONZERO", "draw_order", "drawn_again"]

#: The float dtypes an instance's tensors are drawn in (one per case, mostly).
EXPR_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_NUMBERS = (0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1e-3, 7.0)
#: The values of the floating leaves of a case drawn for the near miss ``optional_arg`` (none is 0).
NONZERO = st.floats(0.25, 2.0) | st.floats(-2.0, -0.25)
_STR_CHOICES = {
    "approximate": ("none", "tanh"),
    "rounding_mode": (None, "trunc", "floor"),
    "reduce": ("sum", "prod", "mean", "amax", "amin"),
    "reduction": ("sum", "mean"),
    "attr": ("none", "relu"),
    "algorithm": ("",),
    "binary_attr": ("sum", "add"),
    "unary_attr": ("none", "relu"),
}
#: Bool arguments that must stay False on a CPU-only machine (pinned memory needs an accelerator).
_HOST_ONLY_FALSE = ("pin_memory",)
#: The dtype the kernels of these calls take their tensor operands in (``_int_mm``: int8 only).
_OPERAND_DTYPES = {"_int_mm": torch.int8}
#: What :meth:`Leaves.quantize_argument` returns for an argument it does not draw.
_NOT_DRAWN = object()


@dataclasses.dataclass
class ArgPosition:
    """One argument position of a call: its schema argument (None: unknown) and what the pattern holds."""

    key: int | str
    schema: Any
    held: Any  # a PatternExpr leaf, a sub-pattern, or a literal


class Leaves:
    """Drawing a call's leaves: a part of :class:`~._expr_instances._Instance` (its ``draw``,
    ``dtype``, ``shaping``, ``qdtype``, ``dynamic``, ``near_misses``, ``force_optional``,
    ``optional_candidates`` and ``changed``)."""

    def leaf(self, fn: Any, position: ArgPosition, drawn: dict, positions: list[ArgPosition]) -> Any:
        arg = position.schema
        if arg is None:
            return self.tensor_like(fn, position, drawn, positions)
        if is_quantize(fn):
            value = self.quantize_argument(fn, arg, drawn)
            if value is not _NOT_DRAWN:
                return value
        kind = schema_kind(arg)
        optional = kind.endswith("?")
        base = kind.removesuffix("?")
        # a factory's dtype is never None in a traced graph (torch.full(...) records the default dtype)
        concrete = base == "ScalarType" and is_factory(fn)
        if (
            optional
            and arg.has_default_value()
            and arg.default_value is None
            and not concrete
            and not self.draw(st.integers(0, 3))
        ):
            return None
        if base == "Tensor":
            if arg.name in ("other", "exponent") and self.draw(st.integers(0, 2)) == 0 and _has_tensor(drawn):
                return self.draw(st.sampled_from(_NUMBERS))
            return self.tensor_like(fn, position, drawn, positions)
        if base in ("Tensor[]", "Tensor?[]"):
            return self.tensor_list(fn, position, drawn, positions)
        if base in ("Scalar?[]", "Scalar[]", "str?[]", "str[]"):
            return []
        anchor = _anchor(drawn)
        if base in ("int", "SymInt"):
            return self.integer(arg.name, anchor, drawn)
        if base in ("int[]", "SymInt[]") or base.startswith("int[") or base.startswith("SymInt["):
            return self.int_list(fn, arg.name, anchor, drawn)
        if base in ("float", "Scalar", "number"):
            return self.draw(st.sampled_from(_NUMBERS))
        if base == "bool":
            return False if arg.name in _HOST_ONLY_FALSE else self.draw(st.booleans())
        if base == "ScalarType":
            return self.draw(st.sampled_from((*EXPR_DTYPES, torch.float64, torch.int64, torch.int32)))
        if base == "Layout":
            return torch.strided
        if base == "Device":
            return torch.device("cpu")
        if base == "MemoryFormat":
            return torch.contiguous_format
        if base == "Generator":
            return None
        if base == "str" and not arg.has_default_value():
            return self.draw(st.sampled_from(_STR_CHOICES.get(arg.name, ("none", ""))))
        if base == "str" and arg.name in _STR_CHOICES:
            return self.draw(st.sampled_from(_STR_CHOICES[arg.name]))
        if arg.has_default_value():
            return arg.default_value
        raise ExprUnsupported(f"{target_name(fn)}'s argument {arg.name} of type {kind} is not drawn")

    def quantize_argument(self, fn: Any, arg: Any, drawn: dict) -> Any:
        """An argument of ``quantized_decomposed``'s (de)quantize ops, consistent with the others:
        one quantized dtype per call (uint8 or int8), its full range as ``quant_min``/``quant_max``,
        a quantized input for a dequantize, positive scales, zero points in range, per-channel
        scales and zero points along ``axis`` 0."""
        if self.qdtype is None:  # per-channel (weights): int8, as PT2E quantizes weights; else either
            per_channel = "per_channel" in str(fn)
            self.qdtype = torch.int8 if per_channel else self.draw(st.sampled_from((torch.uint8, torch.int8)))
        qdtype = self.qdtype
        info = torch.iinfo(qdtype)
        name, kind = arg.name, schema_kind(arg).removesuffix("?")
        anchor = _anchor(drawn)
        channels = int(anchor.shape[0]) if anchor is not None and anchor.dim() else 1
        dequantize = base_name(fn).startswith("dequantize")
        if name in ("dtype",):
            return qdtype
        if name == "quant_min":
            return info.min
        if name == "quant_max":
            return info.max
        if name == "axis":
            return 0
        if name == "input" and dequantize:
            template = self.shaping.want_of(name) if self.shaping is not None else None
            shape = filled(self.draw, template) if template is not None else self.related_shape(None)
            return Pending(shape, qdtype, st.integers(info.min, info.max))
        positive = st.sampled_from((0.01, 0.02, 0.05, 0.1, 0.25))
        points = st.integers(max(info.min, -8), min(info.max, 8)) if qdtype == torch.int8 else st.integers(0, 255)
        if name == "scale":
            return Pending((), torch.float32, positive) if kind == "Tensor" else self.draw(positive)
        if name == "zero_point":
            return Pending((), torch.int64, points) if kind == "Tensor" else self.draw(points)
        if name == "scales":
            return Pending((channels,), torch.float32, positive)
        if name == "zero_points":
            return Pending((channels,), torch.int64, points)
        return _NOT_DRAWN

    def integer(self, name: str, anchor: Any, drawn: dict) -> int:
        rank = anchor.dim() if anchor is not None else 1
        if "dim" in name or name == "axis":
            return self.draw(st.integers(-max(rank, 1), max(rank - 1, 0)))
        size = _dim_size(anchor, drawn)
        if name in ("split_size", "chunks", "sections"):
            return self.draw(st.integers(1, max(size, 1)))
        if name in ("start", "end", "index", "length", "step"):
            return self.draw(st.integers(0 if name != "step" else 1, max(size, 1)))
        if name == "groups":
            return 1
        return self.draw(st.integers(0, 4))

    def int_list(self, fn: Any, name: str, anchor: Any, drawn: dict) -> list[int]:
        shape = list(anchor.shape) if anchor is not None else [self.draw(st.integers(1, MAX_SIDE))]
        fixed = self.shaping.fixed.get(name) if self.shaping is not None else None
        if fixed is not None:  # what makes this call's result the shape its parent needs
            rank = len(fixed)
            padded = [None] * max(rank - len(shape), 0) + [int(s) for s in shape][-rank:]
            return [f if f is not None else (p if p is not None else 1) for f, p in zip(fixed, padded, strict=True)]
        rank = len(shape)
        op = base_name(fn)
        if name in ("dims", "perm") or op == "permute":
            return self.draw(st.permutations(range(rank)))
        if name in ("dim", "reduced_dims") or "dim" in name:
            dims = self.draw(st.lists(st.integers(0, max(rank - 1, 0)), min_size=1, max_size=max(rank, 1), unique=True))
            return sorted(dims) if rank else []
        if name in ("split_sizes", "split_size", "sections", "split_size_or_sections"):
            size = _dim_size(anchor, drawn)
            return _partition(self.draw, size)
        if name in ("size", "shape") and anchor is not None:
            choice = self.draw(st.integers(0, 3))
            if op in ("expand", "broadcast_to"):
                return [*([self.draw(st.integers(1, 3))] if choice == 0 else []), *shape]
            if choice <= 1:
                return shape
            return list(self.draw(refactored(math.prod(shape))))
        if name in ("size", "shape"):
            return list(self.draw(st.lists(st.integers(1, MAX_SIDE), min_size=1, max_size=3)))
        if name in ("stride", "dilation"):
            return [1] * max(rank - 2, 1) if self.draw(st.integers(0, 2)) else [2] * max(rank - 2, 1)
        if name in ("padding", "output_padding"):
            return [0] * max(rank - 2, 1) if self.draw(st.integers(0, 2)) else [1] * max(rank - 2, 1)
        return list(self.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)))

    def tensor_like(self, fn: Any, position: ArgPosition, drawn: dict, positions: list[ArgPosition]) -> Any:
        """A tensor leaf: a provisional fake tensor (made a placeholder once its call runs)."""
        op = base_name(fn)
        name = position.schema.name if position.schema is not None else str(position.key)
        anchor = _anchor(drawn)
        dtype = self.dtype if not self.draw(st.integers(0, 7)) == 0 else self.draw(st.sampled_from(EXPR_DTYPES))
        if anchor is not None and anchor.dtype.is_floating_point and self.draw(st.integers(0, 3)):
            dtype = anchor.dtype
        dtype = _OPERAND_DTYPES.get(op, dtype)
        if name in ("index", "indices", "selector"):
            dim = next((v for k, v in drawn.items() if isinstance(v, int) and _is_dim_key(positions, k)), 0)
            size = anchor.shape[dim] if anchor is not None and anchor.dim() else 1
            shape = tuple(anchor.shape) if anchor is not None else (self.draw(st.integers(1, MAX_SIDE)),)
            return Pending(shape, torch.int64, st.integers(0, max(size - 1, 0)))
        template = self.shaping.want_of(name) if self.shaping is not None else None
        if template is not None and (op in CONTRACTIONS or op in CONVOLUTIONS or name in FIRST_ARGS or anchor is None):
            shape = filled(self.draw, template)
            if name in FIRST_ARGS and op not in CONTRACTIONS | CONVOLUTIONS and not self.draw(st.integers(0, 3)):
                shape = tuple(1 if self.draw(st.booleans()) else s for s in shape)  # the other side broadcasts
        elif template is not None and self.draw(st.integers(0, 2)):
            shape = self.related_shape(Pending(filled(self.draw, template), dtype))
        else:
            shape = self.related_shape(anchor)
            if anchor is None and template is None:  # a fresh tensor: its symbolic dims at their hints
                shape = hinted_shape(self.draw, shape, self.dynamic)
        return Pending(shape, dtype, None)

    def related_shape(self, anchor: Any) -> tuple[int, ...]:
        if anchor is None:
            return tuple(self.draw(st.lists(st.integers(1, MAX_SIDE), min_size=1, max_size=4)))
        shape = tuple(anchor.shape)
        choice = self.draw(st.integers(0, 6))
        if choice <= 2 or not shape:
            return shape
        if choice == 6 and len(shape) >= 2:  # per channel (dim 1), as a bias or a batch-norm scale is
            return (
                (shape[1], *([1] * (len(shape) - 2)))
                if self.draw(st.booleans())
                else (1, shape[1], *([1] * (len(shape) - 2)))
            )
        if choice == 3:  # a broadcast form: size-1 dims
            return tuple(1 if self.draw(st.booleans()) else s for s in shape)
        if choice == 4:  # a trailing suffix
            return shape[self.draw(st.integers(1, len(shape))) :]
        return tuple(self.draw(st.lists(st.integers(1, MAX_SIDE), min_size=1, max_size=4)))

    def tensor_list(self, fn: Any, position: ArgPosition, drawn: dict, positions: list[ArgPosition]) -> list[Any]:
        anchor = _anchor(drawn)
        if position.schema.name == "indices" and anchor is not None and anchor.dim():
            length = self.draw(st.integers(1, MAX_SIDE))
            return [Pending((length,), torch.int64, st.integers(0, max(anchor.shape[0] - 1, 0)))]
        first = self.tensor_like(fn, position, drawn, positions)
        return [first] + [Pending(first.shape, first.dtype, None) for _ in range(self.draw(st.integers(0, 2)))]

    def optional_near_miss(self, fn: Any, schema: Any, positions: list[ArgPosition], args: tuple, kwargs: dict) -> dict:
        """One optional argument the pattern does not bind, set (a near miss the matcher ignores):
        one call in four, each call that has one when ``near_miss="optional_arg"``."""
        if not self.near_misses or schema is None or not isinstance(fn, torch._ops.OpOverload):
            return {}
        bound = {p.key for p in positions} | {schema.arguments[i].name for i in range(len(args))}
        free = [a for a in schema.arguments[len(args) :] if a.has_default_value() and a.name not in bound]
        free = [
            a
            for a in free
            if schema_kind(a).removesuffix("?") in ("Scalar", "ScalarType", "bool", "int", "float", "MemoryFormat")
            and a.name not in _HOST_ONLY_FALSE
        ]
        self.optional_candidates = self.optional_candidates or bool(free)
        if self.draw(st.integers(0, 3)) and not self.force_optional:
            return {}
        if not free:
            return {}
        arg = free[self.draw(st.integers(0, len(free) - 1))]
        base = schema_kind(arg).removesuffix("?")
        value: Any
        if base == "ScalarType":
            value = self.draw(st.sampled_from((torch.float64, torch.float32, torch.float16)))
        elif base == "MemoryFormat":  # (channels_last on a 4-d tensor; a call it does not run on is redrawn)
            value = self.draw(st.sampled_from((torch.channels_last, torch.contiguous_format)))
        elif base == "bool":
            value = not bool(arg.default_value)
        elif base == "int":
            value = self.draw(st.integers(1, 2))
        else:
            value = self.draw(st.sampled_from((2.0, 0.5, -1.0)))
        if value == arg.default_value:
            return {}
        self.changed.append(f"{target_name(fn)} given {arg.name}={value!r}, which the pattern does not bind")
        return {arg.name: value}


def drawn_again(value: Any) -> Any:
    """A leaf drawn again as recorded: a tensor of the same shape, dtype and value range (a new
    one), any other value as it was."""
    if isinstance(value, list):
        return [drawn_again(v) for v in value]
    if isinstance(value, Pending):
        return Pending(value.shape, value.dtype, value.elements)
    return value


def draw_order(position: ArgPosition) -> tuple[int, int]:
    """Tensors first (what the rest is drawn after), then dims, then the rest, each in position order."""
    name = position.schema.name if position.schema is not None else ""
    kind = schema_kind(position.schema) if position.schema is not None else "Tensor"
    index = position.key if isinstance(position.key, int) else 100
    if kind.startswith("Tensor") and name not in ("index", "indices"):
        return (0, index)
    if "dim" in name:
        return (1, index)
    return (2, index)


def _anchor(drawn: dict) -> Any:
    """The first tensor drawn for the call (a fake value or a pending one), or None."""
    for value in drawn.values():
        if isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), torch.Tensor):
            return value.meta["val"]
        if isinstance(value, Pending):
            return value
        if isinstance(value, list) and value and isinstance(value[0], torch.fx.Node):
            val = value[0].meta.get("val")
            if isinstance(val, torch.Tensor):
                return val
    return None


def _has_tensor(drawn: dict) -> bool:
    return _anchor(drawn) is not None


def _dim_size(anchor: Any, drawn: dict) -> int:
    if anchor is None or not anchor.dim():
        return 1
    dims = [v for k, v in drawn.items() if isinstance(v, int) and not isinstance(v, bool) and k in ("dim", 2)]
    dim = dims[0] if dims else 0
    if -anchor.dim() <= dim < anchor.dim():
        return int(anchor.shape[dim])
    return int(anchor.shape[0])


def _is_dim_key(positions: list[ArgPosition], key: Any) -> bool:
    return any(p.key == key and p.schema is not None and p.schema.name == "dim" for p in positions)


def _partition(draw: Any, size: int) -> list[int]:
    if size <= 1:
        return [size]
    cuts = sorted(draw(st.lists(st.integers(1, size - 1), max_size=3, unique=True)))
    edges = [0, *cuts, size]
    return [b - a for a, b in itertools.pairwise(edges)]
