"""``GraphCase``: one random graph with its inputs and the ground truth of what was planted in it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["GraphCase", "PlantedInstance", "MutationSite", "Symbol", "FORMS"]

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
      1e-06 -> 0.5"``), for the findings' messages; None when not recorded.
    - ``truth_from``: where ``must_match`` comes from: ``"pattern"`` when ``planted`` derived it from
      the planted function (Inductor's matcher for that function, which need not be the pass's
      own: a pass may register a part of it, or take one of its constants as a wildcard);
      ``"matcher"`` when from the pass's own registration (a recorded rewrite, or the
      ``scalar_workaround`` / ``exclusive_arg_names`` given); None when whoever built the case
      declared it. The expectations oracle holds a rewritten ``"pattern"`` near miss against a pass
      only where the pass's own matcher says it should not match.
    - ``applicable_near_misses``: the near-miss kinds (of those :func:`~pmverify.strategies.planted`
      drew from) this instance had candidates of, whichever it was made; () when not recorded. A
      search reads from it which kinds apply to a pattern (``check_rewrite``'s coverage).
    """

    pattern: str
    nodes: tuple[str, ...]
    must_match: bool | None
    reason: str | None = None
    detail: str | None = None
    truth_from: str | None = None
    applicable_near_misses: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class MutationSite:
    """One in-place op in a case's graph: the node and the name of the tensor it mutates."""

    node: str
    target: str
    mutated: str


@dataclasses.dataclass(frozen=True)
class Symbol:
    """One symbolic size of a case's graph (a ``SymInt`` as torch.compile's ``ShapeEnv`` makes it).

    - ``name``: the name of its ``Sym`` placeholder (``"s0"``) and of the symbol in the size
      expressions of :attr:`GraphCase.input_dims`.
    - ``hint``: the size the case's inputs have (what ``ShapeEnv`` calls the hint).
    - ``min`` / ``max``: the range the graph is valid for, both ends included (a vLLM compile
      range ``Range(start, end)``): every guard the symbolic trace recorded holds there.
    - ``sizes``: the concrete sizes the oracles run the case at, the hint first (then the range's
      ends and one drawn size), each in ``[min, max]``.

    Raises ``ValueError`` when ``min <= hint <= max`` does not hold or a size lies outside.
    """

    name: str
    hint: int
    min: int
    max: int
    sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"Symbol name={self.name!r} must be an identifier")
        for field in ("hint", "min", "max"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Symbol {self.name}: {field}={value!r} must be a non-negative int")
        if not self.min <= self.hint <= self.max:
            raise ValueError(f"Symbol {self.name}: min={self.min} <= hint={self.hint} <= max={self.max} must hold")
        sizes = tuple(self.sizes) or (self.hint,)
        if any(not isinstance(n, int) or not self.min <= n <= self.max for n in sizes):
            raise ValueError(f"Symbol {self.name}: sizes={sizes!r} must be ints in [{self.min}, {self.max}]")
        object.__setattr__(self, "sizes", sizes)


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
    - ``symbols``: for a case with symbolic sizes (``dynamic=`` of the strategies, see
      :func:`pmverify.symbolize`), its :class:`Symbol` records; ``()`` for static shapes.
    - ``input_dims``: with ``symbols``, one entry per placeholder: the symbol's name for a ``Sym``
      placeholder (its input is an int, the hint), else a tuple with, per dim of the input tensor,
      its size as an expression of the symbols (``"s0"``, ``"2*s0"``) or None where it is static;
      None for a static input. Empty without ``symbols``.
    - ``source``: for a case with symbols, the case with concrete sizes (at the hints) it was made
      from (:func:`pmverify._shapes.symbolic.symbolize`): a strategy that wraps a drawn case (mutations,
      tensor-parallel ranks...) rewrites that one and symbolizes the result again. None otherwise.
    - ``all_reduce``: for a tensor-parallel case whose graph holds a project's own all-reduce op
      (``tp_cases(..., all_reduce=)``), that ``OpOverload`` (schema ``(Tensor, str) -> Tensor``,
      a sum over the group named); the oracles count its nodes as collectives, as they count
      ``_c10d_functional.all_reduce``. None (default): the graph's collectives are the functional
      ones (``_c10d_functional.all_reduce`` + ``wait_tensor``) only.

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
    symbols: tuple[Symbol, ...] = ()
    input_dims: tuple[Any, ...] = ()
    source: GraphCase | None = dataclasses.field(default=None, repr=False, compare=False)
    all_reduce: Any = None

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
        self.symbols = tuple(self.symbols)
        self.input_dims = tuple(self.input_dims)
        if any(not isinstance(symbol, Symbol) for symbol in self.symbols):
            raise ValueError(f"symbols={self.symbols!r} must hold Symbol records")
        if self.symbols and len(self.input_dims) != placeholders:
            raise ValueError(f"input_dims holds {len(self.input_dims)} entries; gm has {placeholders} placeholders")
        if not self.symbols and self.input_dims:
            raise ValueError("input_dims is given without symbols")

    @property
    def dynamic(self) -> bool:
        """Whether the case has symbolic sizes (``symbols`` is not empty)."""
        return bool(self.symbols)

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
        symbols = "".join(
            f", {s.name} in [{s.min}, {s.max}] (hint {s.hint}, runs at {list(s.sizes)})" for s in self.symbols
        )
        return (
            f"GraphCase({self.label or 'graph'}: {nodes} ops, inputs=[{shapes}], tp_world={self.tp_world}, "
            f"form={self.form!r}, planted={[(p.pattern, p.must_match, p.reason) for p in self.planted]}, "
            f"pass_config={self.pass_config!r}{symbols})"
        )
