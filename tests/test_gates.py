"""Gated extra_checks: a rewrite whose extra_check needs a CUDA device, a config option or frozen
weights is "unsatisfiable here" naming the condition, and compared with force_extra_check /
config_patches; one that rejects for a reason no gate explains stays "never matched"."""

from __future__ import annotations

import pytest
import torch
from hypothesis.errors import InvalidArgument
from torch._inductor import config
from torch._inductor import pattern_matcher as pm

from pmverify import RewriteNeverMatched, RewriteUnsatisfiable, check_rewrite
from pmverify._registry.record import record_patterns


def _pattern(x, w):
    return torch.relu(x) * w


def _replacement(x, w):
    return w * torch.relu(x)


def _on_cuda(match):
    return match.kwargs["x"].meta["val"].is_cuda


def _concat_linear(match):
    return config.cpp.enable_concat_linear


def _frozen_w(match):
    return match.kwargs["w"].op == "get_attr"


def _w_dequantized(match):
    """As freezing's int8 weight-only check: ``w`` must be an int8 tensor converted in the graph."""
    w = match.kwargs["w"]
    return w.target is torch.ops.prims.convert_element_type.default and w.args[0].meta["val"].dtype == torch.int8


def _three_rows(match):
    """Reads a config flag, but rejects on the inputs' shape: no gate explains it."""
    return config.shape_padding and match.kwargs["x"].meta["val"].shape[0] == 3


def _rewrite(extra_check, trace_fn=pm.fwd_only):
    training = trace_fn is pm.joint_fwd_bwd
    with record_patterns(register=False) as rewrites:
        example = [torch.empty(4, 8, requires_grad=training), torch.empty(8, requires_grad=training)]
        pm.register_replacement(_pattern, _replacement, example, trace_fn, [], extra_check=extra_check)
    return rewrites[0]


@pytest.mark.parametrize(
    ("extra_check", "condition"),
    [
        (_on_cuda, "tensors on a CUDA device"),
        (
            _frozen_w,
            "inputs w as frozen parameters (get_attr constants, as torch._inductor.config.freezing=True makes them)",
        ),
        (
            _w_dequantized,
            "input w computed in the graph as the check wants (it reads the node that computes it, where pmverify "
            "draws graph inputs)",
        ),
    ],
)
def test_a_gated_extra_check_is_unsatisfiable_here_and_compared_when_forced(extra_check, condition):
    rewrite = _rewrite(extra_check)
    with pytest.raises(RewriteUnsatisfiable) as info:
        check_rewrite(rewrite, max_examples=4, seed=0)
    assert info.value.condition == condition
    assert info.value.result.rewritten_cases == 0 and info.value.result.outcomes["extra_check"] > 0
    assert f"only with {condition}" in str(info.value) and "force_extra_check=True" in str(info.value)
    assert isinstance(info.value, RewriteNeverMatched)  # the audit's "never matched" catches it too

    result = check_rewrite(rewrite, max_examples=4, seed=0, force_extra_check=True)
    assert result.rewritten_cases >= result.outcomes["must match"] > 0
    assert result.simulated == (condition,)
    assert result.rewrite is rewrite


def test_a_config_gate_is_named_and_config_patches_compare_it():
    rewrite = _rewrite(_concat_linear)
    with pytest.raises(RewriteUnsatisfiable) as info:
        check_rewrite(rewrite, max_examples=4, seed=0)
    assert info.value.condition == "torch._inductor.config.cpp.enable_concat_linear=True"
    result = check_rewrite(rewrite, max_examples=4, seed=0, config_patches={"cpp.enable_concat_linear": True})
    assert result.rewritten_cases > 0 and result.simulated == ()
    assert config.cpp.enable_concat_linear is False  # restored


def test_a_rejection_no_gate_explains_stays_never_matched():
    rewrite = _rewrite(_three_rows)
    with pytest.raises(RewriteNeverMatched) as info:
        check_rewrite(rewrite, max_examples=4, seed=0)
    assert not isinstance(info.value, RewriteUnsatisfiable)
    assert "never matched:" in str(info.value)
    with pytest.raises(RewriteNeverMatched, match="even with the gates of its extra_check simulated") as forced:
        check_rewrite(rewrite, max_examples=4, seed=0, force_extra_check=True)
    assert not isinstance(forced.value, RewriteUnsatisfiable)


def test_a_training_pattern_in_inference_mode_is_unsatisfiable_here():
    rewrite = _rewrite(pm._return_true, trace_fn=pm.joint_fwd_bwd)
    with torch.inference_mode(), pytest.raises(RewriteUnsatisfiable) as info:
        check_rewrite(rewrite, max_examples=2, seed=0)
    assert info.value.condition == "outside torch.inference_mode() (a training pattern)"
    assert "registers only outside torch.inference_mode()" in str(info.value)


def test_inductor_pad_mm_is_unsatisfiable_here_naming_cuda():
    """torch 2.13's pad_mm pads only CUDA (or XPU) matmuls, with Triton, after benchmarking them
    (skipped with force_shape_pad); the 4x4 float32 inputs drawn need no padding, so the gate is
    found on the float16 variant (alignment 8)."""
    from torch._inductor.fx_passes import pad_mm

    with record_patterns(register=False) as rewrites:
        pad_mm._pad_mm_init.__wrapped__(torch.device("cpu"))
    rewrite = next(r for r in rewrites if r.name == "mm_pattern_inference")
    with pytest.raises(RewriteUnsatisfiable) as info:
        check_rewrite(rewrite, max_examples=4, seed=0)
    assert info.value.condition == (
        "tensors on a CUDA device (with Triton) and torch._inductor.config.force_shape_pad=True"
    )
    assert "mat1=tensor[4, 4]:float16" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"force_extra_check": "yes"}, "force_extra_check='yes' must be a bool"),
        ({"config_patches": [("freezing", True)]}, "config_patches=.* must be a mapping"),
        ({"config_patches": {"no_such_option": True}}, "'no_such_option' is no option of torch._inductor.config"),
        ({"config_patches": {"freezing": 1}}, r"torch._inductor.config.freezing is a bool, not 1"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        check_rewrite(_rewrite(_on_cuda), max_examples=2, **kwargs)
