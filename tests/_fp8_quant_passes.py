"""A static float8 quantization fusion written as a pass author writes one (vLLM's RMSNorm + static
fp8 quant, in our own words): the pattern normalises in float32, rounds to the activation dtype,
multiplies by the weight, then quantizes with a per-tensor scale as quantization writes it,
``(y / scale).clamp(-448, 448).to(float8_e4m3fn)``; ``register_replacement`` replaces it by one
fused op that rounds once. Correct, and with two scale bugs: a replacement that multiplies by the
scale instead of dividing, and one that clamps to float8_e4m3fnuz's range (240) instead of
float8_e4m3fn's (448)."""

import torch
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
EPS = 1e-6


def _no_keywords(match) -> bool:
    """Refuse calls with keyword arguments the pattern's calls do not hold: Inductor's matcher ignores
    them (``mean(x, [-1], True, dtype=...)``, ``add(..., alpha=...)``) and the fused op would drop them
    (README's recipe; the ``optional_arg`` near miss, found on a 300-case run)."""
    return not any(node.kwargs for node in match.nodes)


def rms_quant_pattern(x, weight, scale):
    """x [T, H] bfloat16, weight [H] bfloat16, scale [1] float32 -> [T, H] float8_e4m3fn."""
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * weight
    return (normed.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def _fused(x, weight, scale, limit: float, divide: bool):
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * weight.float()
    scaled = normed / scale if divide else normed * scale
    return scaled.clamp(-limit, limit).to(FP8)


@torch.library.custom_op("pmverify_test_fp8::rms_norm_quant", mutates_args=())
def rms_norm_quant(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The fused kernel: norm and scale in float32, one rounding to float8_e4m3fn."""
    return _fused(x, weight, scale, FP8_MAX, True)


@torch.library.custom_op("pmverify_test_fp8::rms_norm_quant_times_scale", mutates_args=())
def rms_norm_quant_times_scale(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The bug: multiplies by the scale (an inverse scale where the pattern holds a scale)."""
    return _fused(x, weight, scale, FP8_MAX, False)


@torch.library.custom_op("pmverify_test_fp8::rms_norm_quant_fnuz_range", mutates_args=())
def rms_norm_quant_fnuz_range(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The bug: clamps to float8_e4m3fnuz's largest value (240), not float8_e4m3fn's (448)."""
    return _fused(x, weight, scale, torch.finfo(torch.float8_e4m3fnuz).max, True)


for _op in (rms_norm_quant, rms_norm_quant_times_scale, rms_norm_quant_fnuz_range):

    @_op.register_fake
    def _(x, weight, scale):
        return torch.empty_like(x, dtype=FP8)


EXAMPLE_INPUTS = (torch.empty(8, 16, dtype=torch.bfloat16), torch.empty(16, dtype=torch.bfloat16), torch.empty(1))


class RMSQuantPass:
    """The fusion as a ``CustomGraphPass``-style callable; ``fused`` names the replacement's op."""

    fused = "rms_norm_quant"

    def __init__(self) -> None:
        op = getattr(torch.ops.pmverify_test_fp8, type(self).fused)

        def replacement(x, weight, scale):
            return op(x, weight, scale)

        self.patterns = PatternMatcherPass(pass_name=type(self).__name__)
        register_replacement(
            rms_quant_pattern, replacement, list(EXAMPLE_INPUTS), fwd_only, self.patterns, extra_check=_no_keywords
        )
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = self.patterns.apply(graph)

    def uuid(self) -> str:
        return type(self).__name__


class TimesScalePass(RMSQuantPass):
    fused = "rms_norm_quant_times_scale"


class FnuzRangePass(RMSQuantPass):
    fused = "rms_norm_quant_fnuz_range"
