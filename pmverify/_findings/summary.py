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

from hypothesis.errors import InvalidArgument

from ..errors import (
    AllCasesVoid,
    PmverifyWarning,
    RewriteNeverMatched,
    RewriteNotComparable,
    RewriteUnsatisfiable,
    UnfusedWarning,
    VacuousSearch,
)

__all__ = [
    "VerifySummary",
    "VacuousSearch",
    "RewriteNeverMatched",
    "RewriteUnsatisfiable",
    "RewriteNotComparable",
    "AllCasesVoid",
    "vacuous_error",
    "outcome",
    "PmverifyWarning",
    "UnfusedWarning",
    "UNFUSED_FAMILIES",
    "unfused_warnings",
    "validate_allow_unfused",
    "KEPT_FOR_READERS",
    "either_by_pass",
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


#: In the note of a must-match instance rewritten with an intermediate kept for its readers outside
#: it (``CaseResult.notes``, :func:`pmverify.oracles.expectations.kept_intermediate_notes`), and its
#: outcome: matched, not "either is right".
KEPT_FOR_READERS = "rewritten with an intermediate kept for its other readers"

#: The outcome of such an instance.
MATCHED_KEEPING = f"must match, {KEPT_FOR_READERS}"


def either_by_pass(note: str) -> bool:
    """Whether the note of a must-match instance makes it "either is right" (a mutation the pass put
    among its nodes), rather than matched with an intermediate kept (:data:`KEPT_FOR_READERS`)."""
    return KEPT_FOR_READERS not in note


#: Appended to the outcome of a near miss the pass rewrote that is not a finding (``CaseResult.notes``:
#: duplicated work on an ``extra_user`` one, the pass's own matcher matching it...).
REWRITTEN_NOT_A_FINDING = ", rewritten: either is right (see the case's note)"


def _outcomes(result: Any) -> list[str]:
    """:func:`outcome` of each planted instance of ``result``'s case; for those in ``result.notes``,
    :data:`EITHER_BY_PASS` (a must-match instance) or the outcome and
    :data:`REWRITTEN_NOT_A_FINDING` (a near miss)."""
    notes = getattr(result, "notes", {})

    def with_note(p: Any, note: str) -> str:
        if p.must_match is True:
            return EITHER_BY_PASS if either_by_pass(note) else MATCHED_KEEPING
        return outcome(p) + REWRITTEN_NOT_A_FINDING

    return [with_note(p, notes[i]) if i in notes else outcome(p) for i, p in enumerate(result.case.planted)]


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
    - ``discarded``: draws the cases' strategy rejected (``assume``, ``filter``: an instance whose
      calls do not run, say) outside shrinking, set by :func:`pmverify.verify` from Hypothesis'
      statistics: the rejection rate is ``discarded / (cases + discarded)``, about.
    - ``judged_counts``: per oracle, how many cases it had something to judge (``CaseResult.judged``:
      the oracles that had, on one case).
    - ``planted_counts``: how many planted instances (``GraphCase.planted``) had each outcome: ``{"must match": 12,
      "near miss (eps)": 3, ...}``, each its planted ground truth (see :func:`outcome`) as judged in
      its run (a must-match instance that was "either is right" in its run
      because the pass put a mutation among its nodes counts under :data:`EITHER_BY_PASS`; a near miss
      it rewrote that is not a finding, such as an ``extra_user`` one rewritten with its intermediate
      kept, under ``"near miss (extra_user), rewritten: either is right (see the case's note)"``).
    - ``internal_errors``: errors of pmverify itself, summed over the cases (``CaseResult.internal_errors``:
      an oracle that raised while the rewritten graph runs; never a finding of the pass);
      ``first_internal_error``: the first of them, its oracle, exception and traceback.
    - ``groups``: the planted instances a pass could be expected to rewrite, grouped by what may keep
      a pass from fusing a whole class of them (:func:`unfused_warnings`): ``"dtype bfloat16"``,
      ``"form inplace"``, ``"reason trace_differs"``... mapped to ``(instances, rewritten, cases)``.
    - ``warnings``: the warnings of the search (:func:`unfused_warnings`: a group never rewritten),
      set by :func:`pmverify.verify`; ``describe()`` adds them, a line each.

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
    judged_counts: Mapping[str, int] = dataclasses.field(default_factory=dict)
    planted_counts: Mapping[str, int] = dataclasses.field(default_factory=dict)
    first_void: str | None = None
    not_comparable_cases: int = 0
    first_not_comparable: str | None = None
    internal_errors: int = 0
    first_internal_error: str | None = None
    groups: Mapping[str, tuple[int, int, int]] = dataclasses.field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    discarded: int = 0

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
            judged_counts=dict.fromkeys(getattr(result, "judged", ()), 1),
            planted_counts=dict(collections.Counter(_outcomes(result))),
            first_void=result.void_reason,
            not_comparable_cases=int(getattr(result, "not_comparable", None) is not None),
            first_not_comparable=getattr(result, "not_comparable", None),
            internal_errors=len(errors),
            first_internal_error=f"{errors[0]}\n{errors[0].traceback}" if errors else None,
            groups=_groups(result),
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
            judged_counts=dict(collections.Counter(self.judged_counts) + collections.Counter(other.judged_counts)),
            planted_counts=dict(collections.Counter(self.planted_counts) + collections.Counter(other.planted_counts)),
            first_void=self.first_void if self.first_void is not None else other.first_void,
            not_comparable_cases=self.not_comparable_cases + other.not_comparable_cases,
            first_not_comparable=self.first_not_comparable or other.first_not_comparable,
            internal_errors=self.internal_errors + other.internal_errors,
            first_internal_error=self.first_internal_error or other.first_internal_error,
            groups={
                key: _added(self.groups.get(key, (0, 0, 0)), other.groups.get(key, (0, 0, 0)))
                for key in {**self.groups, **other.groups}
            },
            warnings=tuple(dict.fromkeys((*self.warnings, *other.warnings))),
            discarded=self.discarded + other.discarded,
        )

    def describe(self) -> str:
        """One line: ``"30 cases (4 draws discarded), 12 rewritten (15 rewrites), 2 void; planted: must match 12, ...;
        judged: structure 30, semantics 28, ..."`` (the rewrite count left out when no pass
        reported or recorded one: a hand-written pass that rewrote graphs without counting)."""
        planted = ", ".join(f"{kind} {count}" for kind, count in sorted(self.planted_counts.items())) or "no instance"
        judged = ", ".join(f"{name} {count}" for name, count in self.judged_counts.items()) or "nothing"
        counted = f" ({self.rewrites} rewrites)" if self.rewrites else ""  # a hand pass may report no count
        incomparable = f" ({self.not_comparable_cases} not comparable)" if self.not_comparable_cases else ""
        internal = ""
        if self.internal_errors:
            first = (self.first_internal_error or "").splitlines()[0]
            internal = f"; {self.internal_errors} pmverify internal error{'s' if self.internal_errors != 1 else ''} (first: {first})"
        warned = "".join(f"\nWARNING: {text}" for text in self.warnings)
        discarded = f" ({self.discarded} draws discarded)" if self.discarded else ""
        return (
            f"{self.cases} cases{discarded}, {self.rewritten_cases} rewritten{counted}, {self.void_cases} void{incomparable}; "
            f"planted: {planted}; judged: {judged}{internal}{warned}"
        )


def _added(one: tuple[int, int, int], two: tuple[int, int, int]) -> tuple[int, int, int]:
    """Two groups' ``(instances, rewritten, cases)`` added up."""
    return (one[0] + two[0], one[1] + two[1], one[2] + two[2])


def vacuous_error(summary: VerifySummary, what: str) -> VacuousSearch | None:
    """The error of a search that checked nothing (``what`` names the pass and the cases), else
    None: :class:`RewriteNeverMatched` when no case was rewritten, :class:`AllCasesVoid` when every
    case was void. A search that ran no case is left to Hypothesis."""
    if summary.cases == 0:
        return None
    drawn = f"{summary.cases} case{'s' if summary.cases != 1 else ''}"
    planted = ", ".join(f"{kind}: {count}" for kind, count in sorted(summary.planted_counts.items()))
    truth = f"planted ground truth: {planted}" if planted else "no pattern instance was planted"
    if summary.rewritten_cases == 0:
        void = f", {summary.void_cases} of them void" if summary.void_cases else ""
        must = summary.planted_counts.get("must match", 0)
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


# -- groups never rewritten ---------------------------------------------------------------------------


#: The families of groups a warning is given for, each with what its instances are, what may keep
#: a pass from fusing them, and the remedy. Which instances each family counts:
#:
#: - ``dtype``: must-match instances, ``"dtype"`` near misses (the pattern on another float dtype,
#:   whose trace differs: a pattern traced at float32 only does not match them) and
#:   ``"trace_differs"`` instances (inputs drawn in another dtype than the example inputs'), by the
#:   dtype of the instance's first floating input (its first tensor input when none is floating);
#: - ``form``: must-match instances, by the case's form (``"inplace"``): under torch.compile, where
#:   an in-place case's must-match instances count as may-match;
#: - ``reason``: may-match instances whose ground truth is a matcher that cannot match them here:
#:   ``"trace_differs"`` (their trace has another structure than the example inputs') and
#:   ``"symbolic"`` (Inductor's matcher does not match them under symbolic sizes). Kept by dtype
#:   (``"reason trace_differs@bfloat16"``): those of a dtype warned about (or allowed) count there only.
#:
#: Not counted: near misses (``must_match=False``: never rewriting them is right) and the other
#: may-match kinds (``unused``, ``values``, ``optional_arg``, ``overload``, a wildcard ``constant``...):
#: a correct pass may refuse each on purpose (README's recipe refuses ``optional_arg`` and
#: ``overload`` in its ``extra_check``), and dead code left alone costs nothing. A near-miss kind
#: *always* rewritten is not warned about either: each such rewrite is an expectations finding
#: unless the pass's own matcher matches it (then either is right, and the semantics oracle judges it).
UNFUSED_FAMILIES = ("dtype", "form", "reason")

#: A group is warned about when it held at least this many instances over at least
#: :data:`UNFUSED_MIN_CASES` cases, none rewritten, while the pass rewrote other planted instances.
UNFUSED_MIN_INSTANCES = 5
UNFUSED_MIN_CASES = 3

_REASONS = ("trace_differs", "symbolic")
_FORMS = ("functional", "inplace")


def _instance_dtype(nodes: Mapping[str, Any], instance: Any) -> str | None:
    """The dtype of ``instance``'s first floating input (a value read by its nodes from outside
    them, in graph order), else of its first tensor input, by name (``"bfloat16"``); None unknown."""
    members = set(instance.nodes)
    first = None
    for name in instance.nodes:
        node = nodes.get(name)
        for arg in node.all_input_nodes if node is not None else ():
            val = arg.meta.get("val") if arg.name not in members else None
            dtype = getattr(val, "dtype", None)
            if dtype is None or not hasattr(val, "shape"):
                continue
            if getattr(dtype, "is_floating_point", False):
                return str(dtype).removeprefix("torch.")
            first = first or str(dtype).removeprefix("torch.")
    return first


def _groups(result: Any) -> dict[str, tuple[int, int, int]]:
    """:attr:`VerifySummary.groups` of one case result (see :data:`UNFUSED_FAMILIES`)."""
    case = result.case
    notes = getattr(result, "notes", {})
    nodes = {node.name: node for node in case.gm.graph.nodes} if case.planted else {}
    counts: dict[str, list[int]] = {}
    for index, (instance, matched) in enumerate(zip(case.planted, result.planted_matched, strict=True)):
        if (index in notes and not matched) or instance.must_match is False:
            continue
        keys = []
        dtype = _instance_dtype(nodes, instance)
        if (instance.must_match is True or instance.reason in ("dtype", "trace_differs")) and dtype:
            keys.append(f"dtype {dtype}")
        if instance.must_match is True:
            keys.append(f"form {case.form}")
        elif instance.reason in _REASONS:
            keys.append(f"reason {instance.reason}" + (f"@{dtype}" if dtype else ""))
        for key in keys:
            count = counts.setdefault(key, [0, 0])
            count[0] += 1
            count[1] += int(bool(matched))
    return {key: (instances, rewritten, 1) for key, (instances, rewritten) in counts.items()}


_WHAT = {
    "dtype": "{value} instances",
    "form": "instances in {value}-form graphs",
    "reason": "{value} instances",
}

_WHY = {
    "dtype": "the pass never fuses {value}: a register_replacement pattern traced on example inputs of one dtype "
    "does not match another dtype's trace where that trace holds other ops (casts), nor does a hand matcher that "
    "does not expect them. Register the pattern per dtype (example inputs in {value} too) or match the casts, or "
    "pass allow_unfused=[{value!r}] if the pass is not meant to fuse {value}",
    "form": "the pass never fuses an instance of a graph holding in-place ops (under torch.compile, "
    "functionalization puts write-backs among its nodes). Check its patterns against that form, or pass "
    "allow_unfused=[{value!r}]",
    "reason": "{why}. Register the pattern for those inputs too, or pass allow_unfused=[{value!r}]",
}

_REASON_WHY = {
    "trace_differs": "their search function traces to another graph than on the pattern's example inputs (a size "
    "of 1, another dtype or layout), which the pattern traced on the example inputs does not match",
    "symbolic": "Inductor's matcher does not match them under symbolic sizes (a size compared with an int, a "
    "view's sizes baked in)",
}


def validate_allow_unfused(allow_unfused: Any, name: str = "allow_unfused") -> frozenset[str]:
    """The group keys (``"dtype bfloat16"``, ``"form inplace"``, ``"reason trace_differs"``) that
    ``allow_unfused`` silences: None (none), a list of names (``["bfloat16", "float16"]``: a dtype,
    a form or a reason of :data:`UNFUSED_FAMILIES`), or a dict of family to names
    (``{"dtype": ["bfloat16"]}``). Raises ``InvalidArgument`` naming ``name`` and the value for
    anything else, an unknown family or an unknown name."""
    if allow_unfused is None:
        return frozenset()
    if isinstance(allow_unfused, Mapping):
        pairs = []
        for family, names in allow_unfused.items():
            if family not in UNFUSED_FAMILIES:
                raise InvalidArgument(
                    f"{name}={allow_unfused!r}: {family!r} is not a family of groups; one of {UNFUSED_FAMILIES}"
                )
            if isinstance(names, str) or not isinstance(names, (list, tuple, set, frozenset)):
                raise InvalidArgument(f"{name}={allow_unfused!r}: {family!r} must map to a list of names")
            pairs += [(family, value) for value in names]
    elif isinstance(allow_unfused, (list, tuple, set, frozenset)):
        pairs = [(None, value) for value in allow_unfused]
    else:
        raise InvalidArgument(
            f"{name}={allow_unfused!r} must be None, a list of group names (['bfloat16', 'inplace', "
            "'trace_differs']) or a dict of family to names ({'dtype': ['bfloat16']})"
        )
    keys = set()
    for family, value in pairs:
        families = [family] if family is not None else [f for f in UNFUSED_FAMILIES if _known(f, value)]
        if not isinstance(value, str) or not families or not _known(families[0], value):
            where = f"a {family} of" if family else "a dtype, form or reason of"
            raise InvalidArgument(
                f"{name}={allow_unfused!r}: {value!r} is not {where} the groups warned about "
                f"(dtypes: float32, bfloat16...; forms: {', '.join(_FORMS)}; reasons: {', '.join(_REASONS)})"
            )
        keys.update(f"{f} {value}" for f in families)
    return frozenset(keys)


def _known(family: str, value: Any) -> bool:
    if not isinstance(value, str):
        return False
    if family == "form":
        return value in _FORMS
    if family == "reason":
        return value in _REASONS
    import torch  # (a dtype's name: torch.bfloat16)

    return isinstance(getattr(torch, value, None), torch.dtype)


def _never_rewritten(groups: Mapping[str, tuple[int, int, int]], allow: frozenset[str]) -> set[str]:
    return {
        key
        for key, (instances, done, cases) in groups.items()
        if not done and key not in allow and instances >= UNFUSED_MIN_INSTANCES and cases >= UNFUSED_MIN_CASES
    }


def unfused_warnings(summary: VerifySummary, allow: frozenset[str] = frozenset()) -> list[str]:
    """The warnings of ``summary``: each group of :attr:`VerifySummary.groups` (see
    :data:`UNFUSED_FAMILIES`) not in ``allow`` (:func:`validate_allow_unfused`) that held at least
    :data:`UNFUSED_MIN_INSTANCES` instances over :data:`UNFUSED_MIN_CASES` cases, none rewritten,
    in a search whose pass rewrote other planted instances (a pass that rewrites nothing is
    :class:`RewriteNeverMatched`; a must-match instance left alone is an expectations finding), with
    the count and the remedy: ``"0 of 37 bfloat16 instances rewritten over 20 cases (the pass rewrote
    61 other instances): the pass never fuses bfloat16: ..."``."""
    rewritten = sum(done for _, done, _ in summary.groups.values())
    if not rewritten:
        return []
    texts: list[str] = []
    groups = {key: counts for key, counts in summary.groups.items() if not key.startswith("reason ")}
    warned = _never_rewritten(groups, allow) | {key for key in groups if key in allow}
    # a reason's instances by dtype ("reason trace_differs@bfloat16"): those of a dtype warned about
    # (or allowed) are that dtype's; the rest make the reason's group
    for key, (instances, done, cases) in summary.groups.items():
        reason, _, dtype = key.partition("@")
        if key.startswith("reason ") and f"dtype {dtype}" not in warned:
            total = groups.get(reason, (0, 0, 0))
            groups[reason] = (total[0] + instances, total[1] + done, max(total[2], cases))
    for key, (instances, done, cases) in sorted(groups.items()):
        if key not in _never_rewritten({key: (instances, done, cases)}, allow):
            continue
        family, _, value = key.partition(" ")
        what = _WHAT[family].format(value=value)
        why = _WHY[family].format(value=value, why=_REASON_WHY.get(value, ""))
        others = sum(d for k, (_, d, _) in summary.groups.items() if k.partition(" ")[0] == family and k != key)
        besides = f"the pass rewrote {others} other instances" if others else "the pass rewrote other instances"
        texts.append(f"0 of {instances} {what} rewritten over {cases} cases ({besides}): {why}")
    return texts
