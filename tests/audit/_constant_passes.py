"""A user's pass module for the audit-depth tests: a GELU(tanh)-mul fusion whose replacement writes
out GELU's tanh approximation with a wrong constant (0.0447 for 0.044715), registered for float32
and bfloat16 (issue 30's trial). In float32 the error (about 3e-6 at |x| near 1) is many ulp; in
bfloat16 it is far below one ulp, so that rewrite is rightly never a finding of the constant."""

import math

import torch
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

PASS = PatternMatcherPass(pass_name="gelu_tanh_constant")
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu_mul(x, y):
    return torch.nn.functional.gelu(x, approximate="tanh") * y


def gelu_mul_replacement(x, y):
    xf = x.float()  # in float32, as Inductor's decomposition of gelu
    inner = SQRT_2_OVER_PI * (xf + 0.0447 * xf * xf * xf)  # the bug: 0.0447 for 0.044715
    return (0.5 * xf * (1.0 + torch.tanh(inner))).to(x.dtype) * y


def only_pattern_keywords(match) -> bool:
    """Refuse calls with keyword arguments (the pattern's carry none): Inductor's matcher ignores
    them, so the formula written out would drop ``add(..., alpha=2)``, a bug of its own that the
    audit's ``optional_arg`` near miss (judged before the random cases) shows first."""
    return not any(node.kwargs for node in match.nodes)


for _dtype in (torch.float32, torch.bfloat16):
    register_replacement(
        gelu_mul,
        gelu_mul_replacement,
        [torch.empty(8, 16, dtype=_dtype), torch.empty(8, 16, dtype=_dtype)],
        fwd_only,
        PASS,
        extra_check=only_pattern_keywords,
    )
