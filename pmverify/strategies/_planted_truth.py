"""The ground truth of ``planted``'s instances (:func:`judged`): whether Inductor's matcher for the
pattern must match each one, may, or must not, read from that matcher wherever it can be (the
recorded rewrite's, or the plain pattern registered with its wildcards, :class:`Wildcards`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._fx import trace
from .._registry.record import RecordedRewrite, isolated_pass
from ._like import TensorLike
from ._planted_args import argument_names
from ._traced import Traced, signature
from ._truth import isolated_truth

if TYPE_CHECKING:
    from ._planted_spec import PlantSpec

__all__ = ["Wildcards", "judged"]

#: Near misses made by editing an argument of the trace: a wildcard may hold that argument.
_EDITED_KINDS = ("constant", "dim", "split_sizes")
#: Near misses in what the trace does not pin (:mod:`._argument_near_miss`): Inductor's matcher
#: for the pattern judges them, for every plain pattern (it ignores keyword arguments the pattern
#: does not hold, so it rewrites some of them).
_ASKED_KINDS = ("optional_arg", "overload", "reduction_dim")


class Wildcards:
    """What a plain pattern's pass treats as wildcards (``register_replacement``'s
    ``scalar_workaround`` and ``exclusive_arg_names``, maybe none), and Inductor's matcher for the
    pattern registered with them (built on first use, from the example inputs or the first drawn
    ones): the ground truth of an edited near miss. Its repr names the arguments only."""

    def __init__(
        self,
        pattern: Callable[..., Any],
        trace_fn: Callable[..., Any] | None,
        example_inputs: tuple[Any, ...] | None,
        positions: dict[int, Any],
        exclusive: tuple[str, ...],
    ) -> None:
        self.pattern, self.trace_fn, self.example_inputs = pattern, trace_fn, example_inputs
        self.positions, self.exclusive = positions, exclusive
        self.given = bool(positions or exclusive)
        self.broken = False  # the pattern does not register: no matcher to ask
        self.reference: tuple[Any, ...] | None = None  # the structure of the registered trace
        self._rewrite: RecordedRewrite | None = None

    def rewrite(self, args: tuple[Any, ...]) -> RecordedRewrite:
        if self._rewrite is None:
            from .._registry.record import pattern_rewrite

            example = self.example_inputs if self.example_inputs is not None else args
            example = tuple(x.zeros() if isinstance(x, TensorLike) else x for x in example)
            self.reference = signature(trace(self.pattern, example, self.trace_fn), loose=True)
            self._rewrite = pattern_rewrite(
                self.pattern,
                tuple(x for i, x in enumerate(example) if i not in self.positions),
                trace_fn=self.trace_fn,
                scalar_workaround=self._workaround() or None,
                exclusive_arg_names=self.exclusive,
            )
        return self._rewrite

    def _workaround(self) -> dict[str, Any]:
        names = argument_names(self.pattern) if self.positions else []
        return {names[i]: value for i, value in self.positions.items()}

    def __repr__(self) -> str:
        return f"wildcards(scalar_workaround={self._workaround()!r}, exclusive_arg_names={self.exclusive!r})"


def judged(spec: PlantSpec, base: Traced, chosen: Traced, broadcast: str | None, applicable: tuple[str, ...]) -> Traced:
    """``chosen`` (``base``, the plain instance, or a near miss of it) with its ground truth:
    ``trace_differs`` where its trace is another graph than the registered one; the recorded
    rewrite's matcher's verdict, or the plain pattern's matcher's for a near miss it may match; the
    ``broadcast`` form's (:func:`broadcast_kind` of the drawn inputs); in a dynamic case the matcher
    to ask again on the symbolic graph; where a near miss's truth came from; the ``applicable``
    near-miss kinds."""
    args, structure = base.args[: base.primals], signature(base.gm, loose=True)
    if chosen.must_match is True and not spec.same_structure(signature(chosen.gm, loose=True)):
        # Another graph than the pass registered (e.g. a matmul traced as a broadcasting mul at a
        # contracted size of 1): Inductor cannot match it, a hand-written pass may.
        chosen = dataclasses.replace(chosen, must_match=None, reason="trace_differs")
    if spec.rewrite is not None and chosen.must_match is not None and not chosen.extra_user:
        chosen = isolated_truth(spec.rewrite, chosen)
    elif spec.wildcards is not None and chosen.must_match is False:
        wildcards = spec.wildcards
        if wildcards.given and chosen.reason in _EDITED_KINDS:
            # the edited argument may be one the pass's matcher holds as a wildcard: ask it
            chosen = isolated_truth(wildcards.rewrite(args), chosen)
        elif chosen.reason in _ASKED_KINDS:
            chosen = _asked_truth(wildcards, args, chosen, structure)
    if chosen.reason in (None, "trace_differs") and broadcast is not None:
        chosen = _broadcast_truth(spec, chosen)
    if spec.dynamic:  # asked again on the symbolic graph (_planted_dynamic.symbolic_truth)
        if spec.rewrite is not None:
            chosen = dataclasses.replace(chosen, matcher=spec.rewrite)
        else:
            chosen = dataclasses.replace(chosen, matcher=_matcher(spec.wildcards, args, structure))
    if chosen.reason is not None:  # a near miss: whose matcher its ground truth came from
        own = spec.rewrite is not None or spec.wildcards.given
        chosen = dataclasses.replace(chosen, truth_from="matcher" if own else "pattern")
    return dataclasses.replace(chosen, applicable=applicable)


def _matcher(wildcards: Wildcards, args: tuple[Any, ...], structure: tuple[Any, ...]) -> RecordedRewrite | None:
    """Inductor's matcher for a plain pattern (registered as :class:`Wildcards` says), when it
    registers and its trace has the instance's ``structure`` (loose signature) before any near-miss
    change; else None (no matcher to ask)."""
    if wildcards.broken:
        return None
    try:
        rewrite = wildcards.rewrite(args)
        isolated_pass(rewrite)
    except Exception:  # noqa: BLE001 - whatever register_replacement raises: no matcher
        wildcards.broken = True
        return None
    return rewrite if wildcards.reference == structure else None


def _asked_truth(wildcards: Wildcards, args: tuple[Any, ...], inst: Traced, structure: tuple[Any, ...]) -> Traced:
    """The ground truth of an :data:`_ASKED_KINDS` near miss of a plain pattern, from Inductor's
    matcher for the pattern; ``must_match=None`` (either is right) where it cannot tell: the
    pattern does not register (e.g. it does not trace on zeros), or the instance before the change
    has another ``structure`` (loose signature) than the registered trace (without example inputs
    the matcher is registered on the first drawn ones, e.g. at a contracted size of 1)."""
    if not wildcards.broken:
        try:
            rewrite = wildcards.rewrite(args)
            isolated_pass(rewrite)
        except Exception:  # noqa: BLE001 - whatever register_replacement raises: no matcher
            if wildcards.given:
                raise
            wildcards.broken = True
        else:
            if wildcards.reference == structure:
                return isolated_truth(rewrite, inst)
    return dataclasses.replace(inst, must_match=None)


def _broadcast_truth(spec: PlantSpec, inst: Traced) -> Traced:
    """The ground truth of an instance whose inputs :func:`like` drew in a broadcast form (a size
    1, a missing leading dim, stride 0): a recorded rewrite's matcher was asked (its
    ``extra_check`` included); a plain pattern's instance is ``must_match=None`` (a correct pass may
    refuse the form: the semantics oracle judges it where it rewrites); reason ``"broadcast"`` for
    one that need not match."""
    if inst.must_match is True and spec.wildcards is not None:
        inst = dataclasses.replace(inst, must_match=None, reason="broadcast")
    elif inst.reason == "trace_differs":
        inst = dataclasses.replace(inst, reason="broadcast")
    return inst
