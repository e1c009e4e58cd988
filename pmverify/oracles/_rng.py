"""Random numbers in the graphs the semantics oracle runs (randperm, dropout, rand_like...).

Every run of a graph that draws random numbers (the graph before the pass, after it, and its
float64 reference) starts from the same state of the default CPU generator (:data:`RNG_SEED`),
restored afterwards. A replacement that draws the same numbers in the same order as its pattern
(the same random ops, with outputs of the same shapes and dtypes, in graph order) then computes
the same values, and the case is compared as any other; one that draws them otherwise (a dropout
mask drawn with another op, two draws in the other order) cannot be compared value by value, nor
can a graph that draws more than once when the pass made any draw anew (two like ``randperm``
calls whose rewrites swap their order draw the same sequence, but each use gets the other's): the
case is *not comparable*, :func:`rng_reason` says why in words starting ``"rng: "``, and the
semantics oracle judges nothing there. So are tensor-parallel cases that draw (the ranks of the
threaded world share one generator) and compiled ones (Inductor draws with its own generator).

A node *draws* when its op is tagged ``torch.Tag.nondeterministic_seeded`` in its schema (read at
torch 2.13: the ``rand*`` / ``randn*`` / ``randint*`` / ``randperm`` factories, ``bernoulli``,
``normal``, ``uniform``, ``native_dropout``, ``multinomial``, ``rrelu_with_noise``, and the
attention kernels for their dropout), except a call whose ``dropout_p`` is a literal 0 or whose
``train`` is a literal False: those draw nothing. A custom op that draws inside is not seen.

The float64 reference of a graph that draws reads the numbers the graph before the pass drew: each
random op of the float64 run starts from the generator state its twin started from; where its
outputs, cast to the dtypes of the graph before the pass, equal what that graph drew (a dropout
mask, a permutation: draws that do not depend on the dtype) the float64 values stand, else (a
``rand_like`` draws other bits in float64) the values drawn before the pass are used, widened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree

__all__ = ["RNG_SEED", "draws", "random_calls", "rng_reason", "seeded", "run_recording", "run_replaying"]

#: State of the default CPU generator every run of a graph that draws starts from.
RNG_SEED = 0


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
    """Whether ``node`` calls an op that draws from the default generator (see the module
    docstring)."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded not in node.target.tags:
        return False
    dropout, train = _argument(node, "dropout_p"), _argument(node, "train")
    return not (isinstance(dropout, (int, float)) and dropout == 0) and train is not False


def _shapes(node: torch.fx.Node) -> str:
    values = pytree.tree_leaves(node.meta.get("val"))
    shown = [f"{str(v.dtype).removeprefix('torch.')}{list(v.shape)}" for v in values if isinstance(v, torch.Tensor)]
    if shown:
        return ", ".join(shown)
    return ", ".join(repr(a) for a in node.args if not isinstance(a, torch.fx.Node))


def random_calls(gm: torch.fx.GraphModule) -> list[str]:
    """What ``gm`` draws, in graph order: one ``"aten.randperm.default -> int64[8]"`` per node
    that draws (the outputs' dtypes and shapes from ``meta["val"]``, else the call's constant
    arguments)."""
    return [f"{node.target} -> {_shapes(node)}" for node in gm.graph.nodes if draws(node)]


def _listed(calls: list[str]) -> str:
    return "[" + "; ".join(calls) + "]" if calls else "nothing"


def rng_reason(pair: Any) -> str | None:
    """Why ``pair`` (a ``RunPair``) cannot be compared value by value because its graphs draw
    random numbers (``"rng: ..."``), or None: the graph before the pass draws nothing, or the
    graph after it draws the same numbers in the same order (see the module docstring)."""
    before = random_calls(pair.case.gm)
    if not before:
        return None
    if pair.compiled is not None:
        return (
            f"rng: the graph draws random numbers ({_listed(before)}), which compiled code draws with "
            "Inductor's own generator: not comparable value by value"
        )
    if pair.case.tp_world > 1:
        return (
            f"rng: the graph draws random numbers ({_listed(before)}) on {pair.case.tp_world} ranks, "
            "which share one generator in the threaded world: not comparable value by value"
        )
    after = random_calls(pair.after)
    if after != before:
        return (
            f"rng: the graph before the pass draws {_listed(before)}, the graph after it {_listed(after)}: "
            "the replacement draws its random numbers otherwise than its pattern, so their values cannot be "
            "compared (a case is compared when both draw the same numbers in the same order)"
        )
    kept = [node.name for node in pair.before.graph.nodes if draws(node)]
    remade = [node.name for node in pair.after.graph.nodes if draws(node)]
    if len(before) > 1 and remade != kept:
        return (
            f"rng: the graph draws {len(before)} times ({_listed(before)}) and the pass made some of those draws "
            f"anew ({', '.join(n for n in remade if n not in kept) or 'in another order'}): which draw feeds "
            "which use may have changed, so their values cannot be compared (a case is compared when it draws "
            "once, or when the pass keeps every draw)"
        )
    return None


@contextlib.contextmanager
def seeded(gm: torch.fx.GraphModule) -> Iterator[None]:
    """Run the block from the default CPU generator seeded with :data:`RNG_SEED` when ``gm``
    draws, restoring its state on exit; untouched otherwise."""
    if not any(draws(node) for node in gm.graph.nodes):
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RNG_SEED)
        yield


class _Recorder(torch.fx.Interpreter):
    """Runs a graph; keeps, for each node that draws, the generator state before it and its
    outputs."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.drawn: dict[str, tuple[torch.Tensor, Any]] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        if not draws(n):
            return super().run_node(n)
        state = torch.random.get_rng_state()
        out = super().run_node(n)
        self.drawn[n.name] = (state, pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, out))
        return out


class _Replayer(torch.fx.Interpreter):
    """Runs a float64 twin of a recorded graph; each node that draws starts from its twin's state,
    and its outputs are the float64 ones where they agree with the recorded ones, else the recorded
    ones widened to float64."""

    def __init__(self, gm: torch.fx.GraphModule, drawn: dict[str, tuple[torch.Tensor, Any]]) -> None:
        super().__init__(gm)
        self.drawn = drawn

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.name not in self.drawn:
            return super().run_node(n)
        state, recorded = self.drawn[n.name]
        torch.random.set_rng_state(state)
        out = super().run_node(n)
        ours, theirs = pytree.tree_leaves(out), pytree.tree_leaves(recorded)
        same = len(ours) == len(theirs) and all(
            not isinstance(b, torch.Tensor)
            or (isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a.to(b.dtype), b))
            for a, b in zip(ours, theirs, strict=False)
        )
        if same:
            return out
        return pytree.tree_map(
            lambda v: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v, recorded
        )


def run_recording(gm: torch.fx.GraphModule, args: list[Any]) -> tuple[Any, dict[str, tuple[torch.Tensor, Any]]]:
    """Run ``gm`` on ``args`` (written in place, as a call would) from :data:`RNG_SEED`; return its
    output and what each node that draws drew (for :func:`run_replaying`)."""
    recorder = _Recorder(gm)
    with seeded(gm):
        out = recorder.run(*args)
    return out, recorder.drawn


def run_replaying(gm: torch.fx.GraphModule, args: list[Any], drawn: dict[str, tuple[torch.Tensor, Any]]) -> Any:
    """Run ``gm``, a float64 twin of a graph :func:`run_recording` ran, on ``args``, drawing what
    that run drew (see the module docstring); the generator's state is restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        return _Replayer(gm, drawn).run(*args)
