"""float8 as a first-class dtype: the strategies append to a case only ops that run on each value's
dtype (learned from the dispatcher), a float8 value is inspected through a float32 upcast, scales
are drawn positive, and the semantics rule judges a static fp8 quantization fusion: quiet when
correct, a wrong scale found (tests/_fp8_quant_passes.py)."""

import math

import pytest
import torch
from _fp8_quant_passes import EXAMPLE_INPUTS, FnuzRangePass, RMSQuantPass, TimesScalePass, rms_quant_pattern
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from strategies._minimal import minimal

import pmverify
from pmverify import GraphCase
from pmverify._execution import compare, finite, inspectable, run_graph, runs_on
from pmverify._fx import trace
from pmverify.strategies import like, planted, with_mutating_custom_ops, with_mutations
from pmverify.strategies._dtype_support import add_reader
from pmverify.strategies._mutations import _OP, _inplace_ops_on
from pmverify.strategies._scales import scale_positions
from pmverify.strategies._traced import all_finite

aten = torch.ops.aten
FP8 = torch.float8_e4m3fn
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
DTYPES = (torch.float32, torch.bfloat16, torch.float16, *FLOAT8)


def _recorded():
    with pmverify.record_patterns() as recorded:
        RMSQuantPass()
    (rewrite,) = recorded
    return rewrite


# ------------------------------------------------------------------------------ op support


def test_op_support_is_learned_from_the_dispatcher_once_per_op_dtype_and_device():
    calls = []

    def sample(dtype, device):
        calls.append(dtype)
        return (torch.ones(2, 2, dtype=dtype, device=device),), {}

    op = aten.sgn.default  # an op no other test asks about: its cache entries are this test's
    assert runs_on(op, torch.float32, sample=sample) and runs_on(op, torch.float32, sample=sample)
    assert not runs_on(op, FP8, sample=sample) and not runs_on(op, FP8, "cpu", sample=sample)
    assert calls == [torch.float32, FP8]  # each (op, dtype, device) tried once
    assert runs_on(aten.neg.default, torch.bfloat16) and not any(runs_on(aten.neg.default, d) for d in FLOAT8)
    assert all(runs_on(aten.copy_.default, d) and runs_on(aten.index_put_.default, d) for d in DTYPES)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ops_the_strategies_append_run_on_each_dtype(dtype):
    ops = _inplace_ops_on(dtype)
    if dtype in FLOAT8:
        assert "add_.Scalar" not in ops and "copy_" in ops
    else:
        assert len(ops) == 6
    x = (torch.rand(3, 4) * 4 - 2).to(dtype)
    for name in ops:  # as with_mutations calls them (_operands)
        operand = {
            "add_.Scalar": (0.25,),
            "mul_.Scalar": (-0.5,),
            "add_.Tensor": (x,),
            "mul_.Tensor": (x,),
            "copy_": (x,),
            "index_put_": ([torch.tensor([0, 2])], x[:2], False),
        }[name]
        _OP[name](x.clone(), *operand)
    graph = torch.fx.Graph()
    placeholder = graph.placeholder("x")
    graph.output(add_reader(graph, placeholder, x))
    (out,) = run_graph(torch.fx.GraphModule(torch.nn.Module(), graph), (x,))[0]
    assert torch.equal(out, -x.float() if dtype in FLOAT8 else -x)


# ------------------------------------------------------------------------------ inspection


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_a_float8_value_is_inspected_through_an_upcast(dtype):
    gm = trace(lambda x: x.to(dtype), (torch.ones(2, 3),))
    assert all_finite(gm, (torch.ones(2, 3),))
    assert not all_finite(gm, (torch.tensor([1.0, math.nan]),))
    assert (
        not finite(torch.tensor([math.nan]).to(dtype)) and inspectable(torch.ones(1).to(dtype)).dtype == torch.float32
    )
    one, four = torch.ones(4).to(dtype), torch.full((4,), 4.0).to(dtype)
    assert compare("output 0", one, one, one) is None  # a float8 reference too
    assert "far off" in compare("output 0", one, four, torch.ones(4, dtype=torch.float64))


def test_a_case_whose_graph_cannot_run_is_an_internal_error_not_a_finding():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(aten.neg.default, (x,)),))  # no float8 kernel: raises
    case = GraphCase(torch.fx.GraphModule(torch.nn.Module(), graph), [(torch.ones(2, 2).to(FP8),)])
    result = pmverify.check_case(RMSQuantPass(), case)
    assert not result.violations and result.internal_errors


# ------------------------------------------------------------------------------ scales


def test_like_draws_scales_positive_and_finite_examples():
    example = (torch.empty(4, 8, dtype=torch.bfloat16), torch.empty(1, 1), torch.empty(3))
    assert torch.equal(minimal(like(example, scales=[1]))[1], torch.ones(1, 1))  # the simplest: 1
    negative = minimal(like(example), lambda args: bool((args[1] <= 0).all()))  # without: 0 first
    assert negative[1].item() == 0
    spread = minimal(like(example, scales=[1, 2]), lambda args: bool((args[2] != args[2][0]).any()))
    assert (spread[2] > 0).all() and (spread[2] <= 16).all()


@settings(max_examples=30)
@given(like((torch.empty(4, 8, dtype=torch.bfloat16), torch.empty(1, 1), torch.empty(3)), scales=[1, 2]))
def test_like_draws_scales_positive_and_finite(args):
    for scale in args[1:]:
        assert torch.isfinite(scale).all() and (scale >= 2.0**-8).all() and (scale <= 2.0**4).all()


@pytest.mark.parametrize("scales", [[1], [2], [5], "2", [0.0]], ids=str)
def test_like_refuses_scales_that_are_no_floating_tensor(scales):
    with pytest.raises(InvalidArgument, match="scales="):
        like((torch.empty(2), torch.empty(2, dtype=torch.int64), 1.0), scales=scales)


def _divide(x, s):
    return (x.float() / s).clamp(-448.0, 448.0).to(FP8)


def _inverse(x, s):
    return (x.float() * s.reciprocal()).clamp(-448.0, 448.0).to(FP8)


def _dequant(q, x_scale):
    return (q.float() * x_scale).to(torch.bfloat16)


def _dequant_unnamed(q, s):
    return (q.float() * s).to(torch.bfloat16)


def _norm(x, w):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(torch.bfloat16)


@pytest.mark.parametrize(
    ("pattern", "args", "expected"),
    [
        (_divide, (torch.zeros(4, 8), torch.zeros(1)), (1,)),
        (_inverse, (torch.zeros(4, 8), torch.zeros(4, 1)), (1,)),
        (_dequant, (torch.zeros(4, 8, dtype=FP8), torch.zeros(1)), (1,)),
        (_dequant_unnamed, (torch.zeros(4, 8, dtype=FP8), torch.zeros(1)), ()),
        (_norm, (torch.zeros(4, 8), torch.zeros(8)), ()),
        (rms_quant_pattern, EXAMPLE_INPUTS, (2,)),
    ],
    ids=["divisor", "reciprocal", "named", "unnamed dequant", "norm weight", "rms quant"],
)
def test_scale_positions(pattern, args, expected):
    assert scale_positions(pattern, args) == expected


def test_planted_draws_a_recorded_quant_patterns_scale_positive():
    scale = minimal(planted(_recorded(), context=st.nothing(), min_instances=1), lambda case: True).inputs[0][2]
    assert scale.item() == 1.0


# ------------------------------------------------------------------------------ float8 cases run


def _dequant_recorded():
    from torch._inductor import pattern_matcher
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only

    with pmverify.record_patterns() as recorded:
        pattern_matcher.register_replacement(
            _dequant,
            lambda q, x_scale: (q.float() * x_scale).to(torch.bfloat16),
            [torch.empty(4, 8, dtype=FP8), torch.empty(1)],
            fwd_only,
            PatternMatcherPass(),
        )
    return recorded[0]


def _quant_instance():
    """One instance of the plain quantization pattern ``_divide`` (its float8 output one of four values)."""
    example = (torch.empty(4, 8), torch.empty(1))
    return planted(_divide, like(example, scales=[1]), context=st.nothing(), min_instances=1, max_instances=1)


def _runs(case):
    run_graph(case.gm, case.inputs[0])  # raises where an op has no kernel for its dtype
    return True


EXAMPLES = {
    # the consumer of the quantized output reads its float32 upcast
    "consumer": (
        lambda: planted(_recorded(), context=st.nothing(), min_instances=1),
        lambda case: any(n.target == aten.neg.default and _reads_fp8(n.args[0]) for n in case.gm.graph.nodes),
    ),
    # a write-back of the float8 output, read again after it
    "write-back reader": (
        lambda: with_mutations(_quant_instance()),
        lambda case: "read again" in case.label and _fp8_written(case),
    ),
    # an in-place op on a float8 input (the dequant pattern's q)
    "in-place on float8": (
        lambda: with_mutations(planted(_dequant_recorded(), context=st.nothing(), min_instances=1)),
        lambda case: _mutates_fp8(case, "aten."),
    ),
    # a mutating custom op on a float8 input
    "custom op on float8": (
        lambda: with_mutating_custom_ops(planted(_dequant_recorded(), context=st.nothing(), min_instances=1)),
        lambda case: _mutates_fp8(case, "auto_functionalized"),
    ),
}


def _mutates_fp8(case, kind):
    """Whether an op whose target starts with ``kind`` writes a float8 tensor."""
    nodes = {node.name: node for node in case.gm.graph.nodes}
    return any(m.target.startswith(kind) and nodes[m.mutated].meta["val"].dtype == FP8 for m in case.mutations)


def _casts_to_fp8(node):
    return node.target == torch.ops.prims.convert_element_type.default and node.args[1] == FP8


def _reads_fp8(node):
    """Whether ``node`` is a float8 cast, or a cast of one."""
    upcast = node.target == torch.ops.prims.convert_element_type.default and _casts_to_fp8(node.args[0])
    return _casts_to_fp8(node) or upcast


def _fp8_written(case):
    return any(
        node.target == aten.copy_.default and node.args[0].meta.get("val", torch.empty(0)).dtype == FP8
        for node in case.gm.graph.nodes
    )


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_float8_cases_run_before_the_pass_examples(name):
    strategy, condition = EXAMPLES[name]
    case = minimal(strategy(), condition)
    assert _runs(case)
    assert not pmverify.check_case(RMSQuantPass(), case).internal_errors


# ------------------------------------------------------------------------------ the semantics rule


def _quant_cases():
    base = planted(_recorded())
    return st.one_of(base, with_mutations(base), with_mutating_custom_ops(base))


def test_a_correct_float8_quant_fusion_is_quiet(tmp_path):
    pmverify.verify(RMSQuantPass(), _quant_cases(), max_examples=15, seed=0, repro_dir=tmp_path)


@pytest.mark.parametrize("bug", [TimesScalePass, FnuzRangePass], ids=["times scale", "e4m3fnuz range"])
def test_a_wrong_scale_is_found(bug, finding_only, tmp_path):
    with finding_only(), pytest.raises(pmverify.PassVerificationError) as info:
        pmverify.verify(bug(), planted(_recorded()), max_examples=40, seed=0, repro_dir=tmp_path)
    assert any(v.oracle == "semantics" for v in info.value.violations), info.value.violations


@pytest.mark.slow
def test_a_correct_float8_quant_fusion_is_quiet_over_300_cases(tmp_path):
    pmverify.verify(RMSQuantPass(), _quant_cases(), max_examples=300, seed=0, repro_dir=tmp_path)


def test_an_extra_user_never_reads_an_empty_buffer():
    """A quantization pattern writes its float8 result into an ``empty`` buffer: an extra user of
    that buffer reads uninitialised memory (NaN under deterministic fill: a void case)."""
    from pmverify.strategies._near_miss import kind_applies, variants
    from pmverify.strategies._traced import Traced

    def pattern(x, scale):
        buffer = torch.empty_like(x, dtype=FP8)
        return aten.copy.default(buffer, (x / scale).clamp(-448.0, 448.0))

    args = (torch.ones(4, 8), torch.ones(1))
    base = Traced(trace(pattern, args), args)
    assert kind_applies(base, "extra_user")
    picked = {variants(pattern, base, "extra_user", None, lambda n, i=i: i % n).extra_user for i in range(8)}
    assert picked and not any(name.startswith("empty") for name in picked), picked
