"""The mutation faults: each is correct where its bug cannot show and caught where it can, within
the default example budget; they are built like the shipped pass."""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings

import pmverify
from pmverify import PassVerificationError, verify
from pmverify.faults import HandRMSNormIgnoresMutations, SwappedAutoFunctionalizedGetitems
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.strategies import qk_norm_cases
from pmverify.strategies._auto_functionalized import with_mutating_custom_ops
from pmverify.strategies._mutations import with_mutations
from pmverify.strategies._qk_norm import _build_case, _layer


def test_hand_rms_norm_is_correct_on_functional_graphs():
    results = []
    verify(HandRMSNormIgnoresMutations, qk_norm_cases(forms=["rms_norm"]), seed=0, on_result=results.append)
    assert sum(r.matches for r in results) >= len(results)  # it fuses (each case has a must-match norm)


def test_hand_rms_norm_is_caught_through_mutations(tmp_path, finding_only):
    results = []
    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(
            HandRMSNormIgnoresMutations,
            with_mutations(qk_norm_cases(forms=["rms_norm"])),
            seed=0,
            repro_dir=tmp_path,
            on_result=results.append,
        )
    error = info.value
    assert len(results) <= settings.default.max_examples + 1  # the finding, re-run once to report it
    assert any(p.reason == "mutation_inside" for p in error.case.planted)
    assert any(v.oracle == "expectations" and "mutation_inside" in v.message for v in error.violations)


def test_swapped_getitems_is_caught_through_custom_ops(tmp_path, finding_only):
    results = []
    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(
            SwappedAutoFunctionalizedGetitems,
            with_mutating_custom_ops(qk_norm_cases(), versions=(2,)),
            seed=0,
            repro_dir=tmp_path,
            on_result=results.append,
        )
    error = info.value
    assert len(results) <= settings.default.max_examples + 1
    assert {v.oracle for v in error.violations} == {"semantics"}  # well formed, matches right, values wrong
    assert error.result.pair.pass_.swapped >= 1


def test_swapped_getitems_without_auto_functionalized_is_the_shipped_pass():
    config = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16, max_tokens=4)
    verify(SwappedAutoFunctionalizedGetitems, qk_norm_cases(config), max_examples=3, seed=0)


@pytest.mark.parametrize("fault", [HandRMSNormIgnoresMutations, SwappedAutoFunctionalizedGetitems])
def test_faults_are_built_like_the_shipped_pass(fault):
    a = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16)
    b = QKNormConfig(q_size=8, kv_size=4, eps=1e-5, dtype=torch.bfloat16)
    assert fault(a).uuid() == fault(a).uuid() != fault(b).uuid()
    assert fault(a).uuid() not in (fault().uuid(), QKNormFusionPass(a).uuid())
    assert repr(fault(a)) == f"{fault.__name__}({a!r})"
    assert fault().matched_count == 0
    with pytest.raises(TypeError, match="config="):
        fault("bf16")


def test_hand_rms_norm_without_config_fuses_every_chain():
    config = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.float16, max_tokens=4)
    case = _build_case(config, [_layer(config, "rms_norm", "eps", tokens=2)])  # q: another eps
    result = pmverify.check_case(HandRMSNormIgnoresMutations(), case, oracles=["semantics", "structure"])
    assert result.ok and result.matches == 2


# The acceptance: both faults caught through strategies built on ``planted``, the way
# another pass project uses them (pattern and example inputs as given to register_replacement).

CONFIG = QKNormConfig(q_size=8, kv_size=8, eps=1e-6, dtype=torch.bfloat16)


def _planted(rewrite: str):
    from pmverify.fusions.qk_norm.patterns import rewrites
    from pmverify.strategies import like, planted

    found = {r.name: r for r in rewrites(CONFIG)}[rewrite]
    inputs = like(found.example_inputs, vary={"tokens": [(0, 0)]})
    return planted(found.search_fn, inputs, pass_config=CONFIG, name=rewrite, min_instances=1)


def test_hand_matcher_is_caught_through_mutations_of_planted_instances(tmp_path, finding_only):
    cases = with_mutations(_planted("rms_norm"))
    verify(QKNormFusionPass, cases, seed=0, max_examples=10)  # the shipped pass keeps to the regions
    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(HandRMSNormIgnoresMutations, cases, seed=0, repro_dir=tmp_path)
    assert any(v.oracle == "expectations" and "mutation_inside" in v.message for v in info.value.violations)


def test_swapped_getitems_are_caught_through_custom_ops_on_planted_instances(tmp_path, finding_only):
    cases = with_mutating_custom_ops(_planted("qk_norm"), versions=(2,))
    verify(QKNormFusionPass, cases, seed=0, max_examples=10)
    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(SwappedAutoFunctionalizedGetitems, cases, seed=0, repro_dir=tmp_path)
    assert {v.oracle for v in info.value.violations} == {"semantics"}
