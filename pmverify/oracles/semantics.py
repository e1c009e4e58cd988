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
  nor a violation; :func:`void` says why (:class:`Void`, kind ``"non_finite"``), and ``check_case``
  records it in ``CaseResult.void_reason`` and ``void_kind``. In a case that is not void, a finite ``before`` with a non-finite
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
  void case of kind ``"not_comparable"`` whose reason starts ``"rng: "`` (so are tensor-parallel and
  compiled cases that draw), never a violation.
- Integer and bool results must be equal.
- Tensor parallelism: a case with ``tp_world > 1`` runs on a real world of that many ranks
  (:func:`pmverify.distributed.run_spmd`, threaded backend: collectives really reduce), every
  rank running its own rewritten graph on its own inputs; each rank's results are compared with
  that rank's results before the pass and its float64 reference (computed with float64
  collectives).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .._execution import (  # the one numeric rule (compare and its constants), re-exported
    FAR_ULPS,
    FP32_SLACK,
    ILL_CONDITIONED,
    NOISE_FACTOR,
    SAMPLING,
    ULPS,
    K,
    RunPair,
    clone_inputs,
    compare,
    deterministic_fill,
    finite,
    float64_module,
    float64_reference,
    inspectable,
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
    "lined_up",
    "noise_results",
    "region_results",
    "void_reason",
    "void",
    "Void",
    "VOID_KINDS",
    "NON_FINITE",
    "NOT_COMPARABLE",
    "applies",
    "deterministic_fill",
    "K",
    "SAMPLING",
    "ULPS",
    "FAR_ULPS",
    "FP32_SLACK",
    "NOISE_FACTOR",
    "ILL_CONDITIONED",
]


def named_results(gm: torch.fx.GraphModule, results: tuple[list[Any], list[Any]]) -> list[tuple[str, Any]]:
    """``(name, value)`` of each output and each tensor input's final value of a run of ``gm``."""
    outputs, final_inputs = results
    names = [n.name for n in gm.graph.find_nodes(op="placeholder")]
    return [(f"output {i}", value) for i, value in enumerate(outputs)] + [
        (f"input {names[i] if i < len(names) else i} (final value)", value)
        for i, value in enumerate(final_inputs)
        if isinstance(value, torch.Tensor)
    ]


def lined_up(results: Any, like: tuple[list[Any], list[Any]]) -> list[Any]:
    """The values of ``results`` (``(flat outputs, final inputs)``: a reference, a noise floor...)
    at the positions :func:`named_results` names in ``like`` (a run of the same graph), None where
    ``results`` has none: a noise floor holds None for an integer input, which ``named_results``
    would drop and so shift every later position."""
    if not results:
        return [None] * (len(like[0]) + sum(isinstance(v, torch.Tensor) for v in like[1]))
    outputs, finals = results
    lined = [outputs[i] if i < len(outputs) else None for i in range(len(like[0]))]
    return lined + [
        finals[i] if i < len(finals) else None for i, v in enumerate(like[1]) if isinstance(v, torch.Tensor)
    ]


#: The kinds of :class:`Void`: the reference is NaN/Inf (``"non_finite"``), or the graphs cannot be
#: compared value by value (``"not_comparable"``: they draw random numbers otherwise, see :mod:`._rng`).
NON_FINITE = "non_finite"
NOT_COMPARABLE = "not_comparable"
VOID_KINDS = (NON_FINITE, NOT_COMPARABLE)


@dataclasses.dataclass(frozen=True)
class Void:
    """Why a case says nothing about semantics: ``kind`` (one of :data:`VOID_KINDS`) and
    ``reason``, in words (a not-comparable one starts ``"rng: "``)."""

    kind: str
    reason: str


def void(pair: RunPair) -> Void | None:
    """Why the case says nothing about semantics (:class:`Void`: a non-finite reference, or graphs
    that draw random numbers otherwise, see :mod:`._rng`), or None; see the module docstring.
    None when the pass raised. Computed once per pair."""
    if pair.after is None and pair.compiled is None:
        return None
    return pair.cached(("void",), lambda: _void(pair))


def void_reason(pair: RunPair) -> str | None:
    """:func:`void`'s reason, in words, or None."""
    found = void(pair)
    return found.reason if found is not None else None


def applies(pair: RunPair) -> bool:
    """Whether this oracle has something to judge on ``pair`` (whose pass ran): the case is not
    void (:func:`void`)."""
    return void(pair) is None


def _void(pair: RunPair) -> Void | None:
    rng = _rng.rng_reason(pair)
    if rng is not None:
        return Void(NOT_COMPARABLE, rng)
    for rank in range(pair.case.tp_world):
        results = pair.results(rank)
        reference, kind = results.reference, "float64 reference"
        if reference is None:
            reference, kind = results.before, "graph before the pass (no float64 run)"
        originals = [x for x in pair.case.inputs[rank] if isinstance(x, torch.Tensor)]
        named = named_results(pair.case.gm, reference)
        outputs = len(reference[0])
        for position, (name, value) in enumerate(named):
            if not isinstance(value, torch.Tensor) or finite(value):
                continue
            value = inspectable(value)  # a float8 result (no float64 run) is read widened
            if position >= outputs and _unchanged(value, originals[position - outputs]):
                continue  # an input the graph leaves as it was (a 0/-inf mask): compared exactly, no error in it
            bad = tuple((~torch.isfinite(value)).nonzero()[0].tolist())
            where = f"rank {rank} " if pair.case.tp_world > 1 else ""
            return Void(NON_FINITE, f"{where}{name}: the {kind} is {value[bad].item()} at {list(bad)}")
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

    A case with symbols (symbolic sizes) runs at every assignment :func:`~pmverify._shapes.sizes.size_points`
    gives (the hints, then each symbol at its range's ends and a drawn size), each against its own
    float64 reference (in compiled mode, the compiled functions run at each, see
    ``CompiledRun.at``); a finding names the sizes (``"at s0=9: output 0 ..."``), and a size where
    the case is void is skipped, as is a size of the first symbol the pass says it does not apply to
    (``is_applicable_for_range``, see :func:`~pmverify._shapes.sizes.applies_at`: vLLM runs such a
    graph without the pass; :mod:`.compile_ranges` checks what the pass says of whole ranges)."""
    if pair.after is None and pair.compiled is None:
        return []
    if pair.case.symbols:
        from .._shapes.sizes import applies_at, size_points

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
                region = region_results(pair, rank) if region is None else region
                noise = noise_results(pair, rank) if noise is None else noise
                noise_i = tuple(lined_up(level, results.before)[i] for level in noise) if noise else None
                local_i = lined_up(region, results.before)[i] if region else None
                message = compare(f"{where}{name}", b, a, r, **rule, region_reference=local_i, noise=noise_i)
            if message:
                violations.append(Violation("semantics", message))
    return violations


def noise_results(pair: RunPair, rank: int) -> Any:
    """The noise floor of the graph before the pass (:mod:`._noise`) on rank ``rank``, computed
    once per pair (shared by the oracles that compare values); False when there is none
    (tensor-parallel cases, graphs that do not run perturbed)."""

    def compute() -> Any:
        result = None
        results = pair.results(rank)
        if pair.case.tp_world == 1 and results.reference is not None:
            from ._noise import noise_floor

            with deterministic_fill():
                result = noise_floor(pair.case.gm, pair.case.inputs[rank], results.reference, results.drawn)
        return result if result is not None else False

    return pair.cached(("noise", rank), compute)


def region_results(pair: RunPair, rank: int) -> Any:
    """The float64 run from the rewrite's inputs (:mod:`._region_reference`) on rank ``rank``,
    computed once per pair; False when there is none (tensor-parallel and compiled cases, and
    graphs that draw random numbers, among them)."""

    def compute() -> Any:
        result = None
        direct = pair.compiled is None and pair.case.tp_world == 1 and pair.after is not None
        if direct and not _rng.random_calls(pair.before):  # its real part would draw anew
            from ._region_reference import region_reference, rewritten_region

            region = rewritten_region(pair.before, pair.after)
            with deterministic_fill():
                result = region_reference(pair.before, float64_module(pair.before), region, pair.case.inputs[rank])
        return result if result is not None else False

    return pair.cached(("region", rank), compute)
