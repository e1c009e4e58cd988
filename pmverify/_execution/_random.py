"""Random numbers in the graphs the oracles run: every run of a graph that draws starts from one
generator state, and a float64 twin draws what the graph drew (see :mod:`pmverify.oracles._rng`
for how the semantics oracle judges such cases).

A graph on a CUDA device draws from that device's generator, not the CPU one: every state here is
the CPU generator's and each CUDA generator a run may draw from (:func:`rng_devices`: its tensor
arguments' devices and those its nodes name), forked, seeded, recorded and set together
(``torch.random.fork_rng(devices=[])`` alone would leave a CUDA draw unreplayed and the CUDA
generator advanced)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from .._compat import pytree
from ._dtypes import inspectable

__all__ = [
    "RNG_SEED",
    "Replayer",
    "draws",
    "forked_rng",
    "random_calls",
    "rng_devices",
    "run_recording",
    "run_replaying",
    "seeded",
]

#: Seed of the default generators (CPU, and each CUDA device's) every run of a graph that draws starts from.
RNG_SEED = 0

#: The generators' states before a draw: the CPU generator's, and (index, state) per CUDA device.
GeneratorStates = tuple[torch.Tensor, tuple[tuple[int, torch.Tensor], ...]]


def rng_devices(gm: torch.fx.GraphModule, args: Any = ()) -> list[int]:
    """The CUDA devices (indices) whose generators a run of ``gm`` on ``args`` may draw from: those
    of the tensors in ``args`` and of the tensors and devices its nodes read. Empty on CPU."""
    found: set[int] = set()

    def note(device: torch.device) -> None:
        if device.type == "cuda":
            found.add(device.index if device.index is not None else torch.cuda.current_device())

    for value in pytree.tree_leaves(list(args)):
        if isinstance(value, torch.Tensor):
            note(value.device)
    for node in gm.graph.nodes:
        for value in pytree.tree_leaves((node.args, node.kwargs)):
            if isinstance(value, torch.device):
                note(value)
        if node.op == "get_attr":
            value: Any = gm
            for part in str(node.target).split("."):
                value = getattr(value, part, None)
            if isinstance(value, torch.Tensor):
                note(value.device)
    return sorted(found)


def forked_rng(gm: torch.fx.GraphModule, args: Any = ()) -> contextlib.AbstractContextManager[None]:
    """``torch.random.fork_rng`` of the CPU generator and of each CUDA generator a run of ``gm`` on
    ``args`` may draw from (:func:`rng_devices`): their states are restored on exit."""
    return torch.random.fork_rng(devices=rng_devices(gm, args))


def _states(devices: list[int]) -> GeneratorStates:
    return torch.random.get_rng_state(), tuple((d, torch.cuda.get_rng_state(d)) for d in devices)


def _set_states(states: GeneratorStates) -> None:
    cpu, cuda = states
    torch.random.set_rng_state(cpu)
    for device, state in cuda:
        torch.cuda.set_rng_state(state, device)


def _argument(node: torch.fx.Node, name: str) -> Any:
    """The value of argument ``name`` of the call ``node`` (its schema default when not given), or
    None when the op has no such argument."""
    for position, argument in enumerate(node.target._schema.arguments):
        if argument.name == name:
            if name in node.kwargs:
                return node.kwargs[name]
            if not argument.kwarg_only and position < len(node.args):
                return node.args[position]
            return argument.default_value if argument.has_default_value() else None
    return None


def draws(node: torch.fx.Node) -> bool:
    """Whether ``node`` calls an op that draws from the default generator: its op is tagged
    ``torch.Tag.nondeterministic_seeded``, unless its ``dropout_p`` is a literal 0 or its ``train``
    a literal False (see :mod:`pmverify.oracles._rng`)."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded not in node.target.tags:
        return False
    dropout, train = _argument(node, "dropout_p"), _argument(node, "train")
    return not (isinstance(dropout, (int, float)) and dropout == 0) and train is not False


def _shapes(node: torch.fx.Node, vals: Mapping[str, Any] | None) -> str:
    values = pytree.tree_leaves(node.meta.get("val") if vals is None else vals.get(node.name))
    shown = [f"{str(v.dtype).removeprefix('torch.')}{list(v.shape)}" for v in values if isinstance(v, torch.Tensor)]
    if shown:
        return ", ".join(shown)
    return ", ".join(repr(a) for a in node.args if not isinstance(a, torch.fx.Node))


def random_calls(gm: torch.fx.GraphModule, vals: Mapping[str, Any] | None = None) -> list[str]:
    """What ``gm`` draws, in graph order: one ``"aten.randperm.default -> int64[8]"`` per node
    that draws (the outputs' dtypes and shapes from ``vals``, each node's fake value by name, when
    given, else from ``meta["val"]``; the call's constant arguments where neither has one).

    Why ``vals``: a graph rebuilt without fake values (a reproducer's, a hand-made case's) lists a
    ``rand(size, dtype=...)`` by its arguments, the graph after the pass by its values: pass the
    propagation of the graph before the pass so that both list the same thing."""
    return [f"{node.target} -> {_shapes(node, vals)}" for node in gm.graph.nodes if draws(node)]


@contextlib.contextmanager
def seeded(gm: torch.fx.GraphModule, args: Any = ()) -> Iterator[None]:
    """Run the block from the default generators (CPU and CUDA) seeded with :data:`RNG_SEED` when
    ``gm`` draws, restoring the states of those a run on ``args`` may draw from
    (:func:`rng_devices`) on exit; untouched otherwise."""
    if not any(draws(node) for node in gm.graph.nodes):
        yield
        return
    with forked_rng(gm, args):
        torch.manual_seed(RNG_SEED)  # every device's generator
        yield


class _Recorder(torch.fx.Interpreter):
    """Runs a graph; keeps, for each node that draws, the generators' states before it (CPU's and
    those of ``devices``, CUDA indices) and its outputs."""

    def __init__(self, gm: torch.fx.GraphModule, devices: list[int]) -> None:
        super().__init__(gm)
        self.devices = devices
        self.drawn: dict[str, tuple[GeneratorStates, Any]] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        if not draws(n):
            return super().run_node(n)
        state = _states(self.devices)
        out = super().run_node(n)
        self.drawn[n.name] = (state, pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, out))
        return out


class Replayer(torch.fx.Interpreter):
    """Runs a float64 twin of a recorded graph (``drawn``: what :func:`run_recording` recorded);
    each node that draws starts from its twin's state, and its outputs are the float64 ones where
    they agree with the recorded ones (cast to the recorded dtypes), else the recorded ones widened
    to float64."""

    def __init__(self, gm: torch.fx.GraphModule, drawn: dict[str, tuple[GeneratorStates, Any]]) -> None:
        super().__init__(gm)
        self.drawn = drawn

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.name not in self.drawn:
            return super().run_node(n)
        state, recorded = self.drawn[n.name]
        _set_states(state)
        out = super().run_node(n)
        ours, theirs = pytree.tree_leaves(out), pytree.tree_leaves(recorded)
        same = len(ours) == len(theirs) and all(
            not isinstance(b, torch.Tensor)
            or (
                isinstance(a, torch.Tensor)
                and a.shape == b.shape
                and torch.equal(inspectable(a.to(b.dtype)), inspectable(b))
            )
            for a, b in zip(ours, theirs, strict=False)
        )
        if same:
            return out
        return pytree.tree_map(
            lambda v: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v, recorded
        )


def run_recording(gm: torch.fx.GraphModule, args: list[Any]) -> tuple[Any, dict[str, tuple[GeneratorStates, Any]]]:
    """Run ``gm`` on ``args`` (written in place, as a call would) from :data:`RNG_SEED`; return its
    output and what each node that draws drew (for :func:`run_replaying`)."""
    recorder = _Recorder(gm, rng_devices(gm, args))
    with seeded(gm, args):
        out = recorder.run(*args)
    return out, recorder.drawn


def run_replaying(gm: torch.fx.GraphModule, args: list[Any], drawn: dict[str, tuple[GeneratorStates, Any]]) -> Any:
    """Run ``gm``, a float64 twin of a graph :func:`run_recording` ran, on ``args``, drawing what
    that run drew (see :class:`Replayer`); the generators' states are restored afterwards."""
    with forked_rng(gm, args):
        return Replayer(gm, drawn).run(*args)
