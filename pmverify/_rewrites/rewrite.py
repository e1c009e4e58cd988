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
import contextlib
import dataclasses
import functools
import math
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import FailedHealthCheck, InvalidArgument, Unsatisfiable
from hypothesis.strategies import SearchStrategy

from .._engine.apply import UncompilableCase
from .._engine.check import CaseResult
from .._engine.verify import PassVerificationError, batch_seed
from .._findings.summary import (
    AllCasesVoid,
    RewriteNeverMatched,
    RewriteNotComparable,
    RewriteUnsatisfiable,
    VerifySummary,
    vacuous_error,
)
from .._registry.record import RecordedRewrite, isolated_pass
from ..device import inputs_on, require_device

__all__ = ["NearMissCoverage", "RewriteResult", "RewriteNeverMatched", "check_rewrite", "covered_verify"]


@dataclasses.dataclass(frozen=True)
class RewriteResult:
    """What :func:`check_rewrite` checked.

    - ``rewrite``: the :class:`RecordedRewrite`.
    - ``examples``: cases run (each one instance of the search function).
    - ``rewritten_cases``: the cases in which the rewrite fired, counted (the semantics and structure of those were
      compared; the others pass trivially).
    - ``outcomes``: the ground truth of the instances, counted: ``"must match"``, or the reason it
      need not (``"extra_check"``: the rewrite's ``extra_check`` rejected the inputs;
      ``"trace_differs"``, ``"dtype"``...).
    - ``simulated``: with ``force_extra_check=True``, the conditions under which the
      ``extra_check`` accepted matches it rejects here (``"tensors on a CUDA device"``), sorted.
    - ``capped_sizes``: the example sizes the default inputs drew smaller, ``{example size: drawn
      size}`` (e.g. ``{1024: 64, 128: 8}``; empty when none was, or ``inputs`` was given): see
      :func:`check_rewrite`.
    - ``summary``: the search's :class:`VerifySummary` (void cases among them).
    - ``coverage``: the near-miss kinds the search judged and those that apply but it never
      judged (:class:`NearMissCoverage`).
    """

    rewrite: RecordedRewrite
    examples: int
    rewritten_cases: int
    outcomes: dict[str, int]
    simulated: tuple[str, ...] = ()
    capped_sizes: dict[int, int] = dataclasses.field(default_factory=dict)
    summary: VerifySummary | None = dataclasses.field(default=None, repr=False)
    coverage: NearMissCoverage | None = None


@dataclasses.dataclass(frozen=True)
class NearMissCoverage:
    """Which near-miss kinds a search judged (:func:`covered_verify`), each tuple in the order of
    the kinds asked.

    - ``judged``: kinds a non-void case held an instance of (every oracle ran on it).
    - ``missed``: kinds a case held an instance of, or some instance had candidates of
      (``PlantedInstance.applicable_near_misses``) and none of its own cases was drawn, that no
      non-void case held: they apply, and the search says nothing of them.
    - ``no_valid``: kinds some instance had candidates of, none of which ran on the inputs drawn
      (its cases fell through to other kinds): they do not apply to the inputs drawn.
    """

    judged: tuple[str, ...] = ()
    missed: tuple[str, ...] = ()
    no_valid: tuple[str, ...] = ()

    def describe(self) -> str:
        """``"judged: optional_arg, values; missed: dtype"`` (``missed`` left out when none)."""
        text = f"judged: {', '.join(self.judged) or 'none'}"
        return f"{text}; missed: {', '.join(self.missed)}" if self.missed else text


class _Coverage:
    """The kinds judged, made and with candidates so far, from the cases' planted instances."""

    def __init__(self, kinds: Sequence[str]) -> None:
        self.kinds = tuple(kinds)
        self.judged: set[str] = set()
        self.made: set[str] = set()
        self.candidates: set[str] = set()
        self.tried: set[str] = set()
        self.cases = 0

    def saw(self, result: CaseResult) -> None:
        self.cases += 1
        for instance in result.case.planted:
            self.candidates.update(k for k in instance.applicable_near_misses if k in self.kinds)
            kind, fired = _near_miss_kind(instance.reason)
            if kind in self.kinds and not fired:  # drawn, but the entry did not fire on it: nothing judged
                self.candidates.add(kind)
            elif kind in self.kinds:
                self.made.add(kind)
                if result.void_reason is None:
                    self.judged.add(kind)

    def next_kind(self) -> str | None:
        """The first kind not judged nor tried yet that has candidates (any kind before the first case)."""
        for kind in self.kinds:
            if kind not in self.judged and kind not in self.tried and (kind in self.candidates or not self.cases):
                return kind
        return None

    def result(self) -> NearMissCoverage:
        def among(kinds: set[str]) -> tuple[str, ...]:
            return tuple(k for k in self.kinds if k in kinds)

        unjudged = (self.made | self.candidates) - self.judged
        missed = {k for k in unjudged if k in self.made or k not in self.tried}
        return NearMissCoverage(among(self.judged), among(missed), among(unjudged - missed))


def _near_miss_kind(reason: str | None) -> tuple[str | None, bool]:
    """The near-miss kind of a planted instance's ``reason`` and whether it can be judged: the reason
    of a near miss :func:`~pmverify.strategies.planted` drew (judged whatever the pass does: its
    ground truth says what it must), the suffix of one drawn from a ``PatternExpr`` (``expr_cases``:
    ``"matched, optional_arg"``, judged only there, where the entry's handler ran on it; ``"extra_check,
    optional_arg"``: the entry left it alone, which says nothing of how its handler treats the argument)."""
    if reason is not None and reason.endswith(", optional_arg"):
        return "optional_arg", reason.startswith("matched")
    return reason, True


#: The cases of each near-miss kind :func:`covered_verify` draws first: Hypothesis' first case is the
#: simplest draw (smallest sizes and values, where a near miss often has no valid change or shows
#: nothing), its second a random one.
CASES_PER_KIND = 2


def covered_verify(
    pass_: Any,
    cases: Callable[[str | None], SearchStrategy[Any]],
    kinds: Sequence[str],
    *,
    max_examples: int | None,
    seed: int | None,
    on_result: Callable[[CaseResult], None] | None = None,
    **options: Any,
) -> tuple[VerifySummary, NearMissCoverage]:
    """:func:`verify` of ``pass_`` on ``cases(kind)`` (every instance that near miss:
    ``planted(..., near_miss=kind)``), :data:`CASES_PER_KIND` cases for each of ``kinds`` that
    applies, then on ``cases(None)`` for the rest of ``max_examples``, at least half of it (None:
    the profile's), then again on ``cases(kind)`` for each kind the random cases showed applicable and
    none judged; return the summed :class:`VerifySummary` and the :class:`NearMissCoverage`.

    Systematic first: a kind that applies is judged whatever the random draws, so an ``ok`` does not
    hang on whether one case in ten drew it. Which kinds apply is read from the cases
    (``PlantedInstance.applicable_near_misses``): the first case is that of the first kind, then
    only kinds an instance had a valid candidate of get one. Each kind's case is seeded from
    ``seed`` and the kind's place in ``kinds`` (``seed`` None: random). ``options`` go to
    :func:`verify`; a :class:`PassVerificationError` of any of the searches is raised as is; a near-miss
    search none of whose cases compile (compiled mode: :class:`~pmverify._engine.apply.UncompilableCase`), or
    whose draws are rejected too often (Hypothesis' filter health check), judges nothing of its kind, and
    the others go on."""
    from .._engine import verify as _verify  # (looked up when called: a test may stand in for verify)

    if max_examples is not None and (
        not isinstance(max_examples, int) or isinstance(max_examples, bool) or max_examples < 1
    ):
        raise InvalidArgument(f"max_examples={max_examples!r} must be a positive int")
    coverage = _Coverage(kinds)

    def seen(result: CaseResult) -> None:
        coverage.saw(result)
        if on_result is not None:
            on_result(result)

    summaries: list[VerifySummary] = []

    def cover() -> None:
        while (kind := coverage.next_kind()) is not None:
            coverage.tried.add(kind)
            kind_seed = None if seed is None else batch_seed(seed, 1 + coverage.kinds.index(kind))
            try:
                summaries.append(
                    _verify.verify(
                        pass_, cases(kind), max_examples=CASES_PER_KIND, seed=kind_seed, on_result=seen, **options
                    )
                )
            except UncompilableCase:  # (compiled mode) this kind's cases do not compile even without the pass
                continue
            except (FailedHealthCheck, Unsatisfiable) as exc:  # its draws were rejected too often
                if isinstance(exc, FailedHealthCheck) and "filter" not in str(exc):
                    raise
                continue

    cover()
    random_cases = None if max_examples is None else max(math.ceil(max_examples / 2), max_examples - coverage.cases)
    summaries.append(
        _verify.verify(pass_, cases(None), max_examples=random_cases, seed=seed, on_result=seen, **options)
    )
    cover()
    return functools.reduce(operator.add, summaries), coverage.result()


def _never_matched(
    result: RewriteResult,
    summary: VerifySummary,
    rewrite: RecordedRewrite,
    force_extra_check: bool,
    device: Any = None,
) -> RewriteNeverMatched:
    """The error of a search in which no case was rewritten: :class:`RewriteUnsatisfiable` when the
    rewrite's ``extra_check`` is gated on a device or configuration (see :mod:`pmverify._registry.gates`)
    that the cases' ``device`` does not give (a gate it gives, yet no match accepted there: unsatisfiable
    on that device, never a dead pattern); also when its ``extra_check`` accepted instances on CPU
    (:func:`truth_for_device`) and rejected every match on ``device``: gated away from it."""
    from .._registry.gates import gate_of_rewrite
    from ..strategies import describe_sizes

    why = ", ".join(f"{reason}: {count}" for reason, count in sorted(result.outcomes.items()))
    cap = describe_sizes(result.capped_sizes)
    drawn = (
        f"{result.examples} cases drawn like its example inputs{f' ({cap})' if cap else ''} (ground truth of the "
        f"instances: {why or 'none'})"
    )
    accepted_on_cpu = result.outcomes.get(f"extra_check on {device}", 0) if device is not None else 0
    if accepted_on_cpu:  # (truth_for_device) gated away from this device, as _sfdp_extra_check(disable_cuda=True)
        condition = (
            f"a device other than {device} (its extra_check accepted {accepted_on_cpu} of the instances drawn, on "
            f"CPU, and rejected every match on {device})"
        )
        return RewriteUnsatisfiable(
            f"rewrite {result.rewrite.name} is unsatisfiable here: it never matched in the {drawn} on {device}; it "
            f"needs {condition}; nothing was compared",
            condition,
            summary,
            result,
        )
    found = None
    if result.outcomes.get("extra_check"):
        found = gate_of_rewrite(rewrite, isolated_pass(rewrite), forced=force_extra_check, device=device)
    if found is not None and found.gate is None and found.met is not None:
        condition = (
            f"a {device} on which its extra_check accepts (it accepts one ({found.inputs}) with {found.met.condition} "
            f"simulated, which the cases on {device} have, and rejected every match there)"
        )
        return RewriteUnsatisfiable(
            f"rewrite {result.rewrite.name} is unsatisfiable here: its extra_check rejected every match in the "
            f"{drawn} on {device}; it needs {condition}; nothing was compared",
            condition,
            summary,
            result,
        )
    if found is not None and found.gate is not None:
        condition = found.gate.condition
        return RewriteUnsatisfiable(
            f"rewrite {result.rewrite.name} is unsatisfiable here: its extra_check rejected every match in the "
            f"{drawn} and accepts one ({found.inputs}) only with {condition} (simulated); nothing was compared. "
            "check_rewrite(..., force_extra_check=True) compares it with that simulated, config_patches= sets "
            "config options",
            condition,
            summary,
            result,
        )
    forced = " even with the gates of its extra_check simulated (force_extra_check=True)" if force_extra_check else ""
    accepted = (
        f"; its extra_check{' (forced)' if force_extra_check else ''} accepts inputs like {found.accepted}: draw "
        "such inputs with inputs="
        if found and found.accepted
        else ""
    )
    return RewriteNeverMatched(
        f"rewrite {result.rewrite.name} never matched{forced}: Inductor's matcher holding only "
        f"{result.rewrite!r} rewrote none of {drawn}{accepted}; nothing was compared. Give check_rewrite "
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
    force_extra_check: bool = False,
    config_patches: Mapping[str, Any] | None = None,
    settings: Any = None,
    reproducer_prelude: str | None = None,
    device: Any = None,
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
        and far from its example value (1 where it holds 0 or none: a fake example tensor is
        re-created holding zeros), or as the 0-d tensor.

      Every drawn instance is a program a model could hold: the search function itself (eager, not
      its decomposed trace) runs on its inputs, and a ``"dtype"`` near miss uses only dtypes it
      runs on (a draw on which it does not run even at the example's scalar values is rejected).
    - ``repro_dir``: where a reproducer script is written (as for :func:`verify`).
    - ``pass_source``: Python code defining ``PASS`` for the reproducer (pmverify cannot rebuild a
      one-rewrite ``PatternMatcherPass`` from outside), e.g. code that records the pass's rewrites
      and sets ``PASS = rewrites[i].pattern_pass()``.
    - ``force_extra_check``: when True, a match the ``extra_check`` rejects is accepted where its
      gate is found and simulated (below): the comparison runs as on a machine and configuration
      that have it, and ``RewriteResult.simulated`` names the conditions. A match rejected under
      no gate (a dtype or a scalar the check refuses everywhere) stays rejected. Default False.
    - ``config_patches``: options of ``torch._inductor.config`` (dotted names, ``{"shape_padding":
      True, "cpp.enable_concat_linear": True}``) set with ``torch._inductor.config.patch`` while
      the rewrite is registered again and searched; default none.
    - ``settings``: the ``hypothesis.settings`` of the search, as for :func:`verify`.
    - ``reproducer_prelude``: Python code (a str) the reproducer runs first, as for :func:`verify`
      (the modules that defined the rewrite's custom ops with ``torch.library`` are imported
      without it); default None.
    - ``device``: where the rewrite is checked (``"cuda"``, ``"cuda:1"``, ``"cpu"`` or a
      ``torch.device``): its example inputs are moved there before it is registered again (its
      pattern traced there, as Inductor traces its own on the GPU it runs on), and every case is
      drawn on CPU and moved there (:func:`pmverify.verify`'s ``device``), so its ``extra_check``
      sees tensors on that device: a rewrite gated on "tensors on a CUDA device" is compared on a
      CUDA device, not unsatisfiable. Default None: the example inputs as recorded, the cases on CPU.

    Each case holds one instance of the search function in no context, traced with the rewrite's
    ``trace_fn``: the inputs as drawn, or a near miss of what the trace does not pin (two cases of
    each kind that applies first, then half the random cases: :func:`covered_verify`; the kinds
    judged are :attr:`RewriteResult.coverage`; ``max_examples`` counts them, and at least half of it
    is random), which Inductor's matcher may rewrite too (:func:`~pmverify.strategies.planted`'s
    ``"optional_arg"``, ``"overload"``, ``"reduction_dim"``, ``"values"`` and ``"dtype"``): an
    optional argument the pattern omits set on a call (``alpha=0.5``, ``dtype=``: the matcher
    ignores keyword arguments its pattern does not hold), another overload, another reduction dim,
    a 0/1 mask given 2 or -inf or a bias given large values, the inputs cast to another float dtype.
    So a replacement that drops an argument the pattern never mentions, or assumes 0/1 mask values,
    is a semantics finding. The pass under test is
    :meth:`RecordedRewrite.pattern_pass`; ``extra_check`` decides where it fires (instances it
    rejects are left alone, and pass trivially), and every oracle of :func:`check_case` judges the
    result.

    Raises :class:`PassVerificationError` (shrunk case, reproducer) when the replacement breaks a
    property (``violations`` name the oracle: ``semantics``, ``structure``...);
    :class:`RewriteUnsatisfiable` when no case was rewritten because the rewrite is gated on what
    this machine or configuration lacks (its ``condition``: ``"tensors on a CUDA device (with
    Triton) and torch._inductor.config.force_shape_pad=True"``; see :mod:`pmverify._registry.gates`: the
    ``extra_check`` is run again on a match it rejected with config options it read flipped, its
    inputs made frozen parameters and its tensors put on a fake CUDA device, smallest set first; on
    a ``device``, only what it does not give is the condition, and a check that accepts with CUDA
    simulated, or on CPU, but rejected every match on the device is unsatisfiable there; also a
    training pattern registered in inference mode);
    :class:`RewriteNeverMatched` when no case was rewritten and no gate was found (e.g.
    ``extra_check`` rejected every input: the rewrite was not checked at all; its ``result`` is the
    :class:`RewriteResult`);
    :class:`RewriteNotComparable` when no case it rewrote could be compared value by value
    (``reason`` starting ``"rng: "``: its replacement draws random numbers otherwise than its
    pattern, see :mod:`pmverify.oracles.semantics`; a replacement drawing them alike is compared as
    usual); :class:`AllCasesVoid` when every case's float64 reference was NaN or Inf; ``InvalidArgument`` for a ``recorded`` that is not a
    :class:`RecordedRewrite`, an ``inputs`` that is not a strategy, or example inputs
    :func:`~pmverify.strategies.like` cannot draw, a ``force_extra_check`` that is not a bool, or
    ``config_patches`` that are not a mapping of ``torch._inductor.config`` options to values of
    their type (a bool option takes a bool), a ``reproducer_prelude`` that is not a str, a bad
    ``device``; :class:`~pmverify.DeviceUnavailable` for a device this machine lacks, before anything
    runs; ``ValueError`` when the rewrite cannot be registered again.

    Example::

        with pmverify.record_patterns() as rewrites:
            MyFusionPass(config).patterns  # build the pass inside the block
        for rewrite in rewrites:  # each raises on its finding: catch it to check the others
            try:
                print(pmverify.check_rewrite(rewrite, max_examples=50))
            except (pmverify.PassVerificationError, pmverify.VacuousSearch) as error:
                print(rewrite.name, error)
    """
    from .._compat import inductor_config as config
    from .._registry.gates import inference_mode_gate, rewrite_copy, validate_config_patches

    if not isinstance(recorded, RecordedRewrite):
        raise InvalidArgument(f"recorded={recorded!r} must be a RecordedRewrite (from pmverify.record_patterns())")
    if not isinstance(force_extra_check, bool):
        raise InvalidArgument(f"force_extra_check={force_extra_check!r} must be a bool")
    if reproducer_prelude is not None and not isinstance(reproducer_prelude, str):
        raise InvalidArgument(f"reproducer_prelude={reproducer_prelude!r} must be a str of Python code or None")
    target = require_device("device", device)
    patches = validate_config_patches(config_patches)
    with config.patch(patches) if patches else contextlib.nullcontext():
        rewrite, simulated = (
            rewrite_copy(recorded, force_extra_check=force_extra_check)
            if force_extra_check or patches
            else (recorded, set())
        )
        rewrite = examples_on(rewrite, target)
        try:
            rewrite.pattern_pass()  # ValueError now, not inside the search, when it registers nothing
        except ValueError as error:
            condition = inference_mode_gate(rewrite)
            if condition is None:
                raise
            raise RewriteUnsatisfiable(
                f"rewrite {recorded.name} is unsatisfiable here: {error}; it registers only {condition}",
                condition,
            ) from None
        notes = [f"the pass is {recorded!r} alone (check_rewrite)"]
        if patches:
            notes.append(f"under torch._inductor.config.patch({patches!r}) (config_patches)")
        if force_extra_check:
            notes.append("its extra_check forced: a match it rejects is accepted where a gate is simulated")
        if target is not None:
            notes.append(f"on {target}: its example inputs and every case moved there (device=)")
        return _search(
            recorded,
            rewrite,
            simulated,
            notes,
            force_extra_check,
            inputs,
            max_examples,
            seed,
            repro_dir,
            pass_source,
            settings,
            reproducer_prelude,
            target,
        )


def examples_on(rewrite: RecordedRewrite, device: Any) -> RecordedRewrite:
    """``rewrite`` with its example inputs on ``device`` (a ``torch.device``; moved together with
    :func:`pmverify.device.inputs_on`): a copy, registered afresh on first use; ``rewrite`` itself when
    ``device`` is None or every example tensor is there already."""
    if device is None:
        return rewrite
    moved = inputs_on(rewrite.example_inputs, device)
    if all(new is old for new, old in zip(moved, rewrite.example_inputs, strict=True)):
        return rewrite
    given = rewrite.arguments.get("example_inputs")
    arguments = {**rewrite.arguments, "example_inputs": list(moved) if isinstance(given, list) else moved}
    return dataclasses.replace(rewrite, example_inputs=moved, arguments=arguments)


def truth_for_device(case: Any, rewrite: RecordedRewrite, device: Any) -> Any:
    """``case`` (drawn on CPU, its ground truth from ``rewrite``'s matcher there) as it is judged on
    ``device`` (a ``torch.device``; None: CPU): where ``rewrite`` has an ``extra_check`` and
    ``device`` is not CPU, a must-match instance is "either is right" (``must_match=None``, reason
    ``"extra_check on <device>"``): the check's verdict on CPU says nothing of the device's (Inductor's
    ``_sfdp_extra_check(disable_cuda=True)`` rejects CUDA queries that it accepts on CPU). A near miss
    the check rejected on CPU and the device's check accepts is rewritten rightly: the expectations
    oracle asks the entry again on the graph with the device's values."""
    if device is None or device.type == "cpu" or not rewrite.has_extra_check:
        return case
    if not any(instance.must_match is True for instance in case.planted):
        return case
    relaxed = tuple(
        dataclasses.replace(instance, must_match=None, reason=f"extra_check on {device}")
        if instance.must_match is True
        else instance
        for instance in case.planted
    )
    return dataclasses.replace(case, planted=relaxed)


def _search(
    recorded: RecordedRewrite,
    rewrite: RecordedRewrite,
    simulated: set[str],
    notes: list[str],
    force_extra_check: bool,
    inputs: SearchStrategy[Sequence[Any]] | None,
    max_examples: int | None,
    seed: int | None,
    repro_dir: str | os.PathLike[str] | None,
    pass_source: str | None,
    settings: Any,
    reproducer_prelude: str | None = None,
    device: Any = None,
) -> RewriteResult:
    """:func:`check_rewrite`'s search of ``rewrite`` (``recorded`` or its variant), its cases on ``device``."""
    from ..strategies import planted, recorded_example

    def cases(kind: str | None) -> SearchStrategy[Any]:
        drawn = planted(
            rewrite,
            inputs,
            context=st.nothing(),
            min_instances=1,
            max_instances=1,
            near_misses=_NEAR_MISSES,
            near_miss=kind,
        )
        if device is None or device.type == "cpu" or not rewrite.has_extra_check:
            return drawn
        return drawn.map(functools.partial(truth_for_device, rewrite=rewrite, device=device))

    example = recorded_example(rewrite) if inputs is None else None  # memoised: planted made it
    cap = None if example is None else example.describe_cap()
    outcomes: collections.Counter[str] = collections.Counter()
    counts = {"examples": 0, "matched": 0, "comparable": 0}
    incomparable: list[str] = []  # why matched cases could not be compared value by value

    def count(result: CaseResult) -> None:
        counts["examples"] += 1
        counts["matched"] += result.rewrite_count > 0
        if result.rewrite_count > 0 and result.not_comparable is not None:
            incomparable.append(result.not_comparable)
        counts["comparable"] += result.rewrite_count > 0 and result.not_comparable is None
        outcomes.update(_outcome(instance) for instance in result.case.planted)

    isolated_pass(rewrite).rejected.clear()
    try:
        summary, coverage = covered_verify(
            rewrite.pattern_pass(),
            cases,
            _NEAR_MISSES,
            max_examples=max_examples,
            seed=seed,
            repro_dir=repro_dir,
            pass_source=pass_source,
            on_result=count,
            allow_no_rewrites=True,  # judged below, with the rewrite's own message
            settings=settings,
            reproducer_prelude=reproducer_prelude,
            device=device,
        )
    except PassVerificationError as error:
        if cap:
            notes = [*notes, cap]
        if simulated:
            notes = [*notes, f"simulated: {'; '.join(sorted(simulated))}"]
        raise error.with_notes(notes, "check_rewrite") from None
    sizes = {} if example is None else dict(example.capped_sizes)
    result = RewriteResult(
        recorded,
        counts["examples"],
        counts["matched"],
        dict(outcomes),
        tuple(sorted(simulated)),
        capped_sizes=sizes,
        summary=summary,
        coverage=coverage,
    )
    if not result.rewritten_cases:
        raise _never_matched(result, summary, rewrite, force_extra_check, device)
    if incomparable and not counts["comparable"]:
        raise RewriteNotComparable(
            f"rewrite {recorded.name} is not comparable: none of the {result.rewritten_cases} cases it rewrote could be "
            f"compared value by value ({incomparable[0]}); only its structure was checked",
            incomparable[0],
            summary,
            result,
        )
    error = vacuous_error(summary, f"check_rewrite({recorded.name})")
    if isinstance(error, AllCasesVoid):
        raise error
    return result
