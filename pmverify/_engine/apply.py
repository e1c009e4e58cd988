"""Applying a pass under test to a :class:`GraphCase`: the direct (no-compile) mode.

Direct mode deep-copies the case's graph, propagates fake tensors through it in one
``FakeTensorMode`` (so every node carries ``meta["val"]`` from the same mode, as in Inductor's
post-grad passes), runs the pass on the copy's graph, sorts it with Inductor's
``stable_topological_sort`` (as ``post_grad_passes`` does right after ``post_grad_custom_post_pass``,
and vLLM's ``PostCleanupPass`` after its fusions: the pattern matcher does not promise a sorted
graph, e.g. a multi-output replacement goes before the first output, ahead of a late input) and
recompiles it. A graph that cannot be sorted (a cycle) is left as the pass left it, for the
structure oracle to report. The disorder the pass's own code made is recorded (``RunPair.unsorted``);
with ``strict_order=True``, that of the nodes a pattern entry inserted too (vLLM's pass manager runs
its next pass on the graph a pass left, before any sort). The pass may be:

- anything with ``__call__(torch.fx.Graph)`` (Inductor's ``CustomGraphPass``, vLLM's passes);
- a ``PatternMatcherPass`` (called through ``.apply``);
- a class, built per case as ``cls(case.pass_config)``;
- a :class:`~pmverify._findings.factory.PassFactory` (``verify(pass_factory=...)``), used as a class is.

A tensor-parallel case (``tp_world > 1``) runs the same per-rank graph on every rank, and so does
the pass: it is applied once per rank, to its own copy propagated with that rank's inputs, built
for that rank (a class gets ``case.pass_config`` with ``tp_rank=r`` when the config has that field,
see :func:`rank_config`). ``RunPair.ranks`` holds the runs of ranks 1.., the pair itself is rank 0.

:class:`RunPair`, :class:`MatchRecord`, fake propagation and the graph runs the oracles read live
in :mod:`pmverify._execution` (re-exported here); this module only applies the pass.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import time
import traceback
from typing import Any

import torch

from .._case import GraphCase
from .._compat import python_dispatcher
from .._execution import (
    MatchRecord,
    RunPair,
    error_summary,
    propagate_fake,
    propagate_symbolic,
    propagated_or_own,
    quiet_fake_tensor_errors,
    rank_pair,
)
from .._findings.factory import PassFactory
from .._fx import output_vals
from ..errors import UncompilableCase

__all__ = [
    "MatchRecord",
    "RunPair",
    "UncompilableCase",
    "apply_direct",
    "build_pass",
    "built_from",
    "rank_config",
    "rank_pair",
    "validate_pass",
    "error_summary",
    "pass_made_unsorted",
    "run_pass",
    "propagate_fake",
    "sort_like_inductor",
    "recording_matches",
]


def _out_of_order(graph: torch.fx.Graph) -> list[tuple[torch.fx.Node, torch.fx.Node]]:
    """``(node, input)`` pairs where ``node`` comes before its ``input`` (or uses an erased one)."""
    seen: set[torch.fx.Node] = set()
    pairs = []
    for node in graph.nodes:
        pairs += [(node, arg) for arg in node.all_input_nodes if arg not in seen]
        seen.add(node)
    return pairs


@contextlib.contextmanager
def recording_matches():
    """Record every rewrite an Inductor pattern entry makes while the block runs; yields the list
    of :class:`MatchRecord` it fills. Wraps ``apply`` of the entry classes of
    ``torch._inductor.pattern_matcher`` (what ``PatternMatcherPass.apply`` calls once a match passed
    its mutation-region and ``extra_check`` tests) and restores them on exit."""
    from .._compat import pattern_matcher as pm

    records: list[MatchRecord] = []
    classes = [pm.ReplacementPatternEntry, pm.GraphPatternEntry, pm.LoweringPatternEntry]
    originals = {cls: cls.__dict__["apply"] for cls in classes}

    def wrap(original: Any) -> Any:
        def apply(self: Any, match: Any, graph: torch.fx.Graph, node: torch.fx.Node) -> None:
            matched = tuple(n.name for n in match.nodes)
            anchor = node.name
            present = set(graph.nodes)
            target = getattr(node.target, "__name__", str(node.target))
            original(self, match, graph, node)
            inserted = tuple(n.name for n in graph.nodes if n not in present)
            records.append(MatchRecord(f"{type(self).__name__} at {target}", matched, inserted, anchor, self))

        return apply

    for cls, original in originals.items():
        cls.apply = wrap(original)
    try:
        yield records
    finally:
        for cls, original in originals.items():
            cls.apply = original


def _acyclic(graph: torch.fx.Graph) -> bool:
    """Kahn's algorithm over the data edges."""
    pending = {node: len(set(node.all_input_nodes)) for node in graph.nodes}
    ready = [node for node, count in pending.items() if count == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for user in node.users:
            if user in pending:
                pending[user] -= 1
                if pending[user] == 0:
                    ready.append(user)
    return done == len(pending)


def sort_like_inductor(graph: torch.fx.Graph) -> list[tuple[str, str]]:
    """Sort ``graph`` as Inductor does after custom post-grad passes; return the ``(node, input)``
    name pairs the pass had left out of order (empty when sorted). A graph with a cycle is left
    unchanged."""
    pairs = [(node.name, arg.name) for node, arg in _out_of_order(graph)]
    if pairs and _acyclic(graph):
        from .._compat import stable_topological_sort

        stable_topological_sort(graph)
    return pairs


def pass_made_unsorted(
    pairs: list[tuple[str, str]], matches: list[MatchRecord], strict_order: bool = False
) -> list[tuple[str, str]]:
    """The ``(node, input)`` out-of-order pairs judged: with ``strict_order`` all of ``pairs``;
    else those the pass's own code made, the pairs of nodes an Inductor pattern entry inserted left
    out (it relies on the sort after the custom passes)."""
    if strict_order:
        return list(pairs)
    inserted = {name for record in matches for name in record.replacement}
    return [(node, arg) for node, arg in pairs if node not in inserted]


def validate_pass(pass_: Any) -> None:
    """Raise ``hypothesis.errors.InvalidArgument`` naming ``pass_`` unless it is a pass class, a
    ``PatternMatcherPass`` (anything with ``apply``) or callable on a ``torch.fx.Graph``."""
    from hypothesis.errors import InvalidArgument

    if not (isinstance(pass_, (type, PassFactory)) or callable(pass_) or callable(getattr(pass_, "apply", None))):
        raise InvalidArgument(
            f"pass_={pass_!r} is not a pass: give a class built per case from case.pass_config, a "
            "PatternMatcherPass, or a callable on a torch.fx.Graph"
        )


def rank_config(config: Any, rank: int, tp_world: int | None = None) -> Any:
    """``config`` for rank ``rank``: a dataclass with a ``tp_rank`` field or a dict with a
    ``"tp_rank"`` key gets ``tp_rank=rank``; anything else is returned as it is, and so is a config
    whose own ``tp_world`` is not ``tp_world`` (a single-rank config of a rank-local graph spread
    over ranks by ``tp_cases``: the same pass on every rank)."""
    own_world = config.get("tp_world") if isinstance(config, dict) else getattr(config, "tp_world", None)
    if tp_world is not None and own_world is not None and own_world != tp_world:
        return config
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        if "tp_rank" in {f.name for f in dataclasses.fields(config)} and config.tp_rank != rank:
            return dataclasses.replace(config, tp_rank=rank)
    elif isinstance(config, dict) and "tp_rank" in config and config["tp_rank"] != rank:
        return {**config, "tp_rank": rank}
    return config


def build_pass(pass_: Any, case: GraphCase, rank: int = 0) -> Any:
    """Return the pass object for ``case`` on rank ``rank``: ``pass_`` itself, or, when ``pass_`` is
    a class, ``pass_(rank_config(case.pass_config, rank))``, or ``pass_()`` for a case that carries
    no ``pass_config`` (a fresh object per case, so no state leaks from one case to the next); a
    :class:`PassFactory` the same way (:meth:`PassFactory.build`).
    Raises ``InvalidArgument`` for something that is not a pass (:func:`validate_pass`), ``ValueError`` when
    a class needs constructor arguments and the case carries no ``pass_config``."""
    validate_pass(pass_)
    if isinstance(pass_, PassFactory):
        return pass_.build(
            rank_config(case.pass_config, rank, case.tp_world) if case.tp_world > 1 else case.pass_config
        )
    if isinstance(pass_, type):
        if case.pass_config is None:
            if not _constructible_without_arguments(pass_):
                raise ValueError(
                    f"pass_={pass_.__name__} is a class whose constructor takes arguments, and the case carries "
                    f"no pass_config to build it with: give a built pass (pass_={pass_.__name__}(...)) or cases "
                    "that carry a pass_config"
                )
            return pass_()
        return pass_(rank_config(case.pass_config, rank, case.tp_world) if case.tp_world > 1 else case.pass_config)
    return pass_


def built_from(pass_: Any, case: GraphCase) -> tuple[Any, Any] | None:
    """``(builder, config)``: what built rank 0's pass object for ``case`` and the config it was
    given (None when it was given none: a pass factory taking no argument), so that a pass for
    another config can be built the same way (``builder(variant)``); None for a pass given built."""
    config = case.pass_config
    if isinstance(pass_, PassFactory):
        return (pass_.fn, config if pass_.takes_config else None)
    if isinstance(pass_, type):
        return (pass_, config)
    return None


def _constructible_without_arguments(cls: type) -> bool:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # a builtin or C-extension constructor: try it
        return True
    return all(
        p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in signature.parameters.values()
    )


def run_pass(pass_obj: Any, graph: torch.fx.Graph) -> int | None:
    """Run ``pass_obj`` on ``graph`` in place; return the match count it reports, if any."""
    from .._compat import PatternMatcherPass

    if isinstance(pass_obj, PatternMatcherPass):
        return int(pass_obj.apply(graph))
    if not callable(pass_obj):
        raise TypeError(f"pass_={pass_obj!r} is neither callable on a torch.fx.Graph nor a PatternMatcherPass")
    pass_obj(graph)
    count = getattr(pass_obj, "matched_count", None)
    return int(count) if isinstance(count, int) else None


def apply_direct(pass_: Any, case: GraphCase, *, strict_order: bool = False) -> RunPair:
    """Apply ``pass_`` to a copy of ``case.gm`` without compiling, once per rank of a
    tensor-parallel case (see the module docstring); never raises for the pass's own errors (they
    land in ``RunPair.error``; a rank other than 0 that raises is named there).

    ``strict_order``: record in ``RunPair.unsorted`` every node the pass left before one of its
    inputs, those an Inductor pattern entry inserted too (default False: those left out, as
    Inductor sorts the graph right after ``post_grad_custom_post_pass``). The graph is sorted
    either way, so that the other oracles can run it."""
    pair = _apply_rank(build_pass(pass_, case), case, 0, strict_order)
    pair.reapply = lambda other: _apply_rank(other, case, 0, strict_order).after
    pair.built_from = built_from(pass_, case)
    if case.tp_world == 1 or pair.error is not None:
        return pair
    for rank in range(1, case.tp_world):
        run = _apply_rank(build_pass(pass_, case, rank), case, rank, strict_order)
        pair.ranks.append(run)
        if run.error is not None:
            pair.error, pair.error_summary = f"rank {rank}: {run.error}", f"{run.error_summary} on rank {rank}"
            pair.after = None
            break
    return pair


def _apply_rank(pass_obj: Any, case: GraphCase, rank: int, strict_order: bool) -> RunPair:
    after = copy.deepcopy(case.gm)  # node.meta is copied shallowly: the fake values are shared
    if case.symbols:  # the pass sees SymInt sizes, as under torch.compile(dynamic=True)
        propagation = propagate_symbolic(after, case, rank)
    else:
        propagation = propagated_or_own(after, case.inputs[rank])
    before_outputs = output_vals(after)  # the structure oracle's reference, propagated once
    shape_env = propagation.mode.shape_env
    guards_before = len(shape_env.guards) if shape_env is not None else 0
    start = time.perf_counter()
    try:
        # compile_fx runs post-grad passes under the Python dispatcher (SymInt decompositions)
        dispatcher = python_dispatcher() if case.symbols else contextlib.nullcontext()
        with quiet_fake_tensor_errors(), recording_matches() as matches, dispatcher:
            count = run_pass(pass_obj, after.graph)
        pairs = sort_like_inductor(after.graph)
        after.recompile()
    except Exception as exc:  # noqa: BLE001 - a raising pass is a finding, reported by check_case
        return RunPair(
            case,
            case.gm,
            None,
            pass_obj,
            None,
            traceback.format_exc(),
            time.perf_counter() - start,
            error_summary(exc),
            strict_order=strict_order,
        )
    return RunPair(
        case,
        case.gm,
        after,
        pass_obj,
        count,
        None,
        time.perf_counter() - start,
        resorted=bool(pairs),
        match_records=matches,
        unsorted=pass_made_unsorted(pairs, matches, strict_order),
        strict_order=strict_order,
        before_outputs=before_outputs,
        before_propagation=propagation,
        pass_guards=tuple(guard.expr for guard in shape_env.guards[guards_before:]) if shape_env is not None else (),
    )
