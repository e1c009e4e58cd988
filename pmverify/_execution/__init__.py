"""The execution layer: everything that *runs* a case's graphs, below the oracles.

A :class:`RunPair` is what applying a pass to a :class:`GraphCase` produced (the graph before and
after the pass, what the pass reported); its methods compute, once per pair and memoised in typed
fields, what the oracles read:

- :meth:`RunPair.results`: per rank, the graph before the pass, after it and the float64 reference
  run on the case's inputs (:class:`RankResults`); a tensor-parallel case runs each graph on a real
  world of ``tp_world`` ranks (:func:`pmverify.distributed.run_spmd`, threaded backend);
- :meth:`RunPair.repropagated`: fake tensors re-propagated through the graph after the pass
  (:class:`Repropagation`), reusing the values of the nodes the pass left as they were;
- :meth:`RunPair.live_after`: the nodes of the graph after the pass that dead-code elimination keeps.

The functions below it run one graph: :func:`propagate_fake` (one ``FakeTensorMode``),
:func:`run_graph` (on clones of the inputs, under :func:`deterministic_fill`, from a fixed
generator state when the graph draws random numbers), :func:`float64_reference` (every floating
dtype turned into float64). Random numbers: a graph that draws (``randperm``, dropout...) runs from
:data:`RNG_SEED`; its float64 twin draws what it drew (:func:`run_recording`,
:func:`run_replaying`; see :mod:`pmverify.oracles._rng` for how the semantics oracle judges such
cases). They live in ``_fake`` (propagation), ``_runs`` (graph runs, float64) and ``_random``.

:func:`runs_on` and :func:`inspectable` (in ``_dtypes``): which ops run on a dtype (the float8 types
have few kernels), learned from the dispatcher and cached; a float8 value read through a float32 upcast.

:func:`rewrite_count`, :func:`changed` and :func:`matched_instances` (in ``_rewrites``): what the
pass rewrote (its count, whether the graph changed, which planted instances), read by
``check_case`` and the expectations oracle.

:func:`compare` (in ``_rule``) is the one numeric rule: whether a value after a pass is as
accurate as before it against a float64 reference; every oracle that compares values calls it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import traceback
from typing import Any

import torch

from .._case import GraphCase
from .._fx import output_vals
from ._dtypes import finite, inspectable, is_narrow_float, runs_on
from ._fake import (
    FakePropagation,
    Repropagation,
    node_signature,
    propagate_fake,
    propagate_recorded,
    propagate_symbolic,
    propagated_or_own,
    quiet_fake_tensor_errors,
    repropagate,
    torch_level,
)
from ._random import (
    RNG_SEED,
    Replayer,
    draws,
    forked_rng,
    random_calls,
    rng_devices,
    run_recording,
    run_replaying,
    seeded,
)
from ._rewrites import (
    changed,
    compiled_expectation,
    instance_outputs,
    matched_instances,
    must_match_rewritten,
    partial_rewrite,
    rewrite_count,
    rewritten_outputs,
)
from ._rule import FAR_ULPS, FP32_SLACK, ILL_CONDITIONED, NOISE_FACTOR, SAMPLING, ULPS, K, compare
from ._runs import (
    Results,
    clone_inputs,
    deterministic_fill,
    float64_module,
    float64_reference,
    run_float64,
    run_graph,
)

__all__ = [
    "MatchRecord",
    "RankResults",
    "Repropagation",
    "FakePropagation",
    "Results",
    "RunPair",
    "rank_pair",
    "error_summary",
    "propagate_fake",
    "propagate_recorded",
    "propagate_symbolic",
    "propagated_or_own",
    "node_signature",
    "quiet_fake_tensor_errors",
    "torch_level",
    "clone_inputs",
    "deterministic_fill",
    "run_graph",
    "float64_module",
    "float64_reference",
    "RNG_SEED",
    "draws",
    "random_calls",
    "rng_devices",
    "forked_rng",
    "seeded",
    "run_recording",
    "run_replaying",
    "Replayer",
    "compare",
    "runs_on",
    "inspectable",
    "finite",
    "is_narrow_float",
    "K",
    "SAMPLING",
    "ULPS",
    "FAR_ULPS",
    "FP32_SLACK",
    "NOISE_FACTOR",
    "ILL_CONDITIONED",
    "changed",
    "compiled_expectation",
    "instance_outputs",
    "matched_instances",
    "must_match_rewritten",
    "partial_rewrite",
    "rewrite_count",
    "rewritten_outputs",
]


@dataclasses.dataclass(frozen=True)
class MatchRecord:
    """One rewrite made through an Inductor pattern entry (``PatternMatcherPass``).

    - ``entry``: the entry's kind (``"ReplacementPatternEntry"``, ``"GraphPatternEntry"``...) and
      the target of the node it was anchored at.
    - ``nodes``: names of the matched nodes (``Match.nodes``), as in the graph before the rewrite.
    - ``replacement``: names of the nodes the entry inserted.
    - ``anchor``: name of the node the entry was matched at (the last node of its pattern), or None
      when not recorded.
    - ``pattern_entry``: the entry object itself (its ``pattern`` and ``extra_check``), so that an
      oracle can ask it again on the graph before the pass; None when not recorded. Not compared.
    """

    entry: str
    nodes: tuple[str, ...]
    replacement: tuple[str, ...]
    anchor: str | None = None
    pattern_entry: Any = dataclasses.field(default=None, compare=False, repr=False)


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
      (:class:`pmverify._engine.compiled.CompiledRun`), whose runs stand in for the graph runs.
    - ``ranks``: for a tensor-parallel case in direct mode, the runs of ranks 1..tp_world-1 (each a
      ``RunPair`` of its own: the pass built for that rank, applied to that rank's copy); empty
      otherwise. :func:`rank_pair` picks a rank's run.
    - ``strict_order``: whether the case was applied with ``strict_order=True``.
    - ``before_outputs``: the ``meta["val"]`` of the outputs of the graph before the pass, from the
      fake propagation the direct mode made before running the pass (None in compiled mode:
      :meth:`before_output_vals` propagates then).
    - ``before_propagation``: that propagation (:class:`FakePropagation`), which
      :meth:`repropagated` reuses for the nodes the pass left as they were; None in compiled mode.
      For a case with symbols it is symbolic (:func:`propagate_symbolic`): the pass sees
      ``SymInt`` sizes, as under torch.compile with ``dynamic=True``.
    - ``pass_guards``: for a case with symbols, the guards the pass added to that propagation's
      ``ShapeEnv`` (sympy expressions: what the pass assumed of the sizes, ``Eq(s0, 11)`` when it
      read a symbolic size as an int); empty otherwise.
    - ``reapply``: in direct mode, a function applying another pass object to rank 0's graph as
      this pass was applied (returns the graph after it, or None when that pass raises): what the
      cache-key oracle asks of a pass built with another config; None in compiled mode.
    - ``built_from``: ``(builder, config)``, the class or pass factory that built the pass object
      and the config it was given (None when it took none), :func:`pmverify._engine.apply.built_from`;
      None for a pass given built.
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
    pass_guards: tuple[Any, ...] = ()
    reapply: Any = dataclasses.field(default=None, repr=False)
    built_from: tuple[Any, Any] | None = dataclasses.field(default=None, repr=False)
    _sized: dict[tuple[tuple[str, int], ...], RunPair] = dataclasses.field(default_factory=dict, init=False, repr=False)
    _results: dict[int, RankResults] = dataclasses.field(default_factory=dict, init=False, repr=False)
    _repropagation: Repropagation | BaseException | None = dataclasses.field(default=None, init=False, repr=False)
    _live: dict[str, torch.fx.Node] | None = dataclasses.field(default=None, init=False, repr=False)
    _cache: dict[Any, Any] = dataclasses.field(default_factory=dict, init=False, repr=False)

    def cached(self, key: Any, compute: Any) -> Any:
        """``compute()``, computed once per pair and ``key`` (a hashable naming what it is, such as
        ``("noise", rank)``): what several oracles ask of one pair (the noise floor, the region
        reference) is computed by the first and shared."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

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

    def at(self, sizes: dict[str, int]) -> RunPair:
        """This pair with the case's symbols at ``sizes`` (name -> size): the same graphs and pass,
        the case's inputs resized (:func:`pmverify._shapes.sizes.case_at`), its own results (in compiled
        mode: both compiled functions run on those inputs, ``CompiledRun.at``); made once per
        assignment. ``self`` for a case without symbols."""
        if not self.case.symbols:
            return self
        key = tuple(sorted(sizes.items()))
        if key not in self._sized:
            from .._shapes.sizes import case_at

            sized = case_at(self.case, sizes)
            ranks = [
                dataclasses.replace(run, case=sized, before_outputs=None, before_propagation=None) for run in self.ranks
            ]
            where = ", ".join(f"{name}={size}" for name, size in sizes.items())
            compiled = None if self.compiled is None else self.compiled.at(sized.inputs, where)
            self._sized[key] = dataclasses.replace(
                self, case=sized, ranks=ranks, before_outputs=None, before_propagation=None, compiled=compiled
            )
        return self._sized[key]

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
                self._repropagation = repropagate(
                    self.after,
                    self.case.inputs[0],
                    self.before_propagation,
                    self.case if self.case.symbols else None,
                    own=self.compiled is not None,
                )
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
    raises on a rank, or whose ranks wait in a collective a rank that returned never joined (a
    collective mismatch), makes ``after`` the :class:`~pmverify.distributed.SPMDError` on every rank.
    Each world has :func:`~pmverify.distributed.default_timeout_s` (``$PMVERIFY_TP_TIMEOUT_S``, else
    120 s); a world past it raises :class:`~pmverify.distributed.SPMDTimeoutError`: an error of the
    run, not a finding of the pass."""
    from ..distributed import SPMDError, SPMDTimeoutError, run_spmd

    case, world = pair.case, pair.case.tp_world
    reference_gm = float64_module(case.gm)
    run_filled = functools.partial(run_graph, fill=False)  # deterministic_fill is set once, around the runs
    with deterministic_fill():
        try:
            before = run_spmd(run_filled, world, [(pair.before, inputs) for inputs in case.inputs])
        except SPMDTimeoutError:
            raise
        except SPMDError as exc:
            first = str(exc).splitlines()[0]
            raise RuntimeError(
                f"the case's own graph, before the pass, fails on the tensor-parallel world: {first}"
            ) from None
        try:
            reference = run_spmd(
                functools.partial(run_float64, fill=False),
                world,
                [(reference_gm, inputs) for inputs in case.inputs],
            )
        except SPMDTimeoutError:
            raise
        except SPMDError:
            reference = [None] * world
        try:
            after = run_spmd(
                run_filled,
                world,
                [(rank_pair(pair, rank).after, inputs) for rank, inputs in enumerate(case.inputs)],
            )
        except SPMDTimeoutError:
            raise
        except SPMDError as exc:
            after = [exc] * world
    return [RankResults(before[rank], after[rank], reference[rank]) for rank in range(world)]
