"""The exceptions and warnings pmverify raises where a user sees them, in one public module.

Defined here (torch-free, so ``import pmverify.errors`` is cheap): the searches that checked
nothing (:class:`VacuousSearch` and its kinds), pmverify's warnings, its internal error, and the
errors of bad input to :func:`pmverify.symbolize`, the fuzz job and the audit, and of a case
``torch.compile`` cannot compile. Loaded from their home on first use (PEP 562), as their code
builds on the engine: :class:`PassVerificationError` (a pass broke a property),
:class:`SPMDError` / :class:`SPMDTimeoutError` (:func:`pmverify.distributed.run_spmd`) and
:class:`InternalMoved` (a private torch / Hypothesis internal pmverify relies on moved). Their old
import paths (``pmverify._findings.summary.VacuousSearch``...) still work. Bad arguments raise
``hypothesis.errors.InvalidArgument``, as Hypothesis' own functions do (also importable from here).
"""

from __future__ import annotations

from typing import Any

from .lazy import lazy_attributes

__all__ = [
    "AllCasesVoid",
    "DeviceUnavailable",
    "InternalMoved",  # noqa: F822 - loaded on first use
    "InvalidArgument",  # noqa: F822 - loaded on first use (hypothesis.errors.InvalidArgument)
    "PassVerificationError",  # noqa: F822 - loaded on first use
    "PmverifyInternalError",
    "PmverifyWarning",
    "RewriteNeverMatched",
    "RewriteNotComparable",
    "RewriteUnsatisfiable",
    "SPMDError",  # noqa: F822 - loaded on first use
    "SPMDTimeoutError",  # noqa: F822 - loaded on first use
    "SourceError",
    "SymbolizeError",
    "TargetError",
    "UncompilableCase",
    "UnfusedWarning",
    "VacuousSearch",
]


class VacuousSearch(AssertionError):
    """A search that checked nothing it was meant to check; the base of :class:`RewriteNeverMatched`
    and :class:`AllCasesVoid`. ``summary``: the search's :class:`VerifySummary` (None when the
    error does not come from :func:`pmverify.verify`)."""

    def __init__(self, message: str, summary: Any = None) -> None:
        self.summary = summary
        super().__init__(message)


class RewriteNeverMatched(VacuousSearch):
    """No case of the search was rewritten: nothing the pass rewrites was compared.

    Raised by :func:`pmverify.verify` (``summary`` set, ``result`` None) and by
    :func:`pmverify.check_rewrite` (``result``: its ``RewriteResult``, whose ``outcomes`` say why;
    ``summary`` set too).
    """

    def __init__(self, message: str, summary: Any = None, result: Any = None) -> None:
        self.result = result
        super().__init__(message, summary)


class RewriteUnsatisfiable(RewriteNeverMatched):
    """No case was rewritten because the rewrite is gated on what this machine or configuration
    does not have: ``condition`` names it in words (``"tensors on a CUDA device"``,
    ``"torch._inductor.config.freezing=True"``). Raised by :func:`pmverify.check_rewrite` instead of
    a plain :class:`RewriteNeverMatched` when the gate is found; ``check_rewrite(...,
    force_extra_check=True)`` runs the comparison anyway. A subclass of
    :class:`RewriteNeverMatched`, so code catching that catches this too."""

    def __init__(self, message: str, condition: str, summary: Any = None, result: Any = None) -> None:
        self.condition = condition
        super().__init__(message, summary, result)


class RewriteNotComparable(VacuousSearch):
    """The graphs before and after the rewrite cannot be compared value by value: ``reason`` says
    why in words (``"rng: ..."``: the graph draws random numbers, and the replacement consumes them
    otherwise than the pattern). Raised by :func:`pmverify.check_rewrite`; never a finding."""

    def __init__(self, message: str, reason: str, summary: Any = None, result: Any = None) -> None:
        self.reason = reason
        self.result = result
        super().__init__(message, summary)


class AllCasesVoid(VacuousSearch):
    """Every case of the search was void: its float64 reference is NaN or Inf, or its graphs cannot
    be compared value by value (they draw random numbers otherwise), so the semantics oracle judged
    none (see :mod:`pmverify.oracles.semantics`). Raised by :func:`pmverify.verify`."""


class PmverifyWarning(UserWarning):
    """Base of pmverify's warnings: what a search that found nothing still wants you to know."""


class UnfusedWarning(PmverifyWarning):
    """A whole group of planted instances (a dtype, a graph form, a kind of trace) was never
    rewritten over a search in which the pass rewrote others (:func:`unfused_warnings`): the pass
    silently never fuses them. Silenced per group by ``verify(..., allow_unfused=[...])``."""


class PmverifyInternalError(Exception):
    """An error of pmverify itself while judging a case (an oracle's bookkeeping, the noise floor,
    the region reference...), never a finding of the pass. An oracle may raise it to say so even
    when the rewritten graph does not run (see :class:`InternalError`)."""


class SymbolizeError(ValueError):
    """Raised by :func:`symbolize` for arguments it cannot honour (the message names the argument)."""


class DeviceUnavailable(RuntimeError):
    """A device given as ``device=`` (or ``--device``) that this machine lacks: ``device='cuda'``
    where ``torch.cuda.is_available()`` is False (see :func:`pmverify.device.require_device`). An
    error of the setup, not a finding."""


class UncompilableCase(RuntimeError):
    """A case that ``torch.compile`` does not compile or run even without the pass (compiled mode,
    :func:`pmverify._engine.compiled.apply_compiled`): there is nothing to compare the pass with. Inductor's
    limit on that graph (a lowering it lacks, a decomposition that refuses the drawn arguments), not
    the pass's: :func:`pmverify.verify` discards such a case as an invalid draw."""


class TargetError(ValueError):
    """A target the job cannot run: the message is one line, fit for ``pmverify fuzz: ...``."""


class SourceError(ValueError):
    """A source the audit cannot record: the message is one line, fit for ``pmverify audit: ...``."""


#: The exceptions whose code lives beside the engine they report on, loaded on first use.
_HOMES = {
    "PassVerificationError": "pmverify._engine.verify",
    "SPMDError": "pmverify.distributed",
    "SPMDTimeoutError": "pmverify.distributed",
    "InternalMoved": "pmverify._compat",
    # every bad argument (of verify, check_case, the strategies) raises Hypothesis' own error
    "InvalidArgument": "hypothesis.errors",
}

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, public=__all__)
