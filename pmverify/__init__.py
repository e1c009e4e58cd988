"""pmverify: property-based verification of TorchInductor pattern-matcher passes.

Strategies (``pmverify.strategies``) draw random FX graphs with planted pattern instances; a pass
is applied to them and oracles check that semantics are preserved, the graph stays well formed,
and planted instances are rewritten exactly when they must be.
"""

__version__ = "0.1.0"

from ._case import GraphCase, MutationSite, PlantedInstance
from ._check import CaseResult, check_case
from ._verify import PassVerificationError, verify
from .oracles import Violation

__all__ = [
    "CaseResult",
    "GraphCase",
    "MutationSite",
    "PassVerificationError",
    "PlantedInstance",
    "Violation",
    "__version__",
    "check_case",
    "verify",
]
