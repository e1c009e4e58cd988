"""The oracles and the runs under them on a real CUDA device (``gpu``: skipped without one).

What CPU cannot reach (tests/test_execution_device.py covers the rest with fake CUDA tensors): a
graph drawing random numbers on CUDA runs from the seeded CUDA generator, restores it, and its
float64 reference replays the CUDA draws; the noise floor's perturbations meet CUDA values (drawn
on CPU, the same on every device); a symbolic CUDA case runs at its range's ends (compile_ranges);
a pass that does nothing is quiet on drawn CUDA cases."""

from __future__ import annotations

import pytest
import torch
from _random_graphs import drawing_graph
from hypothesis import HealthCheck, given, settings
from torch.fx.experimental.proxy_tensor import make_fx

from pmverify import GraphCase, check_case
from pmverify._execution import Replayer, deterministic_fill, float64_reference, run_graph
from pmverify._shapes.sizes import case_at
from pmverify.device import on_device
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.oracles._noise import noise_floor
from pmverify.strategies import fx_graphs, with_mutations

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda", 0)


def _drawing_case() -> GraphCase:
    """``x * rand + bernoulli(x) + dropout(x)`` on cuda:0 (its ``rand`` given ``device=`` by the move)."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    return on_device(GraphCase(drawing_graph(), [(x,)]), "cuda")


def test_a_cuda_graph_draws_from_the_seed_and_leaves_the_cuda_generator_as_it_was():
    case = _drawing_case()
    torch.cuda.manual_seed(1234)
    state = torch.cuda.get_rng_state(CUDA.index)
    first, _ = run_graph(case.gm, case.inputs[0])
    assert torch.equal(torch.cuda.get_rng_state(CUDA.index), state)
    torch.rand(16, device=CUDA)  # another state: the run starts from RNG_SEED whatever it is
    second, _ = run_graph(case.gm, case.inputs[0])
    assert all(v.device == CUDA for v in first)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_a_replay_draws_what_the_cuda_run_drew():
    """Each draw's CUDA generator state is recorded and set again: the graph replayed in its own
    dtypes takes every draw from the generator (float32 out), never the recorded fallback (which
    would widen it to float64); and the float64 reference runs on the device."""
    case = _drawing_case()
    drawn: dict = {}
    before, _ = run_graph(case.gm, case.inputs[0], drawn=drawn)
    assert len(drawn) == 3
    assert all([index for index, _ in states[1]] == [CUDA.index] for states, _ in drawn.values())
    args = [x.clone() for x in case.inputs[0]]
    with torch.no_grad(), deterministic_fill():
        replayed = Replayer(case.gm, drawn).run(*args)
    assert replayed[0].dtype == torch.float32 and torch.equal(replayed[0], before[0])
    reference = float64_reference(case.gm, case.inputs[0], drawn=drawn)
    assert reference is not None
    assert reference[0][0].device == CUDA and reference[0][0].dtype == torch.float64


def _centred_softmax(x):
    p = torch.softmax(x, -1)
    return p - p.mean(-1, keepdim=True)  # all cancellation: its noise floor matters


def test_the_noise_floor_runs_on_cuda_as_on_cpu():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    gm = make_fx(_centred_softmax)(x)
    on_cpu = noise_floor(gm, (x,), float64_reference(gm, (x,)))
    case = on_device(GraphCase(gm, [(x,)]), "cuda")
    on_cuda = noise_floor(case.gm, case.inputs[0], float64_reference(case.gm, case.inputs[0]))
    assert on_cpu is not None and on_cuda is not None
    for level_cpu, level_cuda in zip(on_cpu, on_cuda, strict=True):
        for part_cpu, part_cuda in zip(level_cpu, level_cuda, strict=True):
            for a, b in zip(part_cpu, part_cuda, strict=True):
                if a is None:
                    assert b is None
                    continue
                assert b.device == CUDA
                torch.testing.assert_close(b.cpu(), a, rtol=1e-3, atol=1e-15)


@settings(max_examples=5, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(qk_norm_cases(max_instances=1, dynamic=True))
def test_a_symbolic_cuda_case_runs_at_other_sizes(case):
    symbol = case.symbols[0]
    moved = on_device(case, "cuda")
    for size in {symbol.min, symbol.max}:
        on_cpu, on_cuda = case_at(case, {symbol.name: size}), case_at(moved, {symbol.name: size})
        for want, got in zip(on_cpu.inputs[0], on_cuda.inputs[0], strict=True):
            if isinstance(want, torch.Tensor):
                assert got.device == CUDA and torch.equal(got.cpu(), want)
        outputs, _ = run_graph(on_cuda.gm, on_cuda.inputs[0])
        assert all(v.device == CUDA for v in outputs if isinstance(v, torch.Tensor))


def _does_nothing(graph: torch.fx.Graph) -> None:
    return None


@settings(max_examples=20, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(with_mutations(fx_graphs(max_nodes=6), device="cuda"))
def test_a_pass_that_does_nothing_is_quiet_on_cuda(case):
    result = check_case(_does_nothing, case)
    assert result.ok, result.violations
    assert all(v.device == CUDA for v in case.inputs[0] if isinstance(v, torch.Tensor))
