"""A traced pattern instance (:class:`Traced`) and what near misses and ground truth ask of one:
what Inductor's matcher compares (:func:`signature`), and whether it runs (:func:`runs`,
:func:`all_finite`, :func:`runs_eagerly`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .._compat import pytree
from .._execution import finite as finite_values
from .._fx import flat_nodes

__all__ = ["Traced", "signature", "runs", "all_finite", "runs_eagerly"]


@dataclasses.dataclass(frozen=True)
class Traced:
    """One instance ready to splice: the (possibly changed) pattern graph and what it runs on.

    - ``gm``: the traced graph; its placeholders take ``args`` in order.
    - ``must_match`` / ``reason``: the ground truth (see :class:`pmverify.PlantedInstance`).
    - ``extra_user``: name of the intermediate of ``gm`` to give a user outside the instance.
    - ``unused``: whether the instance's outputs are left unused.
    - ``detail``: what a near miss changed, in words (``"aten.add.Tensor's other: 1e-06 -> 0.5"``).
    - ``primals``: how many of ``args`` are the pattern's arguments (None: all); the others are the
      tangents of a joint trace (:mod:`._joint`), then any input a near miss added.
    - ``truth_from``: where ``must_match`` comes from (see :class:`pmverify.PlantedInstance`).
    - ``matcher``: in a ``dynamic`` case, the rewrite whose Inductor matcher is asked about the
      instance on the symbolic graph (:mod:`._planted_dynamic`); None: none to ask.
    - ``applicable``: the near-miss kinds the instance before any change had candidates of.
    """

    gm: torch.fx.GraphModule
    args: tuple[Any, ...]
    must_match: bool | None = True
    reason: str | None = None
    extra_user: str | None = None
    unused: bool = False
    detail: str | None = None
    primals: int | None = None
    matcher: Any = None
    truth_from: str | None = None
    applicable: tuple[str, ...] = ()


#: Literal types Inductor's first, structural match ignores (``gen_pattern_and_search_gm``); its
#: check then re-traces the search function on the matched inputs and compares them exactly.
_LOOSE_TYPES = (int, float, list, torch.device, torch.dtype)


def _normalise(value: Any, index: dict[torch.fx.Node, int], loose: bool) -> Any:
    if isinstance(value, torch.fx.Node):
        return ("node", index.get(value))
    if loose and type(value) in _LOOSE_TYPES and not (isinstance(value, list) and flat_nodes(value)):
        return "_"
    if isinstance(value, (list, tuple)):
        return tuple(_normalise(v, index, loose) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _normalise(v, index, loose)) for k, v in value.items()))
    return (type(value).__name__, repr(value))


def signature(gm: torch.fx.GraphModule, *, loose: bool = False) -> tuple[Any, ...]:
    """What Inductor's pattern matcher compares: op targets, wiring and literal arguments. With
    ``loose``, what its first, structural match compares: int, float, list, device and dtype
    literals ignored (sizes burnt into a trace do not count)."""
    index = {node: i for i, node in enumerate(gm.graph.nodes)}
    return tuple(
        (node.op, str(node.target), _normalise(node.args, index, loose), _normalise(node.kwargs, index, loose))
        for node in gm.graph.nodes
        if node.op != "placeholder"
    )


def runs(gm: torch.fx.GraphModule, args: Sequence[Any], finite: bool) -> bool:
    """Whether ``gm`` runs on clones of ``args`` (and stays finite when ``finite``)."""
    try:
        with torch.no_grad():  # a training instance's primals require grad: its joint graph needs none
            out = pytree.tree_leaves(gm(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args]))
    except Exception:
        return False
    return not finite or all(finite_values(t) for t in out if isinstance(t, torch.Tensor))


def runs_eagerly(pattern: Callable[..., Any], args: Sequence[Any]) -> bool:
    """Whether ``pattern`` itself (eager PyTorch, not its decomposed trace) runs on clones of
    ``args``: a program a model could hold. A decomposition may be laxer than the op it decomposes
    (``torch.lerp`` and ``torch.mv`` refuse mixed float dtypes, their decompositions promote), so a
    trace that runs does not make the inputs valid. Run without grad, on a forked CPU RNG (a random
    op in the pattern leaves the global generator as it was). A pattern that fails outside a
    tensor-parallel world (its collectives need a process group) runs again in a world of one rank
    (:func:`pmverify.distributed.run_spmd`, the default group ``"0"``)."""

    def run() -> None:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            pattern(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])

    try:
        run()
    except Exception:  # noqa: BLE001 - whatever the pattern raises: not a program a model holds
        from ..distributed import run_spmd
        from ..distributed._context import current_rank

        if current_rank() is not None:
            return False
        try:
            run_spmd(run, 1, [()])
        except Exception:  # noqa: BLE001 - nor in a world
            return False
    return True


def all_finite(gm: torch.fx.GraphModule, args: Sequence[Any]) -> bool:
    """Whether ``gm`` runs on clones of ``args`` and every floating output is finite (a float8 one
    read through a float32 upcast)."""
    return runs(gm, args, True)
