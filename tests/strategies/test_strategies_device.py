"""``device=`` on the case strategies: a case is drawn on CPU exactly as without it and moved last.

Without a GPU, under ``simulated("cuda")``: the same choices draw the same case as on CPU, up to
the move (graph, ground truth, every input's shape, strides, storage offset, dtype and which
inputs share a storage), and fake propagation of the moved graph puts every value on ``cuda:0``
(an input or a creation op left on CPU raises a device mismatch). ``device="cpu"`` draws what
None draws. Bad devices raise ``InvalidArgument`` naming ``device``; the device shows in the repr
(it keys the example database). Real CUDA draws: tests/gpu/test_strategies_cuda.py."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from pmverify.device import simulated
from pmverify.fusions.qk_norm.testing import qk_norm_cases, qk_norm_tp_cases
from pmverify.strategies import (
    fx_graphs,
    like,
    planted,
    tensors,
    tp_cases,
    with_mutating_custom_ops,
    with_mutations,
)

CUDA = torch.device("cuda", 0)
_DRAWS = settings(
    max_examples=3,
    database=None,
    derandomize=True,
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def _drawn(strategy: st.SearchStrategy, examples: int = 3) -> list:
    """The values ``strategy`` draws in a derandomized run: the same choices for the same count."""
    values: list = []

    @settings(_DRAWS, max_examples=examples)
    @given(strategy)
    def collect(value):
        values.append(value)

    collect()
    return values


def _rms_pattern(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


_RMS_EXAMPLE = (torch.empty(8, 16), torch.empty(16))


def _expr_cases(**kwargs):
    from torch._inductor.pattern_matcher import Arg, CallFunction, KeywordArg

    from pmverify.strategies import expr_cases

    aten = torch.ops.aten
    mm_add = CallFunction(aten.add.Tensor, CallFunction(aten.mm.default, Arg(), Arg()), KeywordArg("inp"))
    return expr_cases(mm_add, frozen="all", **kwargs)


#: Every public case strategy, as a function of ``device=`` (a few kinds of each: creation ops
#: with their ``device=`` argument, a symbolic case, frozen constants, a tensor-parallel world).
CASE_STRATEGIES = {
    "fx_graphs": lambda **kw: fx_graphs(max_nodes=6, **kw),
    "fx_graphs_creation": lambda **kw: fx_graphs(
        min_nodes=2, max_nodes=4, ops=["full", "zeros", "arange", "scalar_tensor", "full_like", "add"], **kw
    ),
    "fx_graphs_dynamic": lambda **kw: fx_graphs(max_nodes=4, dynamic=True, **kw),
    "planted": lambda **kw: planted(_rms_pattern, like(_RMS_EXAMPLE, vary={"t": [(0, 0)]}), min_instances=1, **kw),
    "with_mutations": lambda **kw: with_mutations(fx_graphs(max_nodes=4), min_mutations=1, **kw),
    "with_mutating_custom_ops": lambda **kw: with_mutating_custom_ops(fx_graphs(max_nodes=4), **kw),
    "tp_cases": lambda **kw: tp_cases(fx_graphs(max_nodes=4), tp_world=st.just(2), **kw),
    "expr_cases": _expr_cases,
    "qk_norm_cases": lambda **kw: qk_norm_cases(max_instances=1, **kw),
    "qk_norm_cases_dynamic": lambda **kw: qk_norm_cases(max_instances=1, dynamic=True, **kw),
    "qk_norm_tp_cases": lambda **kw: qk_norm_tp_cases(tp_world=st.just(2), max_instances=1, **kw),
}


def _storage_groups(values) -> list:
    """For each tensor of ``values``, the index of the first tensor sharing its storage."""
    keys = [v.untyped_storage()._cdata if isinstance(v, torch.Tensor) else None for v in values]
    return [None if key is None else keys.index(key) for key in keys]


def _graph_text(gm: torch.fx.GraphModule) -> str:
    text = gm.code
    for spelled in ("device(type='cuda', index=0)", "device(type='cpu')", "'cuda:0'", "'cpu'"):
        text = text.replace(spelled, "DEVICE")
    return text


def _check_inputs_moved(before, after, device: torch.device) -> None:
    assert len(before) == len(after)
    for x, y in zip(before, after, strict=True):
        if not isinstance(x, torch.Tensor):
            assert x == y
            continue
        assert isinstance(y, torch.Tensor) and y.device == device
        assert (y.shape, y.stride(), y.storage_offset(), y.dtype, y.requires_grad) == (
            x.shape,
            x.stride(),
            x.storage_offset(),
            x.dtype,
            x.requires_grad,
        )
    assert _storage_groups(after) == _storage_groups(before)


def check_moved(cpu_case, moved, mode) -> None:
    """``moved`` is ``cpu_case`` on cuda:0 (simulated in ``mode``): same graph up to its device
    arguments, same ground truth, inputs alike; every value fake-propagates on cuda:0."""
    assert (moved.label, moved.planted, moved.mutations, moved.tp_world, moved.form) == (
        cpu_case.label,
        cpu_case.planted,
        cpu_case.mutations,
        cpu_case.tp_world,
        cpu_case.form,
    )
    assert moved.placements == cpu_case.placements and moved.symbols == cpu_case.symbols
    assert _graph_text(moved.gm) == _graph_text(cpu_case.gm)
    for before, after in zip(cpu_case.inputs, moved.inputs, strict=True):
        _check_inputs_moved(before, after, CUDA)
    if cpu_case.source is not None:
        for before, after in zip(cpu_case.source.inputs, moved.source.inputs, strict=True):
            _check_inputs_moved(before, after, CUDA)
    for node in moved.gm.graph.nodes:  # the fake values a pass reads say cuda too
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            assert val.device == CUDA, (node.format_node(), val.device)
    for rank in moved.inputs:
        FakeTensorProp(moved.gm, mode).propagate(*rank)
        for node in moved.gm.graph.nodes:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                assert val.device == CUDA, (node.format_node(), val.device)


@pytest.mark.parametrize("name", sorted(CASE_STRATEGIES))
def test_cases_move_to_simulated_cuda(name):
    make = CASE_STRATEGIES[name]
    on_cpu = _drawn(make())
    with simulated("cuda") as mode:
        moved = _drawn(make(device="cuda"))
        assert len(moved) == len(on_cpu)
        for cpu_case, case in zip(on_cpu, moved, strict=True):
            check_moved(cpu_case, case, mode)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASE_STRATEGIES))
def test_cases_move_to_simulated_cuda_many(name):
    """As above over 300 draws: the move adds no choice and no span (it is made inside the
    strategy's own span), so a derandomized search draws the same sequence of cases either way."""
    make = CASE_STRATEGIES[name]
    on_cpu = _drawn(make(), examples=300)
    with simulated("cuda") as mode:
        moved = _drawn(make(device="cuda"), examples=300)
        assert len(moved) == len(on_cpu)
        for cpu_case, case in zip(on_cpu, moved, strict=True):
            check_moved(cpu_case, case, mode)


@pytest.mark.parametrize("name", ["fx_graphs", "with_mutations", "tp_cases", "qk_norm_cases"])
def test_device_cpu_draws_what_none_draws(name):
    make = CASE_STRATEGIES[name]
    for plain, on_cpu in zip(_drawn(make()), _drawn(make(device="cpu")), strict=True):
        assert _graph_text(plain.gm) == _graph_text(on_cpu.gm) and plain.label == on_cpu.label
        for before, after in zip(plain.inputs, on_cpu.inputs, strict=True):
            _check_inputs_moved(before, after, torch.device("cpu"))
            assert all(
                torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(before, after, strict=True)
            )


@pytest.mark.parametrize("name", ["with_mutations", "with_mutating_custom_ops", "tp_cases", "planted"])
def test_a_wrapper_keeps_its_inner_strategys_cpu_device(name):
    """A wrapper without ``device=`` leaves an inner CPU draw on CPU (``device="cpu"`` given inside)."""
    inner = fx_graphs(max_nodes=4, device="cpu")
    wrapped = {
        "with_mutations": lambda: with_mutations(inner, min_mutations=1),
        "with_mutating_custom_ops": lambda: with_mutating_custom_ops(inner),
        "tp_cases": lambda: tp_cases(inner, tp_world=st.just(2)),
        "planted": lambda: planted(
            _rms_pattern, like(_RMS_EXAMPLE, device="cpu"), context=inner, min_instances=1, max_instances=1
        ),
    }[name]()
    for case in _drawn(wrapped, examples=2):
        assert all(v.device.type == "cpu" for rank in case.inputs for v in rank if isinstance(v, torch.Tensor))


def test_tensors_on_simulated_cuda():
    shape, dtype = (3, 5), torch.bfloat16
    on_cpu = _drawn(tensors(dtype, shape))
    with simulated("cuda"):
        moved = _drawn(tensors(dtype, shape, device="cuda"))
    for x, y in zip(on_cpu, moved, strict=True):
        assert y.device == CUDA and (y.shape, y.stride(), y.dtype) == (x.shape, x.stride(), x.dtype)
    elements = tensors(torch.int64, (4,), elements=st.integers(0, 3), device="cpu")
    assert all(x.device.type == "cpu" for x in _drawn(elements))


def test_like_on_simulated_cuda_keeps_layouts():
    """A permuted example tensor draws permuted inputs: its strides survive the move."""
    example = (torch.empty(16, 8).t(), torch.empty(8), 1e-6)
    on_cpu = _drawn(like(example, vary={"t": [(0, 1)]}))
    with simulated("cuda"):
        moved = _drawn(like(example, vary={"t": [(0, 1)]}, device="cuda"))
    for before, after in zip(on_cpu, moved, strict=True):
        _check_inputs_moved(before, after, CUDA)
        assert after[0].stride() == (1, after[0].shape[0])


def test_like_with_dtypes_passes_device_on():
    with simulated("cuda"):
        drawn = _drawn(like(_RMS_EXAMPLE, dtypes=[torch.float32, torch.bfloat16], device="cuda"))
    assert all(x.device == CUDA for values in drawn for x in values)


_BAD_DEVICES = ["mps", 3, "cuda:x", "not a device", torch.float32]


@pytest.mark.parametrize("device", _BAD_DEVICES, ids=repr)
@pytest.mark.parametrize(
    "make",
    [
        *CASE_STRATEGIES.values(),
        lambda **kw: tensors(torch.float32, (2,), **kw),
        lambda **kw: like(_RMS_EXAMPLE, **kw),
        lambda **kw: like(_RMS_EXAMPLE, dtypes=[torch.float32], **kw),
    ],
    ids=[*CASE_STRATEGIES, "tensors", "like", "like_dtypes"],
)
def test_bad_device_is_invalid_at_once(make, device):
    with pytest.raises(InvalidArgument, match=r"device="):
        make(device=device)


@pytest.mark.parametrize("name", sorted(CASE_STRATEGIES))
def test_device_shows_in_the_repr(name):
    make = CASE_STRATEGIES[name]
    assert "device=" not in repr(make())
    assert "device='cuda'" in repr(make(device="cuda"))
    assert "device=" in repr(tensors(torch.float32, (2,), device="cuda"))
    assert "device=" in repr(like(_RMS_EXAMPLE, device="cuda"))


def test_drawing_on_a_missing_device_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from pmverify.errors import DeviceUnavailable

    with pytest.raises(DeviceUnavailable, match="device='cuda'"):
        _drawn(fx_graphs(max_nodes=2, device="cuda"), examples=1)


def test_factory_calls_without_a_device_move_too():
    """A hand-written factory call (``level="any"``: ``aten.full(size, v)``, no ``device=``) makes
    CPU tensors, torch's default: the move names the target device there too, so no value of a
    moved case stays on CPU (a ``*_like`` call follows its input already)."""
    creation = ["full", "zeros", "ones", "arange", "scalar_tensor", "full_like", "add", "mul"]
    make = lambda **kw: fx_graphs(min_nodes=2, max_nodes=4, level="any", ops=creation, **kw)  # noqa: E731
    on_cpu = _drawn(make(), examples=10)
    with simulated("cuda") as mode:
        for cpu_case, case in zip(on_cpu, _drawn(make(device="cuda"), examples=10), strict=True):
            assert cpu_case.label == case.label
            _check_inputs_moved(cpu_case.inputs[0], case.inputs[0], CUDA)
            FakeTensorProp(case.gm, mode).propagate(*case.inputs[0])
            for node in case.gm.graph.nodes:
                if isinstance(node.meta.get("val"), torch.Tensor):
                    assert node.meta["val"].device == CUDA, node.format_node()


@pytest.mark.parametrize(
    "wrap",
    [
        lambda: with_mutations(fx_graphs(max_nodes=2, device="cuda")),
        lambda: tp_cases(fx_graphs(max_nodes=2, device="cuda"), tp_world=st.just(2)),
        lambda: planted(_rms_pattern, like(_RMS_EXAMPLE, device="cuda"), min_instances=1),
    ],
    ids=["with_mutations", "tp_cases", "planted_inputs"],
)
def test_a_wrapper_of_a_simulated_inner_strategy_says_what_to_do(wrap):
    """Fake tensors hold no values for a wrapper's CPU work: it says to give it device= instead."""
    with simulated("cuda"), pytest.raises(InvalidArgument, match="give device= to the strategy wrapping it"):
        _drawn(wrap(), examples=1)


def test_inputs_on_moves_a_tuple_storage_by_storage():
    """What like() and planted's inputs move with: a view of another item stays a view of it."""
    from pmverify.device import inputs_on

    base = torch.arange(12.0).reshape(3, 4)
    values = (base, base[1:, ::2], torch.ones(2), 0.5)
    with simulated("cuda"):
        moved = inputs_on(values, "cuda")
    _check_inputs_moved(values, moved, CUDA)
    assert moved[3] == 0.5 and moved[1].storage_offset() == 4
