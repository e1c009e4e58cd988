"""The one numeric rule: whether a value computed after a pass is as accurate as the value before
it, against a float64 reference (see :mod:`pmverify.oracles.semantics` for the rule in words).

Every oracle that compares values calls :func:`compare` with (name, before, after, float64
reference[, region reference, noise floor]); none compares with a tolerance of its own. It lives
here, below the oracles, so that the semantics oracle (outputs, final input values, per rank and
size) and the functionalization oracle (the values a node reads, Inductor's decomposition) judge
alike: a 1-ulp difference of a fused bf16 / fp8 kernel that is as accurate against float64 holds
for both.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ._dtypes import inspectable

__all__ = [
    "compare",
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


def _fallback_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """torch.testing's (rtol, atol) for ``dtype``; for a dtype it has none for (the float8 types):
    two epsilons relative, the smallest normal absolute (bf16's table entry is about that)."""
    if dtype in _FALLBACK:
        return _FALLBACK[dtype]
    info = torch.finfo(dtype)
    return 2 * info.eps, info.tiny


def _fallback(name: str, b: torch.Tensor, a: torch.Tensor, where: torch.Tensor, dtype: torch.dtype) -> str | None:
    """torch.testing's per-dtype tolerance on ``|after - before|`` at the elements ``where``."""
    rtol, atol = _fallback_tolerance(dtype)
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
    ``reference``: the result holds when it holds with that slack too. ``k``, ``ulps`` and ``far_ulps``: the rule's :data:`K`, :data:`ULPS` and :data:`FAR_ULPS`.
    With ``k >= 1``, the same values before and after (``torch.equal``: no NaN) hold unmeasured: the
    error after is the error before, so neither bound can break."""
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
    if k >= 1 and far_ulps >= 0 and before.dtype in _FALLBACK and torch.equal(before, after):
        return None  # the same values (no NaN): the error after is the error before (float8: no torch.equal)
    b, a = before.double(), after.double()
    # a reference of a float8 dtype (an op that returns float8 whatever its inputs) is read widened
    reference, region_reference = (
        inspectable(r) if isinstance(r, torch.Tensor) else r for r in (reference, region_reference)
    )
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
