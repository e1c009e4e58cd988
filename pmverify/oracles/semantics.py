"""Semantics oracle: the graph after the pass computes what the graph before it did.

Compared are every output and the final value of every tensor input (so that in-place mutation of
inputs is covered). The rule for floating-point results, elementwise:

- A float64 *reference* is computed by running the graph before the pass with every floating
  dtype in the graph (inputs, casts, factory dtypes) replaced by float64.
- ``err_before = |before - ref|`` and ``err_after = |after - ref|``. The rewrite may lose at most
  half an ulp of the output dtype against the original, plus a float32-level slack for
  reassociated reductions::

      err_after <= err_before + ulps * ulp(dtype, |ref|) + FP32_SLACK * eps32 * (|ref| + mean|ref|)

  A changed rounding order in bf16/fp16 (e.g. a weight applied after instead of before the cast)
  loses up to one ulp on many elements and is caught; a fused kernel that only reassociates an
  fp32 reduction is not.
- Where no reference can be computed (an op without float64 support), the comparison falls back to
  ``torch.testing``'s per-dtype defaults for ``|after - before|``.
- NaN/Inf: where the graph before the pass gives NaN or ±Inf, the graph after it must give the same
  value (NaN for NaN, Inf of the same sign). A finite ``before`` compared with a non-finite
  ``after`` is a violation. Where the *reference* is non-finite but ``before`` is finite the
  element is judged by the fallback rule (the reference says nothing there).
- Integer and bool results must be equal.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.utils._pytree as pytree

from ._violation import Violation

__all__ = ["check", "compare", "float64_reference", "run_graph", "ULPS", "FP32_SLACK"]

#: Allowed extra error of the rewritten graph, in ulps of the output dtype.
ULPS = 0.5
#: Slack for reassociated float32 arithmetic, in float32 epsilons of the magnitude.
FP32_SLACK = 64.0

_FALLBACK = {  # torch.testing.assert_close defaults: (rtol, atol)
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


def _clone_inputs(inputs: tuple[Any, ...]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def run_graph(gm: torch.fx.GraphModule, inputs: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
    """Run ``gm`` on clones of ``inputs``; return (flat outputs, inputs after the run)."""
    args = _clone_inputs(inputs)
    with torch.no_grad():
        out = gm(*args)
    return pytree.tree_leaves(out), args


def _to64(value: Any) -> Any:
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return torch.float64
    if isinstance(value, (list, tuple)):
        return type(value)(_to64(v) for v in value)
    if isinstance(value, dict):
        return {k: _to64(v) for k, v in value.items()}
    return value


def float64_reference(gm: torch.fx.GraphModule, inputs: tuple[Any, ...]) -> tuple[list[Any], list[Any]] | None:
    """Run ``gm`` with every floating dtype turned into float64; None when the graph does not allow
    it (an op without float64 support, a custom op that checks dtypes...)."""
    ref = copy.deepcopy(gm)
    for node in ref.graph.nodes:
        if node.op == "call_function":
            node.args = _to64(node.args)
            node.kwargs = _to64(node.kwargs)
    ref.recompile()
    args = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)
    try:
        return run_graph(ref, args)
    except Exception:  # noqa: BLE001 - the graph does not run in float64; fall back
        return None


def _ulp(dtype: torch.dtype, magnitude: torch.Tensor) -> torch.Tensor:
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(magnitude.clamp_min(info.tiny))
    return torch.ldexp(torch.full_like(magnitude, info.eps), exponent - 1)


def compare(name: str, before: Any, after: Any, reference: Any = None, *, ulps: float = ULPS) -> str | None:
    """Compare one result; return a message describing the worst element, or None when it holds."""
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        if isinstance(before, torch.Tensor) != isinstance(after, torch.Tensor):
            return f"{name}: {type(before).__name__} before the pass, {type(after).__name__} after it"
        return None if before == after else f"{name}: {before!r} before the pass, {after!r} after it"
    if before.shape != after.shape or before.dtype != after.dtype:
        return (
            f"{name}: {tuple(before.shape)} {before.dtype} before the pass, {tuple(after.shape)} {after.dtype} after it"
        )
    if not before.is_floating_point():
        if torch.equal(before, after):
            return None
        bad = (before != after).nonzero()[0].tolist()
        return f"{name}: differs at {bad}: {before[tuple(bad)].item()} before, {after[tuple(bad)].item()} after"
    b, a = before.double(), after.double()
    finite = torch.isfinite(b)
    same_nonfinite = (b == a) | (torch.isnan(b) & torch.isnan(a))
    nonfinite_bad = (~finite & ~same_nonfinite) | (finite & ~torch.isfinite(a))
    if nonfinite_bad.any():
        idx = tuple(nonfinite_bad.nonzero()[0].tolist())
        return f"{name}: at {list(idx)} {b[idx].item()} before the pass, {a[idx].item()} after it"
    diff = (a - b).abs().where(finite, 0.0)
    rtol, atol = _FALLBACK.get(before.dtype, _FALLBACK[torch.float32])
    allowed = atol + rtol * b.abs()
    rule = "torch.testing tolerance"
    usable = None
    if isinstance(reference, torch.Tensor) and reference.shape == before.shape:
        r = reference.double()
        usable = finite & torch.isfinite(r)
        magnitude = r.abs()
        scale = magnitude.where(usable, 0.0).mean() if usable.any() else magnitude.new_zeros(())
        slack = FP32_SLACK * torch.finfo(torch.float32).eps * (magnitude + scale)
        ref_allowed = (b - r).abs() + ulps * _ulp(before.dtype, magnitude) + slack
        ref_excess = (a - r).abs() - ref_allowed
        fallback_excess = diff - allowed
        excess = ref_excess.where(usable, fallback_excess).where(finite, 0.0)
        rule = f"error vs float64 reference beyond {ulps} ulp of {before.dtype} more than before"
    else:
        excess = (diff - allowed).where(finite, 0.0)
    if not (excess > 0).any():
        return None
    idx = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
    count = int((excess > 0).sum())
    detail = f"{b[idx].item()!r} before the pass, {a[idx].item()!r} after it"
    if usable is not None and bool(usable[idx]):
        detail += f", float64 reference {reference[idx].item()!r}"
    return (
        f"{name}: {count} of {before.numel()} elements off ({rule}); worst at {list(idx)}: {detail}; "
        f"max |after - before| = {diff.max().item():.3g}"
    )


def check(pair: Any, *, ulps: float = ULPS) -> list[Violation]:
    """Return the semantic violations of ``pair`` (a ``RunPair``) on every rank's inputs."""
    if pair.after is None:
        return []
    violations: list[Violation] = []
    for rank, inputs in enumerate(pair.case.inputs):
        where = f"rank {rank} " if pair.case.tp_world > 1 else ""
        before_out, before_in = run_graph(pair.before, inputs)
        try:
            after_out, after_in = run_graph(pair.after, inputs)
        except Exception as exc:  # noqa: BLE001 - a graph that no longer runs is a finding
            violations.append(Violation("semantics", f"{where}graph after the pass raised {exc!r}"))
            continue
        reference = float64_reference(pair.before, inputs)
        ref_out, ref_in = reference if reference is not None else ([None] * len(before_out), [None] * len(inputs))
        if len(before_out) != len(after_out):
            violations.append(
                Violation("semantics", f"{where}{len(before_out)} outputs before the pass, {len(after_out)} after")
            )
            continue
        results = [
            (f"output {i}", b, a, r) for i, (b, a, r) in enumerate(zip(before_out, after_out, ref_out, strict=False))
        ]
        names = [n.name for n in pair.before.graph.find_nodes(op="placeholder")]
        results += [
            (f"input {names[i] if i < len(names) else i} (final value)", b, a, r)
            for i, (b, a, r) in enumerate(zip(before_in, after_in, ref_in, strict=False))
            if isinstance(b, torch.Tensor)
        ]
        for name, b, a, r in results:
            message = compare(f"{where}{name}", b, a, r, ulps=ulps)
            if message:
                violations.append(Violation("semantics", message))
    return violations
