"""The fused QK norm's Triton kernels compile for NVIDIA GPUs, checked without one.

The interpreter tests run the kernels' Python; this compiles them as a GPU launch would (Triton's
front end, its GPU passes, LLVM, ``ptxas`` to a cubin) for sm_90 (H100/H200) with the tilings :func:`launch_for` picks for MiniMax-M2 and for odd
geometries, every activation dtype, both rounding orders, the chunked path and (bf16) ``T == 1``,
which Triton specialises to a constant at decode; and the MiniMax-M2 tp-1 bf16 kernels for sm_80
(A100). It runs in a fresh process: this one decorated the kernels for the interpreter.
"""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import itertools
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from pmverify.fusions.qk_norm import kernels
    from pmverify.fusions.qk_norm.triton_impl import Launch, launch_for

    ACT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
    compiled = 0

    def build(fn, args, constexprs, num_warps, capability):
        global compiled
        signature = {**args, **{name: "constexpr" for name in constexprs}}
        source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
        binary = triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": num_warps})
        assert binary.asm["cubin"], fn.__name__
        compiled += 1

    def meta(launch, q_size, kv_size):
        chunks_q, chunks_kv = launch.chunks(q_size, kv_size)
        return dict(ROWS=launch.rows, BLOCK_Q=launch.block_q, CHUNKS_Q=chunks_q, BLOCK_KV=launch.block_kv,
                    CHUNKS_KV=chunks_kv)

    geometries = [(6144, 1024, None), (768, 128, None), (3000, 500, None), (40000, 500, None),
                  (30, 5, Launch(rows=2, block_q=8, block_kv=2, num_programs=1))]
    # Every geometry and dtype for sm_90; the MiniMax-M2 tp-1 bf16 kernels for sm_80.
    plan = [(90, g, d) for g, d in itertools.product(geometries, ACT)] + [(80, geometries[0], torch.bfloat16)]
    for capability, (q_size, kv_size, launch), dtype in plan:
        launch = launch or launch_for(4096, q_size, kv_size, torch.device("cpu"))
        act, tiling = ACT[dtype], meta(launch, q_size, kv_size)
        scalars = {"T": "i32", "stride": "i32", "q_size": "i32", "kv_size": "i32"}
        for weight_after_cast, weight in ((False, act), (True, "fp32")):
            out = "fp32" if weight_after_cast and weight == "fp32" else act
            args = {"qkv_ptr": f"*{act}", "q_weight_ptr": f"*{weight}", "k_weight_ptr": f"*{weight}",
                    "q_out_ptr": f"*{out}", "k_out_ptr": f"*{out}", **scalars,
                    "q_divisor": "fp32", "k_divisor": "fp32", "eps": "fp32"}
            flags = dict(tiling, WEIGHT_AFTER_CAST=weight_after_cast)
            build(kernels.qk_norm_kernel, args, flags, launch.num_warps, capability)
            if dtype == torch.bfloat16:
                decode = {k: v for k, v in args.items() if k != "T"}
                build(kernels.qk_norm_kernel, decode, dict(flags, T=1), launch.num_warps, capability)
            args = {"qkv_ptr": f"*{act}", "sums_ptr": "*fp32", **{k: v for k, v in args.items() if k != "qkv_ptr"}}
            build(kernels.qk_norm_apply_kernel, args, flags, launch.num_warps, capability)
        build(kernels.sum_squares_kernel, {"qkv_ptr": f"*{act}", "sums_ptr": "*fp32", **scalars}, tiling,
              launch.num_warps, capability)
    print("compiled", compiled)
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="Triton's bundled ptxas is for Linux")
@pytest.mark.slow
def test_kernels_compile_to_cubins_for_sm80_and_sm90(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.strip().endswith("compiled 92"), run.stdout[-500:]
