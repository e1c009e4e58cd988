"""pmverify: property-based verification of TorchInductor pattern-matcher passes.

Strategies (``pmverify.strategies``) draw random FX graphs with planted pattern instances; a pass
is applied to them and oracles check that semantics are preserved, no rewrite crosses a mutation
barrier, auto_functionalized tuples are routed right, the graph stays well formed, planted
instances are rewritten exactly when they must be, and ``uuid()`` tells configs apart.
``record_patterns`` captures a pass's ``register_replacement`` calls (``record_inductor``: those of
Inductor's own passes); ``check_rewrite`` checks one in isolation. ``verify`` returns a ``VerifySummary`` of what it checked, and raises a
``VacuousSearch`` (``RewriteNeverMatched`` and its ``RewriteUnsatisfiable``,
``RewriteNotComparable``, ``AllCasesVoid``) for a search that checked nothing.
"""

__version__ = "0.1.0"

from ._case import GraphCase, MutationSite, PlantedInstance
from ._check import CaseResult, check_case
from ._inductor_rewrites import inductor_rewrite, record_inductor
from ._job.targets import ExtraCheck, FuzzTarget
from ._record import RecordedRewrite, record_patterns
from ._rewrite import RewriteResult, check_rewrite
from ._summary import (
    AllCasesVoid,
    RewriteNeverMatched,
    RewriteNotComparable,
    RewriteUnsatisfiable,
    VacuousSearch,
    VerifySummary,
)
from ._verify import PassVerificationError, verify
from .oracles import Violation

__all__ = [
    "AllCasesVoid",
    "CaseResult",
    "ExtraCheck",
    "FuzzTarget",
    "GraphCase",
    "MutationSite",
    "PassVerificationError",
    "PlantedInstance",
    "RecordedRewrite",
    "RewriteNeverMatched",
    "RewriteNotComparable",
    "RewriteResult",
    "RewriteUnsatisfiable",
    "VacuousSearch",
    "VerifySummary",
    "Violation",
    "__version__",
    "check_case",
    "check_rewrite",
    "inductor_rewrite",
    "record_inductor",
    "record_patterns",
    "verify",
]
