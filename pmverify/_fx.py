"""Small facts about FX nodes that the oracles and the strategies share."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.utils._pytree as pytree

__all__ = ["is_view", "flat_nodes", "output_vals", "GRADIENT_OUTPUTS"]

#: Key of a case graph's output node ``meta``: the positions (in the flattened outputs) of the
#: gradients a planted joint forward-backward instance returns. Autograd gives no stride contract
#: for a gradient (``AccumulateGrad`` re-strides one that does not fit its parameter), so the
#: structure oracle does not compare their strides; their values are compared as any output's.
GRADIENT_OUTPUTS = "pmverify_gradient_outputs"


def is_view(target: Any) -> bool:
    """Whether a node with this target returns a view of its first input: ``getitem`` (of a
    ``split``...) or any aten overload whose schema aliases its input."""
    return target is operator.getitem or (isinstance(target, torch._ops.OpOverload) and target.is_view)


def flat_nodes(value: Any) -> list[torch.fx.Node]:
    """The nodes in an FX argument (a node, or nested lists, tuples and dicts of them), in order."""
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.fx.Node)]


def output_vals(gm: torch.fx.GraphModule) -> list[Any]:
    """The ``meta["val"]`` of each output of ``gm`` (flattened; a constant output as it is)."""
    (output,) = gm.graph.find_nodes(op="output")
    return [
        getattr(arg, "meta", {}).get("val") if isinstance(arg, torch.fx.Node) else arg
        for arg in pytree.tree_leaves(output.args[0])
    ]
