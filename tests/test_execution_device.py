"""The execution layer on a case's device, where CPU can reach it (``simulated("cuda")``: fake
CUDA tensors): which CUDA generators a run forks, seeds and replays (rng_devices), and a symbolic
case resized on its own device (inputs_at builds its index on the value's device). The real CUDA
runs: tests/gpu/test_oracles_cuda.py."""

from __future__ import annotations

import torch
from _random_graphs import drawing_graph
from hypothesis import HealthCheck, Phase, given, settings

from pmverify import GraphCase
from pmverify._execution import rng_devices, run_graph
from pmverify._shapes.sizes import case_at
from pmverify.device import on_device, simulated
from pmverify.fusions.qk_norm.testing import qk_norm_cases

CUDA = torch.device("cuda", 0)


def test_rng_devices_cpu_case_forks_no_cuda_generator():
    x = torch.randn(4, 8)
    assert rng_devices(drawing_graph(), (x,)) == []
    # and the CPU run draws as before: the same numbers twice, the CPU generator restored
    state = torch.random.get_rng_state()
    first, _ = run_graph(drawing_graph(), (x,))
    second, _ = run_graph(drawing_graph(), (x,))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert torch.equal(torch.random.get_rng_state(), state)


def test_rng_devices_of_a_cuda_case():
    """A case moved to CUDA draws from cuda:0's generator: its inputs say so, and so does a graph
    whose only CUDA value is made by a factory call (``rand`` with the device the move named)."""
    x = torch.randn(4, 8)
    with simulated("cuda"):
        case = on_device(GraphCase(drawing_graph(), [(x,)]), "cuda")
        assert rng_devices(case.gm, case.inputs[0]) == [0]
        assert rng_devices(case.gm) == [0]  # from the rand call's device=
    graph = torch.fx.Graph()
    graph.output((graph.call_function(torch.ops.aten.rand.default, ([2],), {"device": torch.device("cuda", 1)}),))
    assert rng_devices(torch.fx.GraphModule(torch.nn.Module(), graph)) == [1]


@settings(
    max_examples=3, database=None, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
)
@given(qk_norm_cases(max_instances=1, dynamic=True))
def test_a_symbolic_cuda_case_resizes_on_its_device(case):
    """compile_ranges runs a symbolic case at other sizes (case_at): the resized inputs stay on the
    case's device (an index built on CPU fails index_select on CUDA)."""
    assert case.symbols
    symbol = case.symbols[0]
    with simulated("cuda") as mode:
        moved = on_device(case, "cuda")
        with mode:
            for size in {symbol.min, symbol.max}:
                sized = case_at(moved, {symbol.name: size})
                expected = case_at(case, {symbol.name: size})
                for got, want in zip(sized.inputs[0], expected.inputs[0], strict=True):
                    if isinstance(want, torch.Tensor):
                        assert got.device == CUDA and (got.shape, got.stride()) == (want.shape, want.stride())
                    else:
                        assert got == want
