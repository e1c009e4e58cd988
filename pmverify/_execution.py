"""The execution layer: everything that *runs* a case's graphs, below the oracles.

A :class:`RunPair` is what applying a pass to a :class:`GraphCase` produced (the graph before and
after the pass, what the pass reported); its methods compute, once per pair and memoised in typed
fields, what the oracles read:

- :meth:`RunPair.results`: per rank, the graph before the pass, after it and the float64 reference
  run on the case's inputs (:class:`RankResults`); a tensor-parallel case runs each graph on a real
  world of ``tp_world`` ranks (:func:`pmverify.distributed.run_spmd`, threaded backend);
- :meth:`RunPair.repropagated`: fake tensors re-propagated through the graph after the pass
  (:class:`Repropagation`).

The functions below it run one graph: :func:`propagate_fake` (one ``FakeTensorMode``),
:func:`run_graph` (on clones of the inputs, under :func:`deterministic_fill`, from a fixed
generator state when the graph draws random numbers), :func:`float64_reference` (every floating
dtype turned into float64). Random numbers: a graph that draws (``randperm``, dropout...) runs from
:data:`RNG_SEED`; its float64 twin draws what it drew (:func:`run_recording`,
:func:`run_replaying`; see :mod:`pmverify.oracles._rng` for how the semantics oracle judges such
cases).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import operator
import traceback
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from ._case import GraphCase
from ._fx import output_vals

__all__ = [
    "MatchRecord",
    "RankResults",
    "Repropagation",
    "Results",
    "RunPair",
    "rank_pair",
    "error_summary",
    "propagate_fake",
    "propagate_recorded",
    "FakePropagation",
    "node_signature",
    "quiet_fake_tensor_errors",
    "clone_inputs",
    "deterministic_fill",
    "run_graph",
    "float64_module",
    "float64_reference",
    "RNG_SEED",
    "draws",
    "random_calls",
    "seeded",
    "run_recording",
    "run_replaying",
    "Replayer",
    "WORLD_TIMEOUT_S",
]

#: What one run of a graph gives: (flat outputs, the inputs' values after the run).
Results = tuple[list[Any], list[Any]]

#: Seconds a tensor-parallel run may take before its ranks are taken to wait on each other forever.
WORLD_TIMEOUT_S = 15.0


@dataclasses.dataclass(frozen=True)
class MatchRecord:
    """One rewrite made through an Inductor pattern entry (``PatternMatcherPass``).

    - ``entry``: the entry's kind (``"ReplacementPatternEntry"``, ``"GraphPatternEntry"``...) and
      the target of the node it was anchored at.
    - ``nodes``: names of the matched nodes (``Match.nodes``), as in the graph before the rewrite.
    - ``replacement``: names of the nodes the entry inserted.
    """

    entry: str
    nodes: tuple[str, ...]
    replacement: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class RankResults:
    """What one rank computes (each run: ``(flat outputs, final values of the inputs)``, see
    :func:`run_graph`).

    - ``before``: the graph before the pass.
    - ``after``: the graph after it, or the exception it raised (on a tensor-parallel world: the
      :class:`~pmverify.distributed.SPMDError`, the same object on every rank).
    - ``reference``: the float64 run of the case's own graph (:func:`float64_reference`), or None
      where the graph does not run in float64.
    - ``drawn``: what the graph before the pass drew, by node name (:func:`run_recording`); empty
      when it draws nothing, and on a tensor-parallel world.
    """

    before: Results
    after: Results | BaseException
    reference: Results | None
    drawn: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Repropagation:
    """Fake tensors re-propagated through the graph after the pass, in one fresh
    ``FakeTensorMode`` from rank 0's inputs: ``vals`` the ``meta["val"]`` each node gets, by name;
    ``outputs`` those of the graph's outputs, flattened (as :func:`pmverify._fx.output_vals`)."""

    vals: dict[str, Any]
    outputs: list[Any]


@dataclasses.dataclass(frozen=True)
class FakePropagation:
    """One :func:`propagate_fake` through a graph, kept so that a later propagation through the
    rewritten graph can reuse what the pass left unchanged: ``mode`` the ``FakeTensorMode``,
    ``vals`` each node's ``meta["val"]`` and ``signatures`` each node's call
    (:func:`node_signature`), by name; ``reusable`` whether the graph's values depend only on
    each node's call and inputs (no op that mutates, see :func:`propagate_recorded`)."""

    mode: FakeTensorMode
    vals: dict[str, Any]
    signatures: dict[str, tuple[str, str, str]]
    reusable: bool


@dataclasses.dataclass(eq=False)
class RunPair:
    """The graph before and after a pass, with what the pass reported; the object every oracle
    reads (``check(pair) -> list[Violation]``).

    - ``case``: the :class:`GraphCase`.
    - ``before``: the case's graph module, untouched (in compiled mode: Inductor's post-grad graph
      before the pass).
    - ``after``: the rewritten copy (None when the pass raised).
    - ``pass_``: the pass object that ran.
    - ``matched_count``: what the pass reported (``PatternMatcherPass.apply``'s return value or
      the pass's ``matched_count``); None when it reports nothing.
    - ``error``: the formatted traceback when the pass raised, else None.
    - ``elapsed_s``: seconds spent in the pass.
    - ``error_summary``: the exception the pass raised, whole, with where it was raised; else None.
    - ``resorted``: whether the pass left the graph out of topological order (sorted afterwards as
      Inductor does, when it has no cycle).
    - ``match_records``: every rewrite made through an Inductor pattern entry, in order (empty for
      a pass that rewrites by hand).
    - ``unsorted``: ``(node, input)`` name pairs where the pass left ``node`` before the definition
      of its ``input``: with ``strict_order``, every such pair; else leaving out nodes an Inductor
      pattern entry inserted (Inductor puts a multi-output replacement before the first output,
      relying on the sort that follows).
    - ``mode``: ``"direct"`` or ``"compiled"``; ``compiled``: what the compiled mode measured
      (:class:`pmverify._compiled.CompiledRun`), whose runs stand in for the graph runs.
    - ``ranks``: for a tensor-parallel case in direct mode, the runs of ranks 1..tp_world-1 (each a
      ``RunPair`` of its own: the pass built for that rank, applied to that rank's copy); empty
      otherwise. :func:`rank_pair` picks a rank's run.
    - ``strict_order``: whether the case was applied with ``strict_order=True``.
    - ``before_outputs``: the ``meta["val"]`` of the outputs of the graph before the pass, from the
      fake propagation the direct mode made before running the pass (None in compiled mode:
      :meth:`before_output_vals` propagates then).
    - ``before_propagation``: that propagation (:class:`FakePropagation`), which
      :meth:`repropagated` reuses for the nodes the pass left as they were; None in compiled mode.
    """

    case: GraphCase
    before: torch.fx.GraphModule
    after: torch.fx.GraphModule | None
    pass_: Any
    matched_count: int | None
    error: str | None
    elapsed_s: float
    error_summary: str | None = None
    resorted: bool = False
    match_records: list[MatchRecord] = dataclasses.field(default_factory=list)
    unsorted: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    mode: str = "direct"
    compiled: Any = None
    ranks: list[RunPair] = dataclasses.field(default_factory=list, repr=False)
    strict_order: bool = False
    before_outputs: list[Any] | None = dataclasses.field(default=None, repr=False)
    before_propagation: FakePropagation | None = dataclasses.field(default=None, repr=False)
    _results: dict[int, RankResults] = dataclasses.field(default_factory=dict, init=False, repr=False)
    _repropagation: Repropagation | BaseException | None = dataclasses.field(default=None, init=False, repr=False)
    _live: dict[str, torch.fx.Node] | None = dataclasses.field(default=None, init=False, repr=False)

    def results(self, rank: int) -> RankResults:
        """What rank ``rank`` computes (:class:`RankResults`), run once per pair. In compiled mode,
        ``compiled.before[rank]`` and ``.after[rank]`` (what the compiled functions returned, which
        line up with the case's graph, not with Inductor's post-grad graphs) replace the graph
        runs. A tensor-parallel case in direct mode runs every rank at once, in one threaded world
        per graph. Raises ``RuntimeError`` when the case's own graph fails on that world.
        Call only when the pass ran (``after`` is not None, or compiled mode)."""
        if rank not in self._results:
            if self.compiled is None and self.case.tp_world > 1:
                self._results.update(enumerate(_world_results(self)))
            else:
                self._results[rank] = _rank_results(self, rank)
        return self._results[rank]

    def before_output_vals(self) -> list[Any]:
        """``before_outputs``, or, where the apply mode recorded none, the outputs' ``meta["val"]``
        of a copy of the graph before the pass propagated from rank 0's inputs."""
        if self.before_outputs is None:
            reference = copy.deepcopy(self.before)
            propagate_fake(reference, self.case.inputs[0])
            self.before_outputs = output_vals(reference)
        return self.before_outputs

    def live_after(self) -> dict[str, torch.fx.Node]:
        """The nodes of ``after`` that dead-code elimination keeps, by name: the placeholders, the
        output, the impure nodes (an in-place op, a collective...) and what they read, directly or
        not; computed once. Call only when ``after`` is not None."""
        if self._live is None:
            stack = [
                node for node in self.after.graph.nodes if node.op in ("output", "placeholder") or node.is_impure()
            ]
            live: dict[str, torch.fx.Node] = {}
            while stack:
                node = stack.pop()
                if node.name not in live:
                    live[node.name] = node
                    stack.extend(node.all_input_nodes)
            self._live = live
        return self._live

    def repropagated(self) -> Repropagation:
        """Fake tensors re-propagated through ``after`` (:class:`Repropagation`), computed once;
        the meta the pass left on ``after`` is kept. Raises what the propagation raised."""
        if self._repropagation is None:
            try:
                self._repropagation = _repropagate(self.after, self.case.inputs[0], self.before_propagation)
            except Exception as exc:  # noqa: BLE001 - kept, raised to every caller
                self._repropagation = exc
        if isinstance(self._repropagation, BaseException):
            raise self._repropagation
        return self._repropagation


def rank_pair(pair: RunPair, rank: int) -> RunPair:
    """The run of rank ``rank``: ``pair`` itself for rank 0 (or when ranks were not applied one by
    one, as in compiled mode), else ``pair.ranks[rank - 1]``."""
    return pair if rank == 0 or not pair.ranks else pair.ranks[rank - 1]


def error_summary(exc: BaseException) -> str:
    """The exception, whole, with where it was raised (the last frame of its traceback); one
    without a message (a bare ``assert``) by its repr, never an empty text."""
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" (at {frame.filename}:{frame.lineno} in {frame.name})" if frame else ""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)
    return f"{text}{where}"


def propagate_fake(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> None:
    """Set ``meta["val"]`` on every node of ``gm`` from one fresh ``FakeTensorMode``."""
    propagate_recorded(gm, inputs)


def node_signature(node: torch.fx.Node) -> tuple[str, str, str]:
    """What ``node`` computes from its inputs: its op, target and arguments (input nodes by name)."""
    names = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.name)
    return node.op, str(node.target), repr(names)


def _pure(graph: torch.fx.Graph) -> bool:
    """Whether every call in ``graph`` is an ATen-style op that mutates nothing (or a ``getitem``):
    then a node's fake value depends only on its call and its inputs' values."""
    return all(
        node.target is operator.getitem
        or (isinstance(node.target, torch._ops.OpOverload) and not node.target._schema.is_mutable)
        for node in graph.nodes
        if node.op == "call_function"
    ) and not any(node.op == "call_module" for node in graph.nodes)


def propagate_recorded(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> FakePropagation:
    """:func:`propagate_fake`, returning the propagation (:class:`FakePropagation`)."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fake_inputs = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fake_inputs)
    nodes = gm.graph.nodes
    return FakePropagation(
        mode,
        {node.name: node.meta.get("val") for node in nodes},
        {node.name: node_signature(node) for node in nodes},
        _pure(gm.graph),
    )


class _Reusing(FakeTensorProp):
    """Fake propagation that takes a node's value from ``known`` when its call is the one
    ``known`` propagated and none of its inputs was propagated anew."""

    def __init__(self, gm: torch.fx.GraphModule, known: FakePropagation) -> None:
        super().__init__(gm, known.mode)
        self.known = known
        self.fresh: set[str] = set()

    def run_node(self, n: torch.fx.Node) -> Any:
        same = self.known.signatures.get(n.name) == node_signature(n) and n.name in self.known.vals
        if (
            same
            and n.op in ("placeholder", "call_function")
            and not any(a.name in self.fresh for a in n.all_input_nodes)
        ):
            n.meta["val"] = self.known.vals[n.name]
            return n.meta["val"]
        self.fresh.add(n.name)
        return super().run_node(n)


def _repropagate(gm: torch.fx.GraphModule, inputs: Sequence[Any], known: FakePropagation | None) -> Repropagation:
    """:func:`propagate_fake` through ``gm`` itself, its nodes' ``meta`` dicts restored afterwards
    (what a propagation through a deep copy gives, without copying the graph and its meta). With
    ``known`` (the propagation through the graph before the pass) and a graph where no op mutates,
    the nodes the pass left as they were, on inputs it left as they were, keep the values ``known``
    gave them: fake propagation is a function of a node's call and its inputs' values."""
    nodes = list(gm.graph.nodes)
    saved = [node.meta for node in nodes]
    for node in nodes:
        node.meta = dict(node.meta)
    try:
        placeholders = [node.name for node in nodes if node.op == "placeholder"]
        if known is not None and known.reusable and _pure(gm.graph) and all(n in known.vals for n in placeholders):
            _Reusing(gm, known).propagate_dont_convert_inputs(*(known.vals[n] for n in placeholders))
        else:
            propagate_fake(gm, inputs)
        return Repropagation({node.name: node.meta.get("val") for node in nodes}, output_vals(gm))
    finally:
        for node, meta in zip(nodes, saved, strict=True):
            node.meta = meta


@contextlib.contextmanager
def quiet_fake_tensor_errors() -> Iterator[None]:
    """Silence torch's ERROR log of a failed meta kernel while a pass runs.

    ``register_replacement`` re-traces every candidate match on its real shapes; on a near miss
    (say, other split sizes) that trace fails a broadcast in fake tensors, torch logs the traceback
    at ERROR level, and the matcher then rejects the match, as it should. The log is noise here.
    """
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        fake_log.setLevel(level)


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    """``inputs`` with every tensor cloned (a graph run may write its inputs), each in its own
    layout: a padded or expanded tensor, which ``clone`` makes contiguous, keeps its strides (its
    storage is cloned), as the pass saw them."""
    return [_clone_strided(x) if isinstance(x, torch.Tensor) else x for x in inputs]


def _clone_strided(x: torch.Tensor) -> torch.Tensor:
    clone = x.clone()
    if clone.stride() == x.stride() or x.layout != torch.strided:
        return clone
    copied = torch.empty(0, dtype=x.dtype, device=x.device)
    copied.set_(x.untyped_storage().clone(), x.storage_offset(), x.shape, x.stride())
    return copied.requires_grad_(x.requires_grad)


@contextlib.contextmanager
def deterministic_fill() -> Iterator[None]:
    """Run the block with deterministic algorithms on (warnings only) and uninitialised memory
    filled (NaN for floats, the largest value for integers); restore the previous settings."""
    import torch.utils.deterministic

    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def run_graph(
    gm: torch.fx.GraphModule, inputs: Sequence[Any], *, fill: bool = True, drawn: dict[str, Any] | None = None
) -> Results:
    """Run ``gm`` on clones of ``inputs`` (under :func:`deterministic_fill` unless ``fill`` is
    False: the caller has set it, as for the threads of a tensor-parallel world, which share those
    global settings); return (flat outputs, inputs after the run). A graph that draws random
    numbers starts from :data:`RNG_SEED` (the generator's state is restored afterwards), and what
    it drew is put in ``drawn`` when given (for :func:`float64_reference`)."""
    args = clone_inputs(inputs)
    with torch.no_grad(), deterministic_fill() if fill else contextlib.nullcontext():
        if drawn is not None and random_calls(gm):
            out, record = run_recording(gm, args)
            drawn.update(record)
        else:
            with seeded(gm):
                out = gm(*args)
    return pytree.tree_leaves(out), args


def _to64(value: Any) -> Any:
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return torch.float64
    if isinstance(value, (list, tuple)):
        return type(value)(_to64(v) for v in value)
    if isinstance(value, dict):
        return {k: _to64(v) for k, v in value.items()}
    return value


def _float64_graph(gm: torch.fx.GraphModule) -> torch.fx.Graph:
    """A copy of ``gm``'s graph (its nodes' ``meta`` shallow-copied) with every floating dtype in
    its nodes' arguments turned into float64."""
    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        if node.op == "call_function":
            node.args = _to64(node.args)
            node.kwargs = _to64(node.kwargs)
    return graph


def float64_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` with every floating dtype in its nodes' arguments turned into float64."""
    ref = copy.deepcopy(gm)
    ref.graph = _float64_graph(gm)  # recompiles
    return ref


class _Float64Run(torch.fx.Interpreter):
    """Runs the float64 twin of a graph without generating its code: ``gm``'s graph turned into
    float64 (:func:`_float64_graph`), interpreted on ``gm`` (which holds no attribute it reads)."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm, graph=_float64_graph(gm))

    def __call__(self, *args: Any) -> Any:
        return self.run(*args)


def _run_float64(ref: Any, inputs: Sequence[Any], fill: bool = True, drawn: Any = None) -> Results | None:
    """Run ``ref`` (a float64 module, or a :class:`_Float64Run`) on ``inputs`` widened to float64."""
    args = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    try:
        if drawn:
            module = ref if isinstance(ref, torch.fx.GraphModule) else float64_module(ref.module)
            with torch.no_grad(), deterministic_fill() if fill else contextlib.nullcontext():
                return pytree.tree_leaves(run_replaying(module, args, drawn)), args
        return run_graph(ref, tuple(args), fill=fill)
    except Exception:  # noqa: BLE001 - the graph does not run in float64; fall back
        return None


def float64_reference(
    gm: torch.fx.GraphModule, inputs: Sequence[Any], drawn: dict[str, Any] | None = None
) -> Results | None:
    """Run ``gm`` with every floating dtype turned into float64 (:func:`float64_module`); None when
    the graph does not allow it (an op without float64 support, a custom op that checks dtypes...).
    ``drawn``: what a run of ``gm`` drew (:func:`run_graph`), for a graph that draws random numbers:
    the reference draws the same (see :func:`run_replaying`)."""
    if any(node.op in ("get_attr", "call_module") for node in gm.graph.nodes):
        return _run_float64(float64_module(gm), inputs, drawn=drawn)  # a copy of its attributes too
    return _run_float64(_Float64Run(gm), inputs, drawn=drawn)


def _rank_results(pair: RunPair, rank: int) -> RankResults:
    inputs = pair.case.inputs[rank]
    drawn: dict[str, Any] = {}  # what a graph that draws random numbers drew before the pass
    after: Results | BaseException
    if pair.compiled is not None:
        before, after = pair.compiled.before[rank], pair.compiled.after[rank]
    else:
        before = run_graph(pair.before, inputs, drawn=drawn)
        try:
            after = run_graph(pair.after, inputs)
        except Exception as exc:  # noqa: BLE001 - a graph that no longer runs is a finding
            after = exc
    return RankResults(before, after, float64_reference(pair.case.gm, inputs, drawn=drawn), drawn)


def _world_results(pair: RunPair) -> list[RankResults]:
    """Every rank's results, run in one threaded world per graph (before, float64 reference,
    after): each rank runs its own rewritten graph (:func:`rank_pair`). A rewritten graph that
    raises on a rank, or whose ranks stop waiting for each other's collectives, makes ``after`` the
    :class:`~pmverify.distributed.SPMDError` on every rank."""
    from .distributed import SPMDError, run_spmd

    case, world = pair.case, pair.case.tp_world
    reference_gm = float64_module(case.gm)
    run_filled = functools.partial(run_graph, fill=False)  # deterministic_fill is set once, around the runs
    with deterministic_fill():
        try:
            before = run_spmd(
                run_filled, world, [(pair.before, inputs) for inputs in case.inputs], timeout_s=WORLD_TIMEOUT_S
            )
        except SPMDError as exc:
            first = str(exc).splitlines()[0]
            raise RuntimeError(
                f"the case's own graph, before the pass, fails on the tensor-parallel world: {first}"
            ) from None
        try:
            reference = run_spmd(
                functools.partial(_run_float64, fill=False),
                world,
                [(reference_gm, inputs) for inputs in case.inputs],
                timeout_s=WORLD_TIMEOUT_S,
            )
        except SPMDError:
            reference = [None] * world
        try:
            after = run_spmd(
                run_filled,
                world,
                [(rank_pair(pair, rank).after, inputs) for rank, inputs in enumerate(case.inputs)],
                timeout_s=WORLD_TIMEOUT_S,
            )
        except SPMDError as exc:
            after = [exc] * world
    return [RankResults(before[rank], after[rank], reference[rank]) for rank in range(world)]


# Random numbers ------------------------------------------------------------------------------

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
    """Whether ``node`` calls an op that draws from the default generator: its op is tagged
    ``torch.Tag.nondeterministic_seeded``, unless its ``dropout_p`` is a literal 0 or its ``train``
    a literal False (see :mod:`pmverify.oracles._rng`)."""
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


class Replayer(torch.fx.Interpreter):
    """Runs a float64 twin of a recorded graph (``drawn``: what :func:`run_recording` recorded);
    each node that draws starts from its twin's state, and its outputs are the float64 ones where
    they agree with the recorded ones (cast to the recorded dtypes), else the recorded ones widened
    to float64."""

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
    that run drew (see :class:`Replayer`); the generator's state is restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        return Replayer(gm, drawn).run(*args)
