"""Hypothesis strategies for pass verification: tensors, random aten graphs, planted pattern
instances with near misses, mutation placements, auto_functionalized forms and tensor-parallel
inputs. Each returns a strategy; bad arguments raise ``hypothesis.errors.InvalidArgument``."""

from ..lazy import lazy_attributes
from ._auto_functionalized import with_mutating_custom_ops
from ._graph_ops import GRAPH_DTYPES, GRAPH_OPS
from ._graphs import DEFAULT_GRAPH_DTYPES as DEFAULT_GRAPH_DTYPES  # the old name of GRAPH_DTYPES_WITHOUT_FLOAT64
from ._graphs import GRAPH_DTYPES_WITHOUT_FLOAT64, fx_graphs
from ._like import Dim, like
from ._mutations import with_mutations
from ._near_miss import NEAR_MISS_KINDS
from ._planted import PRODUCERS, planted
from ._public import Shown
from ._tensors import dtypes, shapes, tensors, tp_sizes
from ._tp import Replicate, Shard, tp_cases

#: Loaded on first use (PEP 562): ``expr_cases`` imports Inductor's pattern matcher (seconds, and
#: triton). Not strategies, so not in ``__all__``: what pmverify's own checks of rewrites ask of
#: the strategies (``undrawable`` / ``ExprUnsupported``: which patterns ``expr_cases`` cannot draw;
#: ``recorded_example`` / ``describe_sizes``: how ``planted`` reads a recorded rewrite's example
#: inputs), named here so that the engine imports no private strategies module.
__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "expr_cases": "._expr_instances",
        "undrawable": "._expr_targets",
        "ExprUnsupported": "._expr_targets",
        "recorded_example": "._recorded_inputs",
        "describe_sizes": "._recorded_inputs",
    },
)

__all__ = [
    "dtypes",
    "shapes",
    "tensors",
    "tp_sizes",
    "fx_graphs",
    "like",
    "planted",
    "with_mutations",
    "with_mutating_custom_ops",
    "tp_cases",
    "expr_cases",  # noqa: F822 - loaded on first use
    "Shown",
    "Dim",
    "Replicate",
    "Shard",
    "GRAPH_OPS",
    "GRAPH_DTYPES",
    "GRAPH_DTYPES_WITHOUT_FLOAT64",
    "NEAR_MISS_KINDS",
    "PRODUCERS",
]
