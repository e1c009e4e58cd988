"""The noise floor of a result (perturbed float64 runs): what float32 arithmetic can tell of a result
that cancels, as slack for flagged results; a wrong value, and a rounding to bf16, stay findings."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from pmverify import GraphCase, check_case
from pmverify.oracles import semantics
from pmverify.oracles._noise import noise_floor

aten = torch.ops.aten


def _graph(fn, *args):
    return make_fx(fn)(*args), args  # ATen ops, as pmverify's cases hold


def _centered_sums(x):
    return ((x - x.mean(-1, keepdim=True)) * 64).sum(-1)


def _noise(fn, *args):
    gm, args = _graph(fn, *args)
    reference = semantics.float64_reference(gm, args)
    with semantics.deterministic_fill():
        return noise_floor(gm, args, reference)[0], reference  # the float32 level


def test_a_result_that_cancels_has_the_noise_of_its_terms():
    """Row sums of a centred row: 0 in exact arithmetic, float32 noise of the terms (|x| ~ 64)."""
    x = torch.randn(8, 64)
    (outputs, _), reference = _noise(_centered_sums, x)
    noise = outputs[0]
    assert noise.shape == (8,) and reference[0][0].abs().max() < 1e-10
    eps32 = torch.finfo(torch.float32).eps
    assert (noise > 0.1 * eps32 * 64).all() and (noise < 64 * 64 * eps32 * 8).all()


def test_noise_excuses_rounding_noise_but_not_a_wrong_value():
    torch.manual_seed(0)
    x = torch.randn(8, 64)
    (outputs, _), reference = _noise(_centered_sums, x)
    noise, ref = outputs[0], reference[0][0]
    before = _centered_sums(x)  # float32 noise around 0
    after = _centered_sums(x.flip(-1)) + torch.finfo(torch.float32).eps  # summed in another order
    assert semantics.compare("output 0", before, after, ref) is not None  # millions of ulps of ~1e-14
    assert semantics.compare("output 0", before, after, ref, noise=noise) is None
    wrong = after.clone()
    wrong[3] += 0.01  # ten times the slack: 8 x (its noise, ~6e-5, plus the median noise)
    assert semantics.compare("output 0", before, wrong, ref, noise=noise) is not None


def _bf16_scale(x, w):
    return (x.to(torch.bfloat16) * w.to(torch.bfloat16)).float()


def test_the_noise_is_float32_level_even_for_bf16_ops():
    """A bf16 rounding is what the rule compares, not noise: the floor stays 2**16 below it."""
    x, w = torch.randn(4, 64), torch.randn(4, 64)
    (outputs, _), reference = _noise(_bf16_scale, x, w)
    bf16_ulp = torch.finfo(torch.bfloat16).eps * reference[0][0].abs()
    assert (outputs[0] <= bf16_ulp / 2**10).all()


def _centered_sums_half(x):
    return ((x - x.mean(-1, keepdim=True)) * 64).sum(-1)


def test_a_half_result_that_cancels_is_judged_by_its_own_dtypes_noise():
    """In float16 the terms round to float16 before they cancel: float32-level noise is far too
    small for that, the float16-level floor is the measure (only on such ill-conditioned elements)."""
    torch.manual_seed(0)
    x = torch.randn(8, 64).half()
    gm, args = _graph(_centered_sums_half, x)
    reference = semantics.float64_reference(gm, args)
    with semantics.deterministic_fill():
        fp32, own = (level[0][0] for level in noise_floor(gm, args, reference))
    assert (own > 100 * fp32).all()
    before = _centered_sums_half(x)
    terms = (x - x.mean(-1, keepdim=True)) * 64
    after = terms[:, :32].sum(-1) + terms[:, 32:].sum(-1)  # two half sums, each rounded to float16
    ref = reference[0][0]
    assert semantics.compare("output 0", before, after, ref, noise=fp32) is not None
    assert semantics.compare("output 0", before, after, ref, noise=(fp32, own)) is None


def _tiny_terms_cancel(x):
    """0 in float64 (one sum taken twice), from float16 products near 1e-7, in float16's subnormal
    range: each rounds to an absolute step of 2**-24, not a relative one."""
    return ((x * 0.3).sum(-1) - (x * 0.3).sum(-1)) * 16


def _refactored(second_scale):
    """A pass rebuilding the whole result as ``((x * 0.3).sum(-1) - x.sum(-1) * second_scale) * 16``:
    the same math for 0.3 (a correct pass), a dropped scale for 1."""

    def rewrite(graph: torch.fx.Graph) -> None:
        (x,) = graph.find_nodes(op="placeholder")
        out = graph.output_node()
        old = out.args[0][0] if isinstance(out.args[0], (list, tuple)) else out.args[0]
        with graph.inserting_before(out):
            first = graph.call_function(aten.sum.dim_IntList, (graph.call_function(aten.mul.Tensor, (x, 0.3)), [-1]))
            second = graph.call_function(
                aten.mul.Tensor, (graph.call_function(aten.sum.dim_IntList, (x, [-1])), second_scale)
            )
            new = graph.call_function(aten.mul.Tensor, (graph.call_function(aten.sub.Tensor, (first, second)), 16))
        old.replace_all_uses_with(new)
        graph.eliminate_dead_code()

    return rewrite


def test_a_half_result_exactly_0_in_float64_is_judged_at_float16s_absolute_floor():
    """The float16 attention gradient class (issue 31): 0 in float64 and in the pattern, a few
    float16 subnormal steps (6e-8 each, times 16 here) after a correct rewrite that sums otherwise.
    The noise floor perturbs each op by half its dtype's subnormal step too, carried to the result
    by the ops that follow: quiet. A dropped scale stays far off."""
    x = (torch.rand(16, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 1e-6 + 1e-6).half()
    case = GraphCase(make_fx(_tiny_terms_cancel)(x), [(x,)])
    correct = check_case(_refactored(0.3), case)
    assert correct.ok and "semantics" in correct.judged, correct.violations
    assert correct.pair.results(0).after[0][0].abs().max() > 50 * 2.0**-24  # not quiet for being exact
    wrong = check_case(_refactored(1), case)
    assert [v.oracle for v in wrong.violations] == ["semantics"] and "far off" in wrong.violations[0].message
