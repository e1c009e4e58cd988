"""What a job and its worker processes say to each other over their ``multiprocessing`` pipe: frozen
dataclasses, pickled as they are. Torch-free.

Both jobs' workers (``pmverify fuzz``'s, :mod:`.worker`; ``pmverify audit``'s,
:mod:`pmverify._audit.worker`) answer :class:`Ready` once they can take work, or :class:`Failed`
(and exit) when they cannot start, and end at :class:`Stop` or when the pipe closes.

The fuzzing job's worker (:mod:`.worker`) takes :class:`BatchRequest`, :class:`RenderRequest` and
:class:`ExtraCheckRequest`:

- a batch is answered by a :class:`CaseStarted` before the pass is applied to each case (so that the
  job knows which case a dead or silent worker was on) and a :class:`CaseChecked` after it; a
  :class:`Found` at the first failing case of the search (its choices, an unshrunk reproducer
  already written); a :class:`SearchDone` at the end (the finding with its final choices,
  ``shrunk`` when it is minimal);
- a render by :class:`Alive` about every second while a forked candidate of its shrinking runs,
  then :class:`Rendered`;
- the real-model check by :class:`ExtraCheckDone`.

The audit's worker takes :class:`CheckRequest` and answers :class:`RewriteChecked`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._findings.summary import VerifySummary

__all__ = [
    "Alive",
    "BatchRequest",
    "CaseChecked",
    "CaseStarted",
    "CheckInfo",
    "CheckRequest",
    "Failed",
    "Found",
    "Finding",
    "OtherFailure",
    "ExtraCheckDone",
    "ExtraCheckRequest",
    "Ready",
    "RenderRequest",
    "Rendered",
    "RewriteChecked",
    "SearchDone",
    "Stop",
    "ViolationRecord",
]

_frozen = dataclasses.dataclass(frozen=True)


# -- findings --------------------------------------------------------------------------------------


@_frozen
class ViolationRecord:
    """A :class:`pmverify.oracles.Violation` as a worker sends it: the oracle's name, its message,
    the names of the nodes it points at, its kind (``Violation.kind``)."""

    oracle: str
    message: str
    nodes: tuple[str, ...] = ()
    kind: str = ""

    @classmethod
    def of(cls, violation: Any) -> ViolationRecord:
        """The record of a :class:`pmverify.oracles.Violation` (or anything with ``oracle``,
        ``message`` and ``nodes``; ``kind`` optional)."""
        return cls(violation.oracle, violation.message, tuple(violation.nodes), getattr(violation, "kind", ""))

    def as_json(self) -> dict[str, Any]:
        found = {"oracle": self.oracle, "message": self.message, "nodes": list(self.nodes)}
        return {**found, "oracle_kind": self.kind} if self.kind else found  # ("kind": the finding's, in a report)


@_frozen
class OtherFailure:
    """Another distinct failure of the same search (``PassVerificationError.failures``), on a case of
    its own: ``oracle`` and ``kind`` (``Violation.kind``) tell it apart; ``shrunk``: Hypothesis
    shrank it to the end (the job's searches report one failure, so the others are their first
    cases, not shrunk)."""

    oracle: str
    violations: tuple[ViolationRecord, ...]
    case: str
    reproducer: str | None
    kind: str = ""
    shrunk: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "oracle": self.oracle,
            "oracle_kind": self.kind,
            "violations": [v.as_json() for v in self.violations],
            "case": self.case,
            "reproducer": self.reproducer,
            "shrunk": self.shrunk,
        }


@_frozen
class Finding:
    """A violation a worker's search found in family ``family`` of target ``target``.

    - ``case``: the failing case's repr; ``reproducer``: its reproducer's path (None: not written);
    - ``shrunk``: shrunk to the end (minimal); ``replayed``: found by replaying the example database;
    - ``choices``: the bytes of the Hypothesis choice sequence that draws the case (None where this
      Hypothesis does not expose them);
    - ``other_failures``: the search's other distinct failures, on cases of their own, most severe first.
    """

    target: str
    family: str
    violations: tuple[ViolationRecord, ...]
    case: str
    reproducer: str | None
    shrunk: bool
    replayed: bool
    choices: bytes | None = None
    other_failures: tuple[OtherFailure, ...] = ()

    def as_row(self) -> dict[str, Any]:
        """The finding as a row of the job's report (kind ``violation``), its choices under
        ``"choices"`` (which the job takes out when it saves them to the example database)."""
        return {
            "target": self.target,
            "family": self.family,
            "kind": "violation",
            "violations": [v.as_json() for v in self.violations],
            "case": self.case,
            "reproducer": self.reproducer,
            "shrunk": self.shrunk,
            "replayed": self.replayed,
            "other_failures": [other.as_json() for other in self.other_failures],
            "choices": self.choices,
        }


# -- both jobs' workers ----------------------------------------------------------------------------


@_frozen
class Ready:
    """A worker can take work. ``pid``: its process id; for a fuzz target's worker, the target's
    case ``families`` (names, in order: a request's ``family`` indexes them), each family's
    example-database ``keys``, its end check (:class:`CheckInfo`), if it has one, and the group
    keys its ``allow_unfused`` silences."""

    pid: int
    families: tuple[str, ...] = ()
    keys: tuple[bytes, ...] = ()
    check: CheckInfo | None = None
    allow_unfused: tuple[str, ...] = ()


@_frozen
class CheckInfo:
    """A target's end check as the job shows it: ``name``, ``about`` (one line), and ``skipped``
    (why it cannot run here, else None)."""

    name: str
    about: str
    skipped: str | None = None


@_frozen
class Failed:
    """A worker could not start (it exits): ``error`` says why, ``"Type: message"``."""

    error: str


@_frozen
class Stop:
    """Ask a worker to end."""


# -- the fuzzing job's worker ----------------------------------------------------------------------


@_frozen
class BatchRequest:
    """One :func:`pmverify.verify` search of ``max_examples`` cases of family ``family`` (an index
    into :attr:`Ready.families`), seeded ``seed``. With ``replay``, the example database's saved
    failures of that family are replayed (no new cases) and the one replayed is shrunk unless it is
    known minimal. Shrinking ends by ``stop_at`` (``time.time()``: the end of the job's budget)."""

    family: int
    seed: int
    max_examples: int
    replay: bool
    stop_at: float


@_frozen
class RenderRequest:
    """Draw again the case of ``choices`` (the bytes of a Hypothesis choice sequence) of family
    ``family``, a crash (``exit_code``: how the worker that ran it ended) or timeout (``exit_code``
    None) finding with ``violations``, and write its reproducer, the pass not applied in this
    process. With a ``stop_at`` (else None), shrink it first, each candidate in a forked child with
    the per-case ``timeout_s`` seconds."""

    family: int
    choices: bytes
    violations: tuple[ViolationRecord, ...]
    exit_code: int | None
    timeout_s: float
    stop_at: float | None


@_frozen
class ExtraCheckRequest:
    """Run the target's end check (:class:`pmverify.EndCheck`, the shipped pass's: the compiled
    tiny MiniMax-M2) with the target's pass."""


@_frozen
class CaseStarted:
    """The pass is about to be applied to the case of ``choices`` (None where this Hypothesis does
    not expose them) of family ``family``."""

    family: int
    choices: bytes | None


@_frozen
class CaseChecked:
    """The case announced last was checked: its ``tp_world`` (ranks), the pass's ``matches`` in it,
    its Hypothesis ``events`` and its ``summary`` (which the job adds up)."""

    tp_world: int
    matches: int
    events: tuple[str, ...]
    summary: VerifySummary


@_frozen
class Found:
    """The first failing case of the running search, unshrunk, its reproducer written."""

    finding: Finding


@_frozen
class SearchDone:
    """The running search ended: its ``finding`` (final choices; ``shrunk`` when minimal) or None,
    and the ``error`` (text) of a search that raised or ran no case, or None."""

    finding: Finding | None
    error: str | None


@_frozen
class Alive:
    """A forked candidate of a crash's or timeout's shrinking is still running (about every second)."""


@_frozen
class Rendered:
    """The answer to a :class:`RenderRequest`: the reproducer's path and the case's repr (None when
    not written: ``note`` says why); with ``choices``, the case was shrunk to those (to the end when
    ``shrunk``, else as far as the budget let it)."""

    reproducer: str | None = None
    case: str | None = None
    note: str | None = None
    choices: bytes | None = None
    shrunk: bool = False


@_frozen
class ExtraCheckDone:
    """The end check's result (JSON-ready: ``name``, ``ok``, ...)."""

    result: dict[str, Any]


# -- the audit's worker ----------------------------------------------------------------------------


@_frozen
class CheckRequest:
    """Audit the entry ``name`` of module ``module``, of kind ``kind`` (a rewrite: ``"replacement"``),
    of audit source ``source`` with seed ``seed``."""

    source: str
    module: str
    name: str
    seed: int
    kind: str = "replacement"


@_frozen
class RewriteChecked:
    """The answer to a :class:`CheckRequest`: the rewrite's outcome (a JSON-ready row of the audit's
    report, :func:`pmverify._audit.check.check_one`'s)."""

    outcome: dict[str, Any]
