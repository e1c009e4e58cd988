"""What a fuzz target is: the pass, its case families and what they need around them
(:class:`FuzzTarget`), and the check it runs once at the end of a job (:class:`EndCheck`).

A user's target builds one::

    # mypkg/fuzzing.py
    from pmverify import FuzzTarget

    def my_target():
        return FuzzTarget(MyFusionPass, [("my_cases", my_cases())])

and is fuzzed with ``pmverify fuzz --target mypkg.fuzzing:my_target`` (how the job resolves and
runs targets: :mod:`pmverify._job.targets`).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["EndCheck", "FuzzTarget", "jsonable"]


@dataclasses.dataclass(frozen=True)
class EndCheck:
    """A check a target runs once at the end of a job, besides its searches (the shipped pass's
    compiled tiny-model check), reported under the job report's ``real_models``.

    - ``name``: its name in the report (``"minimax_m2"``).
    - ``about``: what the job prints when it starts it (``"tiny MiniMax-M2, compiled with and
      without the pass"``).
    - ``run``: called in the target's worker process with the target's pass; returns a JSON-ready
      dict with at least ``ok`` (bool); what it raises is reported as a failed check. A ``run``
      with a ``device`` parameter is also given the job's ``--device`` (when one other than the
      default is given), to run there.
    - ``skipped``: why the check does not apply to this target (reported as skipped, ``ok``), or None.
    """

    name: str
    about: str
    run: Callable[[Any], dict]
    skipped: str | None = None


@dataclasses.dataclass(frozen=True)
class FuzzTarget:
    """A fuzz target: what ``pmverify fuzz --target`` searches.

    - ``pass_``: the pass under test: a class built per case from ``case.pass_config``, a
      ``PatternMatcherPass``, or a callable on a ``torch.fx.Graph``.
    - ``pass_factory``: instead of ``pass_``, a module-level function that builds the pass, as
      ``verify(pass_factory=...)`` takes it (called per case, with the case's ``pass_config`` when
      it takes an argument and the case carries one).
    - ``families``: the ``(name, strategy)`` case families searched in rotation, a batch of cases
      from each in turn; each strategy draws :class:`pmverify.GraphCase`.
    - ``set_up``: called with no arguments in every process that runs the target (the job's own,
      to refuse bad usage, with the environment variables it set undone afterwards; and the
      target's worker) before the target is used, e.g. to set environment variables
      (``TRITON_INTERPRET``); it raises ``ValueError`` or ``RuntimeError`` with a
      one-line message when the target cannot run here. A target's *source* function should call
      it before importing anything it sets up for (a set-up that must precede a module's import
      cannot wait for this field). None: nothing to set up.
    - ``reproducer_prelude``: Python lines the target's reproducers run after ``import torch`` and
      before pmverify is imported (the set-up a script needs); None: the pass's own
      ``reproducer_prelude()`` when it has one, else nothing.
    - ``end_check``: an :class:`EndCheck` run at the end of the job, or None. (``extra_check=``,
      its old name, still works and warns: ``extra_check`` names Inductor's match predicate.)
    - ``strict_order``: searched with ``strict_order=True`` whatever ``--strict-order`` says.
    - ``pass_source``: code that defines ``PASS`` for the reproducers (``from mypkg import
      MyPass as PASS``-like), or None for the recipe pmverify derives from the pass.
    - ``allow_unfused``: groups of planted instances the pass is not meant to fuse, as
      ``verify(..., allow_unfused=)`` takes them (``["bfloat16"]``, ``{"dtype": [...]}``): left out
      of the report's ``warnings`` (groups never rewritten over the whole run). None: none.

    Raises ``ValueError`` naming the field and its value when ``families`` is not a non-empty list
    of ``(str, strategy)`` pairs, when both or neither of ``pass_`` and ``pass_factory`` are given,
    for a ``pass_factory`` not importable by its module path, or another field not of its kind.
    """

    pass_: Any = None
    families: Sequence[tuple[str, Any]] = ()
    set_up: Callable[[], None] | None = None
    reproducer_prelude: str | None = None
    end_check: EndCheck | None = None
    strict_order: bool = False
    pass_source: str | None = None
    pass_factory: Callable[..., Any] | None = None
    allow_unfused: Any = None
    extra_check: dataclasses.InitVar[EndCheck | None] = None  # deprecated: end_check

    def __post_init__(self, extra_check: EndCheck | None = None) -> None:
        """Raises ``ValueError`` naming the field and its value for a field of the wrong kind."""
        if extra_check is not None:
            if self.end_check is not None:
                raise ValueError("FuzzTarget(end_check=..., extra_check=...): give end_check only")
            warnings.warn(
                "FuzzTarget(extra_check=) is deprecated: pass end_check= (extra_check names Inductor's predicate)",
                DeprecationWarning,
                stacklevel=3,
            )
            object.__setattr__(self, "end_check", extra_check)
        from hypothesis.errors import InvalidArgument
        from hypothesis.strategies import SearchStrategy

        if (self.pass_ is None) == (self.pass_factory is None):
            raise ValueError(
                f"FuzzTarget(pass_={self.pass_!r}, pass_factory={self.pass_factory!r}): give exactly one of them"
            )
        if self.pass_factory is not None:
            from ._findings.factory import as_factory

            try:
                as_factory(self.pass_factory)
            except InvalidArgument as exc:
                raise ValueError(f"FuzzTarget({exc})") from None

        families = self.families
        if isinstance(families, (str, bytes, SearchStrategy)) or not isinstance(families, Sequence) or not families:
            raise ValueError(f"FuzzTarget(families={families!r}): must be a non-empty list of (name, strategy) pairs")
        for family in families:
            if not (
                isinstance(family, tuple)
                and len(family) == 2
                and isinstance(family[0], str)
                and isinstance(family[1], SearchStrategy)
            ):
                raise ValueError(
                    f"FuzzTarget(families=...): {family!r} is not a (name, strategy) pair (a str and a "
                    "Hypothesis strategy of GraphCase)"
                )
        for field, value, kind in (
            ("set_up", self.set_up, "callable"),
            ("reproducer_prelude", self.reproducer_prelude, str),
            ("end_check", self.end_check, EndCheck),
            ("pass_source", self.pass_source, str),
        ):
            if value is not None and not (callable(value) if kind == "callable" else isinstance(value, kind)):
                name = "callable" if kind == "callable" else kind.__name__
                what = f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"
                raise ValueError(f"FuzzTarget({field}={value!r}): must be {what} or None")
        if not isinstance(self.strict_order, bool):
            raise ValueError(f"FuzzTarget(strict_order={self.strict_order!r}): must be a bool")
        from ._findings.summary import validate_allow_unfused

        try:
            validate_allow_unfused(self.allow_unfused, "FuzzTarget(allow_unfused)")
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from None


def jsonable(value: Any) -> Any:
    """A dataclass, dict or scalar as plain JSON (NaN and Inf as null, bytes as hex): what an
    :class:`EndCheck`'s ``run`` returns, and what the job's report holds."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    return str(value)


#: The old name of :class:`EndCheck` (``extra_check`` names Inductor's match predicate only).
ExtraCheck = EndCheck
FuzzTarget.extra_check = property(lambda self: self.end_check, doc="Deprecated: :attr:`end_check`.")  # type: ignore[assignment]
