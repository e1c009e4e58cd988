"""check_rewrite() on training rewrites (``trace_fn=joint_fwd_bwd``): the case is the joint
forward-backward graph, run on the primals (requiring grad where the example does, when traced)
and tangents drawn like the forward outputs; forward outputs and gradients are compared. A correct
rewrite checks out, one whose replacement's backward is wrong is a semantics finding on a gradient,
a replacement that only re-strides a gradient is not a finding (autograd gives gradients no stride
contract), and one of Inductor's own attention training rewrites is compared."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch._inductor import pattern_matcher as pm

from pmverify import GraphCase, PassVerificationError, check_case, verify
from pmverify._engine.apply import error_summary
from pmverify._fx import GRADIENT_OUTPUTS, trace
from pmverify._registry.record import record_patterns
from pmverify._rewrites.rewrite import RewriteResult, check_rewrite
from pmverify.strategies import like, planted
from pmverify.strategies._near_miss import variants
from pmverify.strategies._traced import Traced


def _tanh_mul(x, y):
    return torch.tanh(x) * y


def _tanh_mul_swapped(x, y):
    return y * torch.tanh(x)


class _TanhMulWrongGrad(torch.autograd.Function):
    """``tanh(x) * y`` with a wrong gradient for ``x``: the factor ``1 - tanh(x)**2`` is dropped."""

    @staticmethod
    def forward(ctx, x, y):
        t = torch.tanh(x)
        ctx.save_for_backward(t, y)
        return t * y

    @staticmethod
    def backward(ctx, grad):
        t, y = ctx.saved_tensors
        return grad * y, grad * t


def _tanh_mul_wrong_grad(x, y):
    return _TanhMulWrongGrad.apply(x, y)


class _TanhMulTransposedGrad(_TanhMulWrongGrad):
    """``tanh(x) * y`` with right gradients, the one of ``x`` laid out column-major."""

    @staticmethod
    def backward(ctx, grad):
        t, y = ctx.saved_tensors
        return (grad * y * (1 - t * t)).t().contiguous().t(), grad * t


def _tanh_mul_transposed_grad(x, y):
    return _TanhMulTransposedGrad.apply(x, y)


def only_pattern_keywords(match) -> bool:
    """Refuse a match whose calls carry keyword arguments (the pattern's calls carry none)."""
    return not any(node.kwargs for node in match.nodes)


def _training_rewrite(replacement, *, grad=(True, True), **kwargs):
    example = [torch.empty(4, 8, requires_grad=grad[0]), torch.empty(4, 8, requires_grad=grad[1])]
    with record_patterns() as rewrites:
        pm.register_replacement(
            _tanh_mul,
            replacement,
            example,
            pm.joint_fwd_bwd,
            pm.PatternMatcherPass(pass_name="test_training"),
            **kwargs,
        )
    (rewrite,) = rewrites
    return rewrite


def test_a_joint_trace_runs_as_autograd_computes():
    """joint_fwd_bwd's placeholders are named crosswise to their targets (primals_2 for primals_1):
    the traced module, called, must still take its inputs in order (near misses run it)."""
    x, y, tangent = (torch.randn(4, 8, dtype=torch.float64) for _ in range(3))
    gm = trace(_tanh_mul, (x.requires_grad_(), y.requires_grad_()), pm.joint_fwd_bwd)
    out = _tanh_mul(x, y)
    out.backward(tangent)
    got = gm(x.detach(), y.detach(), tangent)
    for value, expected in zip(got, (out, x.grad, y.grad), strict=True):
        torch.testing.assert_close(value, expected.detach())
    # a near miss edits the joint graph (here the backward's ``1 - tanh**2`` given alpha=0.5) and
    # keeps which of its inputs are primals, so that its gradients are known
    base = Traced(gm, (x, y, tangent), primals=2)
    near = variants(_tanh_mul, base, "optional_arg", pm.joint_fwd_bwd, lambda n: 0)
    assert near.reason == "optional_arg" and near.primals == 2


@settings(max_examples=2, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_planted_joint_instance_takes_primals_and_tangents(data):
    """The case graph is the joint graph: inputs are the primals and a tangent like the forward
    output (none requiring grad: the graph computes its gradients), outputs the forward output and
    both gradients, which GRADIENT_OUTPUTS names."""
    rewrite = _training_rewrite(_tanh_mul_swapped)
    case = data.draw(planted(rewrite, context=st.nothing(), min_instances=1, max_instances=1, near_misses=False))
    inputs = case.inputs[0]
    assert len(inputs) == 3 and not any(t.requires_grad for t in inputs)
    assert {tuple(t.shape) for t in inputs} <= {(4, 8), (32,)}  # (32,): a flat input viewed late
    (output,) = case.gm.graph.find_nodes(op="output")
    assert len(output.args[0]) == 3 and output.meta[GRADIENT_OUTPUTS] == (1, 2)
    x, y, tangent = (t.reshape(4, 8).double().requires_grad_() for t in inputs)
    out = torch.tanh(x) * y
    out.backward(tangent)
    got = case.gm(*inputs)
    for node, value, expected in zip(output.args[0], got, (out, x.grad, y.grad), strict=True):
        sign = -1 if node.target is torch.ops.aten.neg.default else 1  # an output planted() consumed
        torch.testing.assert_close(value.double(), sign * expected.detach(), rtol=1e-5, atol=1e-5)


def test_a_correct_training_rewrite_checks_out():
    """Right forward and gradients, the gradient of ``x`` in another layout: no finding (autograd
    gives gradients no stride contract; the structure oracle still compares their shapes). Its
    extra_check refuses calls with keyword arguments the pattern does not hold: Inductor's matcher
    ignores them (the optional_arg near miss ``sub(1, t * t, alpha=0.5)`` in the backward, which a
    custom autograd Function may hold, is rewritten to the gradient of ``tanh``)."""
    rewrite = _training_rewrite(_tanh_mul_transposed_grad, extra_check=only_pattern_keywords)
    result = check_rewrite(rewrite, max_examples=4, seed=0)
    assert isinstance(result, RewriteResult) and result.rewritten_cases >= result.outcomes["must match"] > 0


def test_a_wrong_backward_is_a_semantics_finding_on_a_gradient(finding_only):
    with finding_only(), pytest.raises(PassVerificationError) as info:
        check_rewrite(_training_rewrite(_tanh_mul_wrong_grad), max_examples=6, seed=0)
    (violation,) = info.value.violations
    assert violation.oracle == "semantics"
    (output,) = info.value.result.case.gm.graph.find_nodes(op="output")
    wrong = output.meta[GRADIENT_OUTPUTS][0]  # x's gradient (the one of y is right)
    assert violation.message.startswith(f"output {wrong}:")


@settings(
    max_examples=2, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
)
@given(data=st.data())
def test_inputs_require_grad_as_the_example_does(data):
    """Drawn inputs that do not require grad are made to where the recorded example does, so the
    joint trace has its tangent; with no example saying so, joint_fwd_bwd fails with a bare
    ``assert``, and the error names the cause and the exception, never an empty text."""
    rewrite = _training_rewrite(_tanh_mul_swapped)
    detached = like([torch.empty(4, 8), torch.empty(4, 8)]).map(lambda args: tuple(a.detach() for a in args))
    instances = {"context": st.nothing(), "min_instances": 1, "max_instances": 1, "near_misses": False}
    case = data.draw(planted(rewrite, detached, **instances))
    assert len(case.inputs[0]) == 3  # x, y and a tangent
    untraceable = planted(
        _tanh_mul, like([torch.empty(4, 8), torch.empty(4, 8)]), trace_fn=pm.joint_fwd_bwd, **instances
    )
    with pytest.raises(InvalidArgument, match=r"needs an input that requires grad.*: AssertionError\(\) \(at "):
        data.draw(untraceable)


def _scaled(x, inv_scale):
    return x / inv_scale


def test_a_0d_scale_of_a_training_pattern_is_drawn_as_a_number():
    """Inductor gives its attention patterns' scale as a 0-d tensor that its extra_check wants a
    number for: read as one in the joint trace too (its tangent placeholder after the arguments)."""
    from pmverify.strategies._recorded_inputs import number_positions

    args = (torch.zeros(4, 8, requires_grad=True), torch.tensor(2.0))
    assert number_positions(_scaled, args, pm.joint_fwd_bwd)[0] == {1: 2.0}


def test_an_empty_exception_text_is_never_empty():
    try:
        raise AssertionError
    except AssertionError as exc:
        text = error_summary(exc)
    assert text.startswith("AssertionError() (at ") and "test_an_empty_exception_text_is_never_empty" in text


@pytest.fixture(scope="module")
def sfdp_training():
    from torch._inductor.fx_passes import fuse_attention

    with record_patterns(register=False) as rewrites:  # uncached: other modules record it too
        fuse_attention._sfdp_init.__wrapped__(torch.device("cpu"))
    return {r.name: r for r in rewrites}


def test_an_inductor_attention_training_rewrite_is_compared(sfdp_training):
    """Attention pattern 27 (``dropout(softmax(q @ k.T)) @ v``, float32) in its training form, as
    check_rewrite plants it, plain instances only: every case rewritten to SDPA is compared, forward
    output and the gradients of q, k and v, against float64 (its dropout drawn from one generator
    state before the pass, after it and in the reference), and agrees."""
    rewrite = sfdp_training["_sfdp_pattern_27_training"]
    cases = planted(rewrite, context=st.nothing(), min_instances=1, max_instances=1, near_misses=False)
    summary = verify(rewrite.pattern_pass(), cases, max_examples=4, seed=0, oracles=["semantics"])
    assert summary.rewritten_cases == summary.judged_counts["semantics"] == summary.cases > 0


def _attention(query, key, value):
    return torch.softmax(query @ key.transpose(-2, -1) / 4.0, dim=-1) @ value


def test_gradients_that_cancel_to_rounding_noise_are_judged_by_their_noise_floor(sfdp_training):
    """Attention pattern 1 in training form, as the audit drew it: query 0, key and value all ones,
    so query's gradient is ``P (dP - D) K / 4`` with ``dP`` and ``D`` the same sums of the tangent
    taken two ways: 0 in float64, float32 rounding noise of those sums (up to 1e-6) before the pass
    and after it, in other places (exactly 0 before, 1e-6 after, on a third of the elements: far off
    at |ref| + mean|ref|, itself rounding noise). The noise floor (perturbed float64 runs) says that much noise is
    all float32 can tell; a wrong value stays far off it (test_noise)."""
    torch.manual_seed(0)
    query, key, value = torch.zeros(2, 4, 8, 16), torch.ones(2, 4, 8, 16), torch.ones(2, 4, 8, 16)
    primals = tuple(t.requires_grad_() for t in (query, key, value))
    gm = trace(_attention, primals, pm.joint_fwd_bwd)
    tangent = torch.rand(2, 4, 8, 16) * 4 - 2  # as Hypothesis draws: uniform, a fifth of it round values
    rounded = torch.tensor([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0])[torch.randint(0, 7, (2, 4, 8, 16))]
    tangent = torch.where(torch.rand(2, 4, 8, 16) < 0.2, rounded, tangent)
    case = GraphCase(gm, [(*(t.detach() for t in primals), tangent)])
    result = check_case(sfdp_training["_sfdp_pattern_1_training"].pattern_pass(), case, oracles=["semantics"])
    assert result.rewrite_count == 1 and result.violations == []


@pytest.mark.slow
def test_every_inductor_training_rewrite_gets_a_status():
    """All of Inductor's training rewrites at the installed torch (pad_mm's 3 and fuse_attention's
    54 at 2.13), ten cases each, unshrunk: each is compared (ok or a finding) or refused for a
    stated reason (never matched, unsatisfiable here, not comparable, all cases void), never a
    crash of pmverify; most attention rewrites are compared. About two minutes of CPU."""
    from pmverify import VacuousSearch, record_inductor
    from pmverify._engine.verify import fresh_settings

    rewrites = [entry.rewrite for entry in record_inductor(kinds=("replacement",))]
    training = {r.name: r for r in rewrites if r.trace_fn is pm.joint_fwd_bwd}
    compared = set()
    for name, rewrite in training.items():
        try:
            check_rewrite(rewrite, max_examples=10, seed=0, settings=fresh_settings(shrink=False))
        except PassVerificationError:
            pass
        except VacuousSearch:
            continue
        compared.add(name)
    attention = {name for name in training if name.startswith("_sfdp")}
    assert len(training) >= 50 and len(compared & attention) > len(attention) // 2
