"""What a :func:`~pmverify._engine.verify.verify` search found: its distinct failures (one per ``(oracle,
kind)``, each shrunk to a case of its own), how far shrinking got, and the
:class:`PassVerificationError` raised for them with their reproducers."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import re
import time
from collections.abc import Sequence
from typing import Any

try:
    from builtins import BaseExceptionGroup
except ImportError:  # Python 3.10: Hypothesis depends on the backport
    from exceptiongroup import BaseExceptionGroup

from .._findings import reproducer as _reproducer
from .._findings.factory import PassFactory
from .._findings.severity import failure_key, key_label, most_severe, severity
from .._findings.summary import VerifySummary
from .check import CaseResult

__all__ = [
    "CaseFailed",
    "Failure",
    "PassVerificationError",
    "Shrinking",
    "TooManyUncompilable",
    "case_failures",
    "distinct_failures",
    "failure_class",
    "pass_name",
    "raise_failures",
    "short_repr",
    "shrinking_note",
]


@dataclasses.dataclass(frozen=True)
class Failure:
    """One distinct failure of a search: the failures of one ``(oracle, kind)``
    (:func:`pmverify._findings.severity.failure_key`: ``("semantics", "")``, ``("structure", "strides")``...).

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
      (:mod:`pmverify._findings.severity`: wrong values, dtype/shape, mutation/aliasing, ..., strides, crash).
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
            f"{pass_name(result.pair.pass_)} broke {count} propert{'y' if count == 1 else 'ies'} on {self.case!r}"
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


class TooManyUncompilable(BaseException):
    """Ends a compiled search in which most cases did not compile even without the pass (a
    ``BaseException``, which Hypothesis does not take for a failure to shrink)."""


class CaseFailed(AssertionError):
    """Raised inside the Hypothesis test so that Hypothesis shrinks the case: one subclass per
    ``(oracle, kind)`` (:func:`failure_class`), so that Hypothesis, which tells failures apart by
    their exception's type and origin, shrinks each distinct failure to a case of its own."""

    key: tuple[str, str] = ("", "")

    def __init__(self, result: CaseResult) -> None:
        self.result = result
        super().__init__("; ".join(str(v) for v in result.violations))


_FAILURE_CLASSES: dict[tuple[str, str], type[CaseFailed]] = {}


def failure_class(key: tuple[str, str]) -> type[CaseFailed]:
    """The :class:`CaseFailed` subclass raised for a case whose most severe violation has ``key``."""
    cls = _FAILURE_CLASSES.get(key)
    if cls is None:
        name = "CaseFailed_" + re.sub(r"\W+", "_", "_".join(part for part in key if part))
        cls = _FAILURE_CLASSES[key] = type(name, (CaseFailed,), {"key": key, "__module__": __name__})
    return cls


class Shrinking:
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


def pass_name(pass_: Any) -> str:
    """A class's or function's own name (a pass factory's), else the pass's class name."""
    if isinstance(pass_, PassFactory):
        return pass_.qualname
    return pass_.__qualname__ if isinstance(pass_, type) or inspect.isfunction(pass_) else type(pass_).__name__


def short_repr(value: Any, limit: int = 100) -> str:
    """``repr(value)`` cut to ``limit`` characters (a strategy's repr spells out every argument)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def case_failures(error: BaseException) -> list[CaseFailed]:
    """The ``CaseFailed`` in ``error`` (itself, or inside Hypothesis' flaky/multiple-failure groups)."""
    if isinstance(error, CaseFailed):
        return [error]
    if isinstance(error, BaseExceptionGroup):
        return [found for inner in error.exceptions for found in case_failures(inner)]
    return []


def distinct_failures(
    raised: list[CaseFailed], first: dict[tuple[str, str], CaseResult], progress: Shrinking, cut: bool
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


def shrinking_note(found: list[Failure], progress: Shrinking, limit: float) -> str:
    """How far shrinking got when its time ``limit`` (seconds) cut it."""
    since = time.monotonic() - progress.first_failure_at if progress.first_failure_at is not None else 0.0
    where = "; ".join(f"{failure.label} {failure.note}" for failure in found if failure.note.startswith("at "))
    return f"shrinking stopped at its time limit of {limit:g} s ({since:.1f} s after the first failure): {where}"


def raise_failures(
    error: BaseException,
    raised: list[CaseFailed],
    *,
    first: dict[tuple[str, str], CaseResult],
    progress: Shrinking,
    cut: bool,
    limit: float,
    summary: VerifySummary,
    write: Any,
    pass_: Any,
    pass_source: str | None,
) -> None:
    """Raise the :class:`PassVerificationError` of a search that ended with ``error``, whose case
    failures are ``raised`` (:func:`case_failures`): a reproducer per distinct failure (written by
    ``write(case, violations=, others=)``), the most severe one's also listing the others' and
    getting the before/after picture. ``cut``: the shrink budget (``limit`` seconds) cut shrinking."""
    from hypothesis.errors import FlakyFailure

    notes = []
    if pass_source is None and not _reproducer.rebuildable(pass_):
        notes.append(
            "it cannot rebuild the pass: edit PASS in it, or give verify() pass_factory= a module-level "
            "function building the pass, or pass_source='PASS = ...'"
        )
    if isinstance(error, FlakyFailure):
        notes.append("Hypothesis found the failure flaky: the pass did not fail every time on this case")
    found = distinct_failures(raised, first, progress, cut)
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
        shrink_note=shrinking_note(found, progress, limit) if cut else "",
        summary=summary,
    ) from None
