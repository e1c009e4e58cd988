"""``Violation``: one finding of one oracle; ``InternalError``: an oracle that failed itself."""

from __future__ import annotations

import dataclasses
import traceback as _traceback

from ..errors import PmverifyInternalError

__all__ = [
    "DEVICE",
    "DTYPE_SHAPE",
    "META",
    "ORDER",
    "SPECIALISATION",
    "STRIDES",
    "InternalError",
    "PmverifyInternalError",
    "Violation",
]


@dataclasses.dataclass(frozen=True)
class InternalError:
    """An oracle that raised while judging a case, for a reason of its own (``CaseResult.internal_errors``):
    the case counts as not judged by that oracle, the search goes on, and nothing is held against
    the pass.

    - ``oracle``: the oracle's name (or the step of ``check_case``: ``"semantics (void_reason)"``).
    - ``error``: the exception in one line (``IndexError('list index out of range')``).
    - ``traceback``: the formatted traceback.
    """

    oracle: str
    error: str
    traceback: str

    @classmethod
    def of(cls, oracle: str, exc: BaseException) -> InternalError:
        return cls(oracle, repr(exc), "".join(_traceback.format_exception(type(exc), exc, exc.__traceback__)))

    def __str__(self) -> str:
        return f"pmverify internal error in {self.oracle}: {self.error}"


#: The kinds of the structure oracle's findings (``Violation.kind``): an output's dtype or shape (or
#: the number of outputs) changed; the rewrite specialises symbolic sizes (or loses them); the graph
#: is not well formed (lint, order, an erased input used, fake tensors do not propagate); stale
#: ``meta["val"]``; an output's strides changed; an output's device changed (a replacement that
#: makes a tensor on the default device, CPU, where the graph ran on CUDA).
DTYPE_SHAPE, SPECIALISATION, ORDER, META, STRIDES = "dtype/shape", "specialisation", "order", "meta", "strides"
DEVICE = "device"


@dataclasses.dataclass(frozen=True)
class Violation:
    """A property that does not hold for a case.

    - ``oracle``: the oracle's name (``"semantics"``, ``"structure"``, ``"expectations"``...).
    - ``message``: what is wrong, with the values that show it.
    - ``nodes``: names of the graph nodes involved (may be empty).
    - ``kind``: what sort of finding of its oracle it is, where the oracle tells several apart (the
      structure oracle: ``"dtype/shape"``, ``"specialisation"``, ``"order"``, ``"meta"``,
      ``"strides"``); ``""`` otherwise. :func:`pmverify.verify` shrinks each ``(oracle, kind)`` to
      a case of its own and orders them by severity (see ``pmverify._findings.severity``).
    """

    oracle: str
    message: str
    nodes: tuple[str, ...] = ()
    kind: str = ""

    def __str__(self) -> str:
        where = f" [nodes: {', '.join(self.nodes)}]" if self.nodes else ""
        return f"{self.oracle}: {self.message}{where}"
