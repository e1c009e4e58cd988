"""check_rewrite(): each rewrite of the shipped pass checks out alone; a wrong replacement is caught
(semantics) with a runnable reproducer; a rewrite its extra_check never lets match is an error, not
a vacuous pass; bad arguments."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest
import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch._inductor import pattern_matcher as pm

import pmverify
from pmverify import PassVerificationError, verify
from pmverify._registry.record import record_patterns
from pmverify._rewrites.rewrite import RewriteNeverMatched, RewriteResult, check_rewrite
from pmverify.faults import QKNormWrongRoundingOrder
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.fusion_pass import _pattern_pass
from pmverify.strategies import like, planted

CONFIG = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16)


@functools.cache
def recorded(pass_cls: type = QKNormFusionPass, config: QKNormConfig = CONFIG) -> dict:
    """The rewrites ``pass_cls`` registers for ``config``, by name (registered afresh: the pass's
    own registration is cached per (class, config) and may have run before)."""
    with record_patterns() as rewrites:
        _pattern_pass.__wrapped__(pass_cls, config)
    return {r.name.removesuffix("_pattern"): r for r in rewrites}


@pytest.mark.parametrize("name", ["qk_norm", "qk_norm_split3", "rms_norm"])
def test_shipped_rewrites_check_out(name):
    result = check_rewrite(recorded()[name], max_examples=8, seed=0)
    assert isinstance(result, RewriteResult) and result.rewrite is recorded()[name]
    # two cases of each near-miss kind that applies, then the rest of the 8 (at least 4) random
    assert result.examples >= 8 and not result.coverage.missed
    assert result.rewritten_cases >= result.outcomes["must match"] > 0  # the rest: other dtypes, which it may match


def _rms_upcast(x, w):
    xf = x.to(torch.float32)
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(torch.bfloat16)


def _rms_in_bf16(x, w):
    """Wrong: drops the fp32 upcast, so the mean of squares is computed in bf16."""
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(torch.bfloat16)


def test_a_replacement_that_drops_the_upcast_is_caught(finding_only, tmp_path):
    patterns = pm.PatternMatcherPass(pass_name="test_no_upcast")
    example = [torch.empty(4, 16, dtype=torch.bfloat16), torch.empty(16, dtype=torch.bfloat16)]
    with record_patterns() as rewrites:
        pm.register_replacement(_rms_upcast, _rms_in_bf16, example, pm.fwd_only, patterns)
    with finding_only(), pytest.raises(PassVerificationError) as info:
        check_rewrite(rewrites[0], max_examples=20, repro_dir=tmp_path)
    assert {v.oracle for v in info.value.violations} == {"semantics"}
    assert "_rms_upcast" in str(info.value) and "check_rewrite" in str(info.value)
    assert info.value.reproducer is not None and info.value.reproducer.parent == tmp_path


def rms_eps_pattern(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rms_eps_hard_coded(x, w, eps):
    """Wrong: ignores its eps, which Inductor's pattern matches at any value (scalar_workaround)."""
    eps = 1e-6
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rms_eps(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def only_pattern_keywords(match) -> bool:
    """Refuse a match whose calls carry keyword arguments (these patterns' calls carry none):
    Inductor's matcher ignores those its pattern does not hold (``alpha=``, ``dtype=``), and a
    replacement traced without them drops them."""
    return not any(node.kwargs for node in match.nodes)


def _eps_rewrite(replace_fn, extra_check=None):
    """``rms_eps_pattern -> replace_fn`` registered with eps as a scalar_workaround, as recorded."""
    checked = "_checked" if extra_check else ""
    patterns = pm.PatternMatcherPass(pass_name=f"test_eps_{replace_fn.__name__}{checked}")
    example = [torch.empty(4, 16), torch.empty(16)]
    kwargs = {"extra_check": extra_check} if extra_check else {}
    with record_patterns() as rewrites:
        pm.register_replacement(
            rms_eps_pattern, replace_fn, example, pm.fwd_only, patterns, scalar_workaround={"eps": 1e-6}, **kwargs
        )
    return rewrites[0]


def test_a_replacement_hard_coding_a_scalar_workaround_is_caught(finding_only, tmp_path):
    """The default inputs draw eps away from its example value (Inductor matches any): a
    replacement that hard-codes the example's eps computes something else there. (Its extra_check
    refuses the keyword arguments it drops too, as its correct twin's below: the optional_arg near
    miss, judged first, would show that other bug.)"""
    rewrite = _eps_rewrite(_rms_eps_hard_coded, only_pattern_keywords)
    with finding_only(), pytest.raises(PassVerificationError) as info:
        check_rewrite(rewrite, max_examples=15, seed=0, repro_dir=tmp_path)
    assert {v.oracle for v in info.value.violations} == {"semantics"}
    assert "rms_eps_pattern" in str(info.value)


def test_a_replacement_using_its_scalar_workaround_checks_out():
    """Correct: it uses its eps, and its extra_check refuses the calls with keyword arguments the
    pattern does not hold (check_rewrite draws them: alpha=, dtype=...)."""
    result = check_rewrite(_eps_rewrite(_rms_eps, only_pattern_keywords), max_examples=15, seed=0)
    assert result.rewritten_cases >= result.outcomes["must match"] > 0
    assert set(result.outcomes) - {"must match"}  # near misses were drawn, and left alone or matched rightly


def test_a_replacement_dropping_an_argument_the_pattern_omits_is_caught(finding_only):
    """Without that extra_check, Inductor's matcher also rewrites ``mean(..., dtype=...)`` or
    ``add(..., alpha=...)``, which the replacement drops: a finding of check_rewrite."""
    with finding_only(), pytest.raises(PassVerificationError) as info:
        check_rewrite(_eps_rewrite(_rms_eps), max_examples=15, seed=0)
    assert {v.oracle for v in info.value.violations} <= {"semantics", "structure"}
    assert [p.reason for p in info.value.result.case.planted] == ["optional_arg"]


def addmm_pattern(b, x, w):
    return torch.addmm(b, x, w)


def _mm_plus_bias(b, x, w):
    """Wrong where the call has beta= or alpha=, which Inductor's matcher ignores."""
    return x @ w + b


def mask_pattern(x, mask):
    return x * mask


def _mask_as_bool(x, mask):
    """Wrong: takes a 0/1 mask for a bool one."""
    return torch.where(mask.bool(), x, 0.0)


def _recorded(search_fn, replace_fn, example):
    with record_patterns(register=False) as rewrites:
        pm.register_replacement(search_fn, replace_fn, list(example), pm.fwd_only, [])
    return rewrites[0]


def test_a_replacement_dropping_alpha_or_beta_is_caught(finding_only):
    rewrite = _recorded(addmm_pattern, _mm_plus_bias, (torch.empty(8), torch.empty(4, 6), torch.empty(6, 8)))
    with finding_only(), pytest.raises(PassVerificationError) as info:
        check_rewrite(rewrite, max_examples=60, seed=0)
    assert {v.oracle for v in info.value.violations} == {"semantics"}
    (instance,) = info.value.result.case.planted
    assert instance.reason == "optional_arg" and "aten.addmm.default's" in instance.detail


def test_a_replacement_assuming_a_0_1_mask_is_caught(finding_only):
    """The inputs draw 0/1 masks, on which the replacement is right; check_rewrite's ``"values"``
    near miss gives the mask 2, -1 or 0.5 (Inductor's matcher does not see values)."""
    from pmverify.strategies import tensors

    rewrite = _recorded(mask_pattern, _mask_as_bool, (torch.empty(4, 8), torch.empty(4, 8)))
    masks = tensors(torch.float32, (4, 8), elements=st.sampled_from([0.0, 1.0]))
    inputs = st.tuples(tensors(torch.float32, (4, 8)), masks)
    with finding_only(), pytest.raises(PassVerificationError) as info:
        check_rewrite(rewrite, inputs=inputs, max_examples=30, seed=0)
    assert {v.oracle for v in info.value.violations} == {"semantics"}
    assert [p.reason for p in info.value.result.case.planted] == ["values"]


PASS_SOURCE = """
from pmverify._registry.record import record_patterns
from pmverify.faults import QKNormWrongRoundingOrder
from pmverify.fusions.qk_norm import QKNormConfig
from pmverify.fusions.qk_norm.fusion_pass import _pattern_pass

with record_patterns() as REWRITES:
    _pattern_pass.__wrapped__(QKNormWrongRoundingOrder, QKNormConfig(q_size=8, kv_size=4, eps=1e-6))
PASS = REWRITES[0].pattern_pass()
"""


def test_a_wrong_rounding_order_is_caught_with_a_runnable_reproducer(finding_only, tmp_path):
    """The weight applied after the cast to bf16 instead of before: a fault from pmverify.faults,
    found in the rewrite alone; the reproducer rebuilds the one-rewrite pass from pass_source. The
    semantics rule judges rounding in aggregate, so the fault shows with confidence on results of a
    few hundred elements: 32 to 64 tokens (the example's 4 give 32-element results, on which a
    rewrite about 1.2x worse in RMS is within the rule's noise allowance)."""
    wrong = recorded(QKNormWrongRoundingOrder)["qk_norm"]
    inputs = like(wrong.search_args, vary={"tokens": [(0, 0)]}, min_side=32, max_side=64)
    with finding_only(), pytest.raises(PassVerificationError) as info:
        check_rewrite(wrong, max_examples=20, inputs=inputs, repro_dir=tmp_path, pass_source=PASS_SOURCE)
    assert {v.oracle for v in info.value.violations} == {"semantics"}
    run = subprocess.run([sys.executable, str(info.value.reproducer)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "VIOLATION semantics:" in run.stdout


def test_a_rewrite_that_never_matches_is_an_error():
    """max_tokens=1: the extra_check rejects the 4-token inputs drawn like the example inputs."""
    never = recorded(config=QKNormConfig(q_size=8, kv_size=4, eps=1e-6, max_tokens=1))["rms_norm"]
    with pytest.raises(RewriteNeverMatched, match="rewrite rms_norm_pattern never matched") as info:
        check_rewrite(never, max_examples=6, seed=0)
    assert info.value.result.rewritten_cases == 0 and info.value.result.examples >= 6
    assert info.value.result.outcomes.get("extra_check", 0) > 0
    assert "extra_check: " in str(info.value)
    # the exception verify() raises for a search that rewrote nothing, with verify's summary
    assert isinstance(info.value, pmverify.VacuousSearch) and RewriteNeverMatched is pmverify.RewriteNeverMatched
    assert info.value.summary.cases == info.value.result.examples and info.value.summary.rewritten_cases == 0


def test_inputs_the_extra_check_rejects_in_part():
    """max_tokens=2 and 1..4 tokens drawn: only the instances within the limit are compared."""
    rewrite = recorded(config=QKNormConfig(q_size=8, kv_size=4, eps=1e-6, max_tokens=2))["rms_norm"]
    inputs = like(rewrite.search_args, vary={"tokens": [(0, 0)]}, max_side=4)
    result = check_rewrite(rewrite, inputs=inputs, max_examples=20, seed=1)
    assert result.outcomes.get("extra_check", 0) > 0 and result.outcomes.get("must match", 0) > 0
    assert result.rewritten_cases >= result.outcomes["must match"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"recorded": "qk_norm"}, "recorded='qk_norm' must be a RecordedRewrite"),
        ({"inputs": (torch.ones(2),)}, "inputs="),
        ({"inputs": st.just(1), "max_examples": 0}, "max_examples=0"),
    ],
)
def test_bad_arguments(kwargs, message):
    args = {"recorded": recorded()["rms_norm"], **kwargs}
    with pytest.raises(InvalidArgument, match=message):
        check_rewrite(args.pop("recorded"), **args)


@pytest.fixture(scope="module")
def inductor_sfdp() -> dict:
    """Inductor's own attention fusions (torch/_inductor/fx_passes/fuse_attention.py), by name, as
    ``pmverify.inductor_rewrite`` records them: the same whether or not Inductor was initialised in
    this process (a compiled test run before in the same worker leaves ``_sfdp_init`` cached, so
    calling it again records nothing)."""
    names = ("_sfdp_pattern_1_inference", "_sfdp_pattern_5_inference", "_sfdp_pattern_28_inference")
    return {name: pmverify.inductor_rewrite("fuse_attention", name) for name in names}


def _attention_with_alpha(query, key, value, attn_mask):
    """``_sfdp_pattern_5`` with ``alpha=3.0`` on its mask add (inv_scale 4.0)."""
    return torch.softmax(torch.add(query @ key.transpose(-2, -1) / 4.0, attn_mask, alpha=3.0), dim=-1) @ value


@pytest.mark.slow
def test_inductor_attention_fusion_drops_the_alpha_of_the_mask_add(inductor_sfdp):
    """A bug of torch 2.13's own attention fusion (docs/audit/sfdp_mask_add_alpha.py shows it under
    torch.compile): its matcher ignores ``alpha=`` on the mask add, and SDPA adds the mask once. The
    instance check_rewrite's ``optional_arg`` near miss plants, traced as Inductor traces patterns,
    with a mask at scale 1 (drawn masks go down to 2**-24, where the alpha changes nothing)."""
    torch.manual_seed(0)
    args = (*(torch.randn(2, 4, 8, 16) for _ in range(3)), torch.randn(1, 1, 8, 8))
    case = pmverify.GraphCase(pm.fwd_only(_attention_with_alpha, args), [args])
    result = pmverify.check_case(inductor_sfdp["_sfdp_pattern_5_inference"].pattern_pass(), case, oracles=["semantics"])
    assert result.rewrite_count == 1 and [v.oracle for v in result.violations] == ["semantics"]


def _attention_over_queries(query, key, value):
    """``_sfdp_pattern_1`` with its softmax over dim -2 (the queries) instead of -1."""
    return torch.softmax(query @ key.transpose(-2, -1) / 4.0, dim=-2) @ value


@pytest.mark.slow
def test_inductor_attention_fusion_ignores_the_softmax_dim(inductor_sfdp):
    """A bug of torch 2.13's own attention fusion (docs/audit/sfdp_softmax_dim.py shows it under
    torch.compile): its serialized patterns hold softmax's dim as ``Ignored()`` without a re-trace,
    so a softmax over dim -2 becomes SDPA, which softmaxes over -1. The instance check_rewrite's
    ``reduction_dim`` near miss plants, traced as Inductor traces patterns (a planted search finds it
    too, but whether within a few cases hangs on the process's draws)."""
    torch.manual_seed(0)
    args = tuple(torch.randn(2, 4, 8, 16) for _ in range(3))
    case = pmverify.GraphCase(pm.fwd_only(_attention_over_queries, args), [args])
    result = pmverify.check_case(inductor_sfdp["_sfdp_pattern_1_inference"].pattern_pass(), case, oracles=["semantics"])
    assert result.rewrite_count == 1 and [v.oracle for v in result.violations] == ["semantics"]


def scale_pattern(x, inv_scale):
    return x.div(inv_scale).softmax(-1)


def _scale_replacement(x, inv_scale):
    return (x * (1.0 / inv_scale)).softmax(-1)


def _scale_hard_coded(x, inv_scale):
    """Wrong: the example's 2.0 for any inv_scale."""
    return (x * 0.5).softmax(-1)


def wants_a_number(match) -> bool:
    """As Inductor's _sfdp_extra_check: the scale must be a Python number (1.0 / inv_scale)."""
    return isinstance(match.kwargs["inv_scale"], (int, float))


def _scalar_rewrite(replace_fn):
    """inv_scale given as ``torch.tensor(2.0)``, as Inductor gives its attention patterns' scales."""
    with record_patterns(register=False) as rewrites:
        pm.register_replacement(
            scale_pattern,
            replace_fn,
            [torch.empty(4, 8), torch.tensor(2.0)],
            pm.fwd_only,
            [],
            extra_check=wants_a_number,
        )
    return rewrites[0]


def test_a_0d_scale_the_extra_check_wants_as_a_number_is_compared(finding_only):
    """Drawn as 0-d tensors only, the scale would be refused by the extra_check in every case; drawn
    as Python numbers (around and far from 2.0), it is matched and compared."""
    result = check_rewrite(_scalar_rewrite(_scale_replacement), max_examples=8, seed=0)
    assert result.rewritten_cases >= result.outcomes["must match"] > 0 and not result.capped_sizes
    with finding_only(), pytest.raises(PassVerificationError) as info:
        check_rewrite(_scalar_rewrite(_scale_hard_coded), max_examples=15, seed=0)
    assert {v.oracle for v in info.value.violations} == {"semantics"}


def matmul_relu(x, w):
    return (x @ w).relu()


def test_large_examples_are_capped_and_the_cap_reported():
    rewrite = _recorded(matmul_relu, matmul_relu, (torch.empty(512, 256), torch.empty(256, 512)))
    result = check_rewrite(rewrite, max_examples=3, seed=0)
    assert result.capped_sizes == {512: 64, 256: 32} and result.rewritten_cases


def test_an_inductor_attention_fusion_on_a_number_scale_and_strided_inputs_is_compared(inductor_sfdp):
    """Inductor's pattern 28 is registered on strided q/k/v (``empty_strided``) and a 0-d scale its
    extra_check refuses as a tensor: drawn contiguous with a 0-d scale, it was never matched. Plain
    instances (no near miss: the softmax-dim bug of its serialized pattern would show first)."""
    rewrite = inductor_sfdp["_sfdp_pattern_28_inference"]
    cases = planted(rewrite, context=st.nothing(), min_instances=1, max_instances=1, near_misses=False)
    summary = verify(rewrite.pattern_pass(), cases, max_examples=4, seed=0)
    assert summary.rewritten_cases > 0


def _scaled_add(x, y):
    return torch.add(x, y) * 2


def _scaled_add_drops_alpha(x, y):
    """Right for the pattern's own trace; wrong where the call gives ``alpha=`` (which the matcher ignores)."""
    return (x + y) * 2


@functools.cache
def _alpha_dropping_rewrite():
    patterns = pm.PatternMatcherPass(pass_name="test_drops_alpha")
    example = [torch.empty(4, 8), torch.empty(4, 8)]
    with record_patterns() as rewrites:
        pm.register_replacement(_scaled_add, _scaled_add_drops_alpha, example, pm.fwd_only, patterns)
    return rewrites[0]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_each_near_miss_kind_that_applies_is_judged_first_whatever_the_seed(seed):
    """Two cases of each kind that applies come first (then random ones): the alpha= the replacement
    drops is found at any seed in a search of 2 cases, where random draws show that variant in about 1
    case in 10 (half near misses, a kind among 5)."""
    with pytest.raises(PassVerificationError) as info:
        check_rewrite(_alpha_dropping_rewrite(), max_examples=2, seed=seed)
    assert [(i.reason, "alpha" in (i.detail or "")) for i in info.value.result.case.planted] == [("optional_arg", True)]


def test_a_rewrite_says_which_near_miss_kinds_it_judged():
    result = check_rewrite(recorded()["rms_norm"], max_examples=4, seed=0)
    assert result.coverage == pmverify._rewrites.rewrite.NearMissCoverage(
        judged=("optional_arg", "overload", "reduction_dim", "values", "dtype")
    )
    assert result.coverage.describe() == "judged: optional_arg, overload, reduction_dim, values, dtype"
    assert result.examples > 4  # the kinds' cases, then random ones (at least half of max_examples)
