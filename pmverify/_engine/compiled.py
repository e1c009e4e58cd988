"""Applying a pass under test to a :class:`GraphCase` through ``torch.compile``: the compiled mode.

The case's graph (``case.gm``, called as a function of the case's inputs) is compiled twice with
``torch.compile(backend="inductor", fullgraph=True, dynamic=False)``: once without the pass, once
with it installed as Inductor's ``post_grad_custom_post_pass`` (``torch.compile(options=...)``). Both compiled functions
run every rank's inputs (on clones: the final values of mutated inputs are results too), and the
oracles compare the two; Inductor's own codegen noise cancels out.

A case with symbols (:attr:`GraphCase.symbols`) compiles with ``dynamic=True`` instead, each tensor
dim whose size is a symbol marked with ``torch._dynamo.mark_dynamic`` and the ``Sym`` inputs passed
as ints (their hints), so the pass gets a post-grad graph of symbolic sizes, as torch.compile and
vLLM hand it one (``CompiledRun.symbolic_graphs`` counts them; none is logged as a warning: the
pass was then checked on a static graph only). Both compiled functions are kept, and the oracles run
them at the case's other sizes (``RunPair.at`` -> :meth:`CompiledRun.at`) without recompiling: the
one with the pass runs under ``torch.compiler.set_stance("fail_on_recompile")``, so that a guard the
pass added (a symbolic size read as an int, ``Eq(2*s0, 22)``) is not hidden by a fresh compile at
the new size, whose graph the pass would rewrite right again; vLLM evaluates no guard and would run
the specialised graph. That recompile is the run's exception, reported by the semantics oracle at
that size.

What is installed is a recorder (a ``CustomGraphPass`` whose ``uuid()`` is None, so that the FX
graph cache would be bypassed even if it were on) that, on the post-grad graph:

- copies the graph before the pass;
- runs the pass (``PatternMatcherPass`` through ``.apply``, anything else called on the graph)
  inside :func:`~pmverify._engine.apply.recording_matches`, so ``RunPair.match_records`` fills;
- copies the graph right after it, and sorts the *copy* as Inductor sorts the real graph right
  after the pass, recording the ``(node, input)`` pairs the pass left out of order;
- records an exception of the pass and re-raises it, so the compile fails; the failure becomes
  ``RunPair.error`` (a ``"crash"``) as in the direct mode.

Isolation: each compile gets a fresh function object with a fresh code object (dynamo's cache
lives on the code object, so neither compile can reuse the other's), and runs with every cache
that could serve a compiled graph off: the FX graph cache and AOT autograd cache (local and remote)
and dynamo's PGO profiles. Inductor's kernel cache stays on: it is keyed by the generated kernel's
source, so it can only reuse a kernel both compiles generate identically, and it keeps a compiled
case at seconds. (``force_disable_caches=True`` would also turn it off, and leaves a temporary
cache directory behind for every compile.) Dynamo's ``suppress_errors`` is off: a failing compile
must fail, not fall back to eager. The rest of dynamo's state, and whatever the caller compiled,
is left alone. Both compiles set Inductor's ``emulate_precision_casts=True``: without it Inductor
drops the rounding of bf16/fp16 casts inside fused code, so the compiled graph without the pass
would round differently from eager, and from a fused op that keeps eager's rounding order (see
:mod:`pmverify.fusions.qk_norm.real_model`).

The captured graphs are Inductor's post-grad graphs, whose placeholders are the inputs dynamo
lifted: in the order of their first use, without the unused ones (with symbols, also the symbolic
sizes of tensor inputs, which the copies compute with ``aten.sym_size.int`` from the case's inputs,
found by the sources dynamo records, ``L['args'][1].size()[0]``). So that the oracles can run and
fake-propagate them with ``case.inputs``, the copies in ``RunPair.before`` / ``.after`` get the
case's placeholders back: one per case input, in the case's order and with the case's names (an
input the compile dropped gets an unused placeholder). The mapping comes from a no-op
``pre_grad_custom_pass`` that reads dynamo's graph inputs (the very tensors passed in). Their
outputs stay the post-grad graph's (dynamo returns duplicated outputs and inputs returned as they
are outside the graph), so the float64 reference of the semantics oracle is computed from the
case's own graph, whose outputs line up with what the compiled functions return.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import traceback
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from .._case import GraphCase
from .._compat import CustomGraphPass, get_custom_graph_passes, pytree
from .._execution import clone_inputs, deterministic_fill
from .apply import (
    RunPair,
    UncompilableCase,
    build_pass,
    built_from,
    error_summary,
    pass_made_unsorted,
    quiet_fake_tensor_errors,
    recording_matches,
    run_pass,
    sort_like_inductor,
)
from .compiled_graphs import alignment, copy_graph_module, symbolic_alignment

logger = logging.getLogger(__name__)

__all__ = ["CompiledRun", "apply_compiled", "compile_options", "COMPILE_OPTIONS"]

#: The ``torch.compile`` arguments of both compiles of a static case (:func:`compile_options`).
COMPILE_OPTIONS: dict[str, Any] = {"backend": "inductor", "fullgraph": True, "dynamic": False}

Results = tuple[list[Any], list[Any]]


@dataclasses.dataclass
class CompiledRun:
    """What the compiled mode measured (``RunPair.compiled``).

    - ``before``: per rank, ``(flat outputs, final values of the inputs)`` of the compile *without*
      the pass (as :func:`pmverify._execution.run_graph` returns them for a graph).
    - ``after``: per rank, the same for the compile *with* the pass, or the exception that compile
      (or its run on that rank) raised.
    - ``timings_s``: seconds per phase: ``compile_without_pass`` / ``compile_with_pass`` (the first
      call: compile plus rank 0's run), ``run_without_pass`` / ``run_with_pass`` (the other ranks'
      runs).
    - ``graphs``: post-grad graphs the pass was called on (1 with ``fullgraph=True``; more after a
      recompile, of which only the first is recorded; 0 when Inductor never ran it).
    - ``aligned``: whether the captured graphs got the case's placeholders back (see the module
      docstring); False when dynamo's inputs could not be mapped to the case's.
    - ``symbolic_graphs``: of ``graphs``, those handed to the pass with symbolic sizes (a
      placeholder ``Sym(s0)`` or a tensor of symbolic shape); for a case with symbols, 0 means
      torch.compile specialised the case and the pass was never checked on a dynamic graph.
    - ``pass_guards``: the guards the pass added to the compile's ``ShapeEnv`` while it ran on the
      first graph (as text, ``"Eq(2*s83, 22)"``): what it assumed of the sizes.
    """

    before: list[Results]
    after: list[Results | BaseException]
    timings_s: dict[str, float] = dataclasses.field(default_factory=dict)
    graphs: int = 0
    aligned: bool = False
    symbolic_graphs: int = 0
    pass_guards: tuple[str, ...] = ()
    functions: tuple[Callable[..., Any], Callable[..., Any]] | None = dataclasses.field(default=None, repr=False)

    def at(self, inputs: Sequence[tuple[Any, ...]], where: str) -> CompiledRun:
        """The runs of both compiled functions (``functions``: without, with the pass) on
        ``inputs`` (per rank, e.g. a case's inputs at other sizes, :func:`pmverify._shapes.sizes.case_at`),
        as a :class:`CompiledRun` (``where`` names the sizes in messages). A function compiled with
        ``dynamic=True`` serves every size of the case's ranges without recompiling: the one with
        the pass runs with ``torch.compiler.set_stance("fail_on_recompile")``, so that a guard the pass
        added (a symbolic size read as an int) is not hidden by a recompile at the new size (vLLM
        evaluates no guard: it would run the specialised graph); such a recompile is the run's
        exception, a ``RuntimeError`` that names the guard. Where the compile without the pass
        recompiles too, both may. Raises ``RuntimeError`` when the compile without the pass fails
        there, ``ValueError`` when the functions were not kept (a static case). Where the compile with
        the pass failed (Inductor could not lower the graph the pass left), its exception is the
        ``after`` of every size."""
        if self.functions is None:
            raise ValueError("this compiled run kept no compiled functions (a case without symbols)")
        baseline, with_pass = self.functions
        # the compile with the pass failed (after the pass returned): its exception stands for every size
        first = self.after[0] if self.after else None
        failed = first if isinstance(first, BaseException) and all(a is first for a in self.after) else None
        before: list[Results] = []
        after: list[Results | BaseException] = []
        with _compile_config(None, None):
            for rank_inputs in inputs:
                args = clone_inputs(rank_inputs)
                recompiles = False
                try:
                    with torch.compiler.set_stance("fail_on_recompile"):
                        out = baseline(*args)
                except Exception as exc:  # noqa: BLE001 - a recompile is allowed to both, then
                    if not _is_recompile(exc):
                        raise RuntimeError(
                            f"the compile without the pass fails at {where}: {error_summary(exc)}"
                        ) from exc
                    recompiles, args = True, clone_inputs(rank_inputs)
                    out = baseline(*args)
                before.append((pytree.tree_leaves(out), args))
                if failed is not None:
                    after.append(failed)
                    continue
                args = clone_inputs(rank_inputs)
                try:
                    with contextlib.nullcontext() if recompiles else torch.compiler.set_stance("fail_on_recompile"):
                        after.append((pytree.tree_leaves(with_pass(*args)), args))
                except Exception as exc:  # noqa: BLE001 - the semantics oracle reports it
                    after.append(_recompile_error(exc, where, self.pass_guards) if _is_recompile(exc) else exc)
        return dataclasses.replace(self, before=before, after=after, timings_s={})


def _is_recompile(exc: BaseException) -> bool:
    return "fail_on_recompile" in str(exc)


def _recompile_error(exc: BaseException, where: str, guards: Sequence[str]) -> RuntimeError:
    lines = [line.strip() for line in str(exc).splitlines()]
    failures = [line.removeprefix("- ") for line in lines if line.startswith("- ")]
    added = f"guards the pass added: {', '.join(guards)}; " if guards else ""
    return RuntimeError(
        f"the compile with the pass does not serve {where} (the one without it does): torch.compile recompiles "
        f"there ({added}guard failures: {'; '.join(failures) or lines[0]}): the pass specialised the graph to "
        "its hint, and vLLM, which evaluates no guard, would run it as it is"
    )


class _PostGradRecorder(CustomGraphPass):
    """Installed as ``post_grad_custom_post_pass``: runs the pass under test and records the
    graph before and after it (see the module docstring)."""

    def __init__(self, pass_obj: Any) -> None:
        self.pass_obj = pass_obj
        self.calls = 0
        self.before: torch.fx.GraphModule | None = None
        self.after: torch.fx.GraphModule | None = None
        self.count: int | None = None
        self.matches: list[Any] = []
        self.pairs: list[tuple[str, str]] = []
        self.error: str | None = None
        self.error_summary: str | None = None
        self.internal_error: Exception | None = None
        self.elapsed_s = 0.0
        self.symbolic_graphs = 0
        self.guards: tuple[str, ...] = ()

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.calls += 1
        placeholders = [node.meta.get("val") for node in graph.find_nodes(op="placeholder")]
        self.symbolic_graphs += any(_symbolic(val) for val in placeholders)
        if self.calls > 1:  # a recompile: the pass runs as Inductor would run it, unrecorded
            logger.debug("post-grad graph %d of one compiled case: pass run, not recorded", self.calls)
            with quiet_fake_tensor_errors():
                run_pass(self.pass_obj, graph)
            return
        gm = graph.owning_module
        if gm is None:
            gm = torch.fx.GraphModule(torch.nn.Module(), graph)
        try:
            self.before = copy_graph_module(gm)
        except Exception as exc:  # noqa: BLE001 - pmverify's own failure: not blamed on the pass
            self.internal_error = exc
            return
        from .._compat import detect_fake_mode

        mode = detect_fake_mode([val for val in placeholders if isinstance(val, torch.Tensor)])
        shape_env = getattr(mode, "shape_env", None)
        known = len(shape_env.guards) if shape_env is not None else 0
        start = time.perf_counter()
        try:
            with quiet_fake_tensor_errors(), recording_matches() as matches:
                self.count = run_pass(self.pass_obj, graph)
            if shape_env is not None:
                self.guards = tuple(str(guard.expr) for guard in shape_env.guards[known:])
        except Exception as exc:  # re-raised: the compile must fail as it would for a user
            self.elapsed_s = time.perf_counter() - start
            self.error = traceback.format_exc()
            self.error_summary = error_summary(exc)
            raise
        self.elapsed_s = time.perf_counter() - start
        self.matches = matches
        try:
            self.after = copy_graph_module(gm)
            self.pairs = sort_like_inductor(self.after.graph)  # the copy only: Inductor sorts the real graph
        except Exception as exc:  # noqa: BLE001 - pmverify's own failure: not blamed on the pass
            self.internal_error = exc
            return
        with contextlib.suppress(Exception):
            self.after.recompile()

    def uuid(self) -> None:
        return None  # no cache key: with caches on, Inductor bypasses the FX graph cache


def _symbolic(val: Any) -> bool:
    """Whether a placeholder's value has a symbolic size (a ``SymInt``, or a tensor with one)."""
    if isinstance(val, torch.SymInt):
        return not val.node.expr.is_number
    return isinstance(val, torch.Tensor) and any(
        isinstance(side, torch.SymInt) and not side.node.expr.is_number for side in val.shape
    )


class _InputRecorder(CustomGraphPass):
    """Installed in front of ``pre_grad_custom_pass``: records the example value (the tensor the
    compiled function was called with) of each of dynamo's graph inputs, in graph order; changes
    nothing."""

    def __init__(self) -> None:
        self.examples: list[Any] | None = None
        self.sources: list[str | None] = []

    def __call__(self, graph: torch.fx.Graph) -> None:
        if self.examples is not None:
            return
        examples = []
        for node in graph.find_nodes(op="placeholder"):
            grapharg = node.meta.get("grapharg")
            try:
                examples.append(grapharg.example if grapharg is not None else None)
            except Exception:  # noqa: BLE001 - an example dynamo no longer holds
                examples.append(None)
            source = getattr(grapharg, "source", None)
            self.sources.append(getattr(source, "name", None) if source is not None else None)
        self.examples = examples

    def uuid(self) -> str:
        return f"pmverify-input-recorder-{id(self)}"  # never matches a cache entry


def _fresh_function(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """``gm`` as a function of its inputs, with a code object of its own (dynamo caches compiled
    code per code object: two compiles of one code object would share their cache entries)."""

    def call(*args: Any) -> Any:
        return gm(*args)

    code = call.__code__.replace()
    return types.FunctionType(code, call.__globals__, call.__name__, None, call.__closure__)


@contextlib.contextmanager
def _compile_config(post_pass: Any, pre_pass: Any) -> Iterator[dict[str, Any]]:
    """The configuration of both compiles (see the module docstring): Dynamo's and AOTAutograd's
    set for the block, restored on exit; Inductor's yielded, as ``torch.compile``'s ``options``."""
    from .._compat import dynamo_config, functorch_config, inductor_config

    pre_passes = get_custom_graph_passes(inductor_config.pre_grad_custom_pass)
    options = {
        "fx_graph_cache": False,
        "fx_graph_remote_cache": False,
        "emulate_precision_casts": True,
        "post_grad_custom_post_pass": post_pass,
        "pre_grad_custom_pass": (pre_pass, *pre_passes)
        if pre_pass is not None
        else inductor_config.pre_grad_custom_pass,
    }
    with (
        functorch_config.patch(enable_autograd_cache=False, enable_remote_autograd_cache=False),
        dynamo_config.patch(
            suppress_errors=False, automatic_dynamic_local_pgo=False, automatic_dynamic_remote_pgo=False
        ),
        torch.no_grad(),
        deterministic_fill(),
    ):
        yield options


def compile_options(case: GraphCase) -> dict[str, Any]:
    """The ``torch.compile`` arguments for ``case``: :data:`COMPILE_OPTIONS`, with ``dynamic=True``
    for a case with symbols."""
    return {**COMPILE_OPTIONS, "dynamic": True} if case.symbols else dict(COMPILE_OPTIONS)


def _mark_dynamic(case: GraphCase, args: Sequence[Any]) -> None:
    """``torch._dynamo.mark_dynamic`` on each dim of a tensor input whose size is a symbol of
    ``case`` (``input_dims``: ``"s0"``; a product such as ``"2*s0"`` is left to ``dynamic=True``):
    a compile that specialises such a dim fails instead of checking the pass on a static graph."""
    names = {symbol.name for symbol in case.symbols}
    for value, dims in zip(args, case.input_dims, strict=False):
        if isinstance(value, torch.Tensor) and isinstance(dims, tuple):
            for d, expression in enumerate(dims):
                if expression in names:
                    torch._dynamo.mark_dynamic(value, d)


def _compile_and_run(
    case: GraphCase, post_pass: Any, pre_pass: Any, first_args: list[Any]
) -> tuple[list[Results | BaseException], float, float, Callable[..., Any]]:
    """Compile ``case.gm`` afresh and run it on every rank (rank 0 on ``first_args``, the others on
    clones). Returns per rank the results or the exception, the seconds of the first call and of
    the others, and the compiled function. An exception of the first call (the compile) stands for
    every rank. A case with symbols compiles with ``dynamic=True``, its symbolic dims marked
    dynamic (:func:`_mark_dynamic`), its ``Sym`` inputs passed as ints."""
    results: list[Results | BaseException] = []
    with _compile_config(post_pass, pre_pass) as options:
        compiled = torch.compile(_fresh_function(case.gm), **compile_options(case), options=options)
        if case.symbols:
            _mark_dynamic(case, first_args)
        start = time.perf_counter()
        try:
            results.append((pytree.tree_leaves(compiled(*first_args)), first_args))
        except Exception as exc:  # noqa: BLE001 - the caller decides whose fault it is
            return [exc] * case.tp_world, time.perf_counter() - start, 0.0, compiled
        first = time.perf_counter() - start
        start = time.perf_counter()
        for rank_inputs in case.inputs[1:]:
            args = clone_inputs(rank_inputs)
            try:
                results.append((pytree.tree_leaves(compiled(*args)), args))
            except Exception as exc:  # noqa: BLE001
                results.append(exc)
    return results, first, time.perf_counter() - start, compiled


def apply_compiled(pass_: Any, case: GraphCase, *, strict_order: bool = False) -> RunPair:
    """Apply ``pass_`` to ``case`` through ``torch.compile``, compared with the compile without it.

    Returns a :class:`~pmverify._engine.apply.RunPair` with ``mode="compiled"``: ``before`` / ``after``
    the post-grad graph before / right after the pass (``after`` None when the pass raised),
    ``matched_count``, ``match_records`` and ``unsorted`` from the pass's run in the compile, and
    ``compiled`` a :class:`CompiledRun` (the semantics oracle compares its runs, against the
    float64 reference of ``case.gm``, whose outputs line up with the compiled functions').
    ``strict_order`` as for :func:`~pmverify._engine.apply.apply_direct`: the disorder is read on the
    copy of the graph taken right after the pass, before Inductor sorts it. Never raises for the pass's own errors: one raised by the pass lands in
    ``RunPair.error``; a compile (or run) with the pass that fails after the pass returned lands in
    ``compiled.after`` for the semantics oracle to report.

    Raises :class:`~pmverify._engine.apply.UncompilableCase` (a ``RuntimeError``) when the case does not
    compile or run *without* the pass (nothing to compare with), ``RuntimeError`` when pmverify cannot copy the post-grad graph; ``ValueError`` when a pass class is
    given and the case has no ``pass_config``.
    """
    pass_obj = build_pass(pass_, case)
    timings: dict[str, float] = {}
    baseline, timings["compile_without_pass"], timings["run_without_pass"], without = _compile_and_run(
        case, None, None, clone_inputs(case.inputs[0])
    )
    failed = next((r for r in baseline if isinstance(r, BaseException)), None)
    if failed is not None:
        raise UncompilableCase(
            f"torch.compile of the case without the pass failed ({error_summary(failed)}); the compiled mode "
            f"has nothing to compare with on {case!r}"
        ) from failed
    recorder, inputs = _PostGradRecorder(pass_obj), _InputRecorder()
    first_args = clone_inputs(case.inputs[0])
    after_runs, timings["compile_with_pass"], timings["run_with_pass"], with_pass = _compile_and_run(
        case, recorder, inputs, first_args
    )
    if recorder.internal_error is not None:
        raise RuntimeError(
            f"pmverify could not copy the post-grad graph of {case!r}: {error_summary(recorder.internal_error)}"
        ) from recorder.internal_error
    before_gm, after_gm = recorder.before, recorder.after
    if before_gm is None:
        align = None
    elif case.symbols:
        align = symbolic_alignment(case, before_gm, inputs.sources)
    else:
        align = alignment(case, before_gm, inputs.examples, first_args)
    if before_gm is None:  # Inductor never called the pass (no graph to compile)
        before_gm, after_gm, recorder.count = case.gm, copy_graph_module(case.gm), 0
    elif align is not None:
        before_gm = copy_graph_module(before_gm, align)
        after_gm = copy_graph_module(after_gm, align) if after_gm is not None else None
    run = CompiledRun(
        baseline,
        after_runs,
        timings,
        recorder.calls,
        align is not None,
        recorder.symbolic_graphs,
        recorder.guards,
        (without, with_pass) if case.symbols else None,
    )
    if case.symbols and recorder.calls and not recorder.symbolic_graphs:
        logger.warning(
            "compiled case %s: torch.compile(dynamic=True) handed the pass no graph with symbolic sizes (it "
            "specialised the case): the pass was checked on static graphs only",
            case.label or "graph",
        )
    logger.debug(
        "compiled case: %s matches over %d graph(s); %s",
        recorder.count,
        recorder.calls,
        ", ".join(f"{key} {value:.2f}s" for key, value in timings.items()),
    )
    if recorder.error is not None:
        return RunPair(
            case,
            before_gm,
            None,
            pass_obj,
            None,
            recorder.error,
            recorder.elapsed_s,
            recorder.error_summary,
            mode="compiled",
            compiled=run,
            strict_order=strict_order,
        )
    pair = RunPair(
        case,
        before_gm,
        after_gm,
        pass_obj,
        recorder.count,
        None,
        recorder.elapsed_s,
        resorted=bool(recorder.pairs),
        match_records=recorder.matches,
        unsorted=pass_made_unsorted(recorder.pairs, recorder.matches, strict_order),
        mode="compiled",
        compiled=run,
        strict_order=strict_order,
        built_from=built_from(pass_, case),
    )
    return pair
