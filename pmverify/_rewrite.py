"""``check_rewrite``: one recorded rewrite checked alone, as Alive checks an LLVM peephole.

The rewrite is registered again, alone, into a fresh ``PatternMatcherPass``
(:meth:`RecordedRewrite.pattern_pass`); cases hold one instance of its search function, in no
context, on inputs drawn like its example inputs; the pass rewrites the instances its matcher
accepts (pattern structure, literals, ``extra_check``) and the oracles compare the search function
with the replacement there: semantics against a float64 reference, structure, and whether the
matcher rewrote what Inductor's own matcher says it matches (:func:`pmverify.strategies.planted`).
The search is :func:`pmverify.verify`'s: a failure is shrunk, saved to the example database and
raised as :class:`PassVerificationError` with a reproducer script.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from ._check import CaseResult
from ._record import RecordedRewrite
from ._summary import AllCasesVoid, RewriteNeverMatched, VerifySummary, vacuous_error
from ._verify import PassVerificationError, verify

__all__ = ["RewriteResult", "RewriteNeverMatched", "check_rewrite"]


@dataclasses.dataclass(frozen=True)
class RewriteResult:
    """What :func:`check_rewrite` checked.

    - ``rewrite``: the :class:`RecordedRewrite`.
    - ``examples``: cases run (each one instance of the search function).
    - ``matched``: cases in which the rewrite fired (the semantics and structure of those were
      compared; the others pass trivially).
    - ``outcomes``: the ground truth of the instances, counted: ``"must match"``, or the reason it
      need not (``"extra_check"``: the rewrite's ``extra_check`` rejected the inputs;
      ``"trace_differs"``, ``"dtype"``...).
    - ``capped_sizes``: the example sizes the default inputs drew smaller, ``{example size: drawn
      size}`` (e.g. ``{1024: 64, 128: 8}``; empty when none was, or ``inputs`` was given): see
      :func:`check_rewrite`.
    """

    rewrite: RecordedRewrite
    examples: int
    matched: int
    outcomes: dict[str, int]
    capped_sizes: dict[int, int] = dataclasses.field(default_factory=dict)


def _never_matched(result: RewriteResult, summary: VerifySummary) -> RewriteNeverMatched:
    from .strategies._recorded_inputs import describe_sizes

    why = ", ".join(f"{reason}: {count}" for reason, count in sorted(result.outcomes.items()))
    cap = describe_sizes(result.capped_sizes)
    return RewriteNeverMatched(
        f"rewrite {result.rewrite.name} never matched: Inductor's matcher holding only "
        f"{result.rewrite!r} rewrote none of {result.examples} cases drawn like its example inputs"
        f"{f' ({cap})' if cap else ''} "
        f"(ground truth of the instances: {why or 'none'}); nothing was compared. Give check_rewrite "
        "inputs= drawing inputs its extra_check accepts, or fix the pattern or extra_check",
        summary,
        result,
    )


#: The near misses check_rewrite draws: those Inductor's matcher may rewrite (the others it leaves
#: alone by construction, and the pass under test is that matcher).
_NEAR_MISSES = ("optional_arg", "overload", "reduction_dim", "values", "dtype")


def _outcome(instance: Any) -> str:
    return "must match" if instance.must_match is True else (instance.reason or "may match")


def check_rewrite(
    recorded: RecordedRewrite,
    *,
    max_examples: int | None = None,
    seed: int | None = None,
    inputs: SearchStrategy[Sequence[Any]] | None = None,
    repro_dir: str | os.PathLike[str] | None = None,
    pass_source: str | None = None,
) -> RewriteResult:
    """Check one recorded rewrite alone: its replacement computes what its search function
    computes on every input Inductor's matcher rewrites; return a :class:`RewriteResult`.

    - ``recorded``: a :class:`RecordedRewrite` from :func:`record_patterns`.
    - ``max_examples``: cases to try; default the active Hypothesis profile's ``max_examples``.
    - ``seed``: seed of the search; default random (the example database stays in use).
    - ``inputs``: a strategy of argument tuples for the search function (``scalar_workaround``
      values included, as :attr:`RecordedRewrite.search_args` holds them); default: like the
      example inputs, as :func:`~pmverify.strategies.planted` draws them for a recorded rewrite:

      * their shapes, dtypes and layouts (a permuted, padded or expanded example tensor is drawn in
        its layout family: :func:`~pmverify.strategies.like`), random values;
      * sizes capped: where an example tensor holds more than 4096 elements or a side above 64, its
        sizes are mapped to smaller ones (``[1024, 128, 128]`` is drawn ``[64, 8, 8]``), the same
        map for all inputs, keeping ranks, sizes 0 and 1, equal sizes equal, distinct ones distinct
        and divisibility; kept only where the search function runs there and Inductor's matcher
        judges the capped example as the recorded one (else the example's sizes, said in the
        result). The map is :attr:`RewriteResult.capped_sizes`, and is named in the cases' labels,
        findings and never-matched errors;
      * each ``scalar_workaround`` argument drawn around and far from its example value (Inductor
        matches it at any value: a replacement that hard-codes the example value is caught);
      * a 0-d float or int example tensor that the search function reads only as a number (traced
        with a number there, it has the same ops and wiring, e.g. ``inv_scale`` of Inductor's
        attention patterns, whose ``extra_check`` wants a number) drawn as a Python number, around
        and far from its example value (1 for a fake example tensor), or as the 0-d tensor.

      Every drawn instance is a program a model could hold: the search function itself (eager, not
      its decomposed trace) runs on its inputs, and a ``"dtype"`` near miss uses only dtypes it
      runs on (a draw on which it does not run even at the example's scalar values is rejected).
    - ``repro_dir``: where a reproducer script is written (as for :func:`verify`).
    - ``pass_source``: Python code defining ``PASS`` for the reproducer (pmverify cannot rebuild a
      one-rewrite ``PatternMatcherPass`` from outside), e.g. code that records the pass's rewrites
      and sets ``PASS = rewrites[i].pattern_pass()``.

    Each case holds one instance of the search function in no context, traced with the rewrite's
    ``trace_fn``: the inputs as drawn, or (half the cases) a near miss of what the trace does not
    pin, which Inductor's matcher may rewrite too (:func:`~pmverify.strategies.planted`'s
    ``"optional_arg"``, ``"overload"``, ``"reduction_dim"``, ``"values"`` and ``"dtype"``): an
    optional argument the pattern omits set on a call (``alpha=0.5``, ``dtype=``: the matcher
    ignores keyword arguments its pattern does not hold), another overload, another reduction dim,
    a 0/1 mask given 2 or -inf or a bias given large values, the inputs cast to another float dtype.
    So a replacement that drops an argument the pattern never mentions, or assumes 0/1 mask values,
    is a semantics finding. The pass under test is
    :meth:`RecordedRewrite.pattern_pass`; ``extra_check`` decides where it fires (instances it
    rejects are left alone, and pass trivially), and every oracle of :func:`check_case` judges the
    result. Runs under the active Hypothesis settings profile, as :func:`verify`.

    Raises :class:`PassVerificationError` (shrunk case, reproducer) when the replacement breaks a
    property (``violations`` name the oracle: ``semantics``, ``structure``...);
    :class:`RewriteNeverMatched` when no case was rewritten (e.g. ``extra_check`` rejected every
    input: the rewrite was not checked at all; its ``result`` is the :class:`RewriteResult`);
    :class:`AllCasesVoid` when every case's float64 reference was NaN or Inf; ``InvalidArgument`` for a ``recorded`` that is not a
    :class:`RecordedRewrite`, an ``inputs`` that is not a strategy, or example inputs
    :func:`~pmverify.strategies.like` cannot draw; ``ValueError`` when the rewrite cannot be
    registered again.

    Example::

        with pmverify.record_patterns() as rewrites:
            MyFusionPass(config).patterns  # build the pass inside the block
        for rewrite in rewrites:  # each raises on its finding: catch it to check the others
            try:
                print(pmverify.check_rewrite(rewrite, max_examples=50))
            except (pmverify.PassVerificationError, pmverify.VacuousSearch) as error:
                print(rewrite.name, error)
    """
    from .strategies import planted
    from .strategies._recorded_inputs import recorded_example

    if not isinstance(recorded, RecordedRewrite):
        raise InvalidArgument(f"recorded={recorded!r} must be a RecordedRewrite (from pmverify.record_patterns())")
    recorded.pattern_pass()  # ValueError now, not inside the search, when it registers nothing
    cases = planted(
        recorded,
        inputs,
        context=st.nothing(),
        min_instances=1,
        max_instances=1,
        near_misses=_NEAR_MISSES,
    )
    example = recorded_example(recorded) if inputs is None else None  # memoised: planted made it
    cap = None if example is None else example.describe_cap()
    outcomes: collections.Counter[str] = collections.Counter()
    counts = {"examples": 0, "matched": 0}

    def count(result: CaseResult) -> None:
        counts["examples"] += 1
        counts["matched"] += result.matches > 0
        outcomes.update(_outcome(instance) for instance in result.case.planted)

    try:
        summary = verify(
            recorded.pattern_pass(),
            cases,
            max_examples=max_examples,
            seed=seed,
            repro_dir=repro_dir,
            pass_source=pass_source,
            on_result=count,
            allow_no_rewrites=True,  # judged below, with the rewrite's own message
        )
    except PassVerificationError as error:
        note = error.note.replace("give verify() pass_source", "give check_rewrite() pass_source")
        notes = [f"the pass is {recorded!r} alone (check_rewrite)", *([cap] if cap else []), *([note] if note else [])]
        raise PassVerificationError(
            error.result,
            error.reproducer,
            "; ".join(notes),
            error.pictures,
            other_failures=error.other_failures,
            other_reproducers=error.other_reproducers,
            summary=error.summary,
        ) from None
    sizes = {} if example is None else dict(example.capped_sizes)
    result = RewriteResult(recorded, counts["examples"], counts["matched"], dict(outcomes), sizes)
    if not result.matched:
        raise _never_matched(result, summary)
    error = vacuous_error(summary, f"check_rewrite({recorded.name})")
    if isinstance(error, AllCasesVoid):
        raise error
    return result
