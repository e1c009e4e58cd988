"""Each oracle module owns its applicability (``applies(pair)`` beside ``check(pair)``), which is what
``CaseResult.judged`` lists; a void case's kind is structured (``CaseResult.void_kind``), never read
off its reason's words."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from pmverify import GraphCase, check_case
from pmverify._engine.check import CaseResult
from pmverify.oracles import MODULES, ORACLES, applicability, semantics


def _case(fn, *inputs):
    return GraphCase(make_fx(fn)(*inputs), [tuple(inputs)])


def _untouched(graph: torch.fx.Graph) -> None:
    return None


def test_every_oracle_module_exports_applies_and_check():
    assert list(MODULES) == list(ORACLES)
    for name, module in MODULES.items():
        assert ORACLES[name] is module.check, name
        assert "applies" in module.__all__ and "check" in module.__all__, name
        assert applicability(module.check) is module.applies, name


def test_a_callable_oracle_always_applies():
    def mine(pair):
        return []

    result = check_case(_untouched, _case(lambda x: x * 2, torch.ones(3)), oracles=["structure", mine])
    assert result.judged == ("structure", "mine")


def test_judged_lists_the_oracles_whose_module_applies():
    plain = check_case(_untouched, _case(lambda x: x * 2, torch.ones(3)))
    assert plain.judged == ("structure", "semantics")
    inplace = check_case(_untouched, _case(lambda x: x.mul_(2).sin(), torch.ones(3)))
    assert inplace.judged == ("structure", "semantics", "mutation_barriers", "aliasing")


def test_a_non_finite_void_case_is_not_a_not_comparable_one():
    result = check_case(_untouched, _case(lambda x: torch.log(x) * 2, torch.tensor([1.0, -1.0])))
    assert result.void_kind == semantics.NON_FINITE and result.void_reason.startswith("output 0")
    assert result.not_comparable is None and "semantics" not in result.judged


def test_not_comparable_is_read_from_the_kind_not_the_words():
    def result(kind):
        return CaseResult(None, None, [], 0, [], 0.0, "rng: the words of some reason", void_kind=kind)

    assert result(semantics.NON_FINITE).not_comparable is None
    assert result(semantics.NOT_COMPARABLE).not_comparable == "rng: the words of some reason"
    assert result(None).not_comparable is None
