"""``check_entry``: one entry of a pattern pass checked alone, its instances drawn from its ``PatternExpr``.

Where :func:`pmverify.check_rewrite` checks a ``register_replacement`` rewrite (its search function
traced, its replacement compared), ``check_entry`` checks any entry a ``PatternMatcherPass`` holds,
above all a ``GraphPatternEntry``, whose hand-written handler edits the graph: the pass holds that
entry alone (:meth:`RecordedEntry.pattern_pass`), the cases hold one instance of its pattern drawn
from the expression itself (:func:`pmverify.strategies._expr_instances.expr_cases`: targets,
literals, ``KeywordArg`` / ``Arg`` / ``Ignored`` drawn by schema type, ``_users``, ``ListOf``,
``MultiOutputPattern``, repeated expressions, an optional argument the pattern does not bind set),
and every oracle of :func:`pmverify.check_case` judges what the handler did: values against a
float64 reference, structure, mutation barriers. A handler may leave a match alone: the instances
are ground truth ``must_match=None``; what the matcher and ``extra_check`` said is counted.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from hypothesis.errors import InvalidArgument

from .._engine.apply import UncompilableCase
from .._engine.check import CaseResult
from .._engine.verify import PassVerificationError
from .._findings.summary import AllCasesVoid, RewriteNeverMatched, RewriteUnsatisfiable, VerifySummary, vacuous_error
from .._registry.entries import RecordedEntry
from .rewrite import NearMissCoverage, covered_verify

__all__ = ["EntryResult", "check_entry"]


@dataclasses.dataclass(frozen=True)
class EntryResult:
    """What :func:`check_entry` checked.

    - ``entry``: the :class:`~pmverify._registry.entries.RecordedEntry`.
    - ``examples``: cases run (each one instance of the entry's pattern).
    - ``rewritten_cases``: the cases in which the entry fired (its handler ran on a match its
      ``extra_check`` accepted; the handler may still have left the graph as it was).
    - ``outcomes``: the ground truth of the instances, counted: ``"matched"`` (the matcher matched
      and ``extra_check`` accepted), ``"extra_check"`` (it rejected), ``"pattern"`` (the matcher
      refused the drawn instance); ``", optional_arg"`` added where an optional argument the
      pattern does not bind was set.
    - ``summary``: the search's :class:`VerifySummary`.
    - ``levers``: None, or what the search was given because the entry's ``extra_check`` rejected
      every match without it (``"with what its extra_check needs: inputs other as frozen
      parameters..."``): config options set, tensors drawn as frozen parameters.
    - ``coverage``: whether the near miss ``"optional_arg"`` (an optional argument the pattern does
      not bind, set) applied and was judged (:class:`~pmverify.NearMissCoverage`): the first cases
      set one on each call that has one (:func:`~pmverify._rewrites.rewrite.covered_verify`).
    """

    entry: RecordedEntry
    examples: int
    rewritten_cases: int
    outcomes: dict[str, int]
    summary: VerifySummary | None = dataclasses.field(default=None, repr=False)
    levers: str | None = None
    coverage: NearMissCoverage | None = None


def check_entry(
    entry: RecordedEntry,
    *,
    max_examples: int | None = None,
    seed: int | None = None,
    repro_dir: str | os.PathLike[str] | None = None,
    pass_source: str | None = None,
    config_patches: Mapping[str, Any] | None = None,
    settings: Any = None,
    reproducer_prelude: str | None = None,
    on_result: Any = None,
    dynamic: Any = False,
    device: Any = None,
) -> Any:
    """Check one entry of a pattern pass alone: whatever its handler does to an instance of its
    pattern keeps the graph's values (against a float64 reference), structure and mutation
    barriers; return an :class:`EntryResult` (a :class:`~pmverify.RewriteResult` for a
    ``"replacement"`` entry, checked by :func:`~pmverify.check_rewrite`).

    - ``entry``: a :class:`~pmverify._registry.entries.RecordedEntry` (:func:`pmverify.record_inductor`).
    - ``max_examples``, ``seed``, ``repro_dir``, ``settings``, ``reproducer_prelude``: as for
      :func:`~pmverify.check_rewrite`.
    - ``pass_source``: Python code defining ``PASS`` (the one-entry pass) for the reproducer.
    - ``config_patches``: ``torch._inductor.config`` options set while the search runs, over
      those that enable the entry's pass (:func:`enabling_patches` of :attr:`RecordedEntry.config`,
      always set: a handler runs as its pass runs it).
    - ``on_result``: called with each case's :class:`~pmverify.CaseResult` of a graph entry's search (as by
      :func:`~pmverify.verify`).
    - ``dynamic``: symbolic sizes, as the case strategies take it (False, True or ``"tokens"``):
      instances drawn with some sizes at a symbol's hint and traced again with ``SymInt`` sizes
      (``expr_cases(dynamic=)``), each case run at its symbols' sizes; ``InvalidArgument`` for
      another value.
    - ``device``: where the entry is checked (``"cuda"``, ``"cpu"``...): every case is drawn on CPU
      and moved there (:func:`pmverify.verify`'s ``device``), so the entry's ``extra_check`` and
      handler see tensors there (a handler gated on a CUDA device is judged on one), a
      replacement entry's example inputs too (:func:`~pmverify.check_rewrite`); default None: CPU.

    A ``"lowering"`` entry (its handler lowers the match to Inductor IR, which only a compile runs)
    is checked in compiled mode (:func:`pmverify._engine.compiled.apply_compiled`): each case compiled
    with ``torch.compile`` twice, Inductor's ``pattern_matcher`` off in both, the second with the
    entry alone as the post-grad custom pass, and the semantics oracle alone judges the compiled
    values (the graph the entry leaves calls its handler, which only Inductor's lowering runs);
    ``max_examples`` default :data:`LOWERING_EXAMPLES` (two cold compiles a case). The reproducer
    sets the same ``torch._inductor.config`` options first.

    Raises :class:`PassVerificationError` (shrunk case, reproducer) when the handler breaks a
    property; :class:`RewriteUnsatisfiable` when it never fired because its ``extra_check`` is gated
    on what this machine or configuration lacks (see :mod:`pmverify._registry.gates`); also when its
    pattern calls an op whose CPU kernel trusts its arguments (mkldnn, onednn: a drawn call may
    crash the process, so none is drawn; :func:`~pmverify.strategies._expr_instances.undrawable`);
    also (``condition`` saying so) when it never fired and no gate was found: pmverify drew no
    instance the matcher and the ``extra_check`` accept, which is not shown to be the entry's fault
    (for a ``"lowering"`` entry :data:`LOWERING_CONDITION` where a drawn instance matched: the compile
    re-traces the drawn graph, and its instance may not reach the post-grad graph whole; else
    :data:`LOWERING_UNMATCHED_CONDITION`: a few cases do not show a pattern dead); :class:`AllCasesVoid`
    when every case's float64 reference was NaN or Inf; ``InvalidArgument`` for an ``entry`` that
    is not a :class:`~pmverify._registry.entries.RecordedEntry`, or a bad ``device``;
    :class:`~pmverify.DeviceUnavailable` for a device this machine lacks.
    """
    import contextlib

    from .._compat import inductor_config as config
    from .._registry.gates import validate_config_patches
    from ..device import require_device

    if not isinstance(entry, RecordedEntry):
        raise InvalidArgument(f"entry={entry!r} must be a RecordedEntry (from pmverify.record_inductor())")
    device = require_device("device", device)
    if entry.kind == "replacement":
        from .rewrite import check_rewrite

        return check_rewrite(
            entry.rewrite,
            max_examples=max_examples,
            seed=seed,
            repro_dir=repro_dir,
            pass_source=pass_source,
            config_patches=config_patches,
            settings=settings,
            reproducer_prelude=reproducer_prelude,
            device=device,
        )
    from ..strategies import undrawable

    why = undrawable(entry.pattern)
    if why is not None:
        condition = f"an instance pmverify can draw ({why})"
        raise RewriteUnsatisfiable(f"entry {entry.label} is unsatisfiable here: {why}; nothing was compared", condition)
    patches = {**enabling_patches(entry.config), **validate_config_patches(config_patches)}
    if entry.kind == "lowering":
        # both compiles: Inductor's own patterns off; the one with the pass: this entry alone
        patches["pattern_matcher"] = False
        max_examples = LOWERING_EXAMPLES if max_examples is None else max_examples
    if patches:
        reproducer_prelude = _config_prelude(patches, reproducer_prelude)
    with config.patch(patches) if patches else contextlib.nullcontext():
        return _search(
            entry, max_examples, seed, repro_dir, pass_source, settings, reproducer_prelude, on_result, dynamic, device
        )


#: What a lowering entry that never fired under torch.compile lacked (``RewriteUnsatisfiable.condition``).
LOWERING_CONDITION = "an instance of its pattern that reaches the post-grad graph of torch.compile whole"
#: ... when no drawn instance matched at all (its ``extra_check`` or the matcher refused each).
LOWERING_UNMATCHED_CONDITION = (
    "an instance of its pattern that its extra_check accepts among the few cases a lowering entry gets (too few to "
    "call its pattern dead)"
)

#: Cases of a ``"lowering"`` entry by default: each is two cold ``torch.compile`` runs (8-20 s here).
LOWERING_EXAMPLES = 3


def _config_prelude(patches: Mapping[str, Any], prelude: str | None) -> str:
    """Reproducer code setting ``torch._inductor.config`` as the search set it (the options that enable
    the entry's pass, the config levers its ``extra_check`` needed), then ``prelude``."""
    lines = ["import torch._inductor.config", *(f"torch._inductor.config.{k} = {v!r}" for k, v in patches.items())]
    return "\n".join([*lines, *([prelude] if prelude else [])])


def enabling_patches(options: tuple[str, ...]) -> dict[str, Any]:
    """The ``torch._inductor.config`` patches that enable an entry's pass, from its
    :attr:`RecordedEntry.config` strings: ``"freezing"`` -> ``{"freezing": True}``, ``"not
    fallback_random"`` -> ``{"fallback_random": False}``, ``"pre_grad_fusion_options['x']"`` -> the
    options dict with ``x`` added (``{}``, its defaults) where it is missing. A handler reads its
    pass's options as Inductor's run gives them (``split_cat``'s read their thresholds there)."""
    import re

    from .._compat import inductor_config as config

    patches: dict[str, Any] = {}
    for option in options:
        keyed = re.fullmatch(r"(\w+)\[['\"](\w+)['\"]\]", option)
        if keyed:
            name, key = keyed.groups()
            current = dict(patches.get(name, getattr(config, name, {}) or {}))
            current.setdefault(key, {})
            patches[name] = current
        elif option.startswith("not "):
            patches[option[4:]] = False
        elif isinstance(getattr(config, option, None), bool):
            patches[option] = True
    return patches


def _search(
    entry: RecordedEntry,
    max_examples: int | None,
    seed: int | None,
    repro_dir: Any,
    pass_source: str | None,
    settings: Any,
    reproducer_prelude: str | None,
    on_result: Any = None,
    dynamic: Any = False,
    device: Any = None,
) -> EntryResult:
    """The search, its cases on ``device``; where the entry never fired and its ``extra_check``
    accepts a rejected match with levers pmverify can draw (config options, frozen parameters: not a
    device) beside what ``device`` gives (:func:`~pmverify._registry.gates.unmet`: the rejected
    matches are ground truth's, drawn on CPU), the search again with them (config options set,
    every tensor after the first a frozen parameter)."""
    from .._registry.gates import unmet

    rejected: list[Any] = []
    try:
        return _search_once(
            entry,
            max_examples,
            seed,
            repro_dir,
            pass_source,
            settings,
            reproducer_prelude,
            rejected,
            on_result=on_result,
            dynamic=dynamic,
            device=device,
        )
    except RewriteUnsatisfiable:
        raise
    except RewriteNeverMatched as error:
        gate = unmet(_gate(entry, rejected), device)
        levers = gate.levers if gate is not None else ()
        if gate is None or gate.computed or any(lever.kind == "device" for lever in levers):
            raise _never_fired(entry, error.result, error.summary, gate) from None
    from .._compat import inductor_config as config

    patches = {lever.key: lever.value for lever in levers if lever.kind == "config"}
    frozen = "all" if any(lever.kind == "frozen" for lever in levers) else None
    if patches:  # the reproducer replays the options the search set (else its pass does not fire)
        reproducer_prelude = _config_prelude(patches, reproducer_prelude)
    with config.patch(patches) if patches else contextlib.nullcontext():
        try:
            return _search_once(
                entry,
                max_examples,
                seed,
                repro_dir,
                pass_source,
                settings,
                reproducer_prelude,
                [],
                on_result=on_result,
                frozen=frozen,
                lever_note=f"with what its extra_check needs: {gate.condition}",
                dynamic=dynamic,
                device=device,
            )
        except RewriteUnsatisfiable:
            raise
        except RewriteNeverMatched as again:
            raise _never_fired(entry, again.result, again.summary, gate) from None


def _gate(entry: RecordedEntry, rejected: list[Any]) -> Any:
    """The first gate :func:`pmverify._registry.gates.find_gate` finds on a rejected match (None: none)."""
    from .._registry.gates import find_gate

    for match in rejected:
        try:
            gate = find_gate(entry.extra_check, match)
        except Exception:  # noqa: BLE001 - a check that cannot be re-run has no gate found
            gate = None
        if gate is not None:
            return gate
    return None


def _search_once(
    entry: RecordedEntry,
    max_examples: int | None,
    seed: int | None,
    repro_dir: Any,
    pass_source: str | None,
    settings: Any,
    reproducer_prelude: str | None,
    rejected: list[Any],
    *,
    on_result: Any = None,
    frozen: str | None = None,
    lever_note: str | None = None,
    dynamic: Any = False,
    device: Any = None,
) -> EntryResult:
    from ..strategies import ExprUnsupported, expr_cases

    def extra_check(match: Any) -> bool:
        accepted = bool(entry.extra_check(match))
        if not accepted and len(rejected) < 8:
            rejected.append(match)
        return accepted

    def cases(near_miss: str | None) -> Any:
        return expr_cases(
            entry.pattern,
            name=entry.label,
            extra_check=extra_check,
            frozen=frozen,
            near_miss=near_miss,
            dynamic=dynamic,
        )

    outcomes: collections.Counter[str] = collections.Counter()
    counts = {"examples": 0, "fired": 0}

    def count(result: CaseResult) -> None:
        counts["examples"] += 1
        counts["fired"] += result.rewrite_count > 0
        outcomes.update(instance.reason or "matched" for instance in result.case.planted)
        if on_result is not None:
            on_result(result)

    notes = [f"the pass is {entry.kind} entry {entry.label} of {entry.pass_name} alone (check_entry)"]
    if lever_note:
        notes.append(lever_note)
    if device is not None:
        notes.append(f"on {device}: every case moved there (device=)")
    lowering = entry.kind == "lowering"
    if lowering:
        notes.append(
            "compiled: torch.compile with Inductor's pattern matcher off, without and with this entry as the "
            "post-grad custom pass (its handler lowers the match)"
        )
    from hypothesis.errors import FailedHealthCheck, Unsatisfiable

    try:
        # an optional argument the pattern does not bind, set on each call that has one, in the
        # first cases (then one call in four): a handler that drops it is found whatever the draws
        summary, coverage = covered_verify(
            entry.pattern_pass(),
            cases,
            ("optional_arg",),
            mode="compiled" if lowering else "direct",
            # the graph a lowering entry leaves calls its handler, which only Inductor's lowering can run:
            # the compiled values are what is judged
            oracles=("semantics",) if lowering else None,
            max_examples=max_examples,
            seed=seed,
            repro_dir=repro_dir,
            pass_source=pass_source,
            on_result=count,
            allow_no_rewrites=True,
            settings=settings,
            reproducer_prelude=reproducer_prelude,
            device=device,
        )
    except ExprUnsupported as exc:
        condition = f"an instance pmverify can draw (it does not draw this pattern: {exc})"
        raise RewriteUnsatisfiable(
            f"entry {entry.label} is unsatisfiable here: it needs {condition}; nothing was compared", condition
        ) from None
    except (FailedHealthCheck, Unsatisfiable) as exc:
        if not isinstance(exc, Unsatisfiable) and "filter" not in str(exc):
            raise
        # the drawn calls of its pattern rarely run (shapes, dtypes or values it wants that the
        # drawing does not give): pmverify's limit, said as such, never a finding
        rate = " ".join(str(exc).split(".")[1:2]).strip() or "most instances drawn were rejected"
        condition = f"instances pmverify can draw of its pattern (drawing them was rejected too often: {rate})"
        raise RewriteUnsatisfiable(
            f"entry {entry.label} is unsatisfiable here: it needs {condition}; nothing was compared", condition
        ) from None
    except UncompilableCase as exc:
        # the drawn graphs of its pattern do not compile even with Inductor's matcher off (a lowering
        # Inductor lacks for them): nothing to compare the entry with, never a finding
        first = str(exc).split("; the compiled mode")[0]
        condition = f"an instance of its pattern that torch.compile compiles without the entry ({first})"
        raise RewriteUnsatisfiable(
            f"entry {entry.label} is unsatisfiable here: it needs {condition}; nothing was compared", condition
        ) from None
    except PassVerificationError as error:
        raise error.with_notes(notes, "check_entry") from None
    result = EntryResult(entry, counts["examples"], counts["fired"], dict(outcomes), summary, lever_note, coverage)
    if not result.rewritten_cases:
        raise RewriteNeverMatched("never fired", summary, result)
    error = vacuous_error(summary, f"check_entry({entry.label})")
    if isinstance(error, AllCasesVoid):
        raise error
    return result


def _never_fired(entry: RecordedEntry, result: EntryResult, summary: VerifySummary, gate: Any) -> Any:
    why = ", ".join(f"{reason}: {count}" for reason, count in sorted(result.outcomes.items())) or "none"
    drawn = f"{result.examples} instances drawn from its pattern (ground truth: {why})"
    if gate is not None:
        drawable = not gate.computed and all(lever.kind != "device" for lever in gate.levers)
        tried = " (drawn with those too, it still never fired)" if drawable else ""
        return RewriteUnsatisfiable(
            f"entry {entry.label} is unsatisfiable here: its extra_check rejected every match in the {drawn} and "
            f"accepts one only with {gate.condition} (simulated){tried}; nothing was compared",
            gate.condition,
            summary,
            result,
        )
    if entry.kind == "lowering":
        # torch.compile re-traces the case (decompositions, functionalization): an instance matched in the
        # drawn graph may not reach the post-grad graph whole, so never firing there says nothing of the entry;
        # and a lowering entry gets a few cases (two compiles each): too few to call its pattern dead
        matched = any(outcome.startswith("matched") for outcome in result.outcomes)
        condition = LOWERING_CONDITION if matched else LOWERING_UNMATCHED_CONDITION
        return RewriteUnsatisfiable(
            f"entry {entry.label} is unsatisfiable here: it needs {condition}, and none of the {drawn} gave one (it "
            "never fired under torch.compile); nothing was compared",
            condition,
            summary,
            result,
        )
    # no gate: pmverify could not draw what the check or the matcher wants, which is not shown to be
    # the entry's fault (a hand-written check may want what no lever simulates): never a finding
    if result.outcomes and all(reason.startswith("pattern") for reason in result.outcomes):
        condition = (
            f"an instance Inductor's matcher matches (it matched none of the {result.examples} instances drawn from its "
            "pattern: what pmverify draws, or a pattern that never matches)"
        )
    else:
        condition = (
            f"inputs its extra_check accepts (it rejected every match of the {result.examples} instances drawn, and no "
            "lever made it accept: config options, frozen parameters, a CUDA device)"
        )
    return RewriteUnsatisfiable(
        f"entry {entry.label} is unsatisfiable here: it never fired on the {drawn}; it needs {condition}; nothing was "
        "compared",
        condition,
        summary,
        result,
    )
