"""``verify``: a Hypothesis search for a case on which a pass breaks a property."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import hypothesis
from hypothesis import event, given, reject
from hypothesis.errors import FailedHealthCheck, InvalidArgument, Unsatisfiable
from hypothesis.strategies import SearchStrategy

from .._compat import (
    max_shrinking_seconds,
    no_local_constants,
    search_statistics,
    very_slow_shrinking_reason,
    without_slow_shrinking_warning,
)
from .._findings import reproducer as _reproducer
from .._findings.fatal import announce, call_named, case_label, fatal_stacks
from .._findings.severity import failure_key, most_severe
from .._findings.summary import (
    UnfusedWarning,
    VerifySummary,
    either_by_pass,
    unfused_warnings,
    vacuous_error,
    validate_allow_unfused,
)
from ..device import require_runnable
from .apply import UncompilableCase, validate_pass
from .check import MODES, CaseResult, OracleSpec, check_case, pass_or_factory, validate_oracles
from .verify_failures import (
    Failure,
    PassVerificationError,
    Shrinking,
    TooManyUncompilable,
    case_failures,
    failure_class,
    pass_name,
    raise_failures,
    short_repr,
)
from .verify_settings import batch_seed, database_key, fresh_settings, search_settings

__all__ = [
    "DEFAULT_SHRINK_BUDGET_S",
    "Failure",
    "PassVerificationError",
    "batch_seed",
    "case_events",
    "database_key",
    "fresh_settings",
    "verify",
    "verify_in_rotation",
]


#: The default of ``verify(..., shrink_budget_s=)``: seconds of shrinking a search's failures.
DEFAULT_SHRINK_BUDGET_S = 180.0


def case_events(result: CaseResult) -> list[str]:
    """Labels of what a case exercised, for Hypothesis' statistics (``event()``)."""
    labels = [f"matches: {result.rewrite_count}"]
    notes = getattr(result, "notes", {})
    for index, (instance, matched) in enumerate(zip(result.case.planted, result.planted_matched, strict=True)):
        if instance.must_match is True and index in notes and not either_by_pass(notes[index]):
            labels.append(f"{instance.pattern}: matched, an intermediate kept for its other readers")
        elif instance.must_match is True and index in notes:
            where = "matched" if matched else "left alone"
            labels.append(f"{instance.pattern}: either is right (the pass put a mutation among its nodes): {where}")
        elif instance.must_match is True:
            labels.append(f"{instance.pattern}: {'matched' if matched else 'NOT matched'}")
        elif instance.must_match is None:
            labels.append(f"{instance.reason or 'may match'}: {'matched' if matched else 'left alone'}")
        elif index in notes:
            labels.append(f"near miss {instance.reason}: rewritten, either is right (see the note)")
        else:
            labels.append(f"near miss {instance.reason}: {'wrongly matched' if matched else 'rejected'}")
    if not result.rewritten:
        labels.append("not rewritten")
    if result.pair.resorted:
        labels.append("pass left the graph unsorted (stable_topological_sort ran after it)")
    if result.case.mutations:
        labels.append(f"mutations: {len(result.case.mutations)}")
    if result.void_reason:
        incomparable = getattr(result, "not_comparable", None)
        labels.append(
            "void: not comparable (rng)" if incomparable else "void: non-finite reference (semantics not judged)"
        )
    labels += [f"violation: {v.oracle}" for v in result.violations]
    labels += [f"pmverify internal error: {error.oracle}" for error in getattr(result, "internal_errors", ())]
    return labels


def verify(
    pass_: Any = None,
    cases: SearchStrategy | None = None,
    *,
    max_examples: int | None = None,
    seed: int | None = None,
    oracles: Sequence[OracleSpec] | None = None,
    repro_dir: str | os.PathLike[str] | None = None,
    pass_source: str | None = None,
    on_result: Any = None,
    mode: str = "direct",
    on_case: Callable[[Any], None] | None = None,
    strict_order: bool = False,
    allow_no_rewrites: bool = False,
    settings: hypothesis.settings | None = None,
    shrink_budget_s: float | None = DEFAULT_SHRINK_BUDGET_S,
    pass_factory: Callable[..., Any] | None = None,
    reproducer_prelude: str | None = None,
    allow_unfused: Any = None,
    device: Any = None,
) -> VerifySummary:
    """Search ``cases`` for a case on which ``pass_`` breaks a property; return a
    :class:`VerifySummary` of what was checked when none is found, else raise
    :class:`PassVerificationError` for the shrunk case.

    - ``pass_``: a pass object, or a pass class built per case as ``pass_(case.pass_config)``.
    - ``pass_factory``: instead of ``pass_``, a function that builds the pass (a pass built from a
      config pmverify's cases do not carry, as vLLM's ``Pass(vllm_config)``), defined at module
      level: it is called like a pass class, per case and per rank of a tensor-parallel case, as
      ``pass_factory(case.pass_config)`` when it takes an argument and the case carries a
      ``pass_config``, else as ``pass_factory()``. The reproducer and ``pmverify fuzz``'s workers
      get it back by its module and name (by its file when that module is the ``__main__`` script
      or a test module not importable by name). The cache-key oracle builds the passes of other
      configs with it (``pass_factory(variant)``) when it takes a config.
    - ``cases``: a Hypothesis strategy of :class:`GraphCase` (e.g. ``pmverify.fusions.qk_norm.testing.qk_norm_cases()``).
    - ``max_examples``: cases to try; default that of ``settings``.
    - ``seed``: seed of the search (Hypothesis' ``@seed``; the example database stays in use);
      default ``$PMVERIFY_SEED`` (an int; the pytest plugin's ``ci`` profile sets it), else random.
    - ``oracles``: as for :func:`check_case`; default all.
    - ``repro_dir``: where the reproducer script is written (default ``$PMVERIFY_REPRO_DIR`` or
      ``.pmverify/reproducers``).
    - ``pass_source``: Python code defining ``PASS`` for the reproducer, when pmverify cannot
      rebuild the pass from its class and config.
    - ``reproducer_prelude``: Python code (a str) the reproducer runs first, after ``import
      torch`` and before anything else is imported or built: what the case needs that pmverify
      does not find by itself (an environment variable, the import of a module registering custom
      ops defined in a C++ extension). The modules that defined the custom ops of a graph with
      ``torch.library`` are imported without it. Default None: the pass's own
      ``reproducer_prelude()`` when it has one, else nothing.
    - ``on_result``: called with every :class:`CaseResult` (statistics, progress).
    - ``on_case``: called with every :class:`GraphCase` before the pass is applied to it, inside
      Hypothesis' test (``hypothesis.control.current_build_context()`` works there): what a crash
      harness records so that a case that kills the process is not lost.
    - ``mode``: how each case is applied, as for :func:`check_case`: ``"direct"`` (default) or
      ``"compiled"`` (two ``torch.compile`` runs a case: seconds each, so keep ``max_examples``
      small); the reproducer runs the same mode. A compiled case that ``torch.compile`` cannot
      compile or run even without the pass is discarded as an invalid draw (an event says so);
      when too few others are drawn the search raises :class:`~pmverify._engine.apply.UncompilableCase`
      (a ``RuntimeError``) with the first such case's error.
    - ``strict_order``: judge the graph in the order the pass left it, as for :func:`check_case`
      (default False: Inductor's order, sorted after ``post_grad_custom_post_pass``; True for a
      pass that the next one may run after before any sort, as in vLLM's pass manager). The
      reproducer replays with the same setting, and the example database keeps the two searches'
      failures apart (see :func:`database_key`).
    - ``allow_no_rewrites``: accept a search in which no case was rewritten, or every case was
      void (default False: those raise, see below); for cases on which the pass rightly rewrites
      nothing (a family of near misses) and for batches whose caller judges the whole run.
    - ``allow_unfused``: groups of planted instances the pass is not meant to fuse, silenced from
      the search's :class:`~pmverify.UnfusedWarning`: a list of names (``["float16", "bfloat16"]``:
      dtypes; ``"inplace"``: a form; ``"trace_differs"``, ``"symbolic"``: reasons) or a dict of
      family to names (``{"dtype": ["bfloat16"]}``). When no property broke, each group of at
      least 5 instances over 3 cases (a dtype, a form, a may-match reason) that was never rewritten
      while the pass rewrote other instances is warned about (``warnings.warn``, so pytest shows it)
      with its count and remedy, and listed in the summary's ``warnings``
      (:func:`pmverify._findings.summary.unfused_warnings`). Default None: none silenced.
    - ``device``: run every case on this device (``"cuda"``, ``"cuda:1"``, ``"cpu"``), as
      :func:`check_case` does: the strategy draws on CPU (the same draws, shrinks and saved
      examples on every machine) and each case is moved there before the pass sees it
      (:func:`pmverify.on_device`); the reproducer embeds the moved case, so it runs there too. A
      device other than CPU keys the example database apart (:func:`database_key`). Default None:
      where the strategy's cases are.
    - ``settings``: the ``hypothesis.settings`` the search runs under, as a parent: its
      ``max_examples``, ``database``, ``phases``, ``verbosity``... hold, except that ``deadline`` is
      always None (torch code trips it at random), ``too_slow`` and ``data_too_large`` are added to
      its suppressed health checks, and ``max_examples`` gives way to the argument. Default
      ``hypothesis.settings.default`` (the active profile, e.g. the pytest plugin's). Nothing global
      is changed: ``settings.default`` is the same after the call.
    - ``shrink_budget_s``: seconds the shrinking of the search's failures may take, all together
      (default :data:`DEFAULT_SHRINK_BUDGET_S`; None: Hypothesis' own limit, 300 s, which also caps
      a larger one, as do ``$PMVERIFY_SHRINK_BUDGET`` (seconds; the pytest plugin's
      ``--pmverify-shrink-budget``) and a lower limit a job set in the process); when it runs out,
      each failure is reported as far as it was shrunk, ``shrink_note`` and the message say how far
      (``"semantics at 12 nodes (from 40)"``) and each still gets its reproducer.

    The failing cases are saved to the Hypothesis example database before this
    raises, and replayed first on the next run. Each distinct failure, an ``(oracle, kind)``
    (:func:`pmverify._findings.severity.failure_key`: a stride change and a wrong dtype are two) is shrunk to
    a case of its own on which it is the most severe violation, and gets its own reproducer; the
    error's ``failures`` list them most severe first, the first being the error's ``case``. An
    ``(oracle, kind)`` that fired only beside a more severe one is listed too, on its first case
    (not shrunk).

    Raises :class:`PassVerificationError` as said; unless ``allow_no_rewrites``, when no property
    broke, :class:`~pmverify.RewriteNeverMatched` if no case was rewritten and
    :class:`~pmverify.AllCasesVoid` if every case was void (each with the ``summary``: what was
    drawn, and the planted ground truth). ``InvalidArgument`` for a ``cases`` that is not a
    strategy, a ``max_examples`` below 1, a ``seed`` that is not an int or a
    ``strict_order`` / ``allow_no_rewrites`` that is not a bool, a ``settings`` that is not a
    ``hypothesis.settings``, an empty ``oracles`` or one naming an unknown oracle, a
    ``shrink_budget_s`` that is not a positive number or None, an unknown ``mode``, a ``pass_`` that
    is not a pass; ``ValueError`` for a ``$PMVERIFY_SHRINK_BUDGET`` that is not a positive number or
    a ``$PMVERIFY_SEED`` that is not an int; ``InvalidArgument`` when both ``pass_`` and
    ``pass_factory`` are given or neither is, for a
    ``pass_factory`` that is a class, not callable, or not importable by its module path (a lambda,
    a closure, a ``functools.partial``), for a ``reproducer_prelude`` that is not a str, and for an
    ``allow_unfused`` that is not a list or dict of known group names, and a bad ``device``;
    :class:`~pmverify.DeviceUnavailable` for a device this machine lacks, before any case is drawn.

    Example::

        summary = pmverify.verify(MyPass(), pmverify.strategies.planted(pattern, inputs), max_examples=200)
        print(summary.describe())

        def make_pass():  # module level: the reproducer imports it
            return MyPass(VllmConfig(...))

        pmverify.verify(pass_factory=make_pass, cases=cases)
    """
    pass_ = pass_or_factory(pass_, pass_factory)
    allowed = validate_allow_unfused(allow_unfused)
    if reproducer_prelude is not None and not isinstance(reproducer_prelude, str):
        raise InvalidArgument(f"reproducer_prelude={reproducer_prelude!r} must be a str of Python code or None")
    if not isinstance(cases, SearchStrategy):
        raise InvalidArgument(f"cases={cases!r} must be a Hypothesis strategy of GraphCase")
    if max_examples is not None and (
        not isinstance(max_examples, int) or isinstance(max_examples, bool) or max_examples < 1
    ):
        raise InvalidArgument(f"max_examples={max_examples!r} must be a positive int")
    if mode not in MODES:
        raise InvalidArgument(f"mode={mode!r} is not supported; one of {MODES}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise InvalidArgument(f"seed={seed!r} must be an int or None")
    for name, flag in (("strict_order", strict_order), ("allow_no_rewrites", allow_no_rewrites)):
        if not isinstance(flag, bool):
            raise InvalidArgument(f"{name}={flag!r} must be a bool")
    if shrink_budget_s is not None and (
        not isinstance(shrink_budget_s, (int, float)) or isinstance(shrink_budget_s, bool) or not shrink_budget_s > 0
    ):
        raise InvalidArgument(f"shrink_budget_s={shrink_budget_s!r} must be a positive number of seconds or None")
    if settings is not None and not isinstance(settings, hypothesis.settings):
        raise InvalidArgument(f"settings={settings!r} must be a hypothesis.settings or None")
    if oracles is not None and not isinstance(oracles, str) and not oracles:
        raise InvalidArgument(f"oracles={oracles!r} asks no oracle: the search would check nothing; None asks all")
    validate_oracles(oracles)
    if seed is None:
        from .._settings import env_seed  # (torch-free; pytest and the CLI check it at start-up)

        seed = env_seed()
    validate_pass(pass_)
    device = require_runnable("device", device)
    from .._settings import env_shrink_budget

    cap = env_shrink_budget()
    if cap is not None:
        shrink_budget_s = cap if shrink_budget_s is None else min(shrink_budget_s, cap)
    settings_ = search_settings(settings, max_examples, pass_, cases, mode, strict_order, device)
    search = _Search(pass_, seed, settings_, oracles=oracles, mode=mode, strict_order=strict_order, on_case=on_case,
                     on_result=on_result, device=device)  # fmt: skip
    # The settings go on last: ``hypothesis.seed`` sets ``database=None`` (a seeded search must still
    # save its failures: tests/test_verify.py checks this against Hypothesis), and they replace it.

    @given(cases)
    def run_case(case: Any) -> None:
        search.run_case(case)

    test = settings_(run_case if seed is None else hypothesis.seed(seed)(run_case))
    try:
        # the draws depend on the seed only, not on what was imported
        with (
            no_local_constants(),
            fatal_stacks(),
            max_shrinking_seconds(shrink_budget_s) as limit,
            search_statistics() as statistics,
            without_slow_shrinking_warning() if shrink_budget_s is not None else contextlib.nullcontext(),
        ):
            test()
    except BaseException as error:  # noqa: BLE001 - unwrapped below, anything else re-raised
        raised = case_failures(error)
        if not raised:
            search.raise_uncompilable(error)
            raise
        write = functools.partial(
            _reproducer.write,
            pass_=pass_,
            directory=repro_dir,
            oracles=oracles,
            pass_source=pass_source,
            mode=mode,
            strict_order=strict_order,
            prelude=reproducer_prelude,
        )
        raise_failures(
            error,
            raised,
            first=search.first,
            progress=search.progress,
            cut=statistics.stopped == very_slow_shrinking_reason(),
            limit=limit,
            summary=dataclasses.replace(search.tally, discarded=statistics.discarded),
            write=write,
            pass_=pass_,
            pass_source=pass_source,
        )
    summary = dataclasses.replace(search.tally, discarded=statistics.discarded)
    return _judged_run(summary, pass_, cases, allowed, allow_no_rewrites)


class _Search:
    """The state of one :func:`verify` search: what its cases added up to (``tally``), each
    ``(oracle, kind)``'s first failing case (``first``), where shrinking started (``progress``) and
    the compiled cases that did not compile even without the pass (``uncompilable``)."""

    def __init__(
        self,
        pass_: Any,
        seed: int | None,
        settings: hypothesis.settings,
        *,
        oracles: Sequence[OracleSpec] | None,
        mode: str,
        strict_order: bool,
        on_case: Callable[[Any], None] | None,
        on_result: Any,
        device: Any = None,
    ) -> None:
        self.pass_, self.seed, self.max_examples = pass_, seed, settings.max_examples
        self.oracles, self.mode, self.strict_order = oracles, mode, strict_order
        self.on_case, self.on_result, self.device = on_case, on_result, device
        self.tally = VerifySummary()
        self.first: dict[tuple[str, str], CaseResult] = {}
        self.progress = Shrinking()
        self.numbered = 0
        self.uncompilable: list[UncompilableCase] = []

    def run_case(self, case: Any) -> None:
        """The Hypothesis test: check ``case``; raise a :func:`failure_class` for a failing one."""
        if self.on_case is not None:
            self.on_case(case)
        self.numbered += 1
        label = case_label(self.numbered, case, self.seed)
        announce(label)
        # a process the pass kills: faulthandler's stack names the case (see pmverify._findings.fatal)
        try:
            result = call_named(
                label,
                check_case,
                self.pass_,
                case,
                oracles=self.oracles,
                mode=self.mode,
                strict_order=self.strict_order,
                device=self.device,
            )
        except UncompilableCase as exc:  # nothing to compare with: Inductor's limit, not the pass's
            self.uncompilable.append(exc)
            if len(self.uncompilable) >= max(3, self.max_examples) and len(self.uncompilable) > 2 * self.tally.cases:
                raise TooManyUncompilable() from None  # (each try is a compile: no health check's 50)
            event("discarded: torch.compile fails without the pass")
            reject()
        self.tally = self.tally + VerifySummary.of(result)
        for violation in result.violations:
            self.first.setdefault(failure_key(violation), result)
        for label in case_events(result):
            event(label)
        if self.on_result is not None:
            self.on_result(result)
        key = most_severe(result.violations)
        if key is not None:
            self.progress.saw(key, case)
            raise failure_class(key)(result)

    def raise_uncompilable(self, error: BaseException) -> None:
        """Raise :class:`~pmverify._engine.apply.UncompilableCase` when ``error``, a search's end without a
        case failure, came of too few cases that compile even without the pass."""
        if self.uncompilable and isinstance(error, (Unsatisfiable, FailedHealthCheck, TooManyUncompilable)):
            raise UncompilableCase(
                f"{len(self.uncompilable)} of the cases drawn did not compile even without the pass, and too few "
                f"others were drawn; the first: {self.uncompilable[0]}"
            ) from error


def _judged_run(
    summary: VerifySummary, pass_: Any, cases: SearchStrategy, allowed: Any, allow_no_rewrites: bool
) -> VerifySummary:
    """``summary`` of a search that broke no property, with its :class:`~pmverify.UnfusedWarning`
    texts (each also warned); raise its vacuous error (nothing rewritten, every case void) unless
    ``allow_no_rewrites``."""
    error = None if allow_no_rewrites else vacuous_error(summary, f"verify({pass_name(pass_)}, {short_repr(cases)})")
    if error is not None:
        raise error
    texts = unfused_warnings(summary, allowed)
    for text in texts:
        warnings.warn(f"verify({pass_name(pass_)}, ...): {text}", UnfusedWarning, stacklevel=3)
    return dataclasses.replace(summary, warnings=tuple(texts)) if texts else summary


def verify_in_rotation(
    pass_: Any,
    families: Sequence[tuple[str, SearchStrategy]],
    *,
    batch: int,
    remaining: Callable[[], int],
    seed: int = 0,
    on_result: Any = None,
    repro_dir: str | os.PathLike[str] | None = None,
    strict_order: bool = False,
    settings: hypothesis.settings | None = None,
    device: Any = None,
) -> Iterator[tuple[str, PassVerificationError | None]]:
    """Run :func:`verify` on ``families`` (``(name, strategy)`` pairs) in rotation, ``batch`` cases
    of one family at a time, while ``remaining()`` (checked before each batch) says how many cases
    may still be tried; yield ``(family name, the PassVerificationError or None)`` after each
    batch. Batch ``i`` is seeded :func:`batch_seed` ``(seed, i)``, so a run is reproducible batch by batch.
    A batch that rewrites nothing is no error (``allow_no_rewrites=True``) and warns about no group
    never rewritten (:class:`~pmverify.UnfusedWarning`): the caller judges the whole run, e.g. from
    ``on_result``. ``settings``, ``device``: as for :func:`verify`. What ``pmverify
    selfcheck`` searches with."""
    index = 0
    while (todo := min(batch, remaining())) > 0:
        family, cases = families[index % len(families)]
        try:
            with warnings.catch_warnings():  # a batch's groups are too few to judge: the caller judges the run
                warnings.simplefilter("ignore", UnfusedWarning)
                verify(
                    pass_,
                    cases,
                    max_examples=todo,
                    seed=batch_seed(seed, index),
                    on_result=on_result,
                    repro_dir=repro_dir,
                    strict_order=strict_order,
                    allow_no_rewrites=True,
                    settings=settings,
                    device=device,
                )
        except PassVerificationError as error:
            yield family, error
        else:
            yield family, None
        index += 1
