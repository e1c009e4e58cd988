"""pmverify: property-based verification of TorchInductor pattern-matcher passes.

Strategies (``pmverify.strategies``) draw random FX graphs with planted pattern instances; a pass
is applied to them and oracles check that semantics are preserved, no rewrite crosses a mutation
barrier, auto_functionalized tuples are routed right, the graph stays well formed, planted
instances are rewritten exactly when they must be, and ``uuid()`` tells configs apart.
``record_patterns`` captures a pass's ``register_replacement`` calls (``record_entries`` its every
pattern entry, hand-written handlers too; ``record_inductor``: every
entry of Inductor's own passes, rewrites and hand-written graph and lowering handlers); ``check_rewrite`` checks one in isolation. ``verify`` returns a ``VerifySummary`` of what it checked, and raises a
``VacuousSearch`` (``RewriteNeverMatched`` and its ``RewriteUnsatisfiable``,
``RewriteNotComparable``, ``AllCasesVoid``) for a search that checked nothing.
"""

from typing import TYPE_CHECKING

from ._version import __version__
from .lazy import lazy_attributes

#: Where each public name lives: ``import pmverify`` imports none of these modules (nor torch); the
#: first use of a name imports its module (PEP 562).
_WHERE = {
    "GraphCase": "_case",
    "MutationSite": "_case",
    "PlantedInstance": "_case",
    "Symbol": "_case",
    "CompileRange": "_sizes",
    "symbolize": "_symbolic",
    "CaseResult": "_check",
    "check_case": "_check",
    "run_pass": "_apply",
    "inductor_entry": "_inductor_rewrites",
    "check_entry": "_entry_check",
    "EntryResult": "_entry_check",
    "RecordedEntry": "_entries",
    "inductor_rewrite": "_inductor_rewrites",
    "record_inductor": "_inductor_rewrites",
    "record_entries": "_audit.sources",
    "RecordedRewrite": "_record",
    "record_patterns": "_record",
    "RewriteResult": "_rewrite",
    "check_rewrite": "_rewrite",
    "AllCasesVoid": "errors",
    "RewriteNeverMatched": "errors",
    "RewriteNotComparable": "errors",
    "RewriteUnsatisfiable": "errors",
    "VacuousSearch": "errors",
    "VerifySummary": "_summary",
    "PmverifyWarning": "errors",
    "UnfusedWarning": "errors",
    "EndCheck": "targets",
    "ExtraCheck": "targets",
    "FuzzTarget": "targets",
    "Failure": "_verify",
    "PassVerificationError": "_verify",
    "verify": "_verify",
    "Violation": "oracles",
    "InternalError": "oracles",
    "PmverifyInternalError": "errors",
}

if TYPE_CHECKING:
    from ._apply import run_pass
    from ._audit.sources import record_entries
    from ._case import GraphCase, MutationSite, PlantedInstance, Symbol
    from ._check import CaseResult, check_case
    from ._entries import RecordedEntry
    from ._entry_check import EntryResult, check_entry
    from ._inductor_rewrites import inductor_entry, inductor_rewrite, record_inductor
    from ._record import RecordedRewrite, record_patterns
    from ._rewrite import RewriteResult, check_rewrite
    from ._sizes import CompileRange
    from ._summary import (
        AllCasesVoid,
        PmverifyWarning,
        RewriteNeverMatched,
        RewriteNotComparable,
        RewriteUnsatisfiable,
        UnfusedWarning,
        VacuousSearch,
        VerifySummary,
    )
    from ._symbolic import symbolize
    from ._verify import Failure, PassVerificationError, verify
    from .oracles import InternalError, PmverifyInternalError, Violation
    from .targets import EndCheck, FuzzTarget

__all__ = [
    "AllCasesVoid",
    "CaseResult",
    "CompileRange",
    "EndCheck",
    "Failure",
    "FuzzTarget",
    "GraphCase",
    "InternalError",
    "MutationSite",
    "PassVerificationError",
    "PlantedInstance",
    "PmverifyInternalError",
    "PmverifyWarning",
    "RecordedRewrite",
    "RewriteNeverMatched",
    "RewriteNotComparable",
    "RewriteResult",
    "RewriteUnsatisfiable",
    "Symbol",
    "UnfusedWarning",
    "VacuousSearch",
    "VerifySummary",
    "Violation",
    "__version__",
    "check_case",
    "check_rewrite",
    "inductor_entry",
    "check_entry",
    "EntryResult",
    "RecordedEntry",
    "inductor_rewrite",
    "record_entries",
    "record_inductor",
    "record_patterns",
    "run_pass",
    "symbolize",
    "verify",
]


__getattr__, __dir__ = lazy_attributes(__name__, {name: f".{module}" for name, module in _WHERE.items()}, __all__)
