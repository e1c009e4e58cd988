"""A GELU(tanh)-mul fusion into a custom op, as a pass author writes it: ``register_replacement``
of :func:`pmverify.faults.gelu_mul_pattern` at float32, bfloat16 and float16, replaced by one call
of ``pmverify_test_gelu::gelu_mul`` (a stand-in for a fused kernel)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

from pmverify.faults import gelu_mul_pattern


@torch.library.custom_op("pmverify_test_gelu::gelu_mul", mutates_args=())
def gelu_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (F.gelu(x.float(), approximate="tanh") * y.float()).to(x.dtype)


@gelu_mul.register_fake
def _(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def gelu_mul_replacement(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.ops.pmverify_test_gelu.gelu_mul(x, y)


class GeluMulOpPass(CustomGraphPass):
    """The fusion; ``matched_count`` counts its rewrites of the last call."""

    def __init__(self) -> None:
        self.patterns = PatternMatcherPass(pass_name="pmverify_test_gelu_mul")
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            example = [torch.empty(8, 16, dtype=dtype), torch.empty(8, 16, dtype=dtype)]
            register_replacement(gelu_mul_pattern, gelu_mul_replacement, example, fwd_only, self.patterns)
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = self.patterns.apply(graph)

    def uuid(self) -> str:
        return "pmverify-test-gelu-mul-op-pass-1"
