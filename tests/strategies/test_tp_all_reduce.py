"""``tp_cases(..., all_reduce=)``: tensor-parallel cases whose graphs hold a project's own all-reduce op.

The op (``pmtest::all_reduce``, :mod:`tests._user_all_reduce`) is defined as vLLM defines its
``vllm::all_reduce``. The pass is written here in vLLM's style: built from a config with ``tp_rank``, it fuses an rms-norm whose
mean of squares is all-reduced into one op that performs the all-reduce inside.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _user_all_reduce import ALL_REDUCE, NO_BUG, NO_TP_DIVISOR, RANK_DIVISOR
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement
from torch._subclasses.fake_tensor import FakeTensorMode

import pmverify
from pmverify.distributed import DEFAULT_GROUP_NAME
from pmverify.strategies import fx_graphs, planted, tp_cases


@dataclasses.dataclass(frozen=True)
class TPNormConfig:
    hidden: int = 8  # per rank
    eps: float = 1e-6
    tp_world: int = 2
    tp_rank: int = 0
    group_name: str = DEFAULT_GROUP_NAME
    bug: int = NO_BUG


class TPRMSNormPass:
    """vLLM's style: a pass built from a config, one pattern registered on fake example inputs."""

    def __init__(self, config: TPNormConfig) -> None:
        self.config = config
        self.matched_count = 0
        self.patterns = PatternMatcherPass(pass_name="tp_rms_norm")
        eps, world, rank, group, bug = config.eps, config.tp_world, config.tp_rank, config.group_name, config.bug

        def pattern(x, w):
            xf = x.to(torch.float32)
            var = torch.ops.pmtest.all_reduce(xf.pow(2).mean(-1, keepdim=True), group) / world
            return (xf * torch.rsqrt(var + eps) * w).to(x.dtype)

        def replacement(x, w):
            return torch.ops.pmtest.tp_rms_norm(x, w, eps, rank, world, group, bug)

        with FakeTensorMode():
            examples = [torch.empty(4, config.hidden), torch.empty(config.hidden)]
        register_replacement(pattern, replacement, examples, fwd_only, self.patterns)

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = self.patterns.apply(graph)

    def uuid(self) -> str:
        return repr(self.config)


CONFIG = TPNormConfig()
with pmverify.record_patterns() as _recorded:
    TPRMSNormPass(CONFIG)
(RECORDED,) = _recorded


def user_cases(config: TPNormConfig = CONFIG) -> st.SearchStrategy:
    return tp_cases(planted(RECORDED, pass_config=config), tp_world=st.just(config.tp_world), all_reduce=ALL_REDUCE)


def test_cases_hold_the_users_all_reduce():
    case = find(user_cases(), lambda c: c.expected_matches >= 1, settings=settings(database=None))
    targets = [node.target for node in case.gm.graph.nodes if node.op == "call_function"]
    assert ALL_REDUCE in targets
    assert not any(getattr(t, "namespace", None) == "_c10d_functional" for t in targets)
    assert case.all_reduce is ALL_REDUCE and case.tp_world == 2


_QUICK = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_QUICK
@given(user_cases())
def test_correct_tp_pass_is_quiet(case):
    result = pmverify.check_case(TPRMSNormPass, case)
    assert result.ok, result.violations


def _matched_case():
    """A case with a plain instance, on random inputs (the shrunk case's zeros normalise to zeros)."""
    case = find(user_cases(), lambda c: c.expected_matches >= 1, settings=settings(database=None))
    generator = torch.Generator().manual_seed(0)
    inputs = [tuple(torch.randn(v.shape, generator=generator).to(v.dtype) for v in rank) for rank in case.inputs]
    return dataclasses.replace(case, inputs=inputs)


@pytest.mark.parametrize("bug", [NO_TP_DIVISOR, RANK_DIVISOR])
def test_injected_bug_is_caught(bug):
    case = _matched_case()
    assert pmverify.check_case(TPRMSNormPass, case).ok
    buggy = dataclasses.replace(case, pass_config=dataclasses.replace(CONFIG, bug=bug))
    result = pmverify.check_case(TPRMSNormPass, buggy)
    assert "semantics" in {v.oracle for v in result.violations}, result.violations


@pytest.mark.parametrize("bug", [NO_TP_DIVISOR, RANK_DIVISOR])
def test_injected_bug_is_caught_by_the_search(bug):
    """Within the profile's example count, unshrunk."""
    find(
        user_cases(dataclasses.replace(CONFIG, bug=bug)),
        lambda c: "semantics" in {v.oracle for v in pmverify.check_case(TPRMSNormPass, c).violations},
        settings=settings(database=None, phases=[Phase.generate], deadline=None),
    )


class DropsAllReduce(TPRMSNormPass):
    """Fuses, then also drops every all-reduce its matches left: the same wrong graph on every rank."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        super().__call__(graph)
        for node in list(graph.nodes):
            if node.target is ALL_REDUCE:
                node.replace_all_uses_with(node.args[0])
                graph.erase_node(node)


def _norm_and_all_reduce_case(all_reduce) -> pmverify.GraphCase:
    """The pattern on (x, w) and a lone all-reduce of y, on two ranks."""

    def program(x, w, y):
        return RECORDED.search_fn(x, w), torch.ops.pmtest.all_reduce(y, DEFAULT_GROUP_NAME)

    with FakeTensorMode():
        gm = fwd_only(program, [torch.empty(4, 8), torch.empty(8), torch.empty(3)])
    inputs = [(torch.randn(4, 8), torch.rand(8) + 0.5, torch.randn(3)) for _ in range(2)]
    return pmverify.GraphCase(gm, inputs, tp_world=2, pass_config=CONFIG, all_reduce=all_reduce)


def test_collective_accounting_counts_the_users_op():
    """The tensor-parallel oracle counts the op the case names: an all-reduce dropped outside any
    match is flagged; without ``all_reduce=`` the op is not a collective to it."""
    case = _norm_and_all_reduce_case(ALL_REDUCE)
    result = pmverify.check_case(DropsAllReduce, case, oracles=["tensor_parallel"])
    assert [v.message for v in result.violations] == [
        "the pass removed 2 all-reduce(s) from the graph; its 1 match(es) account for 1"
    ]
    assert pmverify.check_case(TPRMSNormPass, case, oracles=["tensor_parallel"]).ok
    unnamed = _norm_and_all_reduce_case(None)
    assert pmverify.check_case(DropsAllReduce, unnamed, oracles=["tensor_parallel"]).ok


@pytest.mark.slow
def test_correct_tp_pass_is_quiet_over_300_cases(tmp_path):
    summary = pmverify.verify(TPRMSNormPass, user_cases(), max_examples=300, seed=1, repro_dir=tmp_path)
    assert summary.rewritten_cases > 30, summary.describe()


def test_default_is_the_functional_collective():
    assert repr(tp_cases(fx_graphs())) == "tp_cases(fx_graphs())"
    shown = repr(tp_cases(fx_graphs(), all_reduce=ALL_REDUCE))
    assert shown == "tp_cases(fx_graphs(), all_reduce=torch.ops.pmtest.all_reduce.default)"


BAD = [
    ("sum", "all_reduce='sum' must be None"),
    (lambda x, g: x, "must be None, torch.ops._c10d_functional.all_reduce or a registered op"),
    (torch.ops.aten.add.Tensor, r"all_reduce=torch.ops.aten.add.Tensor has schema"),
    (torch.ops.pmtest.two_args.default, r"all_reduce=torch.ops.pmtest.two_args.default has schema"),
    (torch.ops.aten.add_.Tensor, r"all_reduce=torch.ops.aten.add_.Tensor has schema"),
    (torch.ops.aten.softmax, r"all_reduce=torch.ops.aten.softmax has no default overload"),
    (torch.ops._c10d_functional.all_gather_into_tensor.default, "has schema"),
]


@pytest.mark.parametrize(("value", "message"), BAD)
def test_bad_all_reduce(value, message):
    with pytest.raises(InvalidArgument, match=message):
        tp_cases(fx_graphs(), all_reduce=value)


@pytest.mark.parametrize(
    "value", [None, torch.ops._c10d_functional.all_reduce, torch.ops._c10d_functional.all_reduce.default]
)
def test_functional_forms_are_the_default(value):
    from pmverify._validation import validate_all_reduce

    assert validate_all_reduce("all_reduce", value) is None
    assert validate_all_reduce("all_reduce", torch.ops.pmtest.all_reduce) is ALL_REDUCE


def test_reproducer_names_the_all_reduce():
    from pmverify._findings.reproducer import render

    source = render(_norm_and_all_reduce_case(ALL_REDUCE), TPRMSNormPass)
    assert "    all_reduce=torch.ops.pmtest.all_reduce.default,\n" in source
    assert "all_reduce=" not in render(_norm_and_all_reduce_case(None), TPRMSNormPass).split("CASE = GraphCase(")[1]
