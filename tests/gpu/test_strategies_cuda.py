"""The case strategies on a real CUDA device (``gpu``: skipped without one).

What fake CUDA tensors cannot show (tests/strategies/test_strategies_device.py covers the rest):
values. A strategy given ``device="cuda"`` draws the CPU case's values there; a wrapper whose inner
strategy drew on CUDA copies the inner case to CPU for its own work and moves the result back,
drawing the same cases as over a CPU inner strategy; the moved graphs run on the device."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pmverify._execution import run_graph
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.strategies import fx_graphs, like, planted, tp_cases, with_mutating_custom_ops, with_mutations

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda", 0)
_DRAWS = settings(
    max_examples=5,
    database=None,
    derandomize=True,
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def _drawn(strategy: st.SearchStrategy) -> list:
    values: list = []

    @_DRAWS
    @given(strategy)
    def collect(value):
        values.append(value)

    collect()
    return values


def _rms_pattern(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


_RMS_EXAMPLE = (torch.empty(8, 16), torch.empty(16))


def _same_values(cpu_case, cuda_case) -> None:
    assert (cuda_case.label, cuda_case.planted, cuda_case.mutations) == (
        cpu_case.label,
        cpu_case.planted,
        cpu_case.mutations,
    )
    for before, after in zip(cpu_case.inputs, cuda_case.inputs, strict=True):
        for x, y in zip(before, after, strict=True):
            if isinstance(x, torch.Tensor):
                assert y.device == CUDA and y.stride() == x.stride() and torch.equal(y.cpu(), x)
            else:
                assert x == y


#: (a wrapper of a case or input strategy, the inner strategy it wraps) by name
_WRAPPERS = {
    "with_mutations": (lambda inner: with_mutations(inner, min_mutations=1), fx_graphs),
    "with_mutating_custom_ops": (with_mutating_custom_ops, fx_graphs),
    "tp_cases": (lambda inner: tp_cases(inner, tp_world=st.just(2)), fx_graphs),
    "planted_context": (
        lambda inner: planted(_rms_pattern, like(_RMS_EXAMPLE), context=inner, min_instances=1),
        fx_graphs,
    ),
    "planted_inputs": (
        lambda inner: planted(_rms_pattern, inner, min_instances=1),
        lambda **kw: like(_RMS_EXAMPLE, vary={"t": [(0, 0)]}, **kw),
    ),
}


@pytest.mark.parametrize("name", sorted(_WRAPPERS))
def test_a_wrapper_of_a_cuda_strategy_draws_its_cpu_cases_on_cuda(name):
    wrap, inner = _WRAPPERS[name]
    on_cpu = _drawn(wrap(inner()))
    on_cuda = _drawn(wrap(inner(device="cuda")))
    assert len(on_cpu) == len(on_cuda)
    for cpu_case, cuda_case in zip(on_cpu, on_cuda, strict=True):
        _same_values(cpu_case, cuda_case)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: fx_graphs(max_nodes=8, **kw),
        lambda **kw: with_mutations(fx_graphs(max_nodes=6), min_mutations=1, **kw),
        lambda **kw: qk_norm_cases(max_instances=1, **kw),
    ],
    ids=["fx_graphs", "with_mutations", "qk_norm_cases"],
)
def test_moved_cases_hold_the_cpu_values_and_run_on_cuda(make):
    for cpu_case, cuda_case in zip(_drawn(make()), _drawn(make(device="cuda")), strict=True):
        _same_values(cpu_case, cuda_case)
        outputs, _ = run_graph(cuda_case.gm, cuda_case.inputs[0])
        assert all(v.device == CUDA for v in outputs if isinstance(v, torch.Tensor))
