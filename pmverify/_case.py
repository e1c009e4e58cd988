"""``GraphCase``: one random graph with its inputs and the ground truth of what was planted in it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["GraphCase", "PlantedInstance", "MutationSite", "FORMS"]

#: "functional": post-grad style, no in-place ops; "inplace": in-place ops still in the graph.
FORMS = ("functional", "inplace")


@dataclasses.dataclass(frozen=True)
class PlantedInstance:
    """One pattern instance planted into a case's graph.

    - ``pattern``: the name of the rewrite it is an instance of (``"qk_norm"``, ``"rms_norm"``...).
    - ``nodes``: names of the graph nodes that compute it (inputs excluded), in graph order.
    - ``must_match``: True when a correct pass must rewrite it, False when it must leave it alone,
      None when either is correct (e.g. an instance whose output is unused: dead code a pass may
      rewrite or ignore, but must not break).
    - ``reason``: why it is not a plain must-match instance (``"eps"``, ``"split_sizes"``,
      ``"dtype"``, ``"mutation_inside"``, ``"unused"``...); None when it must match.
    - ``detail``: what the near miss changed, in words (``"aten.add.Tensor's other (argument 1):
      1e-06 -> 2e-06"``), for the findings' messages; None when not recorded.
    """

    pattern: str
    nodes: tuple[str, ...]
    must_match: bool | None
    reason: str | None = None
    detail: str | None = None


@dataclasses.dataclass(frozen=True)
class MutationSite:
    """One in-place op in a case's graph: the node and the name of the tensor it mutates."""

    node: str
    target: str
    mutated: str


@dataclasses.dataclass
class GraphCase:
    """A graph for a pass to rewrite, with inputs and ground truth.

    - ``gm``: an aten-level ``torch.fx.GraphModule`` (as Inductor's post-grad passes see it).
    - ``inputs``: one tuple of real input tensors per tensor-parallel rank (``len == tp_world``).
    - ``tp_world``: number of ranks (1 for single-device graphs).
    - ``form``: ``"functional"`` or ``"inplace"`` (see :data:`FORMS`).
    - ``planted``: the :class:`PlantedInstance` records of every instance planted in ``gm``.
    - ``mutations``: the :class:`MutationSite` records of in-place ops in ``gm``.
    - ``pass_config``: what a pass class is built with for this case (``verify(PassClass, ...)``
      builds ``PassClass(case.pass_config)``); None when the pass is given built.
    - ``label``: a short human description, shown in reports.
    - ``placements``: for a tensor-parallel case, one ``torch.distributed.tensor`` placement per
      graph input (``Replicate()`` or ``Shard(dim)``: how the rank tuples relate); None otherwise.

    Raises ``ValueError`` when ``inputs`` does not hold ``tp_world`` tuples or ``form`` is unknown.
    """

    gm: torch.fx.GraphModule
    inputs: Sequence[tuple[Any, ...]]
    tp_world: int = 1
    form: str = "functional"
    planted: tuple[PlantedInstance, ...] = ()
    mutations: tuple[MutationSite, ...] = ()
    pass_config: Any = None
    label: str = ""
    placements: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"form={self.form!r} must be one of {FORMS}")
        if not isinstance(self.tp_world, int) or self.tp_world < 1:
            raise ValueError(f"tp_world={self.tp_world!r} must be a positive int")
        if not isinstance(self.gm, torch.fx.GraphModule):
            raise ValueError(f"gm={self.gm!r} must be a torch.fx.GraphModule")
        if isinstance(self.inputs, torch.Tensor) or any(isinstance(r, torch.Tensor) for r in self.inputs):
            raise ValueError("inputs must hold one tuple of inputs per rank, e.g. [(x, w)], not tensors")
        self.inputs = [tuple(rank_inputs) for rank_inputs in self.inputs]
        if len(self.inputs) != self.tp_world:
            raise ValueError(f"inputs holds {len(self.inputs)} rank tuples; tp_world={self.tp_world}")
        placeholders = len(self.gm.graph.find_nodes(op="placeholder"))
        for rank, rank_inputs in enumerate(self.inputs):
            if len(rank_inputs) != placeholders:
                raise ValueError(f"inputs[{rank}] holds {len(rank_inputs)} values; gm has {placeholders} placeholders")

    @property
    def expected_matches(self) -> int:
        """How many planted instances a correct pass rewrites."""
        return sum(instance.must_match is True for instance in self.planted)

    def __repr__(self) -> str:
        shapes = ", ".join(
            f"{tuple(t.shape)}:{str(t.dtype).removeprefix('torch.')}" if isinstance(t, torch.Tensor) else repr(t)
            for t in self.inputs[0]
        )
        nodes = sum(1 for n in self.gm.graph.nodes if n.op == "call_function")
        return (
            f"GraphCase({self.label or 'graph'}: {nodes} ops, inputs=[{shapes}], tp_world={self.tp_world}, "
            f"form={self.form!r}, planted={[(p.pattern, p.must_match, p.reason) for p in self.planted]}, "
            f"pass_config={self.pass_config!r})"
        )
