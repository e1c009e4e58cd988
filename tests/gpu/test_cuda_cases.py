"""Cases on a real CUDA device (skipped without one): the move keeps values and aliasing, the
shipped pass is checked there directly and compiled (Triton code from Inductor, the fused op on
its compiled Triton kernels), and the tiny MiniMax-M2 compiles with the pass on the GPU.

Run on a GPU machine with the compiled kernels, not the interpreter:
``TRITON_INTERPRET=0 pytest -m gpu tests/gpu`` (``benchmarks/device_session.sh`` does)."""

import pytest
import torch
import torch.utils._pytree as pytree
from hypothesis import HealthCheck, settings

import pmverify
from pmverify.device import case_device, on_device, tensor_on

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda", 0)


@pytest.fixture
def kernels_compiled():
    """The fused op's Triton kernels as compiled for the GPU (not the interpreter), counted."""
    from pmverify.fusions.qk_norm import triton_impl

    if triton_impl.interpreted():
        pytest.fail("TRITON_INTERPRET is on: run the gpu tests with TRITON_INTERPRET=0")
    calls = []
    real = triton_impl.qk_norm_triton

    def counted(*args, **kwargs):
        calls.append(args[0].device)
        return real(*args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(triton_impl, "qk_norm_triton", counted)
    yield calls
    mp.undo()


def _cases(**kwargs):
    from pmverify.fusions.qk_norm.testing import qk_norm_cases

    return qk_norm_cases(**kwargs)


def test_a_move_to_cuda_keeps_values_strides_and_shared_storages():
    base = torch.randn(6, 5)
    for dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.int64, torch.bool):
        source = base.to(dtype)
        view = source[1:, 2:4]
        moved = tensor_on(view, "cuda")
        assert moved.device == CUDA and moved.stride() == view.stride()
        assert moved.storage_offset() == view.storage_offset()
        assert torch.equal(moved.cpu().view(torch.uint8), view.contiguous().view(torch.uint8))


def test_the_shipped_pass_is_quiet_on_cuda_and_its_fused_op_runs_the_compiled_kernels(kernels_compiled):
    from pmverify.fusions.qk_norm import QKNormFusionPass

    summary = pmverify.verify(
        QKNormFusionPass,
        _cases(),
        max_examples=30,
        seed=0,
        device="cuda",
        settings=settings(database=None, suppress_health_check=list(HealthCheck)),
    )
    assert summary.cases == 30 and summary.rewritten_cases > 0
    assert kernels_compiled and all(device.type == "cuda" for device in kernels_compiled)


def test_a_case_on_cuda_runs_there_before_and_after_the_pass():
    from hypothesis import find

    from pmverify.fusions.qk_norm import QKNormFusionPass

    case = find(_cases(near_misses=False), lambda c: c.expected_matches >= 1)
    result = pmverify.check_case(QKNormFusionPass, case, device="cuda")
    assert case_device(result.case) == CUDA and result.violations == [] and result.rewrite_count >= 1
    outputs = pytree.tree_leaves(result.pair.results(0).after)
    assert outputs and all(t.device == CUDA for t in outputs if isinstance(t, torch.Tensor))


def test_compiled_mode_on_cuda_generates_triton_code_with_and_without_the_pass(kernels_compiled):
    from hypothesis import find
    from torch._inductor.utils import run_and_get_code

    from pmverify.fusions.qk_norm import QKNormFusionPass

    case = on_device(find(_cases(near_misses=False), lambda c: c.expected_matches >= 1), "cuda")
    result = pmverify.check_case(QKNormFusionPass, case, mode="compiled")
    assert result.violations == [] and result.rewrite_count >= 1
    torch.compiler.reset()
    _, code = run_and_get_code(torch.compile(case.gm, backend="inductor"), *case.inputs[0])
    assert any("@triton.jit" in source for source in code), "Inductor generated no Triton kernel on CUDA"


def test_the_tiny_minimax_m2_compiles_with_the_pass_on_cuda():
    from pmverify.fusions.qk_norm.real_model import check_minimax_m2

    result = check_minimax_m2(device="cuda")
    if result.skipped:
        pytest.skip(result.skipped)
    assert result.ok, result.detail
    assert "on cuda:0" in result.detail


def test_a_replacement_that_makes_its_output_on_cpu_is_a_device_finding():
    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output((g.call_function(aten.neg.default, (x,)),))
    case = pmverify.GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(4, 3),)])

    def to_cpu(graph):  # neg(x) -> neg(x) made on the default device, as an `empty` without device=
        neg = next(n for n in graph.nodes if n.target is aten.neg.default)
        with graph.inserting_after(neg):
            moved = graph.call_function(aten._to_copy.default, (neg,), {"device": torch.device("cpu")})
        neg.replace_all_uses_with(moved, delete_user_cb=lambda user: user is not moved)

    result = pmverify.check_case(to_cpu, case, device="cuda", oracles=["structure"])
    assert [(v.oracle, v.kind) for v in result.violations] == [("structure", "device")], result.violations
