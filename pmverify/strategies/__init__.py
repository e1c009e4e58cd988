"""Hypothesis strategies for pass verification: tensors, random aten graphs, planted pattern
instances with near misses, mutation placements, auto_functionalized forms and tensor-parallel
inputs. Each returns a strategy; bad arguments raise ``hypothesis.errors.InvalidArgument``."""

from ._auto_functionalized import with_mutating_custom_ops
from ._graph_ops import GRAPH_DTYPES, GRAPH_OPS
from ._graphs import DEFAULT_GRAPH_DTYPES, fx_graphs
from ._like import Dim, like
from ._mutations import with_mutations
from ._near_miss import NEAR_MISS_KINDS
from ._planted import PRODUCERS, planted
from ._tensors import dtypes, shapes, tensors, tp_sizes
from ._tp import Replicate, Shard, tp_cases

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
    "Dim",
    "Replicate",
    "Shard",
    "GRAPH_OPS",
    "GRAPH_DTYPES",
    "DEFAULT_GRAPH_DTYPES",
    "NEAR_MISS_KINDS",
    "PRODUCERS",
]
