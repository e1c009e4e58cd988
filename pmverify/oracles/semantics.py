"""Semantics oracle: the graph after the pass computes what the graph before it did.

Compared are every output and the final value of every tensor input (so that in-place mutation of
inputs is covered). The rule for a floating-point result of n elements:

- A float64 *reference* is computed by running the graph before the pass with every floating
  dtype in the graph (inputs, casts, factory dtypes) replaced by float64.
- ``err_before = |before - ref|`` and ``err_after = |after - ref|`` per element, measured in
  *units*: ulps of the output dtype at the element's magnitude scale ``m = |ref| + mean|ref|``
  (so that a result cancelling to near 0 is judged against the magnitude it cancelled from), less
  a float32-level slack ``s = FP32_SLACK * eps32 * m`` on ``err_after`` for reassociated float32
  arithmetic. Two bounds, both must hold:

  1. **In aggregate** (the rule of torch._dynamo's ``same()``: RMS error against a float64
     reference at most a factor times the original's): over the n elements, ::

         sum((err_after - s)+ ** 2) <= (K + SAMPLING / sqrt(n')) ** 2 * sum(err_before ** 2) + ULPS ** 2

     where n' is n, or three times the number of elements that carry the squared errors
     (:func:`_effective_count`) where that is fewer: a few outliers are a sample of a few;

     with K = 1, SAMPLING = 3 and ULPS = 1/2 (in units). ``same()`` allows 2-3 times the error of a
     whole model run; one rewrite that doubles a rounding is about 1.4 times worse, so the factor
     here is 1 plus an allowance for sampling noise, ``SAMPLING / sqrt(n)``, and half an ulp on
     one element. A fused kernel that rounds once where the pattern rounded twice is *more*
     accurate in aggregate and holds even though it differs by an ulp on many elements; a changed
     rounding order that adds a rounding, or a dropped upcast, is less accurate and is caught once
     the result is large enough for the difference to stand out of the noise (bf16 products
     rounded twice instead of once: caught in 35 % of results of 64 elements, every one of 256).
  2. **Per element** (far off anywhere): ``err_after <= K * err_before + FAR_ULPS * ulp + s`` with
     FAR_ULPS = 2 units: a fully masked row, a wrong mask or a dropped scale is off by about the
     magnitude itself (2**8 units in bf16, 2**11 in fp16) on the elements it touches. Measured:
     Inductor's fp16/bf16 attention fusions (``_sfdp`` patterns replaced by
     ``scaled_dot_product_attention`` on CPU) stay within 0.6 units of their pattern's error on
     every element, and up to 60 ulps at ``|ref|`` (elements that cancel to near 0).

- A result that breaks the rule is measured again against a second float64 reference, run *from
  the rewrite's inputs* (:mod:`._region_reference`: the graph before the pass in its own dtypes up
  to the nodes the pass rewrote, in float64 from there on), and holds when it holds there. Rounding upstream of the
  rewrite (a bf16 in-place op just before it; an fp32 product that a fused multiply-add
  recomputes exactly, so that ``m - x*x`` comes out as m's rounding error instead of 0) otherwise
  makes a replacement more accurate on the values it reads look worse than its pattern. Computed
  only when a result is flagged, and not for tensor-parallel or compiled cases or when an
  in-place op comes at or after the rewrite.
- A result still flagged is judged a last time with its *noise floor* (:mod:`._noise`: float64
  runs of the graph before the pass with every ATen op's operands and results perturbed at float32
  unit roundoff, and at their own dtypes' for ill-conditioned elements) as slack: NOISE_FACTOR
  times the element's noise plus the result's median noise. A result that cancels to near 0 is
  determined by float32 arithmetic only to that noise.
- Where no reference can be computed (an op without float64 support), the comparison falls back to
  ``torch.testing``'s per-dtype defaults for ``|after - before|``.
- NaN/Inf policy: a case whose reference (the float64 run; the graph before the pass where no
  float64 run is possible) is non-finite anywhere in an output or in the final value of an input
  the graph changed is *void* (an input left as it was, a 0/-inf mask say, carries no error):
  it says nothing about the rewrite (a NaN hides any error that feeds it) and is neither a pass
  nor a violation; :func:`void_reason` says why, and ``check_case`` records it in
  ``CaseResult.void_reason``. In a case that is not void, a finite ``before`` with a non-finite
  ``after`` is a violation; a non-finite ``before`` (the original overflowed, a fp16 ``q @ k``
  say) with a finite ``after`` holds where ``after`` is within the per-element bound of the
  reference, counting no error before (torch._dynamo's ``same()`` passes that case too: "res is
  BETTER than ref").
- Uninitialised memory: every graph runs under ``torch.use_deterministic_algorithms(True,
  warn_only=True)`` with ``torch.utils.deterministic.fill_uninitialized_memory``, so ``empty`` /
  ``empty_like`` buffers hold NaN (floats) or the largest integer, and a rewrite that reads a
  buffer it never wrote shows on every run instead of by chance.
- Random numbers (:mod:`._rng`): a graph that draws them (randperm, dropout, rand_like...) runs
  from the same generator state before the pass, after it and in its float64 reference, which
  draws what the graph before the pass drew. A replacement that draws the same numbers in the same
  order is compared as usual; one that draws them otherwise makes the case *not comparable*, a
  void case whose reason starts ``"rng: "`` (so are tensor-parallel and compiled cases that draw),
  never a violation.
- Integer and bool results must be equal.
- Tensor parallelism: a case with ``tp_world > 1`` runs on a real world of that many ranks
  (:func:`pmverify.distributed.run_spmd`, threaded backend: collectives really reduce), every
  rank running its own rewritten graph on its own inputs; each rank's results are compared with
  that rank's results before the pass and its float64 reference (computed with float64
  collectives).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from .._execution import (
    RunPair,
    clone_inputs,
    deterministic_fill,
    float64_module,
    float64_reference,
    run_graph,
)
from . import _rng
from ._violation import Violation

__all__ = [
    "check",
    "compare",
    "float64_reference",
    "float64_module",
    "run_graph",
    "clone_inputs",
    "named_results",
    "void_reason",
    "deterministic_fill",
    "K",
    "SAMPLING",
    "ULPS",
    "FAR_ULPS",
    "FP32_SLACK",
    "NOISE_FACTOR",
    "ILL_CONDITIONED",
]

#: Factor on the error of the graph before the pass, in aggregate and per element (torch._dynamo's
#: ``same()`` uses 2-3 on a whole model's output; one rewrite doubling a rounding is about 1.4).
K = 1.0
#: Sampling allowance of the aggregate factor, ``K + SAMPLING / sqrt(n)`` for a result of n
#: elements: about three standard deviations of the RMS ratio of two equally accurate results
#: whose roundings fall independently (bf16 products rounded in two orders, 3000 draws: 0.1-0.4 %
#: of them break it at n = 64 to 1024; 2.5 % with 2). n is the number of elements, or three times the
#: effective number carrying the errors where that is fewer (:func:`_effective_count`: inputs with
#: a few outliers put the errors of a whole result on a few elements).
SAMPLING = 3.0
#: Extra error the aggregate allows on top, in ulps of the output dtype: half an ulp on one element.
ULPS = 0.5
#: Per-element bound: an element whose error grows by more than this many ulps of the output dtype
#: (at the element's magnitude scale ``|ref| + mean|ref|``) is far off.
FAR_ULPS = 2.0
#: Slack for float32 arithmetic done otherwise, in float32 epsilons of the magnitude scale: about
#: torch.testing's float32 tolerance (rtol 1.3e-6 and atol 1e-5 at magnitude 1). Fused float32
#: kernels need it: CPU flash attention's vectorised exp drops softmax weights below about 1e-5
#: (an output of 0.9999912 comes out 1.0, 74 ulps). So a float32 rewrite off by less than that
#: (1e-5 relative) is not found; 4 was tried and flagged Inductor's correct attention fusions.
FP32_SLACK = 64.0
#: Slack in multiples of an element's noise floor (:mod:`._noise`: the RMS movement of its float64
#: value when every intermediate is perturbed at float32 precision), for flagged results.
NOISE_FACTOR = 8.0
#: An element whose noise at its ops' own dtypes (its noise floor plus the result's median noise)
#: exceeds this many ulps of the output dtype at its magnitude scale is ill-conditioned (a
#: cancellation): that noise is slack there too.
ILL_CONDITIONED = 16.0

_FALLBACK = {  # torch.testing.assert_close defaults: (rtol, atol)
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


def _ulp(dtype: torch.dtype, magnitude: torch.Tensor) -> torch.Tensor:
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(magnitude.clamp_min(info.tiny))
    return torch.ldexp(torch.full_like(magnitude, info.eps), exponent - 1)


@dataclasses.dataclass
class _Judgement:
    """The rule applied to one result against one reference (see the module docstring). Errors are
    in *units*: ulps of the output dtype at each element's magnitude scale ``|ref| + mean|ref|``."""

    usable: torch.Tensor  # elements with a finite reference
    far: torch.Tensor  # by how many units each usable element breaks the per-element bound (> 0: far off)
    worse: torch.Tensor  # by how many units each usable element is farther from the reference than k x before
    rms_after: float  # RMS error after the pass (less the float32 slack), in units
    rms_before: float
    factor: float  # the aggregate factor k + SAMPLING / sqrt(n)
    numel: int  # usable elements (n)
    holds_in_aggregate: bool

    @property
    def holds(self) -> bool:
        return self.holds_in_aggregate and not bool((self.far > 0).any())


def _judge(
    b: torch.Tensor,
    a: torch.Tensor,
    reference: Any,
    judged: torch.Tensor,
    dtype: torch.dtype,
    rule: tuple[float, float, float],
    noise: Any = None,
) -> _Judgement | None:
    """The rule (``rule`` = (k, ulps, far_ulps)) for ``a`` against ``reference`` at the elements
    ``judged``, or None when ``reference`` is no tensor of ``b``'s shape or no judged element of it
    is finite. Where ``b`` is not finite (the original overflowed where the reference did not) only
    the per-element bound applies, with no error before. The float32 slack is relative to the
    magnitude scale, or :data:`NOISE_FACTOR` times the noise scale where
    that is more: ``noise`` = (float32-level, own-dtype-level) noise floors of the result
    (:mod:`._noise`), each plus its median over the result, the own-dtype one only on elements where
    that sum exceeds :data:`ILL_CONDITIONED` ulps."""
    if not isinstance(reference, torch.Tensor) or reference.shape != b.shape:
        return None
    k, ulps, far_ulps = rule
    r = reference.double()
    usable = judged & torch.isfinite(r)
    if not usable.any():
        return None
    counted = usable & torch.isfinite(b)  # the elements of the aggregate
    magnitude = r.abs().where(usable, 0.0)
    scale = magnitude + magnitude.sum() / usable.sum()
    unit = _ulp(dtype, scale)
    eps32 = torch.finfo(torch.float32).eps
    slack = FP32_SLACK * eps32 * scale
    if noise is not None:
        fp32_level, own_level = noise
        for level, only_ill_conditioned in ((fp32_level, False), (own_level, True)):
            if not isinstance(level, torch.Tensor) or level.shape != b.shape:
                continue
            level = level.nan_to_num(0.0, 0.0, 0.0).where(usable, 0.0)
            # the element's noise and the result's median noise (as the magnitude scale adds
            # mean|ref|; a median, so that one ill-conditioned row does not excuse the others)
            noise_scale = level + level[usable].median()
            noise_slack = NOISE_FACTOR * noise_scale
            if only_ill_conditioned:  # a float16/bfloat16 result's own rounding is compared, not excused
                noise_slack = noise_slack.where(noise_scale > ILL_CONDITIONED * unit, 0.0)
            slack = torch.maximum(slack, noise_slack)
    err_before, err_after = (b - r).abs().where(counted, 0.0), (a - r).abs().where(usable, 0.0)
    far = ((err_after - k * err_before - slack) / unit - far_ulps).where(usable, -math.inf)
    worse = ((err_after - k * err_before - slack) / unit).where(usable, -math.inf)
    numel = max(int(counted.sum()), 1)
    squares_after = (((err_after - slack).clamp_min(0.0) / unit) ** 2).where(counted, 0.0)
    squares_before = (err_before / unit) ** 2
    sum_after, sum_before = float(squares_after.sum()), float(squares_before.sum())
    factor = k + SAMPLING / math.sqrt(min(numel, 3 * _effective_count(squares_before + squares_after)))
    holds = sum_after <= factor**2 * sum_before + ulps**2
    return _Judgement(
        usable, far, worse, math.sqrt(sum_after / numel), math.sqrt(sum_before / numel), factor, numel, holds
    )


def _effective_count(weights: torch.Tensor) -> float:
    """How many elements carry the squared errors ``weights``: ``(sum w)**2 / sum w**2`` (the
    participation ratio; the sample size behind a mean of unequal weights, Kish 1965). Roundings
    spread over a result give a third to a half of its elements; four outliers give four."""
    total, squares = float(weights.sum()), float((weights**2).sum())
    return total * total / squares if squares > 0 else float(weights.numel())


def _fallback(name: str, b: torch.Tensor, a: torch.Tensor, where: torch.Tensor, dtype: torch.dtype) -> str | None:
    """torch.testing's per-dtype tolerance on ``|after - before|`` at the elements ``where``."""
    rtol, atol = _FALLBACK.get(dtype, _FALLBACK[torch.float32])
    diff = (a - b).abs()
    excess = (diff - atol - rtol * b.abs()).where(where, -math.inf)
    if not bool((excess > 0).any()):
        return None
    idx = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
    return (
        f"{name}: {int((excess > 0).sum())} of {b.numel()} elements off (torch.testing tolerance); worst at "
        f"{list(idx)}: {b[idx].item()!r} before the pass, {a[idx].item()!r} after it; max |after - before| = "
        f"{diff.where(where, 0.0).max().item():.3g}"
    )


def compare(
    name: str,
    before: Any,
    after: Any,
    reference: Any = None,
    *,
    ulps: float = ULPS,
    k: float = K,
    far_ulps: float = FAR_ULPS,
    region_reference: Any = None,
    noise: Any = None,
) -> str | None:
    """Compare one result; return a message saying how it breaks the rule of the module docstring
    (its worst element named), or None when it holds.

    ``reference`` is the whole graph's float64 run; ``region_reference`` (optional) the run from
    the rewrite's inputs (:mod:`._region_reference`): the result holds when it holds against either.
    ``noise`` (optional): the result's noise floor (:func:`._noise.noise_floor`; or the pair of its
    float32-level and own-dtype-level floors, the second counted on ill-conditioned elements only), as slack against
    ``reference``: the result holds when it holds with that slack too. ``k``, ``ulps`` and ``far_ulps``: the rule's :data:`K`, :data:`ULPS` and :data:`FAR_ULPS`."""
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
    measurable = isinstance(reference, torch.Tensor) and reference.shape == b.shape
    overflowed = ~finite & torch.isfinite(a) & (torch.isfinite(reference) if measurable else False)
    nonfinite_bad = (~finite & ~same_nonfinite & ~overflowed) | (finite & ~torch.isfinite(a))
    if nonfinite_bad.any():
        idx = tuple(nonfinite_bad.nonzero()[0].tolist())
        return f"{name}: at {list(idx)} {b[idx].item()} before the pass, {a[idx].item()} after it"
    rule = (k, ulps, far_ulps)
    judged = finite | overflowed
    whole = _judge(b, a, reference, judged, before.dtype, rule)
    if whole is None:
        return _fallback(name, b, a, finite, before.dtype)
    unjudged = _fallback(name, b, a, finite & ~whole.usable, before.dtype)  # no finite reference there
    if unjudged is not None:
        return unjudged
    if whole.holds:
        return None
    local = _judge(b, a, region_reference, judged, before.dtype, rule)
    if local is not None and local.holds and not bool((judged & ~local.usable).any()):
        return None
    if noise is not None:
        levels = (noise, None) if isinstance(noise, torch.Tensor) else tuple(noise)
        noisy = _judge(b, a, reference, judged, before.dtype, rule, noise=levels)
        if noisy is not None and noisy.holds:
            return None
    return _message(name, b, a, reference, whole, before.dtype, ulps, far_ulps)


def _message(
    name: str,
    b: torch.Tensor,
    a: torch.Tensor,
    reference: torch.Tensor,
    judgement: _Judgement,
    dtype: torch.dtype,
    ulps: float,
    far_ulps: float,
) -> str:
    """How a result breaks the rule: far off somewhere, else less accurate in aggregate."""
    far = judgement.far > 0
    worse = int((judgement.worse > 0).sum())
    if far.any():
        idx = tuple(int(i) for i in torch.unravel_index(judgement.far.argmax(), b.shape))
        head = (
            f"{int(far.sum())} of {b.numel()} elements far off (error vs float64 reference more than {far_ulps:g} "
            f"ulp of {dtype} at |ref| + mean|ref| beyond the error before the pass)"
        )
    else:
        idx = tuple(int(i) for i in torch.unravel_index(judgement.worse.argmax(), b.shape))
        head = (
            f"less accurate in aggregate: RMS error vs float64 reference {judgement.rms_after:.3g} ulp of {dtype} "
            f"(at |ref| + mean|ref|) after the pass, {judgement.rms_before:.3g} before it, more than "
            f"{judgement.factor:.3g}x before plus {ulps:g} ulp on one element, over {judgement.numel} elements; "
            f"{worse} element{'s' if worse != 1 else ''} farther from it than before"
        )
    return (
        f"{name}: {head}; worst at {list(idx)}: {b[idx].item()!r} before the pass, {a[idx].item()!r} after it, "
        f"float64 reference {reference[idx].item()!r}; max |after - before| = {(a - b).abs().nan_to_num(0.0).max().item():.3g}"
    )


def named_results(gm: torch.fx.GraphModule, results: tuple[list[Any], list[Any]]) -> list[tuple[str, Any]]:
    """``(name, value)`` of each output and each tensor input's final value of a run of ``gm``."""
    outputs, final_inputs = results
    names = [n.name for n in gm.graph.find_nodes(op="placeholder")]
    return [(f"output {i}", value) for i, value in enumerate(outputs)] + [
        (f"input {names[i] if i < len(names) else i} (final value)", value)
        for i, value in enumerate(final_inputs)
        if isinstance(value, torch.Tensor)
    ]


def void_reason(pair: RunPair) -> str | None:
    """Why the case says nothing about semantics (a non-finite reference; graphs that draw random
    numbers otherwise, ``"rng: ..."``, see :mod:`._rng`), or None; see the module docstring. None
    when the pass raised."""
    if pair.after is None and pair.compiled is None:
        return None
    rng = _rng.rng_reason(pair)
    if rng is not None:
        return rng
    for rank in range(pair.case.tp_world):
        results = pair.results(rank)
        reference, kind = results.reference, "float64 reference"
        if reference is None:
            reference, kind = results.before, "graph before the pass (no float64 run)"
        originals = [x for x in pair.case.inputs[rank] if isinstance(x, torch.Tensor)]
        named = named_results(pair.case.gm, reference)
        outputs = len(reference[0])
        for position, (name, value) in enumerate(named):
            if not isinstance(value, torch.Tensor) or not value.is_floating_point() or torch.isfinite(value).all():
                continue
            if position >= outputs and _unchanged(value, originals[position - outputs]):
                continue  # an input the graph leaves as it was (a 0/-inf mask): compared exactly, no error in it
            bad = tuple((~torch.isfinite(value)).nonzero()[0].tolist())
            where = f"rank {rank} " if pair.case.tp_world > 1 else ""
            return f"{where}{name}: the {kind} is {value[bad].item()} at {list(bad)}"
    return None


def _unchanged(final: torch.Tensor, original: Any) -> bool:
    """Whether ``final`` (an input's value after a run) still equals ``original`` (NaN where NaN)."""
    if not isinstance(original, torch.Tensor) or original.shape != final.shape:
        return False
    return bool(
        torch.equal(final.double().nan_to_num(1.0), original.double().nan_to_num(1.0))
        and torch.equal(final.isnan(), original.isnan())
    )


def check(pair: RunPair, *, ulps: float = ULPS, k: float = K, far_ulps: float = FAR_ULPS) -> list[Violation]:
    """Return the semantic violations of ``pair`` (a ``RunPair``) on every rank's inputs; none for
    a void case (:func:`void_reason`). ``ulps``, ``k``, ``far_ulps``: the rule's constants (see
    :func:`compare`).

    A case with symbols (symbolic sizes) runs at every assignment :func:`~pmverify._sizes.size_points`
    gives (the hints, then each symbol at its range's ends and a drawn size), each against its own
    float64 reference (in compiled mode, the compiled functions run at each, see
    ``CompiledRun.at``); a finding names the sizes (``"at s0=9: output 0 ..."``), and a size where
    the case is void is skipped, as is a size of the first symbol the pass says it does not apply to
    (``is_applicable_for_range``, see :func:`~pmverify._sizes.applies_at`: vLLM runs such a
    graph without the pass; :mod:`.compile_ranges` checks what the pass says of whole ranges)."""
    if pair.after is None and pair.compiled is None:
        return []
    if pair.case.symbols:
        from .._sizes import applies_at, size_points

        violations: list[Violation] = []
        first = pair.case.symbols[0].name
        for sizes in size_points(pair.case):
            if not applies_at(pair.pass_, sizes[first]):
                continue
            where = ", ".join(f"{name}={size}" for name, size in sizes.items())
            for found in check(pair.at(sizes), ulps=ulps, k=k, far_ulps=far_ulps):
                violations.append(dataclasses.replace(found, message=f"at {where}: {found.message}"))
        return violations
    if void_reason(pair) is not None:
        return []
    violations: list[Violation] = []
    raised: list[BaseException] = []
    for rank in range(pair.case.tp_world):
        where = f"rank {rank} " if pair.case.tp_world > 1 else ""
        results = pair.results(rank)
        if isinstance(results.after, BaseException):
            error = results.after
            if not any(error is seen for seen in raised):  # a world's failure is reported once
                raised.append(error)
                if pair.case.tp_world > 1:  # an SPMDError: its first line names the rank and the exception
                    message = f"graph after the pass failed on the tensor-parallel world: {str(error).splitlines()[0]}"
                else:
                    message = f"graph after the pass raised {error!r}"
                violations.append(Violation("semantics", message))
            continue
        before, after = named_results(pair.case.gm, results.before), named_results(pair.case.gm, results.after)
        reference = named_results(pair.case.gm, results.reference) if results.reference is not None else None
        if len(results.before[0]) != len(results.after[0]):
            violations.append(
                Violation(
                    "semantics",
                    f"{where}{len(results.before[0])} outputs before the pass, {len(results.after[0])} after",
                )
            )
            continue
        region = noise = None  # computed once per rank, for the first flagged result
        rule = {"ulps": ulps, "k": k, "far_ulps": far_ulps}
        for i, ((name, b), (_, a)) in enumerate(zip(before, after, strict=False)):
            r = reference[i][1] if reference is not None and i < len(reference) else None
            message = compare(f"{where}{name}", b, a, r, **rule)
            if message and r is not None:  # measured from the rewrite's inputs and its noise, before reporting
                region = _region_results(pair, rank) if region is None else region
                local = named_results(pair.case.gm, region) if region else None
                noise = _noise_results(pair, rank) if noise is None else noise
                noise_i = (
                    tuple(named_results(pair.case.gm, level)[i][1] if level else None for level in noise)
                    if noise
                    else None
                )
                local_i = local[i][1] if local and i < len(local) else None
                message = compare(f"{where}{name}", b, a, r, **rule, region_reference=local_i, noise=noise_i)
            if message:
                violations.append(Violation("semantics", message))
    return violations


def _noise_results(pair: RunPair, rank: int) -> Any:
    """The noise floor of the graph before the pass (:mod:`._noise`) on rank ``rank``; False when
    there is none (tensor-parallel cases, graphs that do not run perturbed)."""
    result = None
    results = pair.results(rank)
    if pair.case.tp_world == 1 and results.reference is not None:
        from ._noise import noise_floor

        with deterministic_fill():
            result = noise_floor(pair.case.gm, pair.case.inputs[rank], results.reference, results.drawn)
    return result if result is not None else False


def _region_results(pair: RunPair, rank: int) -> Any:
    """The float64 run from the rewrite's inputs (:mod:`._region_reference`) on rank ``rank``;
    False when there is none (tensor-parallel and compiled cases, and graphs that draw random
    numbers, among them)."""
    result = None
    direct = pair.compiled is None and pair.case.tp_world == 1 and pair.after is not None
    if direct and not _rng.random_calls(pair.before):  # its real part would draw anew
        from ._region_reference import region_reference, rewritten_region

        region = rewritten_region(pair.before, pair.after)
        with deterministic_fill():
            result = region_reference(pair.before, float64_module(pair.before), region, pair.case.inputs[rank])
    return result if result is not None else False
