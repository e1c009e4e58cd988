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
    "CompileRange": "_shapes.sizes",
    "symbolize": "_shapes.symbolic",
    "on_device": "device",
    "DeviceUnavailable": "errors",
    "CaseResult": "_engine.check",
    "check_case": "_engine.check",
    "run_pass": "_engine.apply",
    "inductor_entry": "_rewrites.inductor_rewrites",
    "check_entry": "_rewrites.entry_check",
    "EntryResult": "_rewrites.entry_check",
    "RecordedEntry": "_registry.entries",
    "inductor_rewrite": "_rewrites.inductor_rewrites",
    "record_inductor": "_rewrites.inductor_rewrites",
    "record_entries": "_audit.sources",
    "RecordedRewrite": "_registry.record",
    "record_patterns": "_registry.record",
    "RewriteResult": "_rewrites.rewrite",
    "check_rewrite": "_rewrites.rewrite",
    "AllCasesVoid": "errors",
    "RewriteNeverMatched": "errors",
    "RewriteNotComparable": "errors",
    "RewriteUnsatisfiable": "errors",
    "VacuousSearch": "errors",
    "VerifySummary": "_findings.summary",
    "PmverifyWarning": "errors",
    "UnfusedWarning": "errors",
    "EndCheck": "targets",
    "ExtraCheck": "targets",
    "FuzzTarget": "targets",
    "Failure": "_engine.verify",
    "PassVerificationError": "_engine.verify",
    "verify": "_engine.verify",
    "Violation": "oracles",
    "InternalError": "oracles",
    "PmverifyInternalError": "errors",
}

if TYPE_CHECKING:
    from ._audit.sources import record_entries
    from ._case import GraphCase, MutationSite, PlantedInstance, Symbol
    from ._engine.apply import run_pass
    from ._engine.check import CaseResult, check_case
    from ._engine.verify import Failure, PassVerificationError, verify
    from ._findings.summary import (
        AllCasesVoid,
        PmverifyWarning,
        RewriteNeverMatched,
        RewriteNotComparable,
        RewriteUnsatisfiable,
        UnfusedWarning,
        VacuousSearch,
        VerifySummary,
    )
    from ._registry.entries import RecordedEntry
    from ._registry.record import RecordedRewrite, record_patterns
    from ._rewrites.entry_check import EntryResult, check_entry
    from ._rewrites.inductor_rewrites import inductor_entry, inductor_rewrite, record_inductor
    from ._rewrites.rewrite import RewriteResult, check_rewrite
    from ._shapes.sizes import CompileRange
    from ._shapes.symbolic import symbolize
    from .device import on_device
    from .errors import DeviceUnavailable
    from .oracles import InternalError, PmverifyInternalError, Violation
    from .targets import EndCheck, FuzzTarget

__all__ = [
    "AllCasesVoid",
    "CaseResult",
    "CompileRange",
    "DeviceUnavailable",
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
    "on_device",
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
