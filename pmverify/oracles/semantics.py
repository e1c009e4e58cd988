"""Semantics oracle: the graph after the pass computes what the graph before it did.

Compared are every output and the final value of every tensor input (so that in-place mutation of
inputs is covered). The rule for floating-point results, elementwise:

- A float64 *reference* is computed by running the graph before the pass with every floating
  dtype in the graph (inputs, casts, factory dtypes) replaced by float64.
- ``err_before = |before - ref|`` and ``err_after = |after - ref|``. The rewrite may lose at most
  half an ulp of the output dtype against the original, plus a float32-level slack for
  reassociated reductions: the rule of torch._dynamo's ``same()``, error after <= k · error before
  + a small atol, with k = :data:`K` and the atol in ulps of the output dtype::

      err_after <= K * err_before + ulps * ulp(dtype, |ref|) + FP32_SLACK * eps32 * (|ref| + mean|ref|)

  A changed rounding order in bf16/fp16 (e.g. a weight applied after instead of before the cast)
  loses up to one ulp on many elements and is caught; a fused kernel that only reassociates an
  fp32 reduction is not. Such a kernel still moves the rare value that lies within a float32 ulp of
  a bf16/fp16 rounding midpoint to the neighbouring value; when one element, or at most 1 %
  (:data:`TIES`) of a large result's elements, break the rule, each by one ulp at most from its
  value before the pass, they are taken for rounding ties and the result holds.
- An element that breaks the rule is measured again against a second float64 reference, run *from
  the rewrite's inputs* (:mod:`._region_reference`: the graph before the pass in its own dtypes up
  to the nodes the pass rewrote, in float64 from there on, with one float32 eps of the largest
  operand that region reads as slack more), and holds when it holds there. Rounding upstream of the
  rewrite (a bf16 in-place op just before it; an fp32 product that a fused multiply-add
  recomputes exactly, so that ``m - x*x`` comes out as m's rounding error instead of 0) otherwise
  makes a replacement more accurate on the values it reads look worse than its pattern. Computed
  only when an element is flagged, and not for tensor-parallel or compiled cases or when an
  in-place op comes at or after the rewrite.
- Where no reference can be computed (an op without float64 support), the comparison falls back to
  ``torch.testing``'s per-dtype defaults for ``|after - before|``.
- NaN/Inf policy: a case whose reference (the float64 run; the graph before the pass where no
  float64 run is possible) is non-finite anywhere in an output or a final input value is *void*:
  it says nothing about the rewrite (a NaN hides any error that feeds it) and is neither a pass
  nor a violation; :func:`void_reason` says why, and ``check_case`` records it in
  ``CaseResult.void``. In a case that is not void, a finite ``before`` with a non-finite
  ``after`` is a violation.
- Uninitialised memory: every graph runs under ``torch.use_deterministic_algorithms(True,
  warn_only=True)`` with ``torch.utils.deterministic.fill_uninitialized_memory``, so ``empty`` /
  ``empty_like`` buffers hold NaN (floats) or the largest integer, and a rewrite that reads a
  buffer it never wrote shows on every run instead of by chance.
- Integer and bool results must be equal.
- Tensor parallelism: a case with ``tp_world > 1`` runs on a real world of that many ranks
  (:func:`pmverify.distributed.run_spmd`, threaded backend: collectives really reduce), every
  rank running its own rewritten graph on its own inputs; each rank's results are compared with
  that rank's results before the pass and its float64 reference (computed with float64
  collectives).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from ._violation import Violation

__all__ = [
    "check",
    "compare",
    "float64_reference",
    "float64_module",
    "run_graph",
    "rank_results",
    "clone_inputs",
    "named_results",
    "void_reason",
    "deterministic_fill",
    "K",
    "ULPS",
    "FP32_SLACK",
    "TIES",
]

#: Factor on the error of the graph before the pass (torch._dynamo's ``same()`` uses 2–3 with a
#: looser atol; 1 with half an ulp is tight enough to see a changed rounding order).
K = 1.0
#: Allowed extra error of the rewritten graph, in ulps of the output dtype.
ULPS = 0.5
#: Slack for reassociated float32 arithmetic, in float32 epsilons of the magnitude.
FP32_SLACK = 64.0
#: Largest fraction of a result's elements that may be isolated one-ulp rounding ties (see
#: :func:`compare`): 1 in 100, and one element in any result.
TIES = 0.01

_FALLBACK = {  # torch.testing.assert_close defaults: (rtol, atol)
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    """``inputs`` with every tensor cloned (a graph run may write its inputs), each in its own
    layout: a padded or expanded tensor, which ``clone`` makes contiguous, keeps its strides (its
    storage is cloned), as the pass saw them."""
    return [_clone_strided(x) if isinstance(x, torch.Tensor) else x for x in inputs]


def _clone_strided(x: torch.Tensor) -> torch.Tensor:
    clone = x.clone()
    if clone.stride() == x.stride() or x.layout != torch.strided:
        return clone
    copy = torch.empty(0, dtype=x.dtype, device=x.device)
    copy.set_(x.untyped_storage().clone(), x.storage_offset(), x.shape, x.stride())
    return copy.requires_grad_(x.requires_grad)


@contextlib.contextmanager
def deterministic_fill():
    """Run the block with deterministic algorithms on (warnings only) and uninitialised memory
    filled (NaN for floats, the largest value for integers); restore the previous settings."""
    import torch.utils.deterministic

    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def run_graph(gm: torch.fx.GraphModule, inputs: tuple[Any, ...], *, fill: bool = True) -> tuple[list[Any], list[Any]]:
    """Run ``gm`` on clones of ``inputs`` (under :func:`deterministic_fill` unless ``fill`` is
    False: the caller has set it, as for the threads of a tensor-parallel world, which share those
    global settings); return (flat outputs, inputs after the run)."""
    args = clone_inputs(inputs)
    with torch.no_grad(), deterministic_fill() if fill else contextlib.nullcontext():
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


def float64_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` with every floating dtype in its nodes' arguments turned into float64."""
    ref = copy.deepcopy(gm)
    for node in ref.graph.nodes:
        if node.op == "call_function":
            node.args = _to64(node.args)
            node.kwargs = _to64(node.kwargs)
    ref.recompile()
    return ref


def _run_float64(ref: torch.fx.GraphModule, inputs: tuple[Any, ...], fill: bool = True) -> Any:
    args = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)
    try:
        return run_graph(ref, args, fill=fill)
    except Exception:  # noqa: BLE001 - the graph does not run in float64; fall back
        return None


def float64_reference(gm: torch.fx.GraphModule, inputs: tuple[Any, ...]) -> tuple[list[Any], list[Any]] | None:
    """Run ``gm`` with every floating dtype turned into float64; None when the graph does not allow
    it (an op without float64 support, a custom op that checks dtypes...)."""
    return _run_float64(float64_module(gm), inputs)


def _ulp(dtype: torch.dtype, magnitude: torch.Tensor) -> torch.Tensor:
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(magnitude.clamp_min(info.tiny))
    return torch.ldexp(torch.full_like(magnitude, info.eps), exponent - 1)


def _isolated_ties(
    flagged: torch.Tensor, diff: torch.Tensor, before: torch.Tensor, dtype: torch.dtype, usable: Any
) -> bool:
    """Whether every flagged element is an isolated rounding tie: judged against the float64
    reference, at most :data:`TIES` of the elements, each at most one ulp of ``dtype`` from its
    value before the pass. A reassociated float32 sum moves a value that lies within a float32 ulp
    of a low-precision rounding midpoint to the neighbouring bf16/fp16 value; the whole-graph
    reference, which also skips the rounding of earlier low-precision ops, may then find the
    neighbour worse by up to one ulp. A changed rounding order moves many elements; one element
    (or 1 % of a large result) one ulp off is no evidence of it."""
    if usable is None or not bool(usable[flagged].all()):
        return False
    allowed = max(1, int(TIES * flagged.numel()))
    return int(flagged.sum()) <= allowed and bool((diff[flagged] <= _ulp(dtype, before.abs()[flagged])).all())


def _excess(
    b: torch.Tensor,
    a: torch.Tensor,
    reference: Any,
    finite: torch.Tensor,
    dtype: torch.dtype,
    ulps: float,
    k: float,
    operand_scale: float = 0.0,
):
    """(by how much each element of ``a`` breaks the rule against ``reference``, where the
    reference is usable), or None when ``reference`` is no tensor of ``b``'s shape. The float32
    slack is relative to the result's magnitude plus its mean magnitude, and one float32 eps of
    ``operand_scale`` more (the rounding error a cancellation carries from its operands)."""
    if not isinstance(reference, torch.Tensor) or reference.shape != b.shape:
        return None
    r = reference.double()
    usable = finite & torch.isfinite(r)
    magnitude = r.abs()
    scale = magnitude.where(usable, 0.0).mean() if usable.any() else magnitude.new_zeros(())
    eps32 = torch.finfo(torch.float32).eps
    slack = FP32_SLACK * eps32 * (magnitude + scale) + eps32 * operand_scale
    allowed = k * (b - r).abs() + ulps * _ulp(dtype, magnitude) + slack
    return (a - r).abs() - allowed, usable


def compare(
    name: str,
    before: Any,
    after: Any,
    reference: Any = None,
    *,
    ulps: float = ULPS,
    k: float = K,
    region_reference: Any = None,
    operand_scale: float = 0.0,
) -> str | None:
    """Compare one result; return a message describing the worst element, or None when it holds.

    ``reference`` is the whole graph's float64 run; ``region_reference`` (optional) the run from
    the rewrite's inputs (:mod:`._region_reference`), whose slack has one float32 eps of
    ``operand_scale`` more (the magnitude of what the rewrite reads: a result that cancels to 0
    carries the rounding error of its operands): an element holds when it holds against either."""
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
    measured = _excess(b, a, reference, finite, before.dtype, ulps, k)
    if measured is not None:
        ref_excess, usable = measured
        fallback_excess = diff - allowed
        excess = ref_excess.where(usable, fallback_excess).where(finite, 0.0)
        rule = f"error vs float64 reference beyond {ulps} ulp of {before.dtype} more than before"
        local = _excess(b, a, region_reference, finite, before.dtype, ulps, k, operand_scale)
        if local is not None:  # an element either reference accepts holds
            local_excess, local_usable = local
            excess = torch.minimum(excess, local_excess.where(local_usable & finite, excess))
    else:
        excess = (diff - allowed).where(finite, 0.0)
    flagged = excess > 0
    if not flagged.any() or _isolated_ties(flagged, diff, b, before.dtype, usable):
        return None
    idx = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
    count = int(flagged.sum())
    detail = f"{b[idx].item()!r} before the pass, {a[idx].item()!r} after it"
    if usable is not None and bool(usable[idx]):
        detail += f", float64 reference {reference[idx].item()!r}"
    return (
        f"{name}: {count} of {before.numel()} elements off ({rule}); worst at {list(idx)}: {detail}; "
        f"max |after - before| = {diff.max().item():.3g}"
    )


def rank_results(pair: Any, rank: int) -> dict[str, Any]:
    """What rank ``rank`` computes, cached in ``pair.cache``: ``before`` and ``after`` (each
    ``(flat outputs, final inputs)``; ``after`` is the exception when the rewritten graph raised)
    and ``reference`` (the float64 run of the case's own graph, ``pair.case.gm``, or None). In
    compiled mode, ``pair.compiled.before[rank]`` and ``.after[rank]`` (what the compiled functions
    returned, which line up with the case's graph, not with Inductor's post-grad graphs) replace the
    graph runs."""
    key = ("semantics", rank)
    if key in pair.cache:
        return pair.cache[key]
    if pair.compiled is None and pair.case.tp_world > 1:
        _world_results(pair)
        return pair.cache[key]
    inputs = pair.case.inputs[rank]
    if pair.compiled is not None:
        before, after = pair.compiled.before[rank], pair.compiled.after[rank]
    else:
        before = run_graph(pair.before, inputs)
        try:
            after = run_graph(pair.after, inputs)
        except Exception as exc:  # noqa: BLE001 - a graph that no longer runs is a finding
            after = exc
    reference = float64_reference(pair.case.gm, inputs)
    pair.cache[key] = {"before": before, "after": after, "reference": reference}
    return pair.cache[key]


#: Seconds a tensor-parallel run may take before its ranks are taken to wait on each other forever.
WORLD_TIMEOUT_S = 15.0


def _world_results(pair: Any) -> None:
    """Fill ``pair.cache`` with every rank's results, run in one threaded world per graph (before,
    float64 reference, after): each rank runs its own rewritten graph (``rank_pair``). A rewritten
    graph that raises on a rank, or whose ranks stop waiting for each other's collectives, makes
    ``after`` the :class:`~pmverify.distributed.SPMDError` on every rank."""
    from .._apply import rank_pair
    from ..distributed import SPMDError, run_spmd

    case, world = pair.case, pair.case.tp_world
    reference_gm = float64_module(case.gm)
    run_filled = functools.partial(run_graph, fill=False)  # deterministic_fill is set once, around the runs
    with deterministic_fill():
        try:
            before = run_spmd(
                run_filled, world, [(pair.before, inputs) for inputs in case.inputs], timeout_s=WORLD_TIMEOUT_S
            )
        except SPMDError as exc:
            first = str(exc).splitlines()[0]
            raise RuntimeError(
                f"the case's own graph, before the pass, fails on the tensor-parallel world: {first}"
            ) from None
        try:
            reference = run_spmd(
                functools.partial(_run_float64, fill=False),
                world,
                [(reference_gm, inputs) for inputs in case.inputs],
                timeout_s=WORLD_TIMEOUT_S,
            )
        except SPMDError:
            reference = [None] * world
        try:
            after = run_spmd(
                run_filled,
                world,
                [(rank_pair(pair, rank).after, inputs) for rank, inputs in enumerate(case.inputs)],
                timeout_s=WORLD_TIMEOUT_S,
            )
        except SPMDError as exc:
            after = [exc] * world
    for rank in range(world):
        pair.cache[("semantics", rank)] = {"before": before[rank], "after": after[rank], "reference": reference[rank]}


def named_results(gm: torch.fx.GraphModule, results: tuple[list[Any], list[Any]]) -> list[tuple[str, Any]]:
    """``(name, value)`` of each output and each tensor input's final value of a run of ``gm``."""
    outputs, final_inputs = results
    names = [n.name for n in gm.graph.find_nodes(op="placeholder")]
    return [(f"output {i}", value) for i, value in enumerate(outputs)] + [
        (f"input {names[i] if i < len(names) else i} (final value)", value)
        for i, value in enumerate(final_inputs)
        if isinstance(value, torch.Tensor)
    ]


def void_reason(pair: Any) -> str | None:
    """Why the case says nothing about semantics (a non-finite reference), or None; see the
    module docstring. None when the pass raised."""
    if pair.after is None and pair.compiled is None:
        return None
    for rank in range(pair.case.tp_world):
        results = rank_results(pair, rank)
        reference, kind = results["reference"], "float64 reference"
        if reference is None:
            reference, kind = results["before"], "graph before the pass (no float64 run)"
        for name, value in named_results(pair.case.gm, reference):
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not torch.isfinite(value).all():
                bad = tuple((~torch.isfinite(value)).nonzero()[0].tolist())
                where = f"rank {rank} " if pair.case.tp_world > 1 else ""
                return f"{where}{name}: the {kind} is {value[bad].item()} at {list(bad)}"
    return None


def check(pair: Any, *, ulps: float = ULPS, k: float = K) -> list[Violation]:
    """Return the semantic violations of ``pair`` (a ``RunPair``) on every rank's inputs; none for
    a void case (:func:`void_reason`)."""
    if pair.after is None and pair.compiled is None:
        return []
    if void_reason(pair) is not None:
        return []
    violations: list[Violation] = []
    raised: list[BaseException] = []
    for rank in range(pair.case.tp_world):
        where = f"rank {rank} " if pair.case.tp_world > 1 else ""
        results = rank_results(pair, rank)
        if isinstance(results["after"], BaseException):
            error = results["after"]
            if not any(error is seen for seen in raised):  # a world's failure is reported once
                raised.append(error)
                if pair.case.tp_world > 1:  # an SPMDError: its first line names the rank and the exception
                    message = f"graph after the pass failed on the tensor-parallel world: {str(error).splitlines()[0]}"
                else:
                    message = f"graph after the pass raised {error!r}"
                violations.append(Violation("semantics", message))
            continue
        before, after = named_results(pair.case.gm, results["before"]), named_results(pair.case.gm, results["after"])
        reference = named_results(pair.case.gm, results["reference"]) if results["reference"] is not None else None
        if len(results["before"][0]) != len(results["after"][0]):
            violations.append(
                Violation(
                    "semantics",
                    f"{where}{len(results['before'][0])} outputs before the pass, {len(results['after'][0])} after",
                )
            )
            continue
        region = None
        for i, ((name, b), (_, a)) in enumerate(zip(before, after, strict=False)):
            r = reference[i][1] if reference is not None and i < len(reference) else None
            message = compare(f"{where}{name}", b, a, r, ulps=ulps, k=k)
            if message and r is not None:  # measured from the rewrite's inputs too, before reporting
                region = _region_results(pair, rank) if region is None else region
                local = named_results(pair.case.gm, region[0]) if region else None
                if local is not None and i < len(local):
                    message = compare(
                        f"{where}{name}", b, a, r, ulps=ulps, k=k, region_reference=local[i][1], operand_scale=region[1]
                    )
            if message:
                violations.append(Violation("semantics", message))
    return violations


def _region_results(pair: Any, rank: int) -> Any:
    """The float64 run from the rewrite's inputs (:mod:`._region_reference`) on rank ``rank``,
    cached in ``pair.cache``; False when there is none (tensor-parallel and compiled cases among
    them)."""
    key = ("semantics", "region", rank)
    if key not in pair.cache:
        result = None
        if pair.compiled is None and pair.case.tp_world == 1 and pair.after is not None:
            from ._region_reference import region_reference, rewritten_region

            region = rewritten_region(pair.before, pair.after)
            with deterministic_fill():
                result = region_reference(pair.before, float64_module(pair.before), region, pair.case.inputs[rank])
        pair.cache[key] = result if result is not None else False
    return pair.cache[key]
