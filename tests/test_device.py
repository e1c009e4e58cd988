"""on_device: a case moved whole to a device (inputs storage by storage, the graph's device
arguments, constants and fake meta, a symbolic case's source), checked on fake CUDA tensors
(``simulated``) and on CPU; check_case / verify's ``device=``; real CUDA runs are in tests/gpu/."""

import dataclasses

import pytest
import torch
from hypothesis.errors import InvalidArgument
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import pmverify
from pmverify import GraphCase, PlantedInstance
from pmverify._engine.verify_settings import database_key
from pmverify.device import (
    DeviceUnavailable,
    _moved_bytes,
    _view_of,
    case_device,
    on_device,
    require_device,
    simulated,
    validate_device,
)

aten = torch.ops.aten
CPU = torch.device("cpu")
CUDA = torch.device("cuda", 0)
needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")


def _case(with_constant: bool = True) -> GraphCase:
    """x [4, 3] (a view at offset 3), y [4, 3] (a view of x's own base): (x * y + full([3]) [+ w])"""
    g = torch.fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    mul = g.call_function(aten.mul.Tensor, (x, y))
    full = g.call_function(
        aten.full.default,
        ([3], 2.0),
        {"dtype": torch.float32, "layout": torch.strided, "device": CPU, "pin_memory": False},
    )
    out = g.call_function(aten.add.Tensor, (mul, full))
    root = torch.nn.Module()
    if with_constant:
        root.register_buffer("w", torch.randn(3))
        out = g.call_function(aten.add.Tensor, (out, g.get_attr("w")))
    g.output((out,))
    base = torch.randn(5, 3)
    planted = (PlantedInstance("mul_add", (mul.name, out.name), True),)
    return GraphCase(torch.fx.GraphModule(root, g), [(base[1:], base[:4].t().contiguous().t())], planted=planted)


def _tensor_vals(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    return [n.meta["val"] for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]


def test_a_case_moved_to_simulated_cuda_fake_propagates_there_and_the_original_stays_on_cpu():
    case = _case()
    with simulated("cuda") as mode:
        moved = on_device(case, "cuda")
        FakeTensorProp(moved.gm, mode).propagate(*moved.inputs[0])
        with pytest.raises(Exception, match="device"):  # the unmoved graph's full(device=cpu) and buffer
            FakeTensorProp(case.gm, mode).propagate(*moved.inputs[0])
    vals = _tensor_vals(moved.gm)
    assert vals and all(v.device == CUDA for v in vals)
    assert case_device(moved) == CUDA and case_device(case) == CPU
    full = next(n for n in moved.gm.graph.nodes if n.target is aten.full.default)
    assert full.kwargs["device"] == CUDA
    assert moved.gm.w.device == CUDA and case.gm.w.device == CPU
    assert next(n for n in case.gm.graph.nodes if n.target is aten.full.default).kwargs["device"] == CPU
    assert moved.planted == case.planted and moved.label == case.label


def test_a_move_keeps_shapes_strides_offsets_and_which_inputs_share_a_storage():
    case = _case()
    with simulated("cuda"):
        moved = on_device(case, "cuda")
    for before, after in zip(case.inputs[0], moved.inputs[0], strict=True):
        assert (after.shape, after.stride(), after.storage_offset(), after.dtype) == (
            before.shape,
            before.stride(),
            before.storage_offset(),
            before.dtype,
        )
    x, y = moved.inputs[0]
    assert x.untyped_storage()._cdata != y.untyped_storage()._cdata  # y was made contiguous: a storage of its own
    base = torch.randn(2, 6)
    shared = dataclasses.replace(case, inputs=[(base[0, 1:4].view(1, 3).expand(4, 3), base[1, :3].expand(4, 3))])
    with simulated("cuda"):
        x, y = on_device(shared, "cuda").inputs[0]
    assert x.untyped_storage()._cdata == y.untyped_storage()._cdata
    assert (x.storage_offset(), y.storage_offset(), x.stride()) == (1, 6, (0, 1))


def test_the_storage_move_rebuilds_each_view_with_its_values_for_every_dtype():
    """The byte-level rebuild a CUDA move does (the whole storage as uint8, then each tensor set on
    it at its offset and strides), run on CPU, where the values can be compared."""
    for dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.int64, torch.bool):
        base = torch.randn(6, 5).to(dtype)
        for view in (base, base[2:, 1:4], base.t(), base[1]):
            rebuilt = _view_of(view, _moved_bytes(view, CPU), CPU)
            assert rebuilt.stride() == view.stride() and rebuilt.storage_offset() == view.storage_offset()
            assert torch.equal(rebuilt.contiguous().view(torch.uint8), view.contiguous().view(torch.uint8)), (
                dtype,
                view.shape,
            )


def test_tensor_parallel_ranks_and_a_cases_source_move_too():
    case = _case(with_constant=False)
    tp = dataclasses.replace(case, inputs=[case.inputs[0], tuple(t.clone() for t in case.inputs[0])], tp_world=2)
    with simulated("cuda"):
        moved = on_device(tp, "cuda")
        assert all(t.device == CUDA for rank in moved.inputs for t in rank)
        source = dataclasses.replace(case, label="source")
        child = dataclasses.replace(case, source=source)
        moved_child = on_device(child, "cuda")
    assert moved_child.source is not None and case_device(moved_child.source) == CUDA
    assert moved_child.source.label == "source"


def test_on_device_is_the_identity_where_the_case_is_and_for_none():
    case = _case()
    assert on_device(case, None) is case and on_device(case, "cpu") is case and on_device(case, CPU) is case


@pytest.mark.parametrize("bad", ["mps", "meta", "nonsense", 3, torch.float32])
def test_a_bad_device_is_refused_naming_the_argument(bad):
    with pytest.raises(InvalidArgument, match=r"device="):
        validate_device("device", bad)
    with pytest.raises(InvalidArgument, match=r"device="):
        on_device(_case(), bad)


@needs_no_cuda
def test_a_cuda_device_this_machine_lacks_is_a_setup_error_before_any_case_is_drawn():
    from pmverify.fusions.qk_norm import QKNormFusionPass
    from pmverify.fusions.qk_norm.testing import qk_norm_cases

    with pytest.raises(DeviceUnavailable, match=r"device='cuda': this machine has no CUDA device"):
        require_device("device", "cuda")
    with pytest.raises(DeviceUnavailable):
        pmverify.check_case(lambda graph: None, _case(), device="cuda")
    seen = []
    with pytest.raises(DeviceUnavailable):
        pmverify.verify(QKNormFusionPass, qk_norm_cases(), max_examples=2, device="cuda:0", on_case=seen.append)
    assert seen == []
    with simulated("cuda"):
        assert require_device("device", "cuda") == CUDA


def test_check_case_on_cpu_gives_what_it_gives_without_a_device():
    def fuse(graph: torch.fx.Graph) -> None:  # x * y + c -> addcmul(c, x, y): a correct rewrite
        for node in list(graph.nodes):
            if node.target is aten.add.Tensor and getattr(node.args[0], "target", None) is aten.mul.Tensor:
                mul = node.args[0]
                with graph.inserting_before(node):
                    fused = graph.call_function(aten.addcmul.default, (node.args[1], *mul.args))
                node.replace_all_uses_with(fused)
                graph.erase_node(node)
                graph.erase_node(mul)
                return

    case = _case(with_constant=False)
    plain, on_cpu = pmverify.check_case(fuse, case), pmverify.check_case(fuse, case, device="cpu")
    assert plain.violations == on_cpu.violations == [] and plain.rewrite_count == on_cpu.rewrite_count == 1
    assert on_cpu.case is case


def test_a_non_cpu_device_keys_the_example_database_apart():
    from pmverify.fusions.qk_norm import QKNormFusionPass
    from pmverify.fusions.qk_norm.testing import qk_norm_cases

    cases = qk_norm_cases()
    plain = database_key(QKNormFusionPass, cases)
    assert database_key(QKNormFusionPass, cases, device=CPU) == plain
    assert database_key(QKNormFusionPass, cases, device=CUDA) != plain


def test_no_case_runs_on_a_simulated_device():
    from pmverify.fusions.qk_norm import QKNormFusionPass
    from pmverify.fusions.qk_norm.testing import qk_norm_cases

    case = _case(with_constant=False)
    with simulated("cuda"):
        with pytest.raises(DeviceUnavailable, match="is simulated"):
            pmverify.check_case(lambda graph: None, case, device="cuda")
        with pytest.raises(DeviceUnavailable, match=r"case \(its inputs' device\).*is simulated"):
            pmverify.check_case(lambda graph: None, on_device(case, "cuda"))
        with pytest.raises(DeviceUnavailable, match="is simulated"):
            pmverify.verify(QKNormFusionPass, qk_norm_cases(), max_examples=2, device="cuda")
