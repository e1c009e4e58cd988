"""``verify``: a Hypothesis search for a case on which a pass breaks a property."""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import pathlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import hypothesis
from hypothesis import Phase, event, given

try:
    from builtins import BaseExceptionGroup
except ImportError:  # Python 3.10: Hypothesis depends on the backport
    from exceptiongroup import BaseExceptionGroup
from hypothesis.errors import FlakyFailure, InvalidArgument
from hypothesis.strategies import SearchStrategy

from . import _reproducer
from ._apply import check_pass
from ._check import MODES, CaseResult, OracleSpec, check_case
from ._compat import keyed, no_local_constants
from ._settings import SUPPRESSED_HEALTH_CHECKS
from ._summary import VerifySummary, vacuous_error

__all__ = [
    "PassVerificationError",
    "batch_seed",
    "case_events",
    "database_key",
    "fresh_settings",
    "verify",
    "verify_in_rotation",
]


class PassVerificationError(AssertionError):
    """A pass broke a property on some case.

    - ``case``: the shrunk :class:`GraphCase`; ``violations``: every violation of it;
    - ``result``: the full :class:`CaseResult`; ``reproducer``: path of a standalone script that
      shows the violation when run (None if it could not be written).
    - ``pictures``: the before/after picture of the graph next to the reproducer, replaced and
      inserted nodes marked: a Graphviz ``.dot`` file, and an ``.svg`` when Graphviz is installed.
    - ``other_failures``: for each oracle that fired during the search but not on the shrunk case,
      the first case it fired on (a :class:`CaseResult`, not shrunk): shrinking follows one failure
      and may leave another behind (a stride finding must not hide a semantic one).
      ``other_reproducers``: a reproducer script of each (None where it could not be written).
    - ``summary``: the :class:`VerifySummary` of the search up to here, shrinking included.
    """

    def __init__(
        self,
        result: CaseResult,
        reproducer: pathlib.Path | None,
        note: str = "",
        pictures: Sequence[pathlib.Path] = (),
        *,
        other_failures: dict[str, CaseResult] | None = None,
        other_reproducers: dict[str, pathlib.Path | None] | None = None,
        summary: VerifySummary | None = None,
    ) -> None:
        self.result = result
        self.case = result.case
        self.violations = list(result.violations)
        self.reproducer = reproducer
        self.pictures = list(pictures)
        self.other_failures = dict(other_failures or {})
        self.other_reproducers = dict(other_reproducers or {})
        self.summary = summary
        self.note = note
        count = len(self.violations)
        lines = [
            f"{_pass_name(result.pair.pass_)} broke {count} propert{'y' if count == 1 else 'ies'} on {self.case!r}"
        ]
        lines += [f"  - {violation}" for violation in self.violations]
        lines += [f"  note: {instance_note}" for instance_note in getattr(result, "notes", {}).values()]
        lines.append(f"reproducer: {reproducer}" if reproducer else "reproducer: not written")
        if self.other_failures:
            lines.append("other oracles broken during the search, each on its first failing case (not shrunk):")
            for oracle, other in self.other_failures.items():
                lines.append(f"  - {oracle} on {other.case!r}:")
                lines += [f"      {violation}" for violation in other.violations if violation.oracle == oracle]
                path = self.other_reproducers.get(oracle)
                lines.append(f"    reproducer: {path if path else 'not written'}")
        if self.pictures:
            lines.append(f"picture: {', '.join(str(path) for path in self.pictures)}")
        if note:
            lines.append(f"note: {note}")
        super().__init__("\n".join(lines))


class _CaseFailed(AssertionError):
    """Raised inside the Hypothesis test so that Hypothesis shrinks the case."""

    def __init__(self, result: CaseResult) -> None:
        self.result = result
        super().__init__("; ".join(str(v) for v in result.violations))


def case_events(result: CaseResult) -> list[str]:
    """Labels of what a case exercised, for Hypothesis' statistics (``event()``)."""
    labels = [f"matches: {result.rewrite_count}"]
    notes = getattr(result, "notes", {})
    for index, (instance, matched) in enumerate(zip(result.case.planted, result.planted_matched, strict=True)):
        if instance.must_match is True and index in notes:
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
    return labels


def _pass_name(pass_: Any) -> str:
    """A class's or function's own name, else the pass's class name."""
    return pass_.__qualname__ if isinstance(pass_, type) or inspect.isfunction(pass_) else type(pass_).__name__


def _short_repr(value: Any, limit: int = 100) -> str:
    """``repr(value)`` cut to ``limit`` characters (a strategy's repr spells out every argument)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pass_identity(pass_: Any) -> str:
    """What tells passes apart in the example database: a class or function by its import path; an
    object by its class and its ``config``, else its ``uuid()`` (Inductor's ``CustomGraphPass``),
    else its ``pass_name`` (a ``PatternMatcherPass``)."""
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
    pass_: Any,
    cases: SearchStrategy,
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
) -> VerifySummary:
    """Search ``cases`` for a case on which ``pass_`` breaks a property; return a
    :class:`VerifySummary` of what was checked when none is found, else raise
    :class:`PassVerificationError` for the shrunk case.

    - ``pass_``: a pass object, or a pass class built per case as ``pass_(case.pass_config)``.
    - ``cases``: a Hypothesis strategy of :class:`GraphCase` (e.g. ``pmverify.fusions.qk_norm.testing.qk_norm_cases()``).
    - ``max_examples``: cases to try; default that of ``settings``.
    - ``seed``: seed of the search (Hypothesis' ``@seed``; the example database stays in use);
      default ``$PMVERIFY_SEED`` (an int; the pytest plugin's ``ci`` profile sets it), else random.
    - ``oracles``: as for :func:`check_case`; default all.
    - ``repro_dir``: where the reproducer script is written (default ``$PMVERIFY_REPRO_DIR`` or
      ``.pmverify/reproducers``).
    - ``pass_source``: Python code defining ``PASS`` for the reproducer, when pmverify cannot
      rebuild the pass from its class and config.
    - ``on_result``: called with every :class:`CaseResult` (statistics, progress).
    - ``on_case``: called with every :class:`GraphCase` before the pass is applied to it, inside
      Hypothesis' test (``hypothesis.control.current_build_context()`` works there): what a crash
      harness records so that a case that kills the process is not lost.
    - ``mode``: how each case is applied, as for :func:`check_case`: ``"direct"`` (default) or
      ``"compiled"`` (two ``torch.compile`` runs a case: seconds each, so keep ``max_examples``
      small); the reproducer runs the same mode.
    - ``strict_order``: judge the graph in the order the pass left it, as for :func:`check_case`
      (default False: Inductor's order, sorted after ``post_grad_custom_post_pass``; True for a
      pass that the next one may run after before any sort, as in vLLM's pass manager). The
      reproducer replays with the same setting, and the example database keeps the two searches'
      failures apart (see :func:`database_key`).
    - ``allow_no_rewrites``: accept a search in which no case was rewritten, or every case was
      void (default False: those raise, see below); for cases on which the pass rightly rewrites
      nothing (a family of near misses) and for batches whose caller judges the whole run.
    - ``settings``: the ``hypothesis.settings`` the search runs under, as a parent: its
      ``max_examples``, ``database``, ``phases``, ``verbosity``... hold, except that ``deadline`` is
      always None (torch code trips it at random), ``too_slow`` and ``data_too_large`` are added to
      its suppressed health checks, and ``max_examples`` gives way to the argument. Default
      ``hypothesis.settings.default`` (the active profile, e.g. the pytest plugin's). Nothing global
      is changed: ``settings.default`` is the same after the call.

    The failing case is saved to the Hypothesis example database before this
    raises, and replayed first on the next run. When a case breaks several oracles, Hypothesis
    shrinks toward one of them: the error also names, for each other oracle that fired, its own
    first failing case and reproducer (``other_failures``), at no extra search.

    Raises :class:`PassVerificationError` as said; unless ``allow_no_rewrites``, when no property
    broke, :class:`~pmverify.RewriteNeverMatched` if no case was rewritten and
    :class:`~pmverify.AllCasesVoid` if every case was void (each with the ``summary``: what was
    drawn, and the planted ground truth). ``InvalidArgument`` for a ``cases`` that is not a
    strategy, a ``max_examples`` below 1, a ``seed`` that is not an int or a
    ``strict_order`` / ``allow_no_rewrites`` that is not a bool, a ``settings`` that is not a
    ``hypothesis.settings``, an empty ``oracles``, ``ValueError`` for an unknown ``mode`` or a
    ``$PMVERIFY_SEED`` that is not an int, ``TypeError`` for a ``pass_`` that is not a pass.

    Example::

        summary = pmverify.verify(MyPass(), pmverify.strategies.planted(pattern, inputs), max_examples=200)
        print(summary.describe())
    """
    if not isinstance(cases, SearchStrategy):
        raise InvalidArgument(f"cases={cases!r} must be a Hypothesis strategy of GraphCase")
    if max_examples is not None and (
        not isinstance(max_examples, int) or isinstance(max_examples, bool) or max_examples < 1
    ):
        raise InvalidArgument(f"max_examples={max_examples!r} must be a positive int")
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not supported; one of {MODES}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise InvalidArgument(f"seed={seed!r} must be an int or None")
    for name, flag in (("strict_order", strict_order), ("allow_no_rewrites", allow_no_rewrites)):
        if not isinstance(flag, bool):
            raise InvalidArgument(f"{name}={flag!r} must be a bool")
    if settings is not None and not isinstance(settings, hypothesis.settings):
        raise InvalidArgument(f"settings={settings!r} must be a hypothesis.settings or None")
    if oracles is not None and not isinstance(oracles, str) and not oracles:
        raise InvalidArgument(f"oracles={oracles!r} asks no oracle: the search would check nothing; None asks all")
    if seed is None:
        from ._settings import env_seed  # (torch-free; pytest and the CLI check it at start-up)

        seed = env_seed()
    check_pass(pass_)
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
    first: dict[str, CaseResult] = {}  # each oracle's first failing case

    @given(cases)
    def run_case(case: Any) -> None:
        if on_case is not None:
            on_case(case)
        result = check_case(pass_, case, oracles=oracles, mode=mode, strict_order=strict_order)
        tally[0] = tally[0] + VerifySummary.of(result)
        for violation in result.violations:
            first.setdefault(violation.oracle, result)
        for label in case_events(result):
            event(label)
        if on_result is not None:
            on_result(result)
        if result.violations:
            raise _CaseFailed(result)

    # The settings go on last: ``hypothesis.seed`` sets ``database=None`` (a seeded search must still
    # save its failures: tests/test_verify.py checks this against Hypothesis), and they replace it.
    test = search_settings(run_case if seed is None else hypothesis.seed(seed)(run_case))
    try:
        with no_local_constants():  # the draws depend on the seed only, not on what was imported
            test()
    except BaseException as error:  # noqa: BLE001 - unwrapped below, anything else re-raised
        failure = _case_failure(error)
        if failure is None:
            raise
        result = failure.result
        notes = []
        if pass_source is None and _reproducer.pass_recipe(pass_) is None:
            notes.append("it cannot rebuild the pass: edit PASS in it, or give verify() pass_source='PASS = ...'")
        if isinstance(error, FlakyFailure):
            notes.append("Hypothesis found the failure flaky: the pass did not fail every time on this case")
        write = functools.partial(
            _reproducer.write,
            pass_=pass_,
            directory=repro_dir,
            oracles=oracles,
            pass_source=pass_source,
            mode=mode,
            strict_order=strict_order,
        )
        shown = {violation.oracle for violation in result.violations}
        others = {oracle: other for oracle, other in first.items() if oracle not in shown}
        other_paths: dict[str, pathlib.Path | None] = {}
        for oracle, other in others.items():  # its violations first: the file is named after the first
            ordered = sorted(other.violations, key=lambda violation: violation.oracle != oracle)
            try:
                other_paths[oracle] = write(other.case, violations=ordered)
            except (OSError, ValueError) as exc:
                other_paths[oracle] = None
                notes.append(f"the reproducer of the {oracle} failure was not written: {exc}")
        listed = [(oracle, str(path) if path else "not written") for oracle, path in other_paths.items()]
        try:
            path = write(result.case, violations=result.violations, others=listed)
        except (OSError, ValueError) as exc:
            path = None
            notes.insert(0, str(exc))
        pictures: list[pathlib.Path] = []
        if path is not None:
            try:
                pictures = _reproducer.write_picture(result.pair, path)
            except OSError as exc:
                notes.append(f"the picture was not written: {exc}")
        raise PassVerificationError(
            result,
            path,
            "; ".join(notes),
            pictures,
            other_failures=others,
            other_reproducers=other_paths,
            summary=tally[0],
        ) from None
    summary = tally[0]
    error = None if allow_no_rewrites else vacuous_error(summary, f"verify({_pass_name(pass_)}, {_short_repr(cases)})")
    if error is not None:
        raise error
    return summary


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


def _case_failure(error: BaseException) -> _CaseFailed | None:
    """The ``_CaseFailed`` in ``error`` (itself, or inside Hypothesis' flaky/multiple-failure groups)."""
    if isinstance(error, _CaseFailed):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _case_failure(inner)
            if found is not None:
                return found
    return None


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
    A batch that rewrites nothing is no error (``allow_no_rewrites=True``): the caller judges the
    whole run, e.g. from ``on_result``. ``settings``: as for :func:`verify`. What ``pmverify
    selfcheck`` searches with."""
    index = 0
    while (todo := min(batch, remaining())) > 0:
        family, cases = families[index % len(families)]
        try:
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
