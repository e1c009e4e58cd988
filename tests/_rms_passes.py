"""An RMSNorm fusion written as a pass author writes one: ``register_replacement`` with
``scalar_workaround={"eps": ...}`` into a fused custom op, refusing calls with keyword arguments its
pattern does not hold. The pass of README's "Testing your own pass" recipe
(tests/test_readme_recipe.py runs it), correct, and with a replacement that hard-codes the
example's eps."""

import torch
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement


@torch.library.custom_op("pmverify_test_rms::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x^2, -1) + eps) * w`` in float32, cast back: x [T, H], w [H]."""
    xf = x.float()
    return ((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)) * w).to(x.dtype)


@rms_norm.register_fake
def _(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty_like(x)


def rms_pattern(x, w, eps):
    xf = x.float()
    return ((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)) * w).to(x.dtype)


def only_pattern_keywords(match) -> bool:
    """Refuse a call with keyword arguments (the pattern's calls carry none): Inductor's matcher
    ignores those its pattern does not hold, e.g. ``add(ms, eps, alpha=0.5)``, which the
    replacement would drop. Refuse too an ``eps`` that is a tensor, not a number: the wildcard takes
    a 0-d tensor (``ms + eps_buffer``), and the fused op's ``eps`` is a float."""
    return not any(node.kwargs for node in match.nodes) and not isinstance(match.kwargs.get("eps"), torch.fx.Node)


def fused_op_takes(match) -> bool:
    """``only_pattern_keywords``, and the shapes the fused op takes: ``w [H]`` with ``x [..., H]``
    (the pattern also runs where ``w`` or ``x`` broadcasts, ``w[1]`` or ``x[T, 1]``, which
    ``planted`` draws; the op's fake kernel gives ``x``'s shape)."""
    x, w = (match.kwargs[name].meta.get("val") for name in ("x", "w"))
    shapes = x.dim() >= 1 and w.dim() == 1 and w.shape[0] == x.shape[-1]
    return only_pattern_keywords(match) and shapes


def rms_replacement(x, w, eps):
    return torch.ops.pmverify_test_rms.rms_norm(x, w, eps)


def hard_coded_replacement(x, w, eps):
    return torch.ops.pmverify_test_rms.rms_norm(x, w, 1e-6)  # the bug: eps is a wildcard


RMS_EXAMPLE_INPUTS = (torch.empty(8, 16), torch.empty(16))


class MyRMSNormPass:
    """The fusion as a ``CustomGraphPass``-style callable: registers once per object."""

    replacement = staticmethod(rms_replacement)

    def __init__(self) -> None:
        self.patterns = PatternMatcherPass(pass_name=type(self).__name__)
        register_replacement(
            rms_pattern,
            type(self).replacement,
            list(RMS_EXAMPLE_INPUTS),
            fwd_only,
            self.patterns,
            extra_check=fused_op_takes,
            scalar_workaround={"eps": 1e-6},
        )
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = self.patterns.apply(graph)

    def uuid(self) -> str:
        return type(self).__name__


class HardCodedEpsPass(MyRMSNormPass):
    replacement = staticmethod(hard_coded_replacement)


# A pattern with its eps written as a literal (only 1e-6 matches), as vLLM's and Inductor's own
# fusions often have it, and a replacement that hard-codes a nearby eps: found only on rows whose
# mean square is near or below 1e-5 (tensors() draws them).
def literal_eps_pattern(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def literal_eps_replacement(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def nearby_eps_replacement(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w  # the bug: 1e-5 for 1e-6


class LiteralEpsRMSNormPass(MyRMSNormPass):
    """Rewrites ``literal_eps_pattern`` into its own trace (a correct pass)."""

    replacement = staticmethod(literal_eps_replacement)

    def __init__(self) -> None:
        self.patterns = PatternMatcherPass(pass_name=type(self).__name__)
        register_replacement(
            literal_eps_pattern,
            type(self).replacement,
            list(RMS_EXAMPLE_INPUTS),
            fwd_only,
            self.patterns,
            extra_check=only_pattern_keywords,
        )
        self.matched_count = 0


class NearbyEpsRMSNormPass(LiteralEpsRMSNormPass):
    replacement = staticmethod(nearby_eps_replacement)
