"""Cases on a device: :func:`on_device` moves a :class:`~pmverify.GraphCase` (its inputs, the
constants its graph reads, the devices its nodes name) to a CPU or CUDA device whole.

Why one move at the end: the strategies draw, trace and judge their ground truth on CPU (cheap,
deterministic, the same draws and shrinks on every machine, so an example database found on a GPU
machine replays on a laptop up to the move); the move is the last step of a strategy given
``device=`` (every case strategy takes it), and the first of :func:`pmverify.check_case` /
:func:`pmverify.verify` given ``device=``. What a move keeps, so that the oracles see on the device
what they would have seen on CPU:

- every input tensor's shape, strides, storage offset, dtype and values, and which inputs share a
  storage (a view of another input stays a view of it: moved storage by storage, not tensor by
  tensor), across the ranks of a tensor-parallel case too;
- the graph: each ``torch.device('cpu')`` in a node's arguments (creation ops' ``device=``,
  ``_to_copy``'s) names the target, and so does a factory call that leaves ``device=`` out (a
  hand-written ``aten.full(size, v)`` makes CPU tensors, torch's default); each tensor the graph
  reads by ``get_attr`` (frozen parameters, constants) is moved, and the fake values in ``node.meta`` (``val``,
  ``example_value``: what a pass reads, as Inductor's ``is_cuda`` checks do) say the target, with
  their symbolic sizes;
- a symbolic case's ``source`` (moved too).

The float64 reference of the semantics oracle runs on the case's device (the graph widened to
float64 there, :func:`pmverify._execution.float64_reference`): an op's numerics, strides and
aliasing are a device's own (Inductor lowers some ops per device), and a case's tensors are KiB,
so even a GPU whose float64 is 1/64 of its float32 rate runs the reference in microseconds; CPU
and CUDA are the devices supported (:data:`DEVICE_TYPES`), both with float64.

Without the device (CI on a CPU machine), :func:`simulated` makes moves to it produce fake tensors
(``FakeTensorMode``: shapes, strides, dtypes, aliasing; no values) and :func:`require_device` pass:
what tests of the plumbing (generation, fake propagation, a pass's device checks) run on.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from hypothesis.errors import InvalidArgument

from ._case import GraphCase
from .errors import DeviceUnavailable

__all__ = [
    "DEVICE_TYPES",
    "DeviceUnavailable",
    "case_device",
    "inputs_on",
    "on_device",
    "require_device",
    "require_runnable",
    "simulated",
    "tensor_on",
    "validate_device",
]

#: Device types a case runs on: both have float64 for the reference (MPS has none).
DEVICE_TYPES = ("cpu", "cuda")

#: The FakeTensorMode of :func:`simulated` and the device type it stands in for, or None.
_SIMULATED: contextvars.ContextVar[tuple[Any, str] | None] = contextvars.ContextVar("pmverify_simulated", default=None)


def validate_device(name: str, value: Any) -> torch.device | None:
    """``value`` (None, a str such as ``"cuda"`` / ``"cuda:1"``, or a ``torch.device``) as a
    ``torch.device``; None for None. A CUDA device without an index gets index 0, as its tensors
    report it.

    Raises ``hypothesis.errors.InvalidArgument`` naming ``name`` and ``value`` for anything else,
    and for a device type outside :data:`DEVICE_TYPES`."""
    if value is None:
        return None
    if not isinstance(value, (str, torch.device)):
        raise InvalidArgument(f"{name}={value!r} must be a device: 'cpu', 'cuda', 'cuda:1' or a torch.device")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError) as exc:
        raise InvalidArgument(f"{name}={value!r} is not a device ({exc})") from None
    if device.type not in DEVICE_TYPES:
        raise InvalidArgument(
            f"{name}={value!r}: cases run on {' or '.join(map(repr, DEVICE_TYPES))} devices (the float64 "
            f"reference runs on the case's device, and needs float64 there)"
        )
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    return device


def require_device(name: str, value: Any) -> torch.device | None:
    """:func:`validate_device`, then check that this machine has the device (or that
    :func:`simulated` stands in for it). Raises :class:`DeviceUnavailable` naming the argument
    otherwise (``torch.cuda.is_available()`` False, or an index past ``torch.cuda.device_count()``)."""
    device = validate_device(name, value)
    if device is None or device.type == "cpu" or _fake_mode_for(device) is not None:
        return device
    if not torch.cuda.is_available():
        raise DeviceUnavailable(
            f"{name}={value!r}: this machine has no CUDA device (torch {torch.__version__}: "
            "torch.cuda.is_available() is False); run on a GPU machine, or leave the device out to run on CPU"
        )
    if device.index >= torch.cuda.device_count():
        raise DeviceUnavailable(f"{name}={value!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def require_runnable(name: str, value: Any) -> torch.device | None:
    """:func:`require_device` for running cases (``check_case``, ``verify``): a device that
    :func:`simulated` stands for is refused too, since its fake tensors hold no values to run.
    Raises :class:`DeviceUnavailable` naming the argument for it."""
    device = require_device(name, value)
    if device is not None and _fake_mode_for(device) is not None:
        raise DeviceUnavailable(
            f"{name}={value!r} is simulated (pmverify.device.simulated): its fake tensors hold no values, so no "
            "case runs there; move cases to it with on_device and fake-propagate them instead (docs/gpu.md)"
        )
    return device


@contextlib.contextmanager
def simulated(device_type: str = "cuda") -> Iterator[Any]:
    """Inside the block, a move to a ``device_type`` device makes fake tensors there (one
    ``FakeTensorMode``, yielded: shapes, strides, dtypes and aliasing as a real move keeps them,
    no values) and :func:`require_device` accepts that device: for testing the device plumbing of
    strategies, graphs and passes on a machine without the device. Nothing runs for real on a
    simulated case: fake-propagate it (``torch.fx.passes.fake_tensor_prop.FakeTensorProp`` in the
    yielded mode) instead.

    Raises ``InvalidArgument`` for a ``device_type`` outside :data:`DEVICE_TYPES` or ``"cpu"``."""
    if device_type not in DEVICE_TYPES or device_type == "cpu":
        raise InvalidArgument(f"device_type={device_type!r} must be one of {DEVICE_TYPES[1:]}")
    from . import _compat

    mode = _compat.FakeTensorMode(allow_non_fake_inputs=True)
    token = _SIMULATED.set((mode, device_type))
    try:
        yield mode
    finally:
        _SIMULATED.reset(token)


def _fake_mode_for(device: torch.device) -> Any:
    simulated_ = _SIMULATED.get()
    if simulated_ is not None and simulated_[1] == device.type:
        return simulated_[0]
    return None


def _moved_bytes(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The whole storage of ``tensor`` as a uint8 tensor on ``device`` (copied; fake when simulated)."""
    storage = tensor.untyped_storage()
    mode = _fake_mode_for(device)
    if mode is not None:
        with mode:
            return torch.empty(storage.nbytes(), dtype=torch.uint8, device=device)
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage).to(device)


def _view_of(tensor: torch.Tensor, moved: torch.Tensor, device: torch.device) -> torch.Tensor:
    mode = _fake_mode_for(device)
    with mode if mode is not None else contextlib.nullcontext():
        out = torch.empty(0, dtype=tensor.dtype, device=device)
        out.set_(moved.untyped_storage(), tensor.storage_offset(), tensor.shape, tensor.stride())
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(out, requires_grad=tensor.requires_grad)
    return out.requires_grad_(tensor.requires_grad) if tensor.requires_grad else out


class _Mover:
    """Moves tensors storage by storage: tensors sharing a storage still share one on the device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._storages: dict[Any, torch.Tensor] = {}

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or value.device == self.device:
            return value
        storage = value.untyped_storage()
        key = (value.device, storage.data_ptr()) if storage.nbytes() else id(value)
        moved = self._storages.get(key)
        if moved is None:
            moved = self._storages[key] = _moved_bytes(value.detach(), self.device)
        return _view_of(value.detach(), moved, self.device)


def tensor_on(tensor: torch.Tensor, device: Any) -> torch.Tensor:
    """``tensor`` on ``device`` with its shape, strides, storage offset, dtype and values (the
    whole storage is copied, so a view stays the same view); ``tensor`` itself when it is there.

    Raises ``InvalidArgument`` for a bad ``device`` (see :func:`validate_device`),
    :class:`DeviceUnavailable` for a device this machine lacks."""
    return inputs_on((tensor,), device)[0]


def inputs_on(values: Sequence[Any], device: Any) -> tuple[Any, ...]:
    """``values`` (an input tuple) with each tensor on ``device``, moved storage by storage as
    :func:`on_device` moves a case's inputs (tensors sharing a storage still share one there);
    other items as they are. Raises as :func:`tensor_on` does."""
    target = require_device("device", device)
    if target is None:
        return tuple(values)
    mover = _Mover(target)
    return tuple(mover(value) for value in values)


def case_device(case: GraphCase) -> torch.device:
    """The device of ``case``'s tensor inputs (its first one's; CPU when it has none)."""
    for rank_inputs in case.inputs:
        for value in rank_inputs:
            if isinstance(value, torch.Tensor):
                return value.device
    return torch.device("cpu")


def _names_device(value: Any) -> bool:
    return isinstance(value, torch.device) or (isinstance(value, (list, tuple)) and any(map(_names_device, value)))


def _retarget(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.device):
        return device if value.type in DEVICE_TYPES else value
    if isinstance(value, (list, tuple)):
        return type(value)(_retarget(v, device) for v in value)
    return value


def _fake_on(value: Any, device: torch.device) -> Any:
    """A fake tensor of a node's meta, in its own mode, on ``device`` (symbolic sizes kept)."""
    mode = getattr(value, "fake_mode", None)
    if not isinstance(value, torch.Tensor) or mode is None or value.device == device:
        return value
    with mode:
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)


def _attribute_owner(gm: torch.fx.GraphModule, target: Any) -> tuple[Any, str]:
    """The object holding a ``get_attr`` node's ``target`` (``"sub.weight"``: ``gm.sub``) and the name."""
    *path, leaf = str(target).split(".")
    owner: Any = gm
    for part in path:
        owner = getattr(owner, part, None)
    return owner, leaf


def _makes_on_cpu_by_default(node: torch.fx.Node) -> bool:
    """Whether ``node`` calls a factory op (``full``, ``zeros``, ``arange``...: a ``device``
    argument and no tensor one) leaving ``device`` out, so that it makes CPU tensors, torch's
    default device. (A ``*_like`` op left without one follows its input instead.)"""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or node.kwargs.get("device") is not None:
        return False
    names = [argument.name for argument in schema.arguments]
    if "device" not in names or len(node.args) > names.index("device"):
        return False
    return not any("Tensor" in str(argument.type) for argument in schema.arguments)


def _graph_on(gm: torch.fx.GraphModule, device: torch.device) -> torch.fx.GraphModule:
    from ._compat import pytree

    moved = copy.deepcopy(gm)
    mover = _Mover(device)
    for node in moved.graph.nodes:
        if _names_device(node.args) or any(_names_device(v) for v in node.kwargs.values()):
            node.args = _retarget(node.args, device)
            node.kwargs = {k: _retarget(v, device) for k, v in node.kwargs.items()}
        if device.type != "cpu" and _makes_on_cpu_by_default(node):
            node.kwargs = {**node.kwargs, "device": device}
        for key in ("val", "example_value"):
            if key in node.meta:
                node.meta[key] = pytree.tree_map(lambda v: _fake_on(v, device), node.meta[key])
        if node.op == "get_attr":
            owner, leaf = _attribute_owner(moved, node.target)
            value = getattr(owner, leaf, None)
            if isinstance(value, torch.Tensor) and value.device != device:
                new = mover(value)
                if isinstance(owner, torch.nn.Module) and leaf in owner._parameters:
                    owner._parameters[leaf] = new
                elif isinstance(owner, torch.nn.Module) and leaf in owner._buffers:
                    owner._buffers[leaf] = new
                else:
                    setattr(owner, leaf, new)
    moved.recompile()
    return moved


def on_device(case: GraphCase, device: Any) -> GraphCase:
    """``case`` with its inputs, graph and ``source`` on ``device`` (see the module's docstring for
    what the move keeps); ``case`` itself when ``device`` is None or the case is already there.
    ``case`` is left unchanged.

    Raises ``InvalidArgument`` for a ``case`` that is not a ``GraphCase`` or a bad ``device``
    (:func:`validate_device`), :class:`DeviceUnavailable` for a device this machine lacks and
    :func:`simulated` does not stand in for."""
    if not isinstance(case, GraphCase):
        raise InvalidArgument(f"case={case!r} is not a GraphCase")
    target = require_device("device", device)
    if target is None or (case_device(case) == target and not _graph_names_other_device(case.gm, target)):
        return case
    mover = _Mover(target)
    inputs: Sequence[tuple[Any, ...]] = [tuple(mover(v) for v in rank) for rank in case.inputs]
    source = on_device(case.source, target) if case.source is not None else None
    return dataclasses.replace(case, gm=_graph_on(case.gm, target), inputs=inputs, source=source)


def _graph_names_other_device(gm: torch.fx.GraphModule, device: torch.device) -> bool:
    def other(value: Any) -> bool:
        if isinstance(value, torch.device):
            return (
                value.type in DEVICE_TYPES
                and value != device
                and not (value.type == device.type and value.index is None)
            )
        return isinstance(value, (list, tuple)) and any(map(other, value))

    for node in gm.graph.nodes:
        if other(node.args) or any(other(v) for v in node.kwargs.values()):
            return True
        if device.type != "cpu" and _makes_on_cpu_by_default(node):
            return True
        if node.op == "get_attr":
            owner, leaf = _attribute_owner(gm, node.target)
            value = getattr(owner, leaf, None)
            if isinstance(value, torch.Tensor) and value.device != device:
                return True
    return False
