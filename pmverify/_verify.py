"""``verify``: a Hypothesis search for a case on which a pass breaks a property."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import os
import pathlib
import re
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import hypothesis
from hypothesis import Phase, event, given, reject

try:
    from builtins import BaseExceptionGroup
except ImportError:  # Python 3.10: Hypothesis depends on the backport
    from exceptiongroup import BaseExceptionGroup
from hypothesis.errors import FailedHealthCheck, FlakyFailure, InvalidArgument, Unsatisfiable
from hypothesis.strategies import SearchStrategy

from . import _reproducer
from ._apply import UncompilableCase, check_pass
from ._check import MODES, CaseResult, OracleSpec, check_case, pass_or_factory, validate_oracles
from ._compat import (
    keyed,
    max_shrinking_seconds,
    no_local_constants,
    search_statistics,
    very_slow_shrinking_reason,
    without_slow_shrinking_warning,
)
from ._factory import PassFactory
from ._fatal import announce, call_named, case_label, fatal_stacks
from ._settings import SUPPRESSED_HEALTH_CHECKS
from ._severity import failure_key, key_label, most_severe, severity
from ._summary import (
    UnfusedWarning,
    VerifySummary,
    check_allow_unfused,
    either_by_pass,
    unfused_warnings,
    vacuous_error,
)

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


@dataclasses.dataclass(frozen=True)
class Failure:
    """One distinct failure of a search: the failures of one ``(oracle, kind)``
    (:func:`pmverify._severity.failure_key`: ``("semantics", "")``, ``("structure", "strides")``...).

    - ``key``: that ``(oracle, kind)``; ``label``: it in words (``"structure (strides)"``);
    - ``result``: the :class:`CaseResult` of its case; ``case``: the case;
    - ``reproducer``: the path of its reproducer script (None if it could not be written);
    - ``shrunk``: Hypothesis shrank it to the end as a failure of its own (on a case where this key
      is the most severe violation); False when the shrink budget ran out (``note`` then says how
      far shrinking got), and for a ``first_only`` failure.
    - ``first_only``: the key fired during the search only beside a more severe one (or Hypothesis
      reported one failure only: ``report_multiple_bugs=False``): its first case, not shrunk.
    - ``note``: how far its shrinking got when the budget cut it (``"at 12 nodes (from 40)"``), or
      why it was not shrunk; else "".
    """

    key: tuple[str, str]
    result: CaseResult
    reproducer: pathlib.Path | None
    shrunk: bool = True
    note: str = ""
    first_only: bool = False

    @property
    def label(self) -> str:
        return key_label(self.key)

    @property
    def case(self) -> Any:
        return self.result.case

    @property
    def violations(self) -> list[Any]:
        """The violations of its case, those of its key first."""
        return sorted(self.result.violations, key=lambda violation: failure_key(violation) != self.key)


class PassVerificationError(AssertionError):
    """A pass broke a property on some case.

    - ``failures``: every distinct failure of the search (:class:`Failure`: one per ``(oracle,
      kind)``, each shrunk to a case of its own and with its own reproducer), most severe first
      (:mod:`pmverify._severity`: wrong values, dtype/shape, mutation/aliasing, ..., strides, crash).
    - ``case``, ``violations``, ``result``, ``reproducer``: those of ``failures[0]``, the most severe:
      the shrunk :class:`GraphCase`, every violation of it, the full :class:`CaseResult`, the path of
      a standalone script that shows the violation when run (None if it could not be written).
    - ``pictures``: the before/after picture of the graph next to the reproducer, replaced and
      inserted nodes marked: a Graphviz ``.dot`` file, and an ``.svg`` when Graphviz is installed.
    - ``other_failures`` / ``other_reproducers``: ``failures[1:]`` by label (``"semantics"``,
      ``"structure (strides)"``): their :class:`CaseResult` / reproducer paths.
    - ``shrink_note``: when the shrink budget cut shrinking, how far it got; else "".
    - ``summary``: the :class:`VerifySummary` of the search up to here, shrinking included.
    """

    def __init__(
        self,
        result: CaseResult,
        reproducer: pathlib.Path | None,
        note: str = "",
        pictures: Sequence[pathlib.Path] = (),
        *,
        failures: Sequence[Failure] | None = None,
        other_failures: dict[str, CaseResult] | None = None,
        other_reproducers: dict[str, pathlib.Path | None] | None = None,
        shrink_note: str = "",
        summary: VerifySummary | None = None,
    ) -> None:
        if failures is None:
            main_key = most_severe(result.violations) or ("crash", "")
            failures = [Failure(main_key, result, reproducer)]
            for label, other in (other_failures or {}).items():
                key = next((failure_key(v) for v in other.violations if key_label(failure_key(v)) == label), None)
                path = (other_reproducers or {}).get(label)
                failures.append(Failure(key or (label, ""), other, path, shrunk=False, first_only=True))
        self.failures = list(failures)
        self.result = result
        self.case = result.case
        # most severe first: the shrunk case of a wrong value may show a stride change too
        self.violations = sorted(result.violations, key=lambda violation: severity(failure_key(violation)))
        self.reproducer = reproducer
        self.pictures = list(pictures)
        self.other_failures = {failure.label: failure.result for failure in self.failures[1:]}
        self.other_reproducers = {failure.label: failure.reproducer for failure in self.failures[1:]}
        self.shrink_note = shrink_note
        self.summary = summary
        self.note = note
        count = len(self.violations)
        lines = []
        if len(self.failures) > 1:
            lines.append(
                f"{len(self.failures)} distinct failures, most severe first: "
                + ", ".join(failure.label for failure in self.failures)
            )
        lines.append(
            f"{_pass_name(result.pair.pass_)} broke {count} propert{'y' if count == 1 else 'ies'} on {self.case!r}"
        )
        lines += [f"  - {violation}" for violation in self.violations]
        lines += [f"  note: {instance_note}" for instance_note in getattr(result, "notes", {}).values()]
        lines.append(f"reproducer: {reproducer}" if reproducer else "reproducer: not written")
        for index, failure in enumerate(self.failures[1:], 2):
            how = (
                "shrunk"
                if failure.shrunk
                else f"{'not shrunk' if failure.first_only else 'shrinking stopped'}: {failure.note}"
            )
            lines.append(f"failure {index}, {failure.label} ({how}), on {failure.case!r}:")
            lines += [f"  - {violation}" for violation in failure.violations]
            lines.append(f"  reproducer: {failure.reproducer if failure.reproducer else 'not written'}")
        if shrink_note:
            lines.append(f"shrinking: {shrink_note}")
        if self.pictures:
            lines.append(f"picture: {', '.join(str(path) for path in self.pictures)}")
        if note:
            lines.append(f"note: {note}")
        super().__init__("\n".join(lines))

    def with_notes(self, notes: Sequence[str], caller: str) -> PassVerificationError:
        """This error raised again by ``caller`` (``"check_rewrite"``, ``"check_entry"``): ``notes``
        first, then its own note, whose advice names ``caller``'s ``pass_source`` argument."""
        own = self.note.replace(
            "give verify() pass_factory= a module-level function building the pass, or pass_source",
            f"give {caller}() pass_source",
        )
        return PassVerificationError(
            self.result,
            self.reproducer,
            "; ".join([*notes, *([own] if own else [])]),
            self.pictures,
            failures=self.failures,
            shrink_note=self.shrink_note,
            summary=self.summary,
        )


#: The default of ``verify(..., shrink_budget_s=)``: seconds of shrinking a search's failures.
DEFAULT_SHRINK_BUDGET_S = 180.0


class _TooManyUncompilable(BaseException):
    """Ends a compiled search in which most cases did not compile even without the pass (a
    ``BaseException``, which Hypothesis does not take for a failure to shrink)."""


class _CaseFailed(AssertionError):
    """Raised inside the Hypothesis test so that Hypothesis shrinks the case: one subclass per
    ``(oracle, kind)`` (:func:`_failure_class`), so that Hypothesis, which tells failures apart by
    their exception's type and origin, shrinks each distinct failure to a case of its own."""

    key: tuple[str, str] = ("", "")

    def __init__(self, result: CaseResult) -> None:
        self.result = result
        super().__init__("; ".join(str(v) for v in result.violations))


_FAILURE_CLASSES: dict[tuple[str, str], type[_CaseFailed]] = {}


def _failure_class(key: tuple[str, str]) -> type[_CaseFailed]:
    """The :class:`_CaseFailed` subclass raised for a case whose most severe violation has ``key``."""
    cls = _FAILURE_CLASSES.get(key)
    if cls is None:
        name = "CaseFailed_" + re.sub(r"\W+", "_", "_".join(part for part in key if part))
        cls = _FAILURE_CLASSES[key] = type(name, (_CaseFailed,), {"key": key, "__module__": __name__})
    return cls


class _Shrinking:
    """What shrinking started from: per failure key, the node count of its first failing case; and
    when the search's first failure was seen."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str], int] = {}
        self.first_failure_at: float | None = None

    def saw(self, key: tuple[str, str], case: Any) -> None:
        if self.first_failure_at is None:
            self.first_failure_at = time.monotonic()
        self.first.setdefault(key, _node_count(case))


def _node_count(case: Any) -> int:
    return len(case.gm.graph.nodes)


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


def _pass_name(pass_: Any) -> str:
    """A class's or function's own name (a pass factory's), else the pass's class name."""
    if isinstance(pass_, PassFactory):
        return pass_.qualname
    return pass_.__qualname__ if isinstance(pass_, type) or inspect.isfunction(pass_) else type(pass_).__name__


def _short_repr(value: Any, limit: int = 100) -> str:
    """``repr(value)`` cut to ``limit`` characters (a strategy's repr spells out every argument)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pass_identity(pass_: Any) -> str:
    """What tells passes apart in the example database: a class or function by its import path; an
    object by its class and its ``config``, else its ``uuid()`` (Inductor's ``CustomGraphPass``),
    else its ``pass_name`` (a ``PatternMatcherPass``)."""
    if isinstance(pass_, PassFactory):
        return f"factory {pass_.module}.{pass_.qualname}"
    if isinstance(pass_, type) or inspect.isfunction(pass_) or inspect.ismethod(pass_):
        return f"{pass_.__module__}.{pass_.__qualname__}"
    if isinstance(pass_, functools.partial):
        return f"partial({_pass_identity(pass_.func)}, *{pass_.args!r}, **{pass_.keywords!r})"
    cls = type(pass_)
    ident = f"{cls.__module__}.{cls.__qualname__}"
    config = getattr(pass_, "config", None)
    if config is not None:
        return f"{ident}({config!r})"
    uuid = getattr(pass_, "uuid", None)
    if callable(uuid):
        try:
            return f"{ident}[uuid={uuid()!r}]"
        except Exception:  # noqa: BLE001 - a uuid() that fails leaves the class and name to go by
            pass
    name = getattr(pass_, "pass_name", None)
    return ident if name is None else f"{ident}[{name!r}]"


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
      when too few others are drawn the search raises :class:`~pmverify._apply.UncompilableCase`
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
      (:func:`pmverify._summary.unfused_warnings`). Default None: none silenced.
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
    (:func:`pmverify._severity.failure_key`: a stride change and a wrong dtype are two) is shrunk to
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
    ``allow_unfused`` that is not a list or dict of known group names.

    Example::

        summary = pmverify.verify(MyPass(), pmverify.strategies.planted(pattern, inputs), max_examples=200)
        print(summary.describe())

        def make_pass():  # module level: the reproducer imports it
            return MyPass(VllmConfig(...))

        pmverify.verify(pass_factory=make_pass, cases=cases)
    """
    pass_ = pass_or_factory(pass_, pass_factory)
    allowed = check_allow_unfused(allow_unfused)
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
        from ._settings import env_seed  # (torch-free; pytest and the CLI check it at start-up)

        seed = env_seed()
    check_pass(pass_)
    from ._settings import env_shrink_budget

    cap = env_shrink_budget()
    if cap is not None:
        shrink_budget_s = cap if shrink_budget_s is None else min(shrink_budget_s, cap)
    parent = hypothesis.settings.default if settings is None else settings
    search_settings = hypothesis.settings(
        parent,
        deadline=None,
        suppress_health_check=list(dict.fromkeys([*parent.suppress_health_check, *SUPPRESSED_HEALTH_CHECKS])),
        max_examples=parent.max_examples if max_examples is None else max_examples,
        # Hypothesis derives a test's key from its source; the failures are kept under pmverify's own
        database=keyed(parent.database, database_key(pass_, cases, mode, strict_order)),
    )

    tally = [VerifySummary()]
    first: dict[tuple[str, str], CaseResult] = {}  # each (oracle, kind)'s first failing case
    progress = _Shrinking()

    numbered = [0]
    uncompilable: list[UncompilableCase] = []

    @given(cases)
    def run_case(case: Any) -> None:
        if on_case is not None:
            on_case(case)
        numbered[0] += 1
        label = case_label(numbered[0], case, seed)
        announce(label)
        # a process the pass kills: faulthandler's stack names the case (see pmverify._fatal)
        try:
            result = call_named(label, check_case, pass_, case, oracles=oracles, mode=mode, strict_order=strict_order)
        except UncompilableCase as exc:  # nothing to compare with: Inductor's limit, not the pass's
            uncompilable.append(exc)
            if len(uncompilable) >= max(3, search_settings.max_examples) and len(uncompilable) > 2 * tally[0].cases:
                raise _TooManyUncompilable() from None  # (each try is a compile: no health check's 50)
            event("discarded: torch.compile fails without the pass")
            reject()
        tally[0] = tally[0] + VerifySummary.of(result)
        for violation in result.violations:
            first.setdefault(failure_key(violation), result)
        for label in case_events(result):
            event(label)
        if on_result is not None:
            on_result(result)
        key = most_severe(result.violations)
        if key is not None:
            progress.saw(key, case)
            raise _failure_class(key)(result)

    # The settings go on last: ``hypothesis.seed`` sets ``database=None`` (a seeded search must still
    # save its failures: tests/test_verify.py checks this against Hypothesis), and they replace it.
    test = search_settings(run_case if seed is None else hypothesis.seed(seed)(run_case))
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
        raised = _case_failures(error)
        if not raised and uncompilable and isinstance(error, (Unsatisfiable, FailedHealthCheck, _TooManyUncompilable)):
            raise UncompilableCase(
                f"{len(uncompilable)} of the cases drawn did not compile even without the pass, and too few others "
                f"were drawn; the first: {uncompilable[0]}"
            ) from error
        if not raised:
            raise
        notes = []
        if pass_source is None and not _reproducer.rebuildable(pass_):
            notes.append(
                "it cannot rebuild the pass: edit PASS in it, or give verify() pass_factory= a module-level "
                "function building the pass, or pass_source='PASS = ...'"
            )
        if isinstance(error, FlakyFailure):
            notes.append("Hypothesis found the failure flaky: the pass did not fail every time on this case")
        cut = statistics.stopped == very_slow_shrinking_reason()
        found = _failures(raised, first, progress, cut)
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
        written = []
        for failure in found[1:]:  # its violations first: the file is named after the first
            try:
                path = write(failure.case, violations=failure.violations)
            except (OSError, ValueError) as exc:
                path = None
                notes.append(f"the reproducer of the {failure.label} failure was not written: {exc}")
            written.append(dataclasses.replace(failure, reproducer=path))
        main = found[0]
        listed = [
            (f"{failure.label}{'' if failure.shrunk else ' (not shrunk)'}", str(failure.reproducer or "not written"))
            for failure in written
        ]
        try:
            path = write(main.case, violations=main.violations, others=listed)
        except (OSError, ValueError) as exc:
            path = None
            notes.insert(0, str(exc))
        main = dataclasses.replace(main, reproducer=path)
        pictures: list[pathlib.Path] = []
        if path is not None:
            try:
                pictures = _reproducer.write_picture(main.result.pair, path)
            except OSError as exc:
                notes.append(f"the picture was not written: {exc}")
        raise PassVerificationError(
            main.result,
            path,
            "; ".join(notes),
            pictures,
            failures=[main, *written],
            shrink_note=_shrink_note(found, progress, limit) if cut else "",
            summary=dataclasses.replace(tally[0], discarded=statistics.discarded),
        ) from None
    summary = dataclasses.replace(tally[0], discarded=statistics.discarded)
    error = None if allow_no_rewrites else vacuous_error(summary, f"verify({_pass_name(pass_)}, {_short_repr(cases)})")
    if error is not None:
        raise error
    texts = unfused_warnings(summary, allowed)
    for text in texts:
        warnings.warn(f"verify({_pass_name(pass_)}, ...): {text}", UnfusedWarning, stacklevel=2)
    return dataclasses.replace(summary, warnings=tuple(texts)) if texts else summary


def database_key(pass_: Any, cases: SearchStrategy, mode: str = "direct", strict_order: bool = False) -> bytes:
    """The example-database key under which :func:`verify` saves the failures of ``pass_`` on
    ``cases`` in ``mode``: a digest of the pass's class (and config) and the strategy's repr, so
    that every search of the same pass on the same strategy (a test, ``pmverify fuzz``, another
    machine sharing the database) replays the same failures first. Seeds do not enter it.

    ``strict_order`` gets keys of its own: a strict search's failures may hold only a disorder the
    default forgives (a default search replaying them would pass them and delete them from the
    database), and a default search's failures are the strict search's to find on its own."""
    key = f"pmverify.verify:{_pass_identity(pass_)}:{cases!r}" + ("" if mode == "direct" else f":{mode}")
    key += ":strict_order" if strict_order else ""
    key = re.sub(r" at 0x[0-9a-fA-F]+", "", key)  # default reprs hold addresses that change every run
    return hashlib.sha256(key.encode()).digest()


def _case_failures(error: BaseException) -> list[_CaseFailed]:
    """The ``_CaseFailed`` in ``error`` (itself, or inside Hypothesis' flaky/multiple-failure groups)."""
    if isinstance(error, _CaseFailed):
        return [error]
    if isinstance(error, BaseExceptionGroup):
        return [found for inner in error.exceptions for found in _case_failures(inner)]
    return []


def _failures(
    raised: list[_CaseFailed], first: dict[tuple[str, str], CaseResult], progress: _Shrinking, cut: bool
) -> list[Failure]:
    """The distinct failures of a search, most severe first: one per key Hypothesis reported (shrunk,
    unless the budget ``cut`` shrinking), then each key that fired during the search but is among
    the violations of none of those (beside a more severe one only), on its first case."""
    found: dict[tuple[str, str], Failure] = {}
    for failure in raised:
        key = failure.key if failure.key != ("", "") else most_severe(failure.result.violations)
        if key is not None and key not in found:
            note = ""
            if cut:
                note = f"at {_node_count(failure.result.case)} nodes (from {progress.first.get(key, '?')})"
            found[key] = Failure(key, failure.result, None, shrunk=not cut, note=note)
    shown = {failure_key(v) for failure in found.values() for v in failure.result.violations}
    for key, result in first.items():
        if key not in shown:
            note = "its first case: it fired only beside another failure, or Hypothesis reported one failure"
            found[key] = Failure(key, result, None, shrunk=False, note=note, first_only=True)
    return sorted(found.values(), key=lambda failure: severity(failure.key))


def _shrink_note(found: list[Failure], progress: _Shrinking, limit: float) -> str:
    """How far shrinking got when its time ``limit`` (seconds) cut it."""
    since = time.monotonic() - progress.first_failure_at if progress.first_failure_at is not None else 0.0
    where = "; ".join(f"{failure.label} {failure.note}" for failure in found if failure.note.startswith("at "))
    return f"shrinking stopped at its time limit of {limit:g} s ({since:.1f} s after the first failure): {where}"


def batch_seed(seed: int, index: int) -> int:
    """The seed of batch ``index`` (an int >= 0) of a run seeded ``seed``: ``seed * 100_003 + index``,
    so that a run is reproducible batch by batch. The one formula of ``pmverify fuzz``,
    ``pmverify selfcheck`` (:func:`verify_in_rotation`) and ``pmverify audit`` (whose ``index`` is a
    checksum of the rewrite's name)."""
    return seed * 100_003 + index


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
) -> Iterator[tuple[str, PassVerificationError | None]]:
    """Run :func:`verify` on ``families`` (``(name, strategy)`` pairs) in rotation, ``batch`` cases
    of one family at a time, while ``remaining()`` (checked before each batch) says how many cases
    may still be tried; yield ``(family name, the PassVerificationError or None)`` after each
    batch. Batch ``i`` is seeded :func:`batch_seed` ``(seed, i)``, so a run is reproducible batch by batch.
    A batch that rewrites nothing is no error (``allow_no_rewrites=True``) and warns about no group
    never rewritten (:class:`~pmverify.UnfusedWarning`): the caller judges the whole run, e.g. from
    ``on_result``. ``settings``: as for :func:`verify`. What ``pmverify
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
                )
        except PassVerificationError as error:
            yield family, error
        else:
            yield family, None
        index += 1


def fresh_settings(parent: hypothesis.settings | None = None, *, shrink: bool = True) -> hypothesis.settings:
    """``parent`` (default ``hypothesis.settings.default``) less its example database (nothing read
    or saved: counts do not depend on earlier runs), its explain phase (it re-runs the shrunk case
    many times) and, unless ``shrink``, its shrink phase: settings for :func:`verify` to search
    afresh with. Nothing global is changed."""
    parent = hypothesis.settings.default if parent is None else parent
    dropped = {Phase.explain} if shrink else {Phase.explain, Phase.shrink}
    phases = [phase for phase in parent.phases if phase not in dropped]
    return hypothesis.settings(parent, database=None, phases=phases)
