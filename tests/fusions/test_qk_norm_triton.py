"""The fused QK norm's Triton kernels, run in Triton's interpreter on CPU (``TRITON_INTERPRET=1``,
set by ``conftest.py`` without a GPU).

Every run writes into outputs poisoned with NaN (inputs are finite), so an element the kernel never
wrote shows; every run also checks that qkv (and so v) is left untouched.

Tolerances, derived rather than tuned (u = 2⁻²⁴, the float32 unit roundoff):

- The float32 sum of n squares has relative error at most (n - 1)·u (Higham, *Accuracy and
  Stability of Numerical Algorithms*, 2nd ed., §4.2: recursive summation of non-negative terms; a
  tree reduction is within the same bound); the mean, ``+ eps``, sqrt and the two divisions add one
  rounding each and rsqrt halves the relative error of its argument, and ``x · rstd`` and ``· w``
  add two more: float32 results are within (n + 6)·u of the exact value, relatively.
- The cast to a narrower output dtype adds half an ulp of the output, or a whole one for bf16 in
  the interpreter, which truncates float32 → bfloat16 instead of rounding to nearest.
- With the weight after the cast (transformers' order), the normalised value is first rounded to
  the activation dtype (half an ulp, one for bf16 in the interpreter) and then multiplied by w, so
  that rounding counts ``|w|`` times.

- Below float32's normal range relative bounds fail: two float32 ulps at the value are added (the
  subnormal spacing there, a negligible 2u relatively elsewhere).

Against the float64 reference (the exact formula without intermediate roundings) the kernel must
stay within that bound; against the torch implementation, within the sum of both implementations'
bounds, the torch one rounding to nearest. Inputs stay within 2^±6 of unit scale: Triton 3.7.1's
interpreter also converts *subnormal* bfloat16 ↔ float32 values wrongly (bf16 1e-39 loads as
4.4e-39), a bug of the interpreter, not of the kernels, that these tests do not chase.
"""

import os
import subprocess
import sys

import pytest
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from pmverify.distributed import run_spmd
from pmverify.fusions.qk_norm import ops, triton_impl
from pmverify.fusions.qk_norm.config import output_dtype
from pmverify.fusions.qk_norm.triton_impl import Launch, launch_for, qk_norm_tp_triton, qk_norm_triton

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
U32 = 2.0**-24


def _ulp(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The ulp of ``dtype`` at each ``|value|`` (float64), subnormals included."""
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(value.abs().double().clamp(min=info.tiny))
    return info.eps * torch.pow(2.0, (exponent - 1).double())


def _rounding(dtype: torch.dtype, truncating: bool) -> float:
    """Ulps one cast to ``dtype`` may move a value: half (to nearest), one for the truncating
    interpreter's bf16, none for float32 (its roundings are in the relative term)."""
    if dtype == torch.float32:
        return 0.0
    return 1.0 if truncating and dtype == torch.bfloat16 else 0.5


def _bound(reference, weight, act_dtype, out_dtype, width, weight_after_cast, truncating):
    """Per-element bound on ``|result - reference|`` (see the module docstring)."""
    rel = (width + 6) * U32
    w = weight.double().abs()
    normed = reference.abs() / w.clamp(min=1e-30)
    bound = reference.abs() * rel
    if weight_after_cast:
        bound = bound + w * _rounding(act_dtype, truncating) * _ulp(normed * (1 + rel), act_dtype)
    bound = bound + _rounding(out_dtype, truncating) * _ulp(reference.abs() * (1 + rel) + bound, out_dtype)
    return bound + 2 * _ulp(reference, torch.float32)  # absolute floor: float32's subnormal spacing


def _reference64(qkv, q_weight, k_weight, q_size, kv_size, eps):
    """The exact formula in float64: x · rsqrt(mean(x²) + eps) · w, no intermediate rounding."""
    x = qkv.double()
    q, k = x[:, :q_size], x[:, q_size : q_size + kv_size]

    def norm(part, weight):
        return part * torch.rsqrt(part.pow(2).mean(-1, keepdim=True) + eps) * weight.double()

    return norm(q, q_weight), norm(k, k_weight)


def _poisoned(qkv, q_weight, k_weight, q_size, kv_size, weight_after_cast):
    tokens = qkv.shape[0]
    dtypes = [output_dtype(qkv.dtype, w.dtype, weight_after_cast) for w in (q_weight, k_weight)]
    return tuple(torch.full((tokens, w), float("nan"), dtype=d) for w, d in zip((q_size, kv_size), dtypes, strict=True))


def _assert_within(name, got, reference, bound):
    error = (got.double() - reference).abs()
    bad = ~(error <= bound)  # NaN (an unwritten element) counts as bad
    if bad.any():
        index = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {got.numel()} elements off; first at {index}: got {got[index].item()!r}, "
            f"expected {reference[index].item()!r} ± {bound[index].item():.3g} (error {error[index].item():.3g})"
        )


def check_kernel(launcher, qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, launch=None):
    """Run ``launcher`` on poisoned outputs and check it against float64 and the torch op."""
    original = qkv.clone()
    out = _poisoned(qkv, q_weight, k_weight, q_size, kv_size, weight_after_cast)
    result = launcher(qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, out=out, launch=launch)
    assert all(r is o for r, o in zip(result, out, strict=True)), "the launcher must return the out tensors"
    assert torch.equal(qkv, original), "the kernel wrote into qkv"
    with_torch = ops.qk_norm(qkv.contiguous(), q_weight, k_weight, q_size, kv_size, eps, weight_after_cast)
    references = _reference64(qkv, q_weight, k_weight, q_size, kv_size, eps)
    for name, got, expected, reference, weight, width in zip(
        ("q_out", "k_out"), out, with_torch, references, (q_weight, k_weight), (q_size, kv_size), strict=True
    ):
        assert not got.isnan().any(), f"{name}: {int(got.isnan().sum())} elements never written"
        args = (weight, qkv.dtype, got.dtype, width, weight_after_cast)
        kernel_bound = _bound(reference, *args, truncating=True)
        _assert_within(f"{name} vs float64", got, reference, kernel_bound)
        _assert_within(f"{name} vs torch", got, expected.double(), kernel_bound + _bound(reference, *args, False))


def _pow2_at_most(limit):
    return st.integers(0, max(0, limit.bit_length() - 1)).map(lambda e: 1 << e)


@st.composite
def kernel_inputs(draw, max_tokens=40, max_q=160, max_kv=48):
    """qkv ``[T, q + 2kv]`` with q/k values of mixed scale, weights, eps, rounding order, tiling."""
    tokens = draw(st.integers(1, max_tokens))
    q_size, kv_size = draw(st.integers(1, max_q)), draw(st.integers(1, max_kv))
    dtype = draw(st.sampled_from(DTYPES))
    weight_dtype = draw(st.sampled_from((torch.float32, dtype)))
    seed = draw(st.integers(0, 2**16))
    scale = 2.0 ** draw(st.integers(-6, 6))
    generator = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(tokens, q_size + 2 * kv_size, generator=generator) * scale).to(dtype)
    q_weight = (1 + torch.randn(q_size, generator=generator) / 4).to(weight_dtype)
    k_weight = (1 + torch.randn(kv_size, generator=generator) / 4).to(weight_dtype)
    eps = draw(st.sampled_from((1e-6, 1e-5, 1e-2)))
    weight_after_cast = draw(st.booleans())
    launch = None
    if draw(st.booleans()):
        default = launch_for(tokens, q_size, kv_size, qkv.device)
        launch = Launch(
            rows=draw(_pow2_at_most(16)),
            block_q=max(default.block_q // draw(_pow2_at_most(8)), 1),
            block_kv=max(default.block_kv // draw(_pow2_at_most(8)), 1),
            num_programs=draw(st.integers(1, 6)),
        )
    return qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, launch


@given(kernel_inputs())
@example((torch.randn(3, 4000).bfloat16(), torch.rand(3000) + 0.5, torch.rand(500) + 0.5, 3000, 500, 1e-6, False, None))
@example(
    (torch.randn(2, 4000).half(), torch.rand(3000).half(), torch.rand(500).half(), 3000, 500, 1e-6, True, None)
).via("non-power-of-two MiniMax-like widths, fp16 weights after the cast")
def test_tp1_kernel_matches_torch_and_float64(inputs):
    check_kernel(qk_norm_triton, *inputs)


@pytest.mark.parametrize(
    ("launcher", "symptom"),
    [
        ("qk_norm_grid_capped", "never written"),
        ("qk_norm_unmasked_loads", "elements off"),
        ("qk_norm_k_out_floor_chunks", "k_out: .* never written"),
    ],
)
def test_the_kernel_property_catches_the_bank_kernel_faults(launcher, symptom):
    """The property above, run on each faulty launcher of :mod:`pmverify.faults.kernels`, fails."""
    from pmverify.faults import kernels as faulty

    @hypothesis_seed(0)
    @settings(database=None, max_examples=60, phases=[Phase.explicit, Phase.generate])
    @given(kernel_inputs())
    def property_(inputs):
        check_kernel(getattr(faulty, launcher), *inputs)

    with pytest.raises(AssertionError, match=symptom):
        property_()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight_after_cast", [False, True])
def test_every_dtype_and_order_on_an_odd_geometry(dtype, weight_after_cast):
    generator = torch.Generator().manual_seed(1)
    qkv = torch.randn(7, 30 + 2 * 5, generator=generator).to(dtype)
    for weight_dtype in {torch.float32, dtype}:
        q_weight, k_weight = torch.rand(30, generator=generator).to(weight_dtype), torch.rand(5).to(weight_dtype)
        check_kernel(qk_norm_triton, qkv, q_weight, k_weight, 30, 5, 1e-6, weight_after_cast)
        # Chunked: each part read in chunks of 4 / 2 columns, two rows per block, three programs.
        launch = Launch(rows=2, block_q=4, block_kv=2, num_programs=3)
        check_kernel(qk_norm_triton, qkv, q_weight, k_weight, 30, 5, 1e-6, weight_after_cast, launch)


@pytest.mark.parametrize(("tokens", "rows", "num_programs"), [(65536, 512, 4), (65537, 1024, 1), (70001, 256, 3)])
def test_grid_covers_every_row_for_any_token_count(tokens, rows, num_programs):
    """Each program walks many row blocks (the interpreter costs ~10 ms per row block, so the blocks
    are larger than :func:`launch_for`'s 64 rows for this width)."""
    qkv = torch.randn(tokens, 12 + 2 * 3).bfloat16()
    q_weight, k_weight = torch.rand(12) + 0.5, torch.rand(3) + 0.5
    launch = Launch(rows, 16, 4, num_programs)
    assert launch.grid(tokens) == (num_programs,) and num_programs * rows < tokens
    check_kernel(qk_norm_triton, qkv, q_weight, k_weight, 12, 3, 1e-6, False, launch)


def test_tokens_zero_returns_empty_outputs():
    q_out, k_out = qk_norm_triton(torch.empty(0, 10), torch.ones(4), torch.ones(3), 4, 3, 1e-6)
    assert q_out.shape == (0, 4) and k_out.shape == (0, 3)


def _tp_launcher(qkv, q_weight, k_weight, q_size, kv_size, eps, weight_after_cast, *, out=None, launch=None):
    return qk_norm_tp_triton(
        qkv, q_weight, k_weight, q_size, kv_size, eps, 1, "0", weight_after_cast, out=out, launch=launch
    )


@given(kernel_inputs(max_tokens=20, max_q=64, max_kv=24))
def test_tp_kernels_at_world_1_match_torch_and_float64(inputs):
    check_kernel(_tp_launcher, *inputs)


def test_sum_squares_kernel_writes_float32_sums():
    qkv = torch.randn(9, 13 + 2 * 6).half()
    sums = torch.full((9, 2), float("nan"))
    triton_impl.sum_squares_triton(qkv, 13, 6, out=sums, launch=Launch(4, 4, 2, 2))
    expected = torch.stack([qkv[:, :13].double().pow(2).sum(-1), qkv[:, 13:19].double().pow(2).sum(-1)], dim=-1)
    torch.testing.assert_close(sums.double(), expected, rtol=20 * U32, atol=0)


def _tp_rank(qkv, q_weight, k_weight, q_size, kv_size, world):
    return torch.ops.pmverify.qk_norm_tp(qkv, q_weight, k_weight, q_size, kv_size, 1e-6, world, "0", False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world", [2, 4])
def test_tp_kernels_all_reduce_over_a_threaded_world(monkeypatch, dtype, world):
    """Each rank holds 6 q columns and 5 k columns of the full 6·world / 5·world hidden sizes; the
    op under ``PMVERIFY_QK_NORM_IMPL=triton`` must normalise over the full width."""
    generator = torch.Generator().manual_seed(world)
    q_full, k_full = torch.randn(5, 6 * world, generator=generator), torch.randn(5, 5 * world, generator=generator)
    q_weight, k_weight = torch.rand(6 * world, generator=generator) + 0.5, torch.rand(5 * world) + 0.5
    shards = []
    for rank in range(world):
        q, k = q_full[:, rank * 6 : rank * 6 + 6], k_full[:, rank * 5 : rank * 5 + 5]
        qkv = torch.cat([q, k, torch.randn(5, 5)], dim=-1).to(dtype).contiguous()
        shards.append((qkv, q_weight[rank * 6 : rank * 6 + 6], k_weight[rank * 5 : rank * 5 + 5], 6, 5, world))
    monkeypatch.setenv(ops.IMPL_ENV, "triton")
    outs = run_spmd(_tp_rank, world, shards)
    full = torch.cat([torch.cat([s[0][:, :6] for s in shards], -1), torch.cat([s[0][:, 6:11] for s in shards], -1)], -1)
    q_ref, k_ref = _reference64(full, q_weight, k_weight, 6 * world, 5 * world, 1e-6)
    for rank, (q_out, k_out) in enumerate(outs):
        for got, reference, weight in (
            (q_out, q_ref[:, rank * 6 : rank * 6 + 6], q_weight[rank * 6 : rank * 6 + 6]),
            (k_out, k_ref[:, rank * 5 : rank * 5 + 5], k_weight[rank * 5 : rank * 5 + 5]),
        ):
            bound = _bound(reference, weight, dtype, got.dtype, 6 * world + world, False, truncating=True)
            _assert_within(f"rank {rank}", got, reference, bound)


# ------------------------------------------------------------------------------------ dispatch


def test_op_dispatches_on_the_environment_variable(monkeypatch):
    calls = []
    real = triton_impl.qk_norm_triton
    monkeypatch.setattr(triton_impl, "qk_norm_triton", lambda *a: calls.append(a) or real(*a))
    qkv, q_weight, k_weight = torch.randn(3, 16), torch.rand(8), torch.rand(4)
    for value, expected in (("", 0), ("auto", 0), ("torch", 0), ("TRITON", 1), ("triton", 2)):
        monkeypatch.setenv(ops.IMPL_ENV, value)
        assert ops.implementation(qkv) == ("triton" if "triton" in value.lower() else "torch")
        q_out, _ = torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, 8, 4, 1e-6)
        assert len(calls) == expected and not q_out.isnan().any()
    monkeypatch.setenv(ops.IMPL_ENV, "cuda")
    with pytest.raises(ValueError, match=r"PMVERIFY_QK_NORM_IMPL='cuda': expected one of auto, triton, torch"):
        torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, 8, 4, 1e-6)


@pytest.mark.parametrize(
    "prelude",
    [
        "",  # never turned on
        pytest.param(  # turned on after triton's own jit functions; a fresh process each: the slow step
            "import triton\nos.environ['TRITON_INTERPRET'] = '1'\n", marks=pytest.mark.slow
        ),
    ],
)
def test_forced_triton_without_the_interpreter_is_a_clear_error(prelude):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {ops.IMPL_ENV: "triton"}
    code = (
        f"import os\n{prelude}import torch, pmverify.fusions.qk_norm\n"
        "torch.ops.pmverify.qk_norm(torch.randn(2, 16), torch.ones(8), torch.ones(4), 8, 4, 1e-6)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "RuntimeError: the Triton QK norm on CPU tensors runs in Triton's interpreter: set TRITON_INTERPRET=1" in (
        run.stderr
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rows": 3}, "rows=3 must be a power of two"),
        ({"block_q": 0}, "block_q=0 must be a positive int"),
        ({"num_programs": 2.0}, r"num_programs=2.0 must be a positive int"),
        ({"rows": 128, "block_q": 16384}, r"rows·block_q = 128·16384 exceeds Triton's 1048576 elements"),
        ({"num_warps": 64}, r"num_warps=64 exceeds 32"),
    ],
)
def test_launch_refuses_bad_tiling(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Launch(**{"rows": 1, "block_q": 1, "block_kv": 1, "num_programs": 1, **kwargs})


def test_out_of_the_wrong_shape_is_refused():
    qkv = torch.randn(2, 16)
    with pytest.raises(ValueError, match=r"out q_out is \(2, 7\) torch.float32"):
        qk_norm_triton(qkv, torch.ones(8), torch.ones(4), 8, 4, 1e-6, out=(torch.empty(2, 7), torch.empty(2, 4)))


def test_default_tiling_reads_minimax_rows_once():
    """MiniMax-M2 at tp 1 (q 6144, kv 1024) and tp 8 (768, 128): each part one chunk."""
    for q_size, kv_size in ((6144, 1024), (768, 128), (3000, 500)):
        launch = launch_for(32768, q_size, kv_size, torch.device("cpu"))
        assert launch.chunks(q_size, kv_size) == (1, 1)


@pytest.mark.parametrize("tp", [False, True])
def test_opcheck_with_the_triton_implementation(monkeypatch, tp):
    """The ops' schema, fake kernels and aliasing hold with the kernels behind them too."""
    monkeypatch.setenv(ops.IMPL_ENV, "triton")
    qkv, q_weight, k_weight = torch.randn(5, 30 + 2 * 5).bfloat16(), torch.rand(30), torch.rand(5)
    if tp:
        torch.library.opcheck(
            torch.ops.pmverify.qk_norm_tp.default, (qkv, q_weight, k_weight, 30, 5, 1e-6, 1, "0", True)
        )
    else:
        torch.library.opcheck(torch.ops.pmverify.qk_norm.default, (qkv, q_weight, k_weight, 30, 5, 1e-6, True))


@pytest.mark.parametrize("tensor_parallel", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_shipped_pass_with_kernels_behind_its_ops_is_verified(monkeypatch, tensor_parallel):
    """pmverify's own oracles on the shipped pass whose fused ops run the kernels (fp32 and fp16:
    the interpreter's bf16 truncation is not the kernel's rounding on a GPU)."""
    import pmverify
    from pmverify.fusions.qk_norm import QKNormFusionPass
    from pmverify.fusions.qk_norm.testing import qk_norm_cases, qk_norm_tp_cases

    monkeypatch.setenv(ops.IMPL_ENV, "triton")
    calls = []
    name = "qk_norm_tp_triton" if tensor_parallel else "qk_norm_triton"
    launcher = getattr(triton_impl, name)
    monkeypatch.setattr(triton_impl, name, lambda *a, **k: calls.append(1) or launcher(*a, **k))
    cases = qk_norm_tp_cases if tensor_parallel else qk_norm_cases
    pmverify.verify(QKNormFusionPass, cases(dtypes=(torch.float32, torch.float16)))
    assert calls, "the fused op never ran its kernels"


def test_strided_weights_and_a_row_strided_qkv_view():
    """Weights that are strided views are read as such (copied to unit stride); a qkv whose rows are
    spaced wider than its width (a column slice of a wider activation) is read in place."""
    wide = torch.randn(6, 64)
    qkv = wide[:, : 30 + 2 * 5]
    q_weight, k_weight = (torch.rand(60) + 0.5)[::2], (torch.rand(10) + 0.5)[::2]
    assert qkv.stride() == (64, 1) and q_weight.stride() == (2,)
    check_kernel(qk_norm_triton, qkv, q_weight, k_weight, 30, 5, 1e-6, False)
    check_kernel(_tp_launcher, qkv, q_weight, k_weight, 30, 5, 1e-6, True)


@pytest.mark.parametrize(
    "bad", [lambda s: s[:3], lambda s: s[:, :1], lambda s: s.double(), lambda s: s.t().contiguous().t()[:, :0]]
)
def test_apply_refuses_sums_of_the_wrong_shape_or_dtype(bad):
    qkv = torch.randn(6, 40)
    sums = triton_impl.sum_squares_triton(qkv, 30, 5)
    with pytest.raises(ValueError, match=r"sums is .*; expected \(6, 2\) torch.float32 on cpu"):
        triton_impl.qk_norm_apply_triton(qkv, bad(sums), torch.ones(30), torch.ones(5), 30, 5, 1e-6, 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"qkv": torch.randn(2, 3, 40)}, r"qkv has shape \(2, 3, 40\); expected \[T, q_size \+ 2\*kv_size\]"),
        ({"qkv": torch.randn(4, 41)}, r"qkv has shape \(4, 41\)"),
        ({"q_weight": torch.ones(5)}, r"q_weight has shape \(5,\) on cpu; expected \(20,\) on cpu"),
        ({"k_weight": torch.ones(10, 1)}, r"k_weight has shape \(10, 1\)"),
    ],
)
def test_launchers_refuse_a_geometry_they_would_read_past(change, message):
    """The kernels index raw memory by the geometry: a launcher called directly checks it."""
    args = {"qkv": torch.randn(4, 40), "q_weight": torch.ones(20), "k_weight": torch.ones(10)} | change
    for launcher in (qk_norm_triton, _tp_launcher):
        with pytest.raises(ValueError, match=message):
            launcher(args["qkv"], args["q_weight"], args["k_weight"], 20, 10, 1e-6, False)
    with pytest.raises(ValueError, match="tp_world=0 must be positive"):
        qk_norm_tp_triton(torch.randn(4, 40), torch.ones(20), torch.ones(10), 20, 10, 1e-6, 0, "0")
