"""Structure oracle: the rewritten graph is a well-formed graph with the same interface.

Checked: ``Graph.lint()`` passes (topological order, no use of erased
nodes, targets exist); fake tensors re-propagate through the rewritten graph; every output keeps
its shape and dtype.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.utils._pytree as pytree

from ._violation import Violation

__all__ = ["check"]


def _output_metas(gm: torch.fx.GraphModule) -> list[Any]:
    (output,) = gm.graph.find_nodes(op="output")
    return [
        getattr(arg, "meta", {}).get("val") if isinstance(arg, torch.fx.Node) else arg
        for arg in pytree.tree_leaves(output.args[0])
    ]


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {value.dtype}"
    return repr(value)


def check(pair: Any) -> list[Violation]:
    """Return the structural violations of ``pair`` (a ``RunPair``)."""
    from .._apply import propagate_fake

    if pair.after is None:  # the pass raised: check_case reports that as a crash
        return []
    outputs = pair.after.graph.find_nodes(op="output")
    if len(outputs) != 1:
        return [Violation("structure", f"the rewritten graph has {len(outputs)} output nodes; expected 1")]
    try:
        pair.after.graph.lint()
    except Exception as exc:  # noqa: BLE001 - lint failures are findings
        return [Violation("structure", f"graph lint failed after the pass: {exc}")]
    checked, reference = copy.deepcopy(pair.after), copy.deepcopy(pair.before)
    try:
        propagate_fake(checked, pair.case.inputs[0])
    except Exception as exc:  # noqa: BLE001
        return [Violation("structure", f"fake tensors do not propagate through the rewritten graph: {exc!r}")]
    propagate_fake(reference, pair.case.inputs[0])
    before, after = _output_metas(reference), _output_metas(checked)
    if len(before) != len(after):
        return [Violation("structure", f"{len(before)} outputs before the pass, {len(after)} after")]
    violations = []
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if isinstance(b, torch.Tensor) and isinstance(a, torch.Tensor):
            same = b.shape == a.shape and b.dtype == a.dtype
        else:
            same = type(b) is type(a)
        if not same:
            violations.append(
                Violation("structure", f"output {i} was {_describe(b)} before the pass, {_describe(a)} after")
            )
    return violations
