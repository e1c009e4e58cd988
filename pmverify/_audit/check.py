"""One entry audited, the outcome mapped to the audit's status: a rewrite (``replacement``) by
:func:`pmverify.check_rewrite`, then planted into random graphs with near misses; a ``graph`` entry
by ``pmverify._rewrites.entry_check.check_entry``; a ``lowering`` entry by ``check_entry`` too, in compiled
mode (it lowers to Inductor IR: only torch.compile runs it; sampled within ``--lowering-budget``).

Statuses (:data:`STATUSES`), each with a one-line ``reason``:

- ``ok``: check_rewrite compared the rewrite where it fired and found nothing, and so did the
  planted check, and every near-miss kind that applies to the rewrite was judged: each check draws
  two cases of each kind that applies first (:func:`pmverify._rewrites.rewrite.covered_verify`; the planted
  check those check_rewrite did not judge), then random ones (reason: the cases run and rewritten,
  then ``judged: optional_arg, reduction_dim, values``; ``near_misses``: the kinds ``judged``,
  ``missed`` and ``no_valid``, those with candidates none of which ran on the inputs drawn);
- ``not covered``: as ``ok``, but a kind that applies was never judged (made only in void cases):
  the reason names it (``missed: values``); nothing is said of that kind;
- ``finding``: a property broke (``violations``: oracle and message; ``reproducer``), in
  ``check_rewrite`` or in the planted check (``check`` says which; a rewrite that fires on a near
  miss shows there; ``variants``: the near misses or variants of the pattern the rewrite fired on in
  the failing case, with what each changed, the first named in the reason), or ``check_rewrite``
  (``check_entry``) never saw the rewrite fire and found no gate for it (``kind`` ``never_matched``:
  nothing was compared; the reports show it as :data:`DEAD_PATTERN`, apart from the wrong results;
  the report's row names it ``finding_kind``, its ``kind`` being the entry's);
- ``unsatisfiable here``: it never fired because it is gated on what this machine or configuration
  lacks (reason: :attr:`pmverify.RewriteUnsatisfiable.condition`), or it is a lowering entry no drawn
  instance of which reached the post-grad graph of torch.compile whole (:data:`LOWERING_CONDITION`);
- ``not comparable``: before and after cannot be compared value by value (reason:
  :attr:`pmverify.RewriteNotComparable.reason`), or every case's float64 reference was NaN/Inf;
- ``error``: pmverify itself failed (reason: the exception's type and text; ``traceback``);
  never a finding of the rewrite.

Hypothesis is timed in test calls, not seconds (:func:`check_one`): a row depends on the seed and
the rewrite only, its shrunk reason included.

The job adds ``not registered`` (``register_replacement`` skipped the rewrite as a duplicate: it is
registered nowhere, so it never rewrites a graph and is not checked) and ``not run`` (the budget was
spent, or the audit interrupted, before it started).
"""

from __future__ import annotations

import math
import time
import traceback
import types
from typing import Any

__all__ = [
    "DEAD_PATTERN",
    "LABELS",
    "STATUSES",
    "add_counts",
    "case_counts",
    "check_one",
    "describe_counts",
    "error_text",
    "label",
    "planted_examples",
    "rewritten_variants",
]

OK = "ok"
NOT_COVERED = "not covered"
FINDING = "finding"
UNSATISFIABLE = "unsatisfiable here"
NOT_COMPARABLE = "not comparable"
ERROR = "error"
NOT_REGISTERED = "not registered"
NOT_RUN = "not run"
#: Every status, in the order the summary table shows them.
STATUSES = (OK, NOT_COVERED, FINDING, UNSATISFIABLE, NOT_COMPARABLE, ERROR, NOT_REGISTERED, NOT_RUN)
#: The test calls a finding's shrinking may take (:func:`check_one`). Measured on Inductor's attention
#: findings at the default depth: 10-50 calls to shrink (the most, ``_sfdp_pattern_6_training``, at
#: about 2 s a call on 2 loaded cores); twice that, and the wall-clock net (half the per-rewrite
#: timeout) cuts a slower one, its row marked.
AUDIT_SHRINK_CALLS = 100
#: How the reports show a ``finding`` of kind ``never_matched``: the rewrite never fired, so nothing
#: it computes was compared: dead code of the pass (or a gate pmverify did not find), not a wrong
#: result; listed and counted apart from the findings (:func:`label`).
DEAD_PATTERN = "dead pattern (never matches)"
#: Every label a report shows (:func:`label`), in the order of its table.
LABELS = (OK, NOT_COVERED, FINDING, DEAD_PATTERN, UNSATISFIABLE, NOT_COMPARABLE, ERROR, NOT_REGISTERED, NOT_RUN)
#: The longest reason kept on one line (the violations keep their whole messages).
REASON_CHARS = 300


def label(row: dict[str, Any]) -> str:
    """What the reports show of ``row`` (an outcome): its ``status``, but :data:`DEAD_PATTERN` for a
    finding of kind ``never_matched`` (``finding_kind`` in a report's row, whose ``kind`` is the
    entry's; ``kind`` in :func:`check_one`'s outcome)."""
    if row["status"] == FINDING and "never_matched" in (row.get("finding_kind"), row.get("kind")):
        return DEAD_PATTERN
    return row["status"]


def planted_examples(max_examples: int) -> int:
    """Cases of the planted check for ``max_examples`` cases of check_rewrite: half, at least one."""
    return max(1, math.ceil(max_examples / 2))


def case_counts(summary: Any, outcomes: Any = None) -> dict[str, int] | None:
    """The cases a search ran, from its :class:`pmverify.VerifySummary` (None: not known):
    ``checked`` (shrinking's included), ``rewritten`` (the rewrite fired), ``void`` (semantics said
    nothing: NaN/Inf reference, not comparable) and ``rejected`` (instances the rewrite's
    ``extra_check`` refused, from check_rewrite's ground truth ``outcomes``)."""
    if summary is None:
        return None
    return {
        "checked": summary.cases,
        "rewritten": summary.rewritten_cases,
        "void": summary.void_cases,
        "rejected": int((outcomes or {}).get("extra_check", 0)),
        "discarded": summary.discarded,
    }


def add_counts(*counts: dict[str, int] | None) -> dict[str, int] | None:
    """The sum of the known ``counts`` (:func:`case_counts`; None when none is known)."""
    known = [c for c in counts if c is not None]
    if not known:
        return None
    return {key: sum(c.get(key, 0) for c in known) for key in known[0]}


def describe_counts(counts: dict[str, int] | None) -> str:
    """``"15 cases, 4 rewritten, 1 void, 2 rejected, 6 draws discarded"`` (the counts after ``cases``
    left out when zero); ``"cases not known"`` for None."""
    if counts is None:
        return "cases not known"
    parts = [f"{counts[key]} {key}" for key in ("rewritten", "void", "rejected") if counts.get(key)]
    if counts.get("discarded"):
        parts.append(f"{counts['discarded']} draws discarded")
    return ", ".join([f"{counts['checked']} cases", *parts])


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` on one line (its lines joined, runs of spaces as one), cut to ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def error_text(exc: BaseException) -> str:
    """``Type: message`` of ``exc``, never without a message: an exception raised without one is
    named with where it was raised (file, line, function)."""
    text = str(exc).strip()
    if text:
        return f"{type(exc).__name__}: {text}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f", raised at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return f"{type(exc).__name__} with no message{where}"


def _error(exc: BaseException, step: str) -> dict[str, Any]:
    return {
        "status": ERROR,
        "reason": one_line(f"{step} raised {error_text(exc)}"),
        "error": error_text(exc),
        "traceback": _last_frames(exc),
    }


def _last_frames(exc: BaseException, count: int = 12) -> str:
    """``exc``'s traceback, its header kept and only the innermost ``count`` entries (frames and the
    message) after it: a deep stack is cut in the middle, marked ``...``."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "".join(lines if len(lines) <= count + 1 else [lines[0], "  ...\n", *lines[-count:]])


def rewritten_variants(result: Any) -> list[dict[str, Any]]:
    """The instances of ``result``'s case (a :class:`pmverify.CaseResult`) that the rewrite fired on
    although they are not plain instances of its pattern (near misses, may-match variants): what
    each changed (``reason``, ``detail``), so that a finding says which variant it came from."""
    if result is None:
        return []
    rows = []
    for instance, matched in zip(result.case.planted, result.planted_matched, strict=False):
        if matched and instance.must_match is not True and instance.reason and instance.reason != "matched":
            # check_entry's instances say what the matcher said ("matched"), then the near miss drawn
            reason = instance.reason.removeprefix("matched, ")
            rows.append({"pattern": instance.pattern, "reason": reason, "detail": instance.detail})
    return rows


def _finding(error: Any, check: str) -> dict[str, Any]:
    violations = [{"oracle": v.oracle, "message": v.message} for v in error.violations]
    oracles = ", ".join(dict.fromkeys(v["oracle"] for v in violations))
    first = one_line(violations[0]["message"]) if violations else ""
    where = " (planted among random graphs with near misses)" if check == "planted" else ""
    variants = rewritten_variants(getattr(error, "result", None))
    # the variant first: the violation's message is long, and the reason is cut to one line
    shrunk = variants[0] if variants else None
    fired_on = (
        f"shrunk to the {shrunk['reason']} variant ({shrunk['detail'] or 'see the reproducer'}); " if shrunk else ""
    )
    return {
        "status": FINDING,
        "kind": "violation",
        "check": check,
        "reason": one_line(f"{fired_on}{oracles}{where}: {first}"),
        "variants": variants,
        "violations": violations,
        "reproducer": str(error.reproducer) if error.reproducer else None,
        "other_reproducers": {k: str(v) for k, v in error.other_reproducers.items() if v},
        "cases": case_counts(getattr(error, "summary", None)),
    }


def _never_matched(error: Any, check: str = "check_rewrite", drawn: str = "like its example inputs") -> dict[str, Any]:
    result = error.result
    if result is not None:
        truth = ", ".join(f"{reason}: {count}" for reason, count in sorted(result.outcomes.items())) or "none"
        reason = f"never matched: none of {result.examples} cases drawn {drawn} was rewritten (ground truth: {truth})"
    else:
        reason = f"never matched: {one_line(str(error))}"
    return {
        "status": FINDING,
        "kind": "never_matched",
        "check": check,
        "reason": one_line(reason),
        "violations": [{"oracle": "never_matched", "message": str(error)}],
        "cases": _error_counts(error),
    }


def _error_counts(error: Any) -> dict[str, int] | None:
    result = getattr(error, "result", None)
    return case_counts(getattr(error, "summary", None), getattr(result, "outcomes", None))


#: Cases of a lowering entry at most: each is two cold ``torch.compile`` runs (8-20 s here).
LOWERING_MAX_EXAMPLES = 3


def _search(check: Any, step: str, drawn: str) -> dict[str, Any]:
    """The outcome of ``check()`` (``check_rewrite`` or ``check_entry``, named ``step``; ``drawn``:
    how its cases are drawn, for a never-matched reason), mapped to a status."""
    from .._engine.verify import PassVerificationError
    from .._findings.summary import AllCasesVoid, RewriteNeverMatched, RewriteNotComparable, RewriteUnsatisfiable

    try:
        result = check()
    except PassVerificationError as error:
        return _finding(error, step)
    except RewriteUnsatisfiable as error:
        return {
            "status": UNSATISFIABLE,
            "reason": one_line(error.condition),
            "message": str(error),
            "cases": _error_counts(error),
        }
    except RewriteNeverMatched as error:
        return _never_matched(error, step, drawn)
    except RewriteNotComparable as error:
        return {
            "status": NOT_COMPARABLE,
            "reason": one_line(error.reason),
            "message": str(error),
            "cases": _error_counts(error),
        }
    except AllCasesVoid as error:
        first = error.summary.first_void if error.summary is not None else None
        return {
            "status": NOT_COMPARABLE,
            "reason": one_line(f"void: every case's float64 reference was NaN or Inf (first: {first})"),
            "message": str(error),
            "cases": _error_counts(error),
        }
    except Exception as exc:  # noqa: BLE001 - pmverify's own failure, reported as such
        return _error(exc, step)
    return {
        "status": OK,
        "reason": f"{result.examples} cases, {result.rewritten_cases} rewritten",
        "examples": result.examples,
        "matched": result.rewritten_cases,
        "cases": case_counts(getattr(result, "summary", None), getattr(result, "outcomes", None)),
        "near_misses": _near_misses(getattr(result, "coverage", None)),
    }


def _check_rewrite(rewrite: Any, **options: Any) -> dict[str, Any]:
    from .._rewrites.rewrite import check_rewrite

    return _search(lambda: check_rewrite(rewrite, **options), "check_rewrite", "like its example inputs")


def _check_entry(entry: Any, **options: Any) -> dict[str, Any]:
    """A graph entry: ``pmverify._rewrites.entry_check.check_entry`` (the instances drawn from its pattern,
    near misses among them), its outcome mapped as check_rewrite's is: ``not covered`` when an
    optional argument its pattern does not bind applied and no case judged one set."""
    from .._rewrites.entry_check import check_entry

    outcome = _search(lambda: check_entry(entry, **options), "check_entry", "from its pattern")
    near_misses = outcome.get("near_misses")
    if outcome["status"] == OK and near_misses and (near_misses["judged"] or near_misses["missed"]):
        outcome["reason"] = f"{outcome['reason']}; {_describe_near_misses(near_misses)}"
        if near_misses["missed"]:
            outcome["status"] = NOT_COVERED
    return outcome


def _near_misses(*coverages: Any) -> dict[str, list[str]]:
    """The near-miss kinds ``coverages`` (:class:`pmverify._rewrites.rewrite.NearMissCoverage` or alike;
    None: none) judged, missed and found no valid near miss of, together, as JSON lists in
    :data:`pmverify.strategies.NEAR_MISS_KINDS` order: a kind one judged is judged."""
    from ..strategies import NEAR_MISS_KINDS

    known = [c for c in coverages if c is not None]
    judged = {k for c in known for k in c.judged}
    missed = {k for c in known for k in c.missed} - judged
    no_valid = {k for c in known for k in c.no_valid} - judged - missed
    return {
        name: [k for k in NEAR_MISS_KINDS if k in kinds]
        for name, kinds in (("judged", judged), ("missed", missed), ("no_valid", no_valid))
    }


def _describe_near_misses(near_misses: dict[str, list[str]]) -> str:
    """``"judged: optional_arg, values"``, then ``"; missed: dtype"`` when one was."""
    text = f"judged: {', '.join(near_misses['judged']) or 'none'}"
    return f"{text}; missed: {', '.join(near_misses['missed'])}" if near_misses["missed"] else text


def _planted(
    rewrite: Any,
    *,
    max_examples: int,
    seed: int,
    repro_dir: Any,
    pass_source: str,
    settings: Any,
    reproducer_prelude: str | None = None,
    judged: tuple[str, ...] = (),
    device: str | None = None,
) -> dict[str, Any]:
    from .._engine.verify import PassVerificationError
    from .._rewrites.rewrite import covered_verify
    from ..strategies import NEAR_MISS_KINDS, planted

    counts = {"cases": 0, "rewritten": 0}

    def count(result: Any) -> None:
        counts["cases"] += 1
        counts["rewritten"] += bool(result.rewrite_count)

    on = None
    if device is not None:  # its pattern traced on the device, its ground truth judged there, as check_rewrite's
        import functools

        from .._rewrites.rewrite import examples_on, truth_for_device
        from ..device import require_device

        target = require_device("device", device)
        rewrite = examples_on(rewrite, target)
        on = functools.partial(truth_for_device, rewrite=rewrite, device=target)

    try:
        summary, coverage = covered_verify(
            rewrite.pattern_pass(),
            lambda kind: planted(rewrite, near_miss=kind) if on is None else planted(rewrite, near_miss=kind).map(on),
            tuple(k for k in NEAR_MISS_KINDS if k not in judged),  # the kinds check_rewrite judged: covered
            max_examples=max_examples,
            seed=seed,
            repro_dir=repro_dir,
            pass_source=pass_source,
            on_result=count,
            allow_no_rewrites=True,  # near misses and context graphs are rightly left alone
            settings=settings,
            reproducer_prelude=reproducer_prelude,
            device=device,
        )
    except PassVerificationError as error:
        return _finding(error, "planted")
    except Exception as exc:  # noqa: BLE001 - pmverify's own failure, reported as such
        return _error(exc, "the planted check")
    return {
        "status": OK,
        "reason": f"planted: {counts['cases']} cases, {counts['rewritten']} rewritten",
        "planted": counts,
        "cases": case_counts(summary),
        "coverage": coverage,
    }


def check_one(
    recorded: Any,
    pass_source: str,
    *,
    max_examples: int,
    seed: int,
    repro_dir: Any = None,
    planted: int | None = None,
    settings: Any = None,
    reproducer_prelude: str | None = None,
    shrink_calls: int = AUDIT_SHRINK_CALLS,
    wall_limit_s: float | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """Audit one entry, a :class:`~pmverify._registry.entries.RecordedEntry` (or a
    :class:`pmverify.RecordedRewrite`, a replacement), by its kind:

    - ``"replacement"``: :func:`pmverify.check_rewrite` with ``max_examples`` cases, then, when that
      found nothing, ``planted`` cases (default :func:`planted_examples`) of
      :func:`pmverify.strategies.planted` (random context graphs, near misses) through
      :func:`pmverify.verify` with the one-rewrite pass; seeded ``seed`` and ``seed + 1``;
    - ``"graph"``: ``pmverify._rewrites.entry_check.check_entry`` with ``max_examples`` cases, seeded ``seed``;
    - ``"lowering"``: ``check_entry`` in compiled mode (Inductor's pattern matcher off, without and with
      the entry alone), with at most :data:`LOWERING_MAX_EXAMPLES` cases, seeded ``seed``.

    ``pass_source``: code defining ``PASS`` for the reproducers. ``settings``: the
    ``hypothesis.settings`` of the searches (default the active profile).
    ``reproducer_prelude``: Python code the reproducers run first (:func:`pmverify.verify`).
    ``device``: where every check runs (``"cuda"``...; None: CPU), as :func:`pmverify.check_rewrite`'s:
    an entry gated on a CUDA device is judged there, not ``unsatisfiable here``.

    Hypothesis is timed in test calls, not seconds (:func:`pmverify._compat.counted_clock`): a
    failure's shrinking stops after about ``shrink_calls`` calls, and the search for other failures
    about 10 cases after the first; so the outcome, the shrunk reason included, depends on ``seed``
    and the entry only, not on the machine's load. ``wall_limit_s``: the safety net of real time
    (None: none); a check that runs past it has its shrinking cut, and its row says so
    (``shrink_cut``, and in the reason). Returns the outcome
    as plain JSON: ``status``, ``reason`` (one line), ``check``, ``kind``, ``violations``,
    ``reproducer``, ``cases`` (:func:`case_counts` of the searches summed, None when not
    known), ``seconds``..., as the module docstring says. Never raises for what the
    entry or pmverify does (an exception of pmverify is an ``error`` outcome)."""
    from .._compat import counted_clock, max_shrinking_seconds, set_max_shrinking_seconds

    start = time.monotonic()
    with counted_clock(wall_limit_s) as clock, max_shrinking_seconds(None):  # (restored after)
        set_max_shrinking_seconds(shrink_calls)  # calls, whatever limit in seconds was set
        outcome = _check_kind(
            recorded, pass_source, max_examples, seed, repro_dir, planted, settings, reproducer_prelude, device
        )
    if clock.cut:
        outcome["shrink_cut"] = True
        outcome["reason"] = one_line(
            f"{outcome['reason']} (the checks ran past {wall_limit_s:g} s and shrinking was cut: this reason may "
            "differ between runs)"
        )
    outcome.setdefault("violations", [])
    outcome.setdefault("cases", None)
    outcome.setdefault("reproducer", None)
    outcome["seconds"] = round(time.monotonic() - start, 3)
    return outcome


def _check_kind(
    recorded: Any,
    pass_source: str,
    max_examples: int,
    seed: int,
    repro_dir: Any,
    planted: int | None,
    settings: Any,
    reproducer_prelude: str | None,
    device: str | None = None,
) -> dict[str, Any]:
    """The checks of ``recorded``'s kind (:func:`check_one`): its outcome."""
    options = {
        "seed": seed,
        "repro_dir": repro_dir,
        "pass_source": pass_source,
        "settings": settings,
        "reproducer_prelude": reproducer_prelude,
        "device": device,
    }
    kind = getattr(recorded, "kind", "replacement")
    if kind == "lowering":
        return _check_entry(recorded, max_examples=min(max_examples, LOWERING_MAX_EXAMPLES), **options)
    if kind == "graph":
        return _check_entry(recorded, max_examples=max_examples, **options)
    rewrite = getattr(recorded, "rewrite", None) or recorded
    return _replacement(rewrite, max_examples, planted, options)


def _replacement(rewrite: Any, max_examples: int, planted: int | None, options: dict[str, Any]) -> dict[str, Any]:
    seed = options["seed"]
    outcome = _check_rewrite(rewrite, max_examples=max_examples, **options)
    if outcome["status"] == OK:
        options = {**options, "seed": seed + 1}
        first = outcome["near_misses"]
        judged = tuple(first["judged"])
        second = _planted(rewrite, max_examples=planted or planted_examples(max_examples), judged=judged, **options)
        cases = outcome.get("cases")
        if second["status"] == OK:
            near_misses = _near_misses(types.SimpleNamespace(**first), second.pop("coverage"))
            outcome["reason"] = f"{outcome['reason']}; {second['reason']}; {_describe_near_misses(near_misses)}"
            outcome["planted"] = second["planted"]
            outcome["cases"] = add_counts(cases, second["cases"])
            outcome["near_misses"] = near_misses
            if near_misses["missed"]:
                outcome["status"] = NOT_COVERED
        else:
            outcome = {
                **second,
                "checked": outcome["reason"],
                "cases": add_counts(cases, second.get("cases")),
                "near_misses": first,
            }
    return outcome
