"""What a :func:`pmverify.verify` search checked, and the errors of a search that checked nothing.

Why: a search that passes because the pass never fired, or because every case's reference was
NaN, proves nothing; like Hypothesis' health checks, ``verify`` says so unless told it is expected
(``allow_no_rewrites=True``).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = [
    "VerifySummary",
    "VacuousSearch",
    "RewriteNeverMatched",
    "RewriteUnsatisfiable",
    "RewriteNotComparable",
    "AllCasesVoid",
    "vacuous_error",
    "outcome",
]


def outcome(instance: Any) -> str:
    """The planted ground truth of ``instance`` in words: ``"must match"``, ``"may match (unused)"``,
    ``"near miss (eps)"``..."""
    if instance.must_match is True:
        return "must match"
    kind = "may match" if instance.must_match is None else "near miss"
    return f"{kind} ({instance.reason})" if instance.reason else kind


#: The outcome of a must-match instance that is "either is right" in its run because the pass put a
#: mutation among its nodes (``CaseResult.notes``).
EITHER_BY_PASS = "must match, either is right (a mutation the pass put there)"


#: Appended to the outcome of a near miss the pass rewrote that is not a finding (``CaseResult.notes``:
#: duplicated work on an ``extra_user`` one, the pass's own matcher matching it...).
REWRITTEN_NOT_A_FINDING = ", rewritten: either is right (see the case's note)"


def _outcomes(result: Any) -> list[str]:
    """:func:`outcome` of each planted instance of ``result``'s case; for those in ``result.notes``,
    :data:`EITHER_BY_PASS` (a must-match instance) or the outcome and
    :data:`REWRITTEN_NOT_A_FINDING` (a near miss)."""
    notes = getattr(result, "notes", {})
    return [
        (EITHER_BY_PASS if p.must_match is True else outcome(p) + REWRITTEN_NOT_A_FINDING) if i in notes else outcome(p)
        for i, p in enumerate(result.case.planted)
    ]


@dataclasses.dataclass(frozen=True)
class VerifySummary:
    """What a search checked: :func:`pmverify.verify` returns it, and its errors carry it
    (``PassVerificationError.summary``, ``VacuousSearch.summary``).

    - ``cases``: cases run (replayed ones from the example database included; when a failure was
      found, the cases its shrinking ran too).
    - ``rewrites``: rewrites made, summed over the cases (``CaseResult.rewrite_count``).
    - ``rewritten_cases``: cases in which the pass rewrote something (``CaseResult.rewritten``).
    - ``void_cases``: cases on which semantics said nothing (``CaseResult.void_reason``): their float64
      reference is NaN/Inf, or they are not comparable; ``first_void``: why the first of them was.
    - ``not_comparable_cases``: the void cases whose graphs cannot be compared value by value
      (``CaseResult.not_comparable``: they draw random numbers otherwise before and after the
      pass); ``first_not_comparable``: why the first of them was (``"rng: ..."``).
    - ``failing_cases``: cases with a violation.
    - ``judged``: per oracle, the cases it had something to judge (``CaseResult.judged``).
    - ``planted``: the planted ground truth, per instance: ``{"must match": 12, "near miss (eps)":
      3, ...}`` (see :func:`outcome`; a must-match instance that was "either is right" in its run
      because the pass put a mutation among its nodes counts under :data:`EITHER_BY_PASS`; a near miss
      it rewrote that is not a finding, such as an ``extra_user`` one rewritten with its intermediate
      kept, under ``"near miss (extra_user), rewritten: either is right (see the case's note)"``).
    - ``internal_errors``: errors of pmverify itself, summed over the cases (``CaseResult.internal_errors``:
      an oracle that raised while the rewritten graph runs; never a finding of the pass);
      ``first_internal_error``: the first of them, its oracle, exception and traceback.

    Summaries add up: ``total = total + summary`` (what ``pmverify fuzz`` does over a target's
    batches). Example::

        summary = pmverify.verify(MyPass(), cases, max_examples=100)
        assert summary.rewritten_cases > 50, summary
    """

    cases: int = 0
    rewrites: int = 0
    rewritten_cases: int = 0
    void_cases: int = 0
    failing_cases: int = 0
    judged: Mapping[str, int] = dataclasses.field(default_factory=dict)
    planted: Mapping[str, int] = dataclasses.field(default_factory=dict)
    first_void: str | None = None
    not_comparable_cases: int = 0
    first_not_comparable: str | None = None
    internal_errors: int = 0
    first_internal_error: str | None = None

    @classmethod
    def of(cls, result: Any) -> VerifySummary:
        """The summary of one :class:`~pmverify.CaseResult`."""
        errors = getattr(result, "internal_errors", ())
        return cls(
            cases=1,
            rewrites=int(result.rewrite_count),
            rewritten_cases=int(bool(getattr(result, "rewritten", result.rewrite_count > 0))),
            void_cases=int(result.void_reason is not None),
            failing_cases=int(bool(result.violations)),
            judged=dict.fromkeys(getattr(result, "judged", ()), 1),
            planted=dict(collections.Counter(_outcomes(result))),
            first_void=result.void_reason,
            not_comparable_cases=int(getattr(result, "not_comparable", None) is not None),
            first_not_comparable=getattr(result, "not_comparable", None),
            internal_errors=len(errors),
            first_internal_error=f"{errors[0]}\n{errors[0].traceback}" if errors else None,
        )

    def __add__(self, other: VerifySummary) -> VerifySummary:
        if not isinstance(other, VerifySummary):
            return NotImplemented
        return VerifySummary(
            cases=self.cases + other.cases,
            rewrites=self.rewrites + other.rewrites,
            rewritten_cases=self.rewritten_cases + other.rewritten_cases,
            void_cases=self.void_cases + other.void_cases,
            failing_cases=self.failing_cases + other.failing_cases,
            judged=dict(collections.Counter(self.judged) + collections.Counter(other.judged)),
            planted=dict(collections.Counter(self.planted) + collections.Counter(other.planted)),
            first_void=self.first_void if self.first_void is not None else other.first_void,
            not_comparable_cases=self.not_comparable_cases + other.not_comparable_cases,
            first_not_comparable=self.first_not_comparable or other.first_not_comparable,
            internal_errors=self.internal_errors + other.internal_errors,
            first_internal_error=self.first_internal_error or other.first_internal_error,
        )

    def describe(self) -> str:
        """One line: ``"30 cases, 12 rewritten (15 rewrites), 2 void; planted: must match 12, ...;
        judged: structure 30, semantics 28, ..."`` (the rewrite count left out when no pass
        reported or recorded one: a hand-written pass that rewrote graphs without counting)."""
        planted = ", ".join(f"{kind} {count}" for kind, count in sorted(self.planted.items())) or "no instance"
        judged = ", ".join(f"{name} {count}" for name, count in self.judged.items()) or "nothing"
        counted = f" ({self.rewrites} rewrites)" if self.rewrites else ""  # a hand pass may report no count
        incomparable = f" ({self.not_comparable_cases} not comparable)" if self.not_comparable_cases else ""
        internal = ""
        if self.internal_errors:
            first = (self.first_internal_error or "").splitlines()[0]
            internal = f"; {self.internal_errors} pmverify internal error{'s' if self.internal_errors != 1 else ''} (first: {first})"
        return (
            f"{self.cases} cases, {self.rewritten_cases} rewritten{counted}, {self.void_cases} void{incomparable}; "
            f"planted: {planted}; judged: {judged}{internal}"
        )


class VacuousSearch(AssertionError):
    """A search that checked nothing it was meant to check; the base of :class:`RewriteNeverMatched`
    and :class:`AllCasesVoid`. ``summary``: the search's :class:`VerifySummary` (None when the
    error does not come from :func:`pmverify.verify`)."""

    def __init__(self, message: str, summary: VerifySummary | None = None) -> None:
        self.summary = summary
        super().__init__(message)


class RewriteNeverMatched(VacuousSearch):
    """No case of the search was rewritten: nothing the pass rewrites was compared.

    Raised by :func:`pmverify.verify` (``summary`` set, ``result`` None) and by
    :func:`pmverify.check_rewrite` (``result``: its ``RewriteResult``, whose ``outcomes`` say why;
    ``summary`` set too).
    """

    def __init__(self, message: str, summary: VerifySummary | None = None, result: Any = None) -> None:
        self.result = result
        super().__init__(message, summary)


class RewriteUnsatisfiable(RewriteNeverMatched):
    """No case was rewritten because the rewrite is gated on what this machine or configuration
    does not have: ``condition`` names it in words (``"tensors on a CUDA device"``,
    ``"torch._inductor.config.freezing=True"``). Raised by :func:`pmverify.check_rewrite` instead of
    a plain :class:`RewriteNeverMatched` when the gate is found; ``check_rewrite(...,
    force_extra_check=True)`` runs the comparison anyway. A subclass of
    :class:`RewriteNeverMatched`, so code catching that catches this too."""

    def __init__(self, message: str, condition: str, summary: VerifySummary | None = None, result: Any = None) -> None:
        self.condition = condition
        super().__init__(message, summary, result)


class RewriteNotComparable(VacuousSearch):
    """The graphs before and after the rewrite cannot be compared value by value: ``reason`` says
    why in words (``"rng: ..."``: the graph draws random numbers, and the replacement consumes them
    otherwise than the pattern). Raised by :func:`pmverify.check_rewrite`; never a finding."""

    def __init__(self, message: str, reason: str, summary: VerifySummary | None = None, result: Any = None) -> None:
        self.reason = reason
        self.result = result
        super().__init__(message, summary)


class AllCasesVoid(VacuousSearch):
    """Every case of the search was void: its float64 reference is NaN or Inf, or its graphs cannot
    be compared value by value (they draw random numbers otherwise), so the semantics oracle judged
    none (see :mod:`pmverify.oracles.semantics`). Raised by :func:`pmverify.verify`."""


def vacuous_error(summary: VerifySummary, what: str) -> VacuousSearch | None:
    """The error of a search that checked nothing (``what`` names the pass and the cases), else
    None: :class:`RewriteNeverMatched` when no case was rewritten, :class:`AllCasesVoid` when every
    case was void. A search that ran no case is left to Hypothesis."""
    if summary.cases == 0:
        return None
    drawn = f"{summary.cases} case{'s' if summary.cases != 1 else ''}"
    planted = ", ".join(f"{kind}: {count}" for kind, count in sorted(summary.planted.items()))
    truth = f"planted ground truth: {planted}" if planted else "no pattern instance was planted"
    if summary.rewritten_cases == 0:
        void = f", {summary.void_cases} of them void" if summary.void_cases else ""
        must = summary.planted.get("must match", 0)
        hint = (
            f"{must} must-match instance(s) were left alone: run with the expectations oracle to see where"
            if must
            else "plant instances of its pattern (pmverify.strategies.planted) or draw graphs that hold some"
        )
        return RewriteNeverMatched(
            f"{what}: the pass rewrote nothing in the {drawn} drawn{void} ({truth}), so nothing it rewrites was "
            f"checked. If it should match these cases, check that its patterns are registered and that their "
            f"extra_check accepts the inputs drawn; {hint}. If rewriting nothing is right here (a family of near "
            "misses, say), pass allow_no_rewrites=True",
            summary,
        )
    if summary.void_cases == summary.cases:
        if summary.not_comparable_cases == summary.cases:
            why = f"the graphs cannot be compared value by value, first: {summary.first_not_comparable}"
            remedy = "A pass whose replacements draw random numbers otherwise than their patterns is checked only where they draw alike"
        else:
            why = f"the float64 reference is NaN or Inf, first: {summary.first_void}"
            remedy = "Draw inputs whose results stay finite"
        return AllCasesVoid(
            f"{what}: every one of the {drawn} drawn was void ({why}), so the semantics oracle judged none of "
            f"the {summary.rewritten_cases} rewritten ({truth}). {remedy}, or pass allow_no_rewrites=True to "
            "accept a search that judged no semantics",
            summary,
        )
    return None
