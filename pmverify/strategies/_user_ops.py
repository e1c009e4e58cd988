"""A project's own mutable custom ops, as ``with_mutating_custom_ops(ops=..., examples=...)`` takes
them: each op's schema read once, its example calls validated, and the calls drawn for a case
checked before they are drawn.

An op's schema says which args it mutates (``Tensor(a!)``), which are optional and which are
scalars, but not the shapes or dtypes its kernel takes: those come from example calls or, without
them, from the drawn target (every tensor arg of its layout). A call for a case renames the sizes
and dtype of one example tensor arg to the target's; every other tensor arg of the example holding
one of those sizes or that dtype follows. A call is drawn only when the op's fake kernel accepts
it and its eager kernel runs it to finite values; both are tried once per call and cached. The
eager run also tells which mutated args the op only writes (its results do not depend on their
contents): only those may be fresh ``empty`` buffers.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from hypothesis.errors import InvalidArgument

from .._compat import can_auto_functionalize, has_fake_kernel

__all__ = ["TensorArg", "Call", "UserOp", "validate_ops", "candidates", "verdict", "Verdict", "call_kwargs"]

_DRAWN = (-2.0, 2.0)  # floating values of a drawn tensor arg
_POSITIVE = (0.5, 2.0)  # ... of one named like a scale


@dataclasses.dataclass(frozen=True)
class TensorArg:
    """A tensor argument of a call: its layout and the range its drawn values lie in
    (``[low, high)`` for floating dtypes, integers in ``[low, high]`` otherwise)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    low: float
    high: float

    def fill(self, generator: torch.Generator, device: Any = "cpu") -> torch.Tensor:
        """A tensor of this layout holding values drawn from ``generator``."""
        if self.dtype.is_floating_point:
            values = (torch.rand(self.shape, generator=generator) * (self.high - self.low) + self.low).to(self.dtype)
        elif self.dtype == torch.bool:
            values = torch.randint(0, 2, self.shape, generator=generator).bool()
        else:
            values = torch.randint(int(self.low), int(self.high) + 1, self.shape, generator=generator).to(self.dtype)
        out = torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=device)
        out.copy_(values)
        return out


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(torch.empty(tuple(shape), device="meta").stride())


def _from_example(name: str, value: torch.Tensor) -> TensorArg:
    """The layout of an example tensor and the range its drawn values lie in: an integer (or bool)
    tensor's own min and max (0 for a meta tensor), [0.5, 2) for a floating arg named like a scale,
    [-2, 2) for other floating args (an example's float values, often ``torch.empty``, are ignored)."""
    low, high = _DRAWN
    if not value.dtype.is_floating_point:
        low = high = 0
        if value.device.type != "meta" and value.numel():
            low, high = int(value.min()), int(value.max())
    elif "scale" in name:
        low, high = _POSITIVE
    return TensorArg(tuple(value.shape), _contiguous(value.shape), value.dtype, low, high)


@dataclasses.dataclass(frozen=True)
class Call:
    """A call of ``op``: ``args`` are ``(name, value)`` in schema order, a value being a
    :class:`TensorArg`, None or a scalar (lists as tuples); ``anchor`` is the arg the drawn target
    takes, None for an example drawn as it is."""

    op: Any
    args: tuple[tuple[str, Any], ...]
    anchor: str | None = None

    def value(self, name: str) -> Any:
        return dict(self.args).get(name)


@dataclasses.dataclass(frozen=True)
class UserOp:
    """An op of ``ops=``: its mutated tensor args (schema order), its tensor args, and its examples."""

    op: Any
    mutated: tuple[str, ...]
    tensors: tuple[str, ...]
    examples: tuple[Call, ...]

    @property
    def name(self) -> str:
        return self.op._name.split("::")[-1]


def _is_tensor(arg: Any) -> bool:
    return isinstance(arg.type, torch.TensorType)


def _is_optional_tensor(arg: Any) -> bool:
    return isinstance(arg.type, torch.OptionalType) and isinstance(arg.type.getElementType(), torch.TensorType)


def _is_mutated(arg: Any) -> bool:
    return arg.alias_info is not None and arg.alias_info.is_write


def _scalar(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def call_kwargs(call: Call, tensors: Mapping[str, Any]) -> dict[str, Any]:
    """The kwargs of ``call``: ``tensors`` for its tensor args, its scalars (tuples as lists)."""
    kwargs = {}
    for name, value in call.args:
        if isinstance(value, TensorArg):
            kwargs[name] = tensors[name]
        else:
            kwargs[name] = list(value) if isinstance(value, tuple) else value
    return kwargs


def _bind(op: Any, example: Any, where: str) -> Call:
    schema = op._schema
    names = [arg.name for arg in schema.arguments]
    if isinstance(example, Mapping):
        unknown = [name for name in example if name not in names]
        if unknown:
            raise InvalidArgument(f"{where} names {unknown!r}, not arguments of {schema}")
        given = dict(example)
    elif isinstance(example, (tuple, list)):
        if len(example) > len(names):
            raise InvalidArgument(f"{where} holds {len(example)} arguments; {schema} takes {len(names)}")
        given = dict(zip(names, example, strict=False))
    else:
        raise InvalidArgument(f"{where}={example!r} must be a tuple of the op's arguments or a dict by name")
    args = []
    for arg in schema.arguments:
        if arg.name not in given:
            if not arg.has_default_value():
                raise InvalidArgument(f"{where} misses argument {arg.name!r} of {schema}")
            continue
        value = given[arg.name]
        if _is_tensor(arg) or _is_optional_tensor(arg):
            if value is None and _is_tensor(arg):
                raise InvalidArgument(f"{where}: argument {arg.name!r} must be a tensor, not None")
            if value is not None and not isinstance(value, torch.Tensor):
                raise InvalidArgument(f"{where}: argument {arg.name!r} must be a tensor, not {value!r}")
            args.append((arg.name, None if value is None else _from_example(arg.name, value)))
        elif isinstance(value, torch.Tensor):
            raise InvalidArgument(f"{where}: argument {arg.name!r} of type {arg.type} holds a tensor")
        else:
            args.append((arg.name, _scalar(value)))
    return Call(op, tuple(args))


def _default_scalar(arg: Any) -> Any:
    if arg.has_default_value():
        return _scalar(arg.default_value)
    kind = arg.type.kind() if hasattr(arg.type, "kind") else ""
    return {"FloatType": 1.0, "IntType": 1, "BoolType": False, "SymIntType": 1}.get(kind)


def validate_ops(ops: Any, examples: Any) -> tuple[UserOp, ...]:
    """``ops`` and ``examples`` checked and read; raises InvalidArgument (see
    ``with_mutating_custom_ops``)."""
    if not isinstance(ops, Sequence) or isinstance(ops, (str, bytes)) or not ops:
        raise InvalidArgument(f"ops={ops!r} must be a non-empty list of OpOverloads (torch.ops.ns.op.default)")
    if examples is not None and not isinstance(examples, Mapping):
        raise InvalidArgument(f"examples={examples!r} must be a dict from an op of ops to a list of example calls")
    examples = dict(examples or {})
    for key in examples:
        if key not in ops:
            raise InvalidArgument(f"examples names {key!r}, which is not in ops={ops!r}")
    result = []
    for op in ops:
        if isinstance(op, torch._ops.OpOverloadPacket):
            raise InvalidArgument(f"ops holds the packet {op!r}; pass an overload such as {op}.default")
        if not isinstance(op, torch._ops.OpOverload):
            raise InvalidArgument(f"ops holds {op!r}, not a torch OpOverload (torch.ops.ns.op.default)")
        arguments = op._schema.arguments
        mutated = tuple(arg.name for arg in arguments if _is_mutated(arg))
        if not mutated:
            raise InvalidArgument(f"ops holds {op}, which mutates no argument (no Tensor(a!) in {op._schema})")
        if not can_auto_functionalize(op):
            raise InvalidArgument(f"ops holds {op}: functionalization cannot wrap {op._schema} in auto_functionalized")
        unsupported = [
            arg.name
            for arg in arguments
            if "Tensor" in str(arg.type) and not (_is_tensor(arg) or _is_optional_tensor(arg))
        ]
        if unsupported:
            raise InvalidArgument(f"ops holds {op}: its tensor-list args {unsupported!r} are not drawn")
        if not has_fake_kernel(op):
            raise InvalidArgument(f"ops holds {op}, which has no fake kernel (torch.library.register_fake)")
        given = examples.get(op)
        calls: list[Call] = []
        if given is not None:
            if not isinstance(given, Sequence) or isinstance(given, (str, bytes)) or not given:
                raise InvalidArgument(f"examples[{op}]={given!r} must be a non-empty list of example calls")
            for i, example in enumerate(given):
                where = f"examples[{op}][{i}]"
                call = _bind(op, example, where)
                found = verdict(call)
                if found.error is not None:
                    raise InvalidArgument(f"{where} is not a valid call of {op}: {found.error}")
                calls.append(call)
        tensors = tuple(arg.name for arg in arguments if _is_tensor(arg) or _is_optional_tensor(arg))
        result.append(UserOp(op, mutated, tensors, tuple(calls)))
    return tuple(result)


def _default_calls(uop: UserOp, target: torch.Tensor) -> list[Call]:
    """Without examples: every tensor arg of ``target``'s layout; optional tensors None, then tensors."""
    anchor = uop.mutated[0]
    calls = []
    for optional in (False, True):
        args = []
        for arg in uop.op._schema.arguments:
            if _is_tensor(arg) or (optional and _is_optional_tensor(arg)):
                stride = tuple(target.stride()) if arg.name == anchor else _contiguous(target.shape)
                low, high = _POSITIVE if "scale" in arg.name else _DRAWN
                args.append((arg.name, TensorArg(tuple(target.shape), stride, target.dtype, low, high)))
            elif _is_optional_tensor(arg):
                args.append((arg.name, None))
            else:
                args.append((arg.name, _default_scalar(arg)))
        calls.append(Call(uop.op, tuple(args), anchor))
    return calls if any(_is_optional_tensor(arg) for arg in uop.op._schema.arguments) else calls[:1]


def _renamed(example: Call, anchor: str, target: torch.Tensor) -> Call | None:
    """``example`` with its ``anchor`` arg's sizes and dtype renamed to ``target``'s; None when the
    anchor holds one size twice and the target does not."""
    given = example.value(anchor)
    sizes: dict[int, int] = {}
    for old, new in zip(given.shape, target.shape, strict=True):
        if sizes.setdefault(old, new) != new:
            return None
    args = []
    for name, value in example.args:
        if isinstance(value, TensorArg):
            if name == anchor:
                value = TensorArg(tuple(target.shape), tuple(target.stride()), target.dtype, value.low, value.high)
            else:
                shape = tuple(sizes.get(size, size) for size in value.shape)
                dtype = target.dtype if value.dtype == given.dtype else value.dtype
                value = TensorArg(shape, _contiguous(shape), dtype, value.low, value.high)
        args.append((name, value))
    return Call(example.op, tuple(args), anchor)


def candidates(uop: UserOp, target: torch.Tensor) -> list[Call]:
    """The calls of ``uop`` that may be drawn with ``target`` (a meta tensor) written or read:
    each example as it is, then each renamed to ``target`` through one of its tensor args; without
    examples, the calls of :func:`_default_calls`. Only calls whose :func:`verdict` accepts them."""
    found: list[Call] = list(uop.examples)
    if not uop.examples:
        found.extend(_default_calls(uop, target))
    for example in uop.examples:
        for name, value in example.args:
            if isinstance(value, TensorArg) and len(value.shape) == target.dim() and target.dim() >= 1:
                renamed = _renamed(example, name, target)
                if renamed is not None and renamed not in found:
                    found.append(renamed)
    return [call for call in found if verdict(call).error is None]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a call may be drawn (``error`` None) and which mutated args it only writes."""

    error: str | None
    write_only: frozenset[str] = frozenset()


def _finite(value: torch.Tensor) -> bool:
    return not value.dtype.is_floating_point or bool(value.float().isfinite().all())


def _flat(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for t in result if isinstance(t, torch.Tensor)]
    return []


def _run(call: Call, seed: int, blank: str | None = None) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    tensors = {name: value.fill(generator) for name, value in call.args if isinstance(value, TensorArg)}
    if blank is not None:
        tensors[blank].zero_()
    out = _flat(call.op(**call_kwargs(call, tensors)))
    mutated = [tensors[arg.name] for arg in call.op._schema.arguments if _is_mutated(arg) and arg.name in tensors]
    return out + mutated


def _same(first: list[torch.Tensor], second: list[torch.Tensor]) -> bool:
    return len(first) == len(second) and all(
        a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.float(), b.float())
        for a, b in zip(first, second, strict=True)
    )


@functools.lru_cache(maxsize=2048)
def verdict(call: Call) -> Verdict:
    """Whether ``call`` may be drawn: its op's fake kernel accepts it and its eager kernel (on the
    CPU) runs it to finite values; with the mutated args whose contents its results ignore."""
    from .._compat import FakeTensorMode

    try:
        with FakeTensorMode():
            fakes = {
                name: torch.empty_strided(v.shape, v.stride, dtype=v.dtype)
                for name, v in call.args
                if isinstance(v, TensorArg)
            }
            call.op(**call_kwargs(call, fakes))
    except Exception as exc:  # noqa: BLE001 - the op's own fake kernel rejects the call
        return Verdict(
            f"its fake kernel raises {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        )
    try:
        results = _run(call, 0)
    except Exception as exc:  # noqa: BLE001 - the op's own kernel rejects the call
        return Verdict(f"it raises {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
    if not all(_finite(t) for t in results):
        return Verdict("it computes non-finite values from inputs in their drawn ranges")
    write_only = set()
    for arg in call.op._schema.arguments:
        if _is_mutated(arg) and isinstance(call.value(arg.name), TensorArg):
            try:
                if _same(results, _run(call, 0, blank=arg.name)):
                    write_only.add(arg.name)
            except Exception:  # noqa: BLE001 - not write-only then
                pass
    return Verdict(None, frozenset(write_only))


def describe_examples(uops: Sequence[UserOp]) -> str:
    """``examples=`` as a strategy's repr shows it: each call's tensors by layout, never by value."""

    def arg(value: Any) -> str:
        if isinstance(value, TensorArg):
            return f"{'x'.join(map(str, value.shape)) or 'scalar'} {str(value.dtype).removeprefix('torch.')}"
        return repr(value)

    entries = [
        f"{uop.op}: [{', '.join('(' + ', '.join(arg(v) for _, v in call.args) + ')' for call in uop.examples)}]"
        for uop in uops
        if uop.examples
    ]
    return "{" + ", ".join(entries) + "}"
