"""The fused QK norm's Triton kernels against the unfused pattern compiled by Inductor, on one GPU.

Run: ``python benchmarks/qk_norm_gpu.py [--tokens T ...] [--iters N] [--warmup W] [--json PATH]
[--smoke] [--compile]``. Geometry is MiniMax-M2's (48 query heads, 8 kv heads, head_dim 128),
activations bf16, eps 1e-6, T (tokens, rows of qkv) in ``--tokens`` (default 1 128 2048 8192
32768). Three cases per T:

- ``tp1``: tp_world = 1 (q 6144, kv 1024 columns), the one-pass kernel (``qk_norm_triton``);
- ``tp8``: one rank of tp_world = 8 (q 768, kv 128 per rank), the two per-rank kernels
  (``sum_squares_triton`` then ``qk_norm_apply_triton`` with tp_world = 8, divisor width · 8).
  **The all-reduce of the [T, 2] float32 sums is excluded**: one GPU has no process group, so this
  is everything the op does except the collective;
- ``tp8/1pass``: the tp-1 one-pass kernel on the tp-8 widths (tp-1 math, divisor width): what the
  per-rank split into two kernels costs.

Per case and T: the median device time of the fused kernels; the bytes they must move (below) and
the bandwidth that achieves; a device-to-device ``copy_`` moving the same bytes (``bytes / 2`` read
and ``bytes / 2`` written), timed in the same run, and the fused kernels' fraction of its bandwidth;
the median time of the unfused rank-local pattern compiled by Inductor and the speed-up over it.
The unfused pattern is vLLM's ``forward_qk`` rounding order (``weight_after_cast=False``:
``(x.float() * rsqrt(mean(x²) + eps) * weight).to(bf16)``), at tp 8 the form of
:func:`pmverify.fusions.qk_norm.tp.qk_norm_tp_forward` without the collective (``cat`` of the two
means, ``/ 8``, ``chunk``), compiled with ``torch.compile(fullgraph=True, dynamic=False)`` (default
mode: an Inductor kernel specialised to each T). Before timing, the fused outputs are checked once
to agree within bf16 tolerance (``torch.testing.assert_close``, which raises) with the
compiled-unfused ones and with pmverify's torch implementation (at tp 8 ``pmverify::qk_norm_tp``
on CPU copies and a one-rank gloo group, whose all-reduce is the identity; skipped, with a note, if
no such group starts).

Weights are bf16: vLLM's ``MiniMaxText01RMSNormTP`` creates its weight with ``torch.ones`` while
the model is built under the model dtype (``set_default_torch_dtype``), so it is bf16 in a bf16
model.

Bytes moved (activation element ``a`` = 2 bytes, weight element ``w`` = 2 bytes), with
``width = q_size + kv_size``:

- one pass (``tp1``, ``tp8/1pass``): ``2·T·width·a + width·w``: q and k columns of qkv read once,
  q_out and k_out written, each weight read once (v is not touched);
- sum + apply (``tp8``): ``3·T·width·a + width·w + 2·T·2·4``: q and k of qkv read twice (sums,
  then scaling), q_out and k_out written, weights read once, the float32 ``[T, 2]`` sums written
  and read back.

This is the least each kernel must move, not what the hardware counters would show (at these
widths each part of a row is one chunk, so the one-pass kernel reads q and k once).

Timing: CUDA events around each call, ``--iters`` runs (default 200) after ``--warmup`` untimed
ones (default 25), median reported. A spin kernel (``torch.cuda._sleep``) holds the GPU while the
timed launches are queued, so the events time the kernels back to back, not Python launch overhead
(vLLM replays CUDA graphs). L2 is warm: every run reuses the same tensors and nothing is flushed;
the ``in L2`` column says whether the bytes moved fit in the device's L2, where the bandwidth is
L2's rather than HBM's. The first call of each case and T compiles the unfused pattern (15
Inductor compiles at the default tokens: expect a minute or two before the table).

``--json PATH`` writes the run's settings (device, versions, dtypes, eps, iters, what each case
runs, the bytes formulas) and ``rows``: one per case and T with ``bytes``, ``fused_us``,
``fused_gbps``, ``copy_us``, ``copy_gbps``, ``copy_fraction`` (fused bandwidth / copy bandwidth),
``unfused_us``, ``speedup`` (unfused / fused), ``in_l2`` and the largest distance in bf16 ulps from
the unfused pattern and from the torch implementation (table column ``ulp``: the former).

Without CUDA (or with ``--smoke``) it runs a correctness-only smoke pass instead: Triton's
interpreter (``TRITON_INTERPRET=1``, set before pmverify's kernels are imported) on CPU tensors,
T in ``--tokens`` (default 1 3 17), the same cases, rows, table and JSON with the timing fields
``None`` ("n/a"). Each kernel output is compared with pmverify's torch implementation
(``pmverify::qk_norm``; at tp 8 ``pmverify::qk_norm_tp`` on a one-rank gloo group, whose all-reduce
is the identity) and with the unfused pattern run eagerly (``--compile``: compiled by Inductor, as
on the GPU; slow on CPU), allowing one bf16 ulp (the interpreter truncates float32 to bf16). It
prints that timing needs a GPU and exits 0, or 1 when a check fails.

Figures, not assertions: timing is not tested.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

DTYPE = torch.bfloat16
WEIGHT_DTYPE = torch.bfloat16
EPS = 1e-6
GPU_TOKENS = (1, 128, 1024, 4096, 8192, 16384)
SMOKE_TOKENS = (1, 3, 17)
#: Assumed upper bound of the GPU clock, in cycles per second, to size the spin kernel.
SPIN_CYCLES_PER_S = 2.5e9
#: Longest spin, in seconds.
MAX_SPIN_S = 2.0

ONE_PASS = "one-pass"
SUM_APPLY = "sum+apply"
#: The issue's goals (figures checked by eye and in the JSON's ``goals``, not asserted): the fused
#: kernels reach this fraction of a device-to-device copy's bandwidth from ``GOAL_TOKENS`` rows up...
GOAL_COPY_FRACTION = 0.85
GOAL_TOKENS = 4096
#: ... and are this many times faster than Inductor's code for the unfused pattern.
GOAL_SPEEDUP = 2.0


@dataclasses.dataclass(frozen=True)
class Case:
    """One kernel configuration: the per-rank widths, the tp_world of its math (the divisor is
    width · tp_world) and which kernels run."""

    name: str
    geometry: str
    q_size: int
    kv_size: int
    tp_world: int
    kernel: str
    note: str


CASES = (
    Case("tp1", "tp1", 6144, 1024, 1, ONE_PASS, "qk_norm_triton"),
    Case("tp8", "tp8", 768, 128, 8, SUM_APPLY, "sum_squares_triton + qk_norm_apply_triton, all-reduce excluded"),
    Case("tp8/1pass", "tp8", 768, 128, 1, ONE_PASS, "qk_norm_triton (tp-1 math) on the tp-8 widths"),
)

ROW_KEYS = (
    "case",
    "geometry",
    "kernel",
    "tp_world",
    "q_size",
    "kv_size",
    "tokens",
    "bytes",
    "fused_us",
    "fused_gbps",
    "copy_us",
    "copy_gbps",
    "copy_fraction",
    "unfused_us",
    "speedup",
    "in_l2",
    "max_ulp_vs_unfused",
    "max_ulp_vs_torch_impl",
    "ulp_vs_float64",
    "unfused_ulp_vs_float64",
)


def bytes_moved(case: Case, tokens: int, act_bytes: int = 2, weight_bytes: int = 2) -> int:
    """What the fused kernels of ``case`` must read and write for ``tokens`` rows (module docstring)."""
    width = case.q_size + case.kv_size
    activations = tokens * width * act_bytes
    weights = width * weight_bytes
    if case.kernel == ONE_PASS:
        return 2 * activations + weights
    return 3 * activations + weights + 2 * tokens * 2 * 4


def unfused(case: Case, eps: float = EPS) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]:
    """The rank-local unfused pattern of ``case`` in vLLM's rounding order: ``(q_out, k_out)``.

    tp_world = 1: vLLM's ``forward_qk`` after the split of qkv. tp_world > 1:
    :func:`~pmverify.fusions.qk_norm.tp.qk_norm_tp_forward` without the all-reduce, so the mean
    over the rank's columns is divided by tp_world (the divisor is width · tp_world)."""
    sizes = [case.q_size, case.kv_size, case.kv_size]
    tp_world = case.tp_world

    def pattern(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor) -> tuple:
        q, k, _ = qkv.split(sizes, dim=-1)
        qf = q.to(torch.float32)
        kf = k.to(torch.float32)
        q_var = qf.pow(2).mean(dim=-1, keepdim=True)
        k_var = kf.pow(2).mean(dim=-1, keepdim=True)
        if tp_world > 1:
            q_var, k_var = (torch.cat([q_var, k_var], dim=-1) / tp_world).chunk(2, dim=-1)
        q_out = (qf * torch.rsqrt(q_var + eps) * q_weight).to(qkv.dtype)
        k_out = (kf * torch.rsqrt(k_var + eps) * k_weight).to(qkv.dtype)
        return q_out, k_out

    return pattern


def fused(case: Case, eps: float = EPS) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]:
    """The fused kernels of ``case``: ``(q_out, k_out)`` (the all-reduce of sum + apply left out)."""
    from pmverify.fusions.qk_norm import triton_impl

    q_size, kv_size, tp_world = case.q_size, case.kv_size, case.tp_world
    if case.kernel == ONE_PASS:
        return lambda qkv, qw, kw: triton_impl.qk_norm_triton(qkv, qw, kw, q_size, kv_size, eps, False)

    def sum_apply(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor) -> tuple:
        sums = triton_impl.sum_squares_triton(qkv, q_size, kv_size)
        return triton_impl.qk_norm_apply_triton(qkv, sums, q_weight, k_weight, q_size, kv_size, eps, tp_world, False)

    return sum_apply


@contextlib.contextmanager
def torch_impl() -> Iterator[None]:
    """Force pmverify's ops to their torch implementation for the duration."""
    from pmverify.fusions.qk_norm.ops import IMPL_ENV

    old = os.environ.get(IMPL_ENV)
    os.environ[IMPL_ENV] = "torch"
    try:
        yield
    finally:
        if old is None:
            del os.environ[IMPL_ENV]
        else:
            os.environ[IMPL_ENV] = old


def torch_reference(case: Case, qkv, q_weight, k_weight, group_name: str | None, eps: float = EPS):
    """pmverify's torch implementation of ``case``'s op on ``qkv``'s device: ``pmverify::qk_norm``
    at tp_world = 1; at tp_world > 1 ``pmverify::qk_norm_tp`` on the one-rank gloo group
    ``group_name`` (its all-reduce is the identity), run on CPU copies; None without a group."""
    with torch_impl():
        if case.tp_world == 1:
            return torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, case.q_size, case.kv_size, eps, False)
        if group_name is None:
            return None
        cpu = [t.cpu() for t in (qkv, q_weight, k_weight)]
        out = torch.ops.pmverify.qk_norm_tp(*cpu, case.q_size, case.kv_size, eps, case.tp_world, group_name, False)
        return tuple(t.to(qkv.device) for t in out)


def max_ulp(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> int:
    """The largest distance, in bf16 ulps (representable values apart), between matching outputs."""

    def ordered(x: torch.Tensor) -> torch.Tensor:
        bits = x.detach().cpu().contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    worst = 0
    for a, e in zip(actual, expected, strict=True):
        if a.shape != e.shape or a.dtype != torch.bfloat16 or e.dtype != torch.bfloat16:
            raise ValueError(f"max_ulp: {tuple(a.shape)} {a.dtype} vs {tuple(e.shape)} {e.dtype}; expected equal bf16")
        if a.numel():
            worst = max(worst, int((ordered(a) - ordered(e)).abs().max()))
    return worst


def float64_reference(case: Case, qkv, q_weight, k_weight, eps: float = EPS) -> tuple[torch.Tensor, ...]:
    """The math of ``case``'s unfused pattern in float64 on ``qkv``'s device, every input widened
    and nothing rounded (at tp_world > 1 the rank's mean divided by tp_world, as the pattern does
    without the all-reduce): the exact value each output approximates."""
    q, k, _ = qkv.to(torch.float64).split([case.q_size, case.kv_size, case.kv_size], dim=-1)
    q_var = q.pow(2).mean(dim=-1, keepdim=True) / case.tp_world
    k_var = k.pow(2).mean(dim=-1, keepdim=True) / case.tp_world
    return (
        q * torch.rsqrt(q_var + eps) * q_weight.to(torch.float64),
        k * torch.rsqrt(k_var + eps) * k_weight.to(torch.float64),
    )


def ulps_vs_float64(actual: Sequence[torch.Tensor], exact: Sequence[torch.Tensor]) -> float:
    """The largest error of bf16 outputs against their float64 values, in bf16 ulps of each exact
    value (``2**(floor(log2|x|) - 7)``, bf16's spacing there; its smallest normal's below it): 0.5
    is a correctly rounded result."""
    worst = 0.0
    tiny = torch.finfo(torch.bfloat16).tiny
    for a, e in zip(actual, exact, strict=True):
        if not a.numel():
            continue
        e = e.to(a.device)
        spacing = torch.exp2(torch.floor(torch.log2(e.abs().clamp_min(tiny))) - 7)
        worst = max(worst, float(((a.to(torch.float64) - e).abs() / spacing).max()))
    return worst


def inputs(case: Case, tokens: int, device: torch.device, seed: int) -> tuple[torch.Tensor, ...]:
    """Random ``(qkv, q_weight, k_weight)``: qkv ~ N(0, 1), weights ~ 1 + N(0, 0.1²)."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(tokens, case.q_size + 2 * case.kv_size, generator=gen).to(DTYPE)
    q_weight = (1 + 0.1 * torch.randn(case.q_size, generator=gen)).to(WEIGHT_DTYPE)
    k_weight = (1 + 0.1 * torch.randn(case.kv_size, generator=gen)).to(WEIGHT_DTYPE)
    return tuple(t.to(device) for t in (qkv, q_weight, k_weight))


def compiled(case: Case) -> Callable:
    """``case``'s unfused pattern compiled by Inductor, specialised to the shapes it is first called
    with. Dynamo's caches are reset first, so that one compile per case and T stays under its
    recompile limit."""
    torch.compiler.reset()
    return torch.compile(unfused(case), fullgraph=True, dynamic=False)


def cuda_time_us(fn: Callable[[], Any], iters: int, warmup: int) -> float:
    """Median device time of ``fn()`` in microseconds: CUDA events around each of ``iters`` calls,
    after ``warmup`` untimed ones, the GPU held by a spin kernel while the calls are queued."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    probe = max(1, min(warmup, 10))
    start = time.perf_counter()
    for _ in range(probe):
        fn()
    host_s = (time.perf_counter() - start) / probe  # an upper bound of the host time per call
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(min(2 * host_s * iters, MAX_SPIN_S) * SPIN_CYCLES_PER_S))
    for begin, end in zip(starts, ends, strict=True):
        begin.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return 1e3 * statistics.median(begin.elapsed_time(end) for begin, end in zip(starts, ends, strict=True))


def gbps(nbytes: int, us: float | None) -> float | None:
    return None if us is None else nbytes / (us * 1e-6) / 1e9


def make_row(
    case: Case,
    tokens: int,
    *,
    fused_us: float | None = None,
    copy_us: float | None = None,
    unfused_us: float | None = None,
    l2_bytes: int | None = None,
    max_ulp_vs_unfused: int | None = None,
    max_ulp_vs_torch_impl: int | None = None,
    ulp_vs_float64: float | None = None,
    unfused_ulp_vs_float64: float | None = None,
) -> dict[str, Any]:
    """One row of the table and the JSON (:data:`ROW_KEYS`); timings None where not measured."""
    nbytes = bytes_moved(case, tokens)
    fused_gbps, copy_gbps = gbps(nbytes, fused_us), gbps(nbytes, copy_us)
    row = {
        "case": case.name,
        "geometry": case.geometry,
        "kernel": case.kernel,
        "tp_world": case.tp_world,
        "q_size": case.q_size,
        "kv_size": case.kv_size,
        "tokens": tokens,
        "bytes": nbytes,
        "fused_us": fused_us,
        "fused_gbps": fused_gbps,
        "copy_us": copy_us,
        "copy_gbps": copy_gbps,
        "copy_fraction": None if fused_us is None or copy_us is None else copy_us / fused_us,
        "unfused_us": unfused_us,
        "speedup": None if fused_us is None or unfused_us is None else unfused_us / fused_us,
        "in_l2": None if l2_bytes is None else nbytes <= l2_bytes,
        "max_ulp_vs_unfused": max_ulp_vs_unfused,
        "max_ulp_vs_torch_impl": max_ulp_vs_torch_impl,
        "ulp_vs_float64": ulp_vs_float64,
        "unfused_ulp_vs_float64": unfused_ulp_vs_float64,
    }
    assert tuple(row) == ROW_KEYS
    return row


COLUMNS = (
    ("case", "case", "{:<10}", 10),
    ("T", "tokens", "{:>6}", 6),
    ("MB", "bytes", "{:>9.3f}", 9),
    ("fused us", "fused_us", "{:>9.2f}", 9),
    ("GB/s", "fused_gbps", "{:>7.0f}", 7),
    ("copy us", "copy_us", "{:>9.2f}", 9),
    ("of copy", "copy_fraction", "{:>7.1%}", 7),
    ("Inductor us", "unfused_us", "{:>11.2f}", 11),
    ("speed-up", "speedup", "{:>8.2f}", 8),
    ("in L2", "in_l2", "{:>5}", 5),
    ("ulp", "max_ulp_vs_unfused", "{:>3}", 3),
    ("f64 ulp", "ulp_vs_float64", "{:>7.2f}", 7),
    ("Ind f64", "unfused_ulp_vs_float64", "{:>7.2f}", 7),
)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a text table; ``n/a`` for a figure not measured."""
    lines = [
        " ".join(f"{title:>{width}}" if i else f"{title:<{width}}" for i, (title, _, _, width) in enumerate(COLUMNS))
    ]
    for row in rows:
        cells = []
        for i, (_, key, fmt, width) in enumerate(COLUMNS):
            value = row[key]
            if key == "bytes":
                value = value / 1e6
            elif key == "in_l2" and value is not None:
                value = "yes" if value else "no"
            cells.append(fmt.format(value) if value is not None else f"{'n/a':>{width}}" if i else f"{'n/a':<{width}}")
        lines.append(" ".join(cells))
    return "\n".join(lines)


def measure(
    case: Case, tokens: int, args: argparse.Namespace, device: torch.device, group_name: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Check ``case`` at ``tokens`` rows on ``device`` and, on CUDA, time it: ``(row, failures)``.

    The fused kernels' outputs are compared with the unfused pattern (compiled by Inductor on CUDA
    or with ``--compile``, else eager) and with pmverify's torch implementation where there is one
    (``group_name`` names a one-rank group for tp_world > 1). On CUDA, compiled-unfused and fused
    must pass ``torch.testing.assert_close`` (it raises); in the interpreter, which truncates to
    bf16, every comparison may differ by one bf16 ulp at most (more is a failure)."""
    timed = device.type == "cuda"
    qkv, q_weight, k_weight = inputs(case, tokens, device, args.seed)
    run_fused = fused(case)
    run_unfused = compiled(case) if timed or args.compile else unfused(case)
    got, want = run_fused(qkv, q_weight, k_weight), run_unfused(qkv, q_weight, k_weight)
    reference = torch_reference(case, qkv, q_weight, k_weight, group_name)
    exact = float64_reference(case, qkv, q_weight, k_weight)
    f64_fused, f64_unfused = ulps_vs_float64(got, exact), ulps_vs_float64(want, exact)
    if timed:
        checks = [("compiled unfused", want)] + ([("torch implementation", reference)] if reference else [])
        for what, expected in checks:
            for name, a, e in zip(("q_out", "k_out"), got, expected, strict=True):
                torch.testing.assert_close(
                    a, e, msg=lambda m, w=what, n=name: f"{case.name} T={tokens} {n} vs {w}: {m}"
                )
    ulp_unfused = max_ulp(got, want)
    ulp_torch = None if reference is None else max_ulp(got, reference)
    del got, want, reference, exact
    failures = []
    if f64_fused > max(f64_unfused, 0.5) + 1:
        failures.append(
            f"{case.name} T={tokens}: fused kernels {f64_fused:.2f} bf16 ulps from float64, "
            f"the unfused pattern {f64_unfused:.2f} (more than one ulp less accurate)"
        )
    if not timed:
        for what, ulp in (("unfused pattern", ulp_unfused), ("torch implementation", ulp_torch)):
            if ulp is not None and ulp > 1:
                failures.append(f"{case.name} T={tokens}: fused kernels and the {what} differ by {ulp} bf16 ulps (> 1)")
    timings: dict[str, Any] = {}
    if timed:
        timings["fused_us"] = cuda_time_us(lambda: run_fused(qkv, q_weight, k_weight), args.iters, args.warmup)
        timings["unfused_us"] = cuda_time_us(lambda: run_unfused(qkv, q_weight, k_weight), args.iters, args.warmup)
        src = torch.empty(bytes_moved(case, tokens) // 2, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        timings["copy_us"] = cuda_time_us(lambda: dst.copy_(src), args.iters, args.warmup)
        timings["l2_bytes"] = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None)
    row = make_row(
        case,
        tokens,
        max_ulp_vs_unfused=ulp_unfused,
        max_ulp_vs_torch_impl=ulp_torch,
        ulp_vs_float64=f64_fused,
        unfused_ulp_vs_float64=f64_unfused,
        **timings,
    )
    return row, failures


@contextlib.contextmanager
def one_rank_group() -> Iterator[str | None]:
    """A one-rank gloo group's name (its all-reduce is the identity), or None if none starts."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield dist.group.WORLD.group_name
        return
    try:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    except Exception as exc:  # no gloo here: the tp-8 rows are compared with the unfused pattern only
        print(f"note: no one-rank gloo group ({exc!r}); tp-8 rows skip the torch implementation", file=sys.stderr)
        yield None
        return
    try:
        yield dist.group.WORLD.group_name
    finally:
        dist.destroy_process_group()


def header(smoke: bool, args: argparse.Namespace) -> dict[str, Any]:
    """What the run measured, on what: the JSON's fields besides ``rows``."""
    import triton

    return {
        "mode": "smoke" if smoke else "cuda",
        "device": "cpu (Triton interpreter)" if smoke else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "dtype": str(DTYPE).removeprefix("torch."),
        "weight_dtype": str(WEIGHT_DTYPE).removeprefix("torch."),
        "eps": EPS,
        "iters": None if smoke else args.iters,
        "warmup": None if smoke else args.warmup,
        "timing": None
        if smoke
        else "CUDA events per call, median; GPU held by a spin kernel while launches are queued; L2 warm (no flush)",
        "cases": {case.name: case.note for case in CASES},
        "allreduce": "excluded: the tp8 case times the per-rank kernels only",
        "baseline": "unfused rank-local pattern, torch.compile(fullgraph=True, dynamic=False)"
        if (not smoke or args.compile)
        else "unfused rank-local pattern, eager",
        "bytes_formula": {
            ONE_PASS: "2*T*(q_size+kv_size)*2 + (q_size+kv_size)*2",
            SUM_APPLY: "3*T*(q_size+kv_size)*2 + (q_size+kv_size)*2 + 2*T*2*4",
        },
        "copy": "dst.copy_(src), uint8, bytes // 2 elements (bytes // 2 read + bytes // 2 written)",
    }


def goals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The issue's goals read off the timed rows: the least fraction of a copy's bandwidth from
    :data:`GOAL_TOKENS` rows up and the least speed-up over Inductor, per case; ``lines`` says them
    in words (figures, not assertions: nothing fails on them). None where nothing was timed."""
    out: dict[str, Any] = {"copy_fraction_goal": GOAL_COPY_FRACTION, "speedup_goal": GOAL_SPEEDUP, "lines": []}
    for case in CASES:
        timed = [r for r in rows if r["case"] == case.name and r["fused_us"] is not None]
        big = [r["copy_fraction"] for r in timed if r["tokens"] >= GOAL_TOKENS]
        least_fraction = min(big) if big else None
        least_speedup = min((r["speedup"] for r in timed), default=None)
        out[case.name] = {"least_copy_fraction_at_goal_tokens": least_fraction, "least_speedup": least_speedup}
        if least_fraction is not None:
            out["lines"].append(
                f"{case.name}: at T >= {GOAL_TOKENS} at least {least_fraction:.1%} of a copy's bandwidth "
                f"(goal {GOAL_COPY_FRACTION:.0%}: {'met' if least_fraction >= GOAL_COPY_FRACTION else 'NOT met'})"
            )
        if least_speedup is not None:
            out["lines"].append(
                f"{case.name}: at least {least_speedup:.2f}x over Inductor's unfused code "
                f"(goal {GOAL_SPEEDUP:g}x: {'met' if least_speedup >= GOAL_SPEEDUP else 'NOT met'})"
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tokens", type=int, nargs="+", help=f"token counts (default {GPU_TOKENS}; smoke {SMOKE_TOKENS})"
    )
    parser.add_argument("--iters", type=int, default=200, help="timed runs per figure (default 200)")
    parser.add_argument("--warmup", type=int, default=25, help="untimed runs before them (default 25)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--smoke", action="store_true", help="correctness only, in Triton's interpreter on CPU")
    parser.add_argument(
        "--compile", action="store_true", help="smoke mode: compile the unfused pattern with Inductor (slow on CPU)"
    )
    args = parser.parse_args(argv)
    if args.iters < 1 or args.warmup < 0 or any(t < 1 for t in args.tokens or ()):
        parser.error("--iters and every --tokens must be positive, --warmup not negative")
    if args.json:
        folder = os.path.dirname(os.path.abspath(args.json))
        if os.path.isdir(args.json) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            parser.error(f"--json {args.json}: not a file in a writable folder")  # before minutes of timing

    smoke = args.smoke or not torch.cuda.is_available()
    # The interpreter must be on (or off) before pmverify's kernels, and triton, are imported.
    if smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    elif os.environ.pop("TRITON_INTERPRET", "0") not in ("", "0"):
        print("note: TRITON_INTERPRET unset for the timed run (the kernels are compiled)", file=sys.stderr)
    if "triton" in sys.modules:
        print("warning: triton was imported before TRITON_INTERPRET was set", file=sys.stderr)
    tokens = args.tokens or (SMOKE_TOKENS if smoke else GPU_TOKENS)

    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    if smoke:
        print("timing needs a GPU: smoke mode, correctness only (Triton interpreter on CPU)")
        device = torch.device("cpu")
    else:
        print(f"{torch.cuda.get_device_name()}: bf16, all-reduce excluded at tp8, L2 warm, median of {args.iters}")
        device = torch.device("cuda")
    with one_rank_group() as group_name:
        for case in CASES:
            for t in tokens:
                row, bad = measure(case, t, args, device, group_name)
                rows.append(row)
                failures += bad
                if not smoke:
                    print(f"  {case.name} T={t}: {row['fused_us']:.2f} us", flush=True)
    print(format_table(rows))
    print("tp8: sum_squares + apply kernels of one rank; the all-reduce of the [T, 2] fp32 sums is excluded")
    print(f"{len(rows)} rows in {time.perf_counter() - start:.1f}s")
    met = goals(rows)
    for line in met["lines"]:
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**header(smoke, args), "rows": rows, "goals": met, "failures": failures}, f, indent=2)
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    if smoke and not failures:
        print("smoke: every kernel output within one bf16 ulp of the torch implementation and the unfused pattern")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
