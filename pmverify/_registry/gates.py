"""Gates of an ``extra_check``: what a machine or configuration must have for a rewrite's
``extra_check`` to accept a match it rejects here.

Some of Inductor's rewrites can never fire on a CPU-only machine with the default configuration:
pad_mm pads only CUDA matmuls, online-softmax needs a Triton GPU backend, freezing's concat-linear
wants frozen weights and ``config.cpp.enable_concat_linear``. :func:`find_gate` finds such a
condition without knowing the pass: it runs the ``extra_check`` again on a match it rejected,
with *levers* pulled one set at a time, smallest sets first:

- ``config``: a bool of ``torch._inductor.config`` the check read, flipped (the reads are recorded
  while it runs, so a lever appears only once the check reaches the flag);
- ``frozen``: the match's tensor inputs made constants (``get_attr`` nodes, as
  ``torch._inductor.config.freezing=True`` makes parameters), then narrowed to those needed;
- ``device``: every tensor value of the graph (``node.meta["val"]``) re-made as a fake tensor on
  ``cuda:0`` (FakeTensorMode makes them without CUDA), with ``torch.cuda.is_available()``,
  ``torch.cuda.device_count()`` and Triton's availability (``torch.utils._triton.has_triton``)
  answering as on a CUDA machine.

The first set that makes the check accept is the gate (:class:`Gate`); a check that accepts under
no set of at most ``max_levers`` levers has no gate found, and a rewrite that never matched stays
"never matched" (a pattern that silently never matches is a finding, never hidden as a gate).
A check that raises under a lever set counts as rejecting there.

Why simulate rather than read the check's source: the condition is then the check's own
behaviour, for any pass. Limits: the simulation patches the queries only while the check runs,
and a cache the check fills then (``functools.cache`` around a device query) keeps what it saw;
a check that benchmarks on the device fails under simulation (pad_mm is found through
``force_shape_pad``, which skips its benchmark). Private torch internals used, read at torch
2.13: ``ConfigModule.__getattr__`` (torch.utils._config_module; no public hook records config
reads), ``torch.utils._triton.has_triton``, ``FakeTensor.fake_mode``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

__all__ = [
    "Gate",
    "Lever",
    "RewriteGate",
    "validate_config_patches",
    "find_gate",
    "gate_of_rewrite",
    "inference_mode_gate",
    "rejection_key",
    "rewrite_copy",
    "unmet",
]

_DEVICE = "cuda"
#: Config the probe sets itself (never a lever): no persistent cache sees a simulated answer.
_PROBE_CONFIG = {"force_disable_caches": True}


@dataclasses.dataclass(frozen=True)
class Lever:
    """One simulated condition: ``kind`` is ``"config"`` (``key`` an option of
    ``torch._inductor.config``, ``value`` the value set), ``"frozen"`` (``value``: the names of
    the inputs made constants) or ``"device"`` (``key``: the device type)."""

    kind: str
    key: str
    value: Any = None

    def describe(self) -> str:
        if self.kind == "config":
            return f"torch._inductor.config.{self.key}={self.value!r}"
        if self.kind == "frozen":
            return (
                f"inputs {', '.join(self.value)} as frozen parameters (get_attr constants, as "
                "torch._inductor.config.freezing=True makes them)"
            )
        return "tensors on a CUDA device"


_ORDER = {"config": 0, "frozen": 1, "device": 2}  # what a user can set here first


@dataclasses.dataclass(frozen=True)
class Gate:
    """The levers under which the ``extra_check`` accepted the match: ``condition`` names them in
    words (``"tensors on a CUDA device (with Triton) and torch._inductor.config.force_shape_pad=True"``).
    ``computed``: when not empty, the check did not accept under ``levers`` but read how these
    inputs are computed (their producing node's target or arguments: ``w1`` must be a
    ``convert_element_type`` of an int8 tensor, say), which pmverify's drawn inputs, graph
    placeholders, can never be; the gate is then ``levers`` and those inputs computed as the check
    wants, not simulated."""

    levers: tuple[Lever, ...]
    triton: bool = False
    computed: tuple[str, ...] = ()

    @property
    def condition(self) -> str:
        words = []
        for lever in sorted(self.levers, key=lambda lv: -_ORDER[lv.kind]):
            text = lever.describe()
            if lever.kind == "device" and self.triton:
                text += " (with Triton)"
            words.append(text)
        if self.computed:
            inputs = f"input {self.computed[0]}" if len(self.computed) == 1 else f"inputs {', '.join(self.computed)}"
            them = "it" if len(self.computed) == 1 else "them"
            words.append(
                f"{inputs} computed in the graph as the check wants (it reads the node that computes {them}, where "
                "pmverify draws graph inputs)"
            )
        return " and ".join(words)


@dataclasses.dataclass(frozen=True)
class _Outcome:
    accepted: bool
    flags: tuple[tuple[str, bool], ...]  # bool config options read, with the value read
    triton: bool  # whether Triton's availability was asked
    computed: tuple[str, ...] = ()  # placeholder inputs whose producing node the check read


def rejection_key(match: Any) -> tuple[Any, ...]:
    """What a gate can depend on in ``match``: its inputs' shapes, strides, dtypes and devices and
    its other inputs' values (two matches of one key have one gate)."""
    key = []
    for name, value in sorted(match.kwargs.items()):
        val = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
        if isinstance(val, torch.Tensor):
            key.append((name, tuple(val.shape), tuple(val.stride()), val.dtype, val.device.type))
        else:
            key.append((name, repr(val)))
    return tuple(key)


def find_gate(check: Callable[[Any], Any], match: Any, *, max_levers: int = 3, max_calls: int = 64) -> Gate | None:
    """Return the smallest set of levers (at most ``max_levers``; ``max_calls`` runs of ``check``
    in all) under which ``check(match)`` accepts a ``match`` it rejects as is, or None when there
    is none (or it accepts as is). ``match``: the ``Match`` an ``extra_check`` was called with; its
    graph's nodes are changed while ``check`` runs and restored."""
    first = _run(check, match, ())
    if first.accepted:
        return None
    frontier = [((), first)]
    seen: set[tuple[Lever, ...]] = {()}
    calls = 1
    # the fewest levers under which the check read how an input is computed: the gate when none accepts
    computed = Gate((), first.triton, first.computed) if first.computed else None
    for _ in range(max_levers):
        following = []
        for levers, outcome in frontier:
            for lever in _candidates(match, levers, outcome):
                new = tuple(sorted((*levers, lever), key=lambda lv: (_ORDER[lv.kind], lv.key)))
                if new in seen:
                    continue
                if calls >= max_calls:
                    return computed
                seen.add(new)
                calls += 1
                result = _run(check, match, new)
                if result.accepted:
                    return _narrowed(check, match, new, result)
                if computed is None and result.computed:
                    computed = Gate(new, result.triton, result.computed)
                following.append((new, result))
        frontier = following
    return computed


@dataclasses.dataclass(frozen=True)
class RewriteGate:
    """What :func:`gate_of_rewrite` found: the ``gate`` (None when none was found), the ``match`` it
    was found on (its inputs in words: ``inputs``), and ``accepted``: inputs of other sizes or
    dtypes on which the ``extra_check`` accepts as is (when no gate was found), in words. ``met``:
    when no gate was found, a gate the cases' device already gives (:func:`unmet` left nothing of
    it), found on the match ``inputs`` names: the check accepts there simulated, yet rejected
    every match on the device; else None."""

    gate: Gate | None
    inputs: str | None = None
    accepted: str | None = None
    met: Gate | None = None


def unmet(gate: Gate | None, device: Any) -> Gate | None:
    """What of ``gate`` a run on ``device`` (a ``torch.device``, or None: CPU) does not give: the
    gate without its ``device`` lever when ``device`` is of that lever's type (a CUDA device
    gives "tensors on a CUDA device", Triton included); None when nothing is left of it (or
    ``gate`` is None). A gate of a match drawn on CPU (ground truth is computed there) names the
    device even when the cases run on it: this is what is still missing."""
    if gate is None:
        return None
    kind = None if device is None else torch.device(device).type
    levers = tuple(lever for lever in gate.levers if not (lever.kind == "device" and lever.key == kind))
    if len(levers) == len(gate.levers):
        return gate
    if not levers and not gate.computed:
        return None
    return dataclasses.replace(gate, levers=levers, triton=False)


def gate_of_rewrite(rewrite: Any, isolated: Any, *, forced: bool = False, device: Any = None) -> RewriteGate:
    """Look for the gate of a recorded rewrite's ``extra_check``: on the matches it rejected
    (``isolated.rejected``, from its one-rewrite pass), then on the search function traced on its
    example inputs with other sizes and dtypes, on ``device`` (:func:`_variants`: the drawn inputs
    may be ones the check rejects on every machine, such as a matmul pad_mm need not pad).
    ``forced``: the check is :func:`rewrite_copy`'s forced one, which looked for gates itself: only
    ``accepted`` is looked for. ``device``: where the cases ran (None: CPU); a gate is what of it
    that device does not give (:func:`unmet`); one it gives whole is ``met``, and the search goes on."""
    met: list[tuple[Gate, Any]] = []

    def gate_among(matches: list[Any]) -> RewriteGate | None:
        for match in matches:
            gate = find_gate(rewrite.extra_check, match)
            left = unmet(gate, device)
            if left is not None:
                return RewriteGate(left, _inputs(match))
            if gate is not None and not met:
                met.append((gate, match))
        return None

    found = None if forced else gate_among(list(isolated.rejected.values()))
    if found is not None:
        return found
    accepted = None
    for args in _variants(rewrite.search_args, device):
        isolated.rejected.clear()
        if _apply_on(rewrite, isolated, args) and accepted is None:
            from .._validation import short_repr

            accepted = short_repr(args)
        found = None if forced else gate_among(list(isolated.rejected.values()))
        if found is not None:
            return found
    if met:
        return RewriteGate(None, _inputs(met[0][1]), accepted, met=met[0][0])
    return RewriteGate(None, accepted=accepted)


def rewrite_copy(recorded: Any, *, force_extra_check: bool) -> tuple[Any, set[str]]:
    """A copy of ``recorded`` (registered afresh on first use: under the caller's config patches)
    and the set of conditions its ``extra_check`` is accepted under. With ``force_extra_check``,
    the ``extra_check`` accepts a match it rejects when :func:`find_gate` finds a gate for it, and
    the set collects those gates' conditions (a match rejected under no gate stays rejected:
    dtypes or scalars the check refuses on every machine are not forced)."""
    simulated: set[str] = set()
    check = recorded.extra_check
    if not force_extra_check or not recorded.has_extra_check:
        return dataclasses.replace(recorded), simulated

    gates: dict[Any, Gate | None] = {}

    def forced(match: Any) -> bool:
        if check(match):
            return True
        key = (rejection_key(match), tuple((node.op, node.target) for node in match.nodes))
        if key not in gates:
            gates[key] = find_gate(check, match)
        gate = gates[key]
        if gate is None:
            return False
        simulated.add(gate.condition)
        return True

    forced.__qualname__ = forced.__name__ = f"forced({getattr(check, '__qualname__', repr(check))})"
    arguments = {**recorded.arguments, "extra_check": forced}
    return dataclasses.replace(recorded, extra_check=forced, arguments=arguments), simulated


def inference_mode_gate(recorded: Any) -> str | None:
    """The condition under which ``recorded`` registers when it registers nothing now: outside
    ``torch.inference_mode()`` (``register_replacement`` skips ``joint_fwd_bwd`` patterns in
    inference mode), else None."""
    if not torch.is_inference_mode_enabled():
        return None
    from .._compat import PatternMatcherPass

    with torch.inference_mode(False):
        try:
            registered = recorded.register(PatternMatcherPass()) is not False
        except Exception:  # noqa: BLE001 - no evidence of the gate
            return None
    return "outside torch.inference_mode() (a training pattern)" if registered else None


def validate_config_patches(config_patches: Any) -> dict[str, Any]:
    """``config_patches`` as a dict of options of ``torch._inductor.config`` (dotted names:
    ``"cpp.enable_concat_linear"``); InvalidArgument naming it for anything else, an unknown
    option, or a non-bool value for a bool option."""
    from hypothesis.errors import InvalidArgument

    from .._compat import inductor_config as config

    if config_patches is None:
        return {}
    if not isinstance(config_patches, Mapping):
        raise InvalidArgument(
            f"config_patches={config_patches!r} must be a mapping of torch._inductor.config options to values"
        )
    options = config.get_config_copy()  # with values, to check their types
    for key, value in config_patches.items():
        if not isinstance(key, str) or key not in options:
            raise InvalidArgument(
                f"config_patches={dict(config_patches)!r}: {key!r} is no option of torch._inductor.config"
            )
        if isinstance(options[key], bool) and not isinstance(value, bool):
            raise InvalidArgument(
                f"config_patches={dict(config_patches)!r}: torch._inductor.config.{key} is a bool, not {value!r}"
            )
    return dict(config_patches)


def _variants(args: tuple[Any, ...], device: Any = None) -> Iterator[tuple[Any, ...]]:
    """``args`` with every size above 1 made one larger (equal sizes kept equal), with the float
    tensors cast to float16 and to bfloat16, and both (zeros; ``requires_grad`` kept), on
    ``device`` (None: CPU; moved with :func:`pmverify.device.tensor_on`)."""
    sizes = {s for a in args if isinstance(a, torch.Tensor) for s in a.shape if s > 1}
    for grow in (False, True):
        if grow and not sizes:
            continue
        for dtype in (None, torch.float16, torch.bfloat16):
            if not grow and dtype is None:
                continue
            variant = tuple(_variant(a, grow, dtype) for a in args)
            yield variant if device is None else tuple(_moved(a, device) for a in variant)


def _moved(value: Any, device: Any) -> Any:
    from ..device import tensor_on

    if not isinstance(value, torch.Tensor):
        return value
    moved = tensor_on(value.detach(), device)
    return moved.requires_grad_() if value.requires_grad and not moved.requires_grad else moved


def _variant(value: Any, grow: bool, dtype: torch.dtype | None) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    shape = [s + 1 if grow and s > 1 else s for s in value.shape]
    floating = value.dtype.is_floating_point
    return torch.zeros(
        shape,
        dtype=dtype if dtype is not None and floating else value.dtype,
        requires_grad=value.requires_grad and floating,
    )


def _apply_on(rewrite: Any, isolated: Any, args: tuple[Any, ...]) -> bool:
    """Run the one-rewrite pass on the search function traced on ``args``; whether it rewrote."""
    import copy

    from .._execution import propagate_fake, quiet_fake_tensor_errors
    from .._fx import trace

    try:
        gm = copy.deepcopy(trace(rewrite.search_fn, args, rewrite.trace_fn))
        propagate_fake(gm, tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args))
        with quiet_fake_tensor_errors():
            return isolated.pass_.apply(gm.graph) > 0
    except Exception:  # noqa: BLE001 - a variant the pattern does not trace on: no evidence
        return False


def _inputs(match: Any) -> str:
    """The match's inputs in words: ``mat1=tensor[5, 5]:float16, ...``."""
    from .._validation import short_repr

    parts = []
    for name, value in match.kwargs.items():
        val = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
        parts.append(f"{name}={short_repr(val)}")
    return ", ".join(parts)


def _candidates(match: Any, levers: tuple[Lever, ...], outcome: _Outcome) -> list[Lever]:
    """Levers to add to ``levers``: flags the run read, then frozen inputs, then the device."""
    kinds = {(lever.kind, lever.key) for lever in levers}
    out = [Lever("config", key, not value) for key, value in outcome.flags if ("config", key) not in kinds]
    if not any(lever.kind == "frozen" for lever in levers):
        names = _placeholder_inputs(match)
        if names:
            out.append(Lever("frozen", "inputs", names))
    if ("device", _DEVICE) not in kinds and any(v.device.type != _DEVICE for v in _graph_tensors(match)):
        out.append(Lever("device", _DEVICE))
    return out


def _narrowed(check: Callable[[Any], Any], match: Any, levers: tuple[Lever, ...], outcome: _Outcome) -> Gate:
    """The gate of ``levers`` with its frozen inputs narrowed to those the check needs."""
    levers = list(levers)
    for i, lever in enumerate(levers):
        if lever.kind != "frozen":
            continue
        names = list(lever.value)
        for name in list(names):
            trial = [n for n in names if n != name]
            if not trial:
                continue
            candidate = [*levers[:i], Lever("frozen", "inputs", tuple(trial)), *levers[i + 1 :]]
            if _run(check, match, tuple(candidate)).accepted:
                names = trial
        levers[i] = Lever("frozen", "inputs", tuple(names))
    final = _run(check, match, tuple(levers))
    return Gate(tuple(levers), triton=final.triton or outcome.triton)


def _placeholder_inputs(match: Any) -> tuple[str, ...]:
    """Names (in ``match.kwargs``) of the match's inputs that are tensor placeholders."""
    return tuple(
        name
        for name, value in match.kwargs.items()
        if isinstance(value, torch.fx.Node)
        and value.op == "placeholder"
        and isinstance(value.meta.get("val"), torch.Tensor)
    )


def _graph_tensors(match: Any) -> Iterator[torch.Tensor]:
    for node in match.graph.nodes:
        for leaf in torch.utils._pytree.tree_leaves(node.meta.get("val")):
            if isinstance(leaf, torch.Tensor):
                yield leaf


def _run(check: Callable[[Any], Any], match: Any, levers: tuple[Lever, ...]) -> _Outcome:
    """Run ``check(match)`` with ``levers`` simulated, recording the bool config it reads."""
    from .._compat import inductor_config as config

    patches = dict(_PROBE_CONFIG)
    patches.update({lever.key: lever.value for lever in levers if lever.kind == "config"})
    reads: dict[str, bool] = {}
    asked = [False]
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(config.patch(patches))
        for lever in levers:
            if lever.kind == "frozen":
                stack.enter_context(_frozen(match, lever.value))
            elif lever.kind == "device":
                stack.enter_context(_on_device(match, asked))
        stack.enter_context(_recording_reads(config, reads))
        inspected: set[str] = set()
        stack.enter_context(_recording_producers(match, inspected))
        try:
            accepted = bool(check(match))
        except Exception:  # noqa: BLE001 - a check that raises under simulation rejects there
            accepted = False
    flags = tuple((key, value) for key, value in reads.items() if key not in _PROBE_CONFIG)
    computed = tuple(name for name in _placeholder_inputs(match) if name in inspected)
    return _Outcome(accepted, flags, asked[0], computed)


#: What a check reads of a node to see how it is computed (a placeholder has none of it to show).
_PRODUCER_READS = frozenset({"target", "args", "kwargs", "_input_nodes", "all_input_nodes"})


class _RecordedNode(torch.fx.Node):
    """A node whose reads of :data:`_PRODUCER_READS` are recorded (in ``_RecordedNode.reads``,
    the names of the inputs read): swapped in as the class of a match's placeholder inputs."""

    __slots__ = ()
    reads: dict[int, tuple[str, set[str]]] = {}

    def __getattribute__(self, attribute: str) -> Any:
        if attribute in _PRODUCER_READS:
            entry = _RecordedNode.reads.get(id(self))
            if entry is not None:
                entry[1].add(entry[0])
        return super().__getattribute__(attribute)


@contextlib.contextmanager
def _recording_producers(match: Any, inspected: set[str]) -> Iterator[None]:
    """Record in ``inspected`` the names of ``match``'s placeholder inputs whose producing node the
    block reads (:data:`_PRODUCER_READS`)."""
    nodes = [(name, match.kwargs[name]) for name in _placeholder_inputs(match)]
    for name, node in nodes:
        _RecordedNode.reads[id(node)] = (name, inspected)
        node.__class__ = _RecordedNode
    try:
        yield
    finally:
        for _, node in nodes:
            node.__class__ = torch.fx.Node
            _RecordedNode.reads.pop(id(node), None)


@functools.cache
def _options() -> frozenset[str]:
    """The option names of ``torch._inductor.config`` (dotted: ``"cpp.enable_concat_linear"``)."""
    from .._compat import inductor_config as config

    return frozenset(config.get_config_copy())


@contextlib.contextmanager
def _recording_reads(config: Any, reads: dict[str, bool]) -> Iterator[None]:
    """Record in ``reads`` every bool option of ``config`` (a ConfigModule) read inside the block,
    with the value read (first read wins). Private: ConfigModule.__getattr__, torch 2.13."""
    cls = type(config)
    had = "__getattr__" in cls.__dict__
    previous = cls.__dict__.get("__getattr__")
    base = cls.__getattr__
    options = _options()

    def __getattr__(self: Any, name: str) -> Any:
        value = base(self, name)
        if self is config and name in options and isinstance(value, bool):
            reads.setdefault(name, value)
        return value

    cls.__getattr__ = __getattr__
    try:
        yield
    finally:
        if had:
            cls.__getattr__ = previous
        else:
            del cls.__getattr__


@contextlib.contextmanager
def _frozen(match: Any, names: tuple[str, ...]) -> Iterator[None]:
    """The placeholder nodes of ``match.kwargs[name]`` made ``get_attr`` nodes inside the block."""
    nodes = [match.kwargs[name] for name in names]
    for node in nodes:
        node.op = "get_attr"
    try:
        yield
    finally:
        for node in nodes:
            node.op = "placeholder"


def _on_cuda(value: Any) -> Any:
    if not isinstance(value, torch.Tensor) or value.device.type == _DEVICE:
        return value
    mode = getattr(value, "fake_mode", None)
    if mode is None:
        from .._compat import FakeTensorMode

        mode = FakeTensorMode()
    with mode:
        return torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device=_DEVICE, requires_grad=value.requires_grad
        )


@functools.lru_cache(maxsize=1)
def _holding(function: Any, modules: int) -> tuple[Any, ...]:
    """The loaded modules holding ``function`` as a global (scanned again when ``modules``, the
    number of loaded modules, changes)."""
    return tuple(
        module
        for module in list(sys.modules.values())
        if isinstance(getattr(module, "__dict__", None), dict) and module.__dict__.get("has_triton") is function
    )


@contextlib.contextmanager
def _on_device(match: Any, asked: list[bool]) -> Iterator[None]:
    """Inside the block, every tensor value of the match's graph is a fake tensor on ``cuda:0`` and
    the device queries answer as on a CUDA machine with Triton (``asked[0]`` set when Triton's
    availability is asked)."""
    from .._compat import triton_utils as _triton

    saved = {}
    for node in match.graph.nodes:
        if "val" in node.meta:
            saved[node] = node.meta["val"]
            node.meta["val"] = torch.utils._pytree.tree_map(_on_cuda, node.meta["val"])

    def has_triton() -> bool:
        asked[0] = True
        return True

    replaced = [(torch.cuda, "is_available", lambda: True), (torch.cuda, "device_count", lambda: 1)]
    replaced += [(module, "has_triton", has_triton) for module in _holding(_triton.has_triton, len(sys.modules))]
    previous = [(owner, name, getattr(owner, name)) for owner, name, _ in replaced]
    try:
        for owner, name, value in replaced:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in previous:
            setattr(owner, name, value)
        for node, val in saved.items():
            node.meta["val"] = val
