"""Structure oracle: the rewritten graph is a well-formed graph with the same interface.

Checked, on the graph the pass left:

- it has one output node and ``Graph.lint()`` passes (topological order, no use of erased nodes,
  targets exist);
- the pass left no node before the definition of one of its inputs (``RunPair.unsorted``). By
  default nodes an Inductor pattern entry inserted are left out, since the pattern matcher itself
  puts a multi-output replacement before its first output and relies on the sort that follows
  (Inductor's ``stable_topological_sort`` right after ``post_grad_custom_post_pass``); with
  ``strict_order=True`` (``check_case``, ``verify``, ``pmverify fuzz --strict-order``) they are
  findings too. ``apply_direct`` sorts the graph as Inductor does, so lint passes anyway; but a
  pass that runs before others (vLLM's pass manager, ``post_grad_custom_pre_pass``) hands them a
  graph that does not lint. A use of a node the pass erased is reported as such;
- fake tensors re-propagate through it (on a copy, in one fresh ``FakeTensorMode``; a graph holding an op with no
  fake kernel, such as mkldnn's weight reorder that freezing folds on real weights, is not judged here);
- every ``meta["val"]`` the pass left (tensors, and tensors in tuples/lists) has the shape, dtype
  and device re-propagation gives: stale meta misleads later passes, which read shapes and dtypes from it;
- every output keeps its device (a replacement that makes a tensor on the default device, CPU,
  where the case runs on CUDA: kind ``device``), its shape and dtype and, for tensors with static strides, its strides (dims of
  size 1 and empty tensors aside: their strides mean nothing), both from re-propagation. The
  gradients a joint forward-backward graph returns (``GRADIENT_OUTPUTS``) keep shape and dtype
  only: autograd gives no stride contract for a gradient (``AccumulateGrad`` re-strides one that
  does not fit its parameter: ``torch/csrc/autograd/functions/accumulate_grad.h``);
- for a case with symbolic sizes, the rewrite specialises nothing (:mod:`._specialisation`): no
  guard the pass added, or its rewritten graph records, excludes a size of a symbol's range, and
  every output keeps its symbolic sizes.
"""

from __future__ import annotations

from typing import Any

import torch

from .._compat import DynamicOutputShapeException, UnsupportedOperatorException, pytree
from .._execution import Repropagation, RunPair
from .._fx import GRADIENT_OUTPUTS
from . import _specialisation
from ._violation import DEVICE, DTYPE_SHAPE, META, ORDER, SPECIALISATION, STRIDES, Violation

__all__ = [
    "DEVICE",
    "DTYPE_SHAPE",
    "META",
    "ORDER",
    "SPECIALISATION",
    "STRIDES",
    "applies",
    "check",
    "MAX_STALE_REPORTED",
]

#: Stale-meta nodes reported one by one; more are summed up in one violation.
MAX_STALE_REPORTED = 8


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {value.dtype}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_describe(v) for v in value)
        return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else f"({inner})"
    return repr(value)


def _unsorted(pair: RunPair) -> tuple[list[Violation], list[Violation]]:
    """Violations for the ``(node, input)`` pairs the pass left out of order: (inputs defined
    later, inputs the pass erased)."""
    names = {node.name for node in pair.after.graph.nodes}
    entries = {name: record.entry for record in pair.match_records for name in record.replacement}
    later, erased = [], []
    for node, arg in pair.unsorted:
        if arg not in names:
            erased.append(
                Violation("structure", f"the pass left `{node}` using `{arg}`, which it erased", (node, arg), ORDER)
            )
        elif node in entries:  # only with strict_order (see pass_made_unsorted)
            message = (
                f"an Inductor pattern entry ({entries[node]}) inserted `{node}` before its input `{arg}` is defined; "
                "Inductor's stable_topological_sort after post_grad_custom_post_pass hides it, but strict_order=True "
                "judges the graph as the pass left it: a pass manager that runs the next pass before any sort "
                "(vLLM's) hands it a graph that does not lint"
            )
            later.append(Violation("structure", message, (node, arg), ORDER))
        else:
            message = (
                f"the pass inserted `{node}` before its input `{arg}` is defined; Inductor's stable_topological_sort "
                "hides it after post_grad_custom_post_pass but a pass running before others (vLLM's pass manager, "
                "post_grad_custom_pre_pass) hands them a graph that does not lint"
            )
            later.append(Violation("structure", message, (node, arg), ORDER))
    return later, erased


def _same_layout(left: Any, true: Any) -> bool:
    """Whether the tensors of ``left`` (a meta value the pass left) have the shapes and dtypes of
    those of ``true`` (re-propagated); non-tensor leaves are not judged."""
    left_leaves, true_leaves = pytree.tree_leaves(left), pytree.tree_leaves(true)
    if not any(isinstance(v, torch.Tensor) for v in left_leaves):
        return True
    if len(left_leaves) != len(true_leaves):
        return False
    for a, b in zip(left_leaves, true_leaves, strict=True):
        if isinstance(a, torch.Tensor):
            if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or a.device != b.device:
                return False
            try:
                if tuple(a.shape) != tuple(b.shape):
                    return False
            except Exception:  # noqa: BLE001 - symbolic sizes that cannot be compared: not judged
                continue
    return True


def _stale_meta(left: dict[str, Any], after: torch.fx.GraphModule, checked: Repropagation) -> list[Violation]:
    stale = []
    for node in after.graph.nodes:
        value, true = left.get(node.name), checked.vals.get(node.name)
        if value is None or true is None or node.op == "output":  # outputs: judged by _outputs
            continue
        if not _same_layout(value, true):
            stale.append((node.name, value, true))
    violations = [
        Violation(
            "structure",
            f"`{name}` carries meta['val'] {_describe(value)} left by the pass, but re-propagation gives "
            f"{_describe(true)}; stale meta misleads later passes",
            (name,),
            META,
        )
        for name, value, true in stale[:MAX_STALE_REPORTED]
    ]
    if len(stale) > MAX_STALE_REPORTED:
        rest = tuple(name for name, _, _ in stale[MAX_STALE_REPORTED:])
        violations.append(Violation("structure", f"{len(rest)} more nodes carry stale meta['val']", rest, META))
    return violations


def _static_strides(value: torch.Tensor) -> tuple[int, ...] | None:
    """The strides of the dims of size > 1; None when a size or stride is symbolic."""
    try:
        sizes, strides = tuple(value.shape), tuple(value.stride())
    except Exception:  # noqa: BLE001 - sparse or otherwise strideless
        return None
    if not all(isinstance(v, int) for v in sizes + strides):
        return None
    return tuple(stride for size, stride in zip(sizes, strides, strict=True) if size > 1)


def _outputs(before: list[Any], checked: Repropagation, gradients: tuple[int, ...] = ()) -> list[Violation]:
    after = checked.outputs
    if len(before) != len(after):
        return [Violation("structure", f"{len(before)} outputs before the pass, {len(after)} after", kind=DTYPE_SHAPE)]
    violations = []
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if isinstance(b, torch.Tensor) and isinstance(a, torch.Tensor) and b.device != a.device:
            violations.append(
                Violation(
                    "structure",
                    f"output {i} ({_describe(b)}) was on {b.device} before the pass, on {a.device} after",
                    kind=DEVICE,
                )
            )
            continue
        if isinstance(b, torch.Tensor) and isinstance(a, torch.Tensor):
            same = b.shape == a.shape and b.dtype == a.dtype
        else:
            same = type(b) is type(a)
        if not same:
            violations.append(
                Violation(
                    "structure",
                    f"output {i} was {_describe(b)} before the pass, {_describe(a)} after",
                    kind=DTYPE_SHAPE,
                )
            )
        elif isinstance(b, torch.Tensor) and b.numel() > 0 and i not in gradients:
            sb, sa = _static_strides(b), _static_strides(a)
            if sb is not None and sa is not None and sb != sa:
                violations.append(
                    Violation(
                        "structure",
                        f"output {i} ({_describe(b)}) had strides {tuple(b.stride())} before the pass, "
                        f"{tuple(a.stride())} after",
                        kind=STRIDES,
                    )
                )
    return violations


#: What fake propagation raises for an op that has no fake (meta) kernel or a data-dependent output
#: shape: the rewritten graph cannot be checked on fake tensors, which is not the pass's fault.
_NO_FAKE_KERNEL = (UnsupportedOperatorException, DynamicOutputShapeException)


def applies(pair: RunPair) -> bool:
    """Whether this oracle has something to judge on ``pair`` (whose pass ran): always, every
    rewritten graph has a structure."""
    return True


def check(pair: RunPair) -> list[Violation]:
    """Return the structural violations of ``pair`` (a ``RunPair``): output node count, lint,
    nodes left before their inputs, re-propagation, stale meta, output shapes/dtypes/strides (see the
    module docstring). Returns [] when the pass raised; never raises on a finding."""
    if pair.after is None:  # the pass raised: check_case reports that as a crash
        return []
    outputs = pair.after.graph.find_nodes(op="output")
    if len(outputs) != 1:
        return [Violation("structure", f"the rewritten graph has {len(outputs)} output nodes; expected 1", kind=ORDER)]
    later, erased = _unsorted(pair)
    try:
        pair.after.graph.lint()
    except Exception as exc:  # noqa: BLE001 - lint failures are findings (a cycle, an erased input...)
        return [Violation("structure", f"graph lint failed after the pass: {exc}", kind=ORDER), *erased]
    unsorted = later + erased
    left = {node.name: node.meta.get("val") for node in pair.after.graph.nodes}
    try:
        checked = pair.repropagated()
    except _NO_FAKE_KERNEL:
        # an op the pass put in has no fake kernel (mkldnn's weight reorder, which freezing folds on
        # real weights): nothing to say of the metadata; the real runs are compared by semantics
        return unsorted
    except Exception as exc:  # noqa: BLE001
        return [
            *unsorted,
            Violation("structure", f"fake tensors do not propagate through the rewritten graph: {exc!r}", kind=ORDER),
        ]
    (output,) = pair.before.graph.find_nodes(op="output")
    gradients = output.meta.get(GRADIENT_OUTPUTS, ())
    return (
        unsorted
        + _stale_meta(left, pair.after, checked)
        + _outputs(pair.before_output_vals(), checked, gradients)
        + _specialisation.violations(pair)
    )
