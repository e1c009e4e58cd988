"""The tensor-parallel oracle compares the ranks' graphs up to arguments that are the rank: a
correct per-rank pass whose fused collective takes ``tp_rank`` (as vLLM's do) is quiet."""

import dataclasses
import functools
import types

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.tensor import Replicate, Shard

import pmverify
from pmverify import GraphCase
from pmverify.distributed import DEFAULT_GROUP_NAME
from pmverify.oracles.tensor_parallel import _graph_difference, all_reduce_count

aten = torch.ops.aten
c10d = torch.ops._c10d_functional


@torch.library.custom_op("pmverify_test_tp::all_reduce_bias", mutates_args=())
def all_reduce_bias(x: torch.Tensor, bias: torch.Tensor, group_name: str, tp_rank: int) -> torch.Tensor:
    """``all_reduce(x) + bias`` with the bias added before the reduction, on rank 0 only (so that
    it is counted once), as vLLM's ``RowParallelLinear`` adds its bias on rank 0 alone."""
    local = x + bias if tp_rank == 0 else x.clone()
    return c10d.wait_tensor(c10d.all_reduce(local, "sum", group_name))


@all_reduce_bias.register_fake
def _all_reduce_bias_fake(x, bias, group_name, tp_rank):
    return torch.empty_like(x + bias)


@dataclasses.dataclass(frozen=True)
class ReduceBiasConfig:
    """What :class:`AllReduceBiasFusion` is built with: the world and this rank."""

    tp_world: int
    tp_rank: int = 0
    group_name: str = DEFAULT_GROUP_NAME


def all_reduce_then_bias(x, bias, group_name=DEFAULT_GROUP_NAME, op="sum"):
    return c10d.wait_tensor(c10d.all_reduce(x, op, group_name)) + bias


@functools.lru_cache(maxsize=32)
def _patterns(config: ReduceBiasConfig, replacement_rank: int):
    from torch._inductor import pattern_matcher as pm

    patterns = pm.PatternMatcherPass(pass_name="pmverify_test_all_reduce_bias")

    def search(x, bias):
        return all_reduce_then_bias(x, bias, config.group_name)

    def replace(x, bias):
        return torch.ops.pmverify_test_tp.all_reduce_bias(x, bias, config.group_name, replacement_rank)

    with FakeTensorMode():
        examples = [torch.empty(4, 8), torch.empty(8)]
    pm.register_replacement(search, replace, examples, pm.fwd_only, patterns)
    return patterns


class AllReduceBiasFusion:
    """Replaces ``all_reduce(x) + bias`` with one ``pmverify_test_tp.all_reduce_bias(x, bias,
    group, tp_rank)``: correct, the fused op taking the rank it was built for (one rank per pass)."""

    def __init__(self, config: ReduceBiasConfig):
        self.config = config
        self.matched_count = 0

    def rank_argument(self) -> int:
        return self.config.tp_rank

    def __call__(self, graph):
        self.matched_count = _patterns(self.config, self.rank_argument()).apply(graph)


class PassesRankZero(AllReduceBiasFusion):
    """Passes 0 whatever its rank (a rank read from a global set on the first rank): every rank
    adds the bias, the sum holds it ``tp_world`` times. The graphs are identical on every rank: the
    semantics oracle finds it."""

    def rank_argument(self) -> int:
        return 0


class FusesOnRankZeroOnly(AllReduceBiasFusion):
    """Rewrites where it was built for rank 0 only: the match counts differ across ranks."""

    def __call__(self, graph):
        if self.config.tp_rank == 0:
            super().__call__(graph)


class PassesTheNextRank(AllReduceBiasFusion):
    """Passes ``(rank + 1) % world``: one rank still adds the bias, so the values hold on this op:
    ranks are judged by their results, and an int argument may differ across ranks."""

    def rank_argument(self) -> int:
        return (self.config.tp_rank + 1) % self.config.tp_world


# --------------------------------------------------------------------------------------------- cases

_CONTEXT = {"tanh": aten.tanh.default, "neg": aten.neg.default, "none": None}


def build_case(world: int, layers: list[tuple[int, int, str, str]], seed: int = 0) -> GraphCase:
    """One ``[rows, width]`` input per layer (each rank its own: a partial sum, as a row-parallel
    linear leaves it) and one bias (replicated); a layer is ``context(x)`` all-reduced (``"sum"``,
    or ``"max"``: a near miss), plus its bias, then ``tanh``."""

    def program(*args):
        outs = []
        for i, (_, _, context, op) in enumerate(layers):
            x, bias = args[2 * i], args[2 * i + 1]
            x = _CONTEXT[context](x) if _CONTEXT[context] else x
            outs.append(torch.tanh(all_reduce_then_bias(x, bias, op=op)))
        return tuple(outs)

    from torch._guards import TracingContext, tracing
    from torch._inductor.pattern_matcher import fwd_only

    mode = FakeTensorMode(allow_fallback_kernels=True)
    with mode:
        fake = [t for rows, width, _, _ in layers for t in (torch.empty(rows, width), torch.empty(width))]
    with tracing(TracingContext(mode)):
        gm = fwd_only(program, fake)
    generator = torch.Generator().manual_seed(seed)
    biases = [torch.randn(width, generator=generator) for _, width, _, _ in layers]
    inputs = [
        tuple(
            t
            for (rows, width, _, _), bias in zip(layers, biases, strict=True)
            for t in (torch.randn(rows, width, generator=generator), bias.clone())
        )
        for _ in range(world)
    ]
    placements = tuple(p for _ in layers for p in (Shard(1), Replicate()))
    label = f"all_reduce+bias x{len(layers)} tp={world}"
    return GraphCase(
        gm, inputs, tp_world=world, pass_config=ReduceBiasConfig(world), label=label, placements=placements
    )


@st.composite
def reduce_bias_cases(draw):
    world = draw(st.integers(2, 4))
    layers = draw(
        st.lists(
            st.tuples(
                st.integers(1, 6),
                st.integers(1, 8),
                st.sampled_from(sorted(_CONTEXT)),
                st.sampled_from(["sum", "sum", "max"]),
            ),
            min_size=1,
            max_size=3,
        )
    )
    return build_case(world, layers, seed=draw(st.integers(0, 2**16)))


SIMPLE = (2, [(3, 4, "none", "sum")])
MIXED = (4, [(2, 5, "tanh", "sum"), (3, 5, "neg", "max"), (1, 8, "none", "sum")])


def test_a_fused_collective_taking_its_rank_is_quiet():
    for world, layers in (SIMPLE, MIXED):
        result = pmverify.check_case(AllReduceBiasFusion, build_case(world, layers))
        assert result.ok, result.violations
        assert result.rewrite_count == sum(op == "sum" for *_, op in layers)
        ranks = [result.pair, *result.pair.ranks]
        fused = [n for n in ranks[-1].after.graph.nodes if "all_reduce_bias" in str(n.target)]
        assert fused and fused[0].args[3] == world - 1  # the rank is an argument
        assert [all_reduce_count(run.after.graph.nodes) for run in ranks] == [1 if world == 4 else 0] * world


def test_passing_rank_zero_everywhere_is_found_by_its_results():
    result = pmverify.check_case(PassesRankZero, build_case(*SIMPLE))
    assert {v.oracle for v in result.violations} == {"semantics"}


def test_rewriting_on_rank_zero_only_is_found():
    result = pmverify.check_case(FusesOnRankZeroOnly, build_case(*SIMPLE), oracles=["tensor_parallel"])
    assert [v.message for v in result.violations] == [
        "matches differ across ranks: rank 1 reported 0 matches, rank 0 1"
    ]


def test_an_int_argument_computed_from_the_rank_is_judged_by_the_results():
    result = pmverify.check_case(PassesTheNextRank, build_case(*MIXED))
    assert result.ok, result.violations
    assert result.rewrite_count == 2


def _graph(*args):
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(aten.sum.dim_IntList, (x, *args)))
    return types.SimpleNamespace(after=torch.fx.GraphModule(torch.nn.Module(), g))


def test_graphs_are_compared_up_to_int_values():
    assert _graph_difference([_graph([r]) for r in range(3)]) is None  # the rank
    assert _graph_difference([_graph([1]) for r in range(3)]) is None  # 1: rank 1's, but on every rank
    assert _graph_difference([_graph([0], True) for r in range(2)]) is None
    assert _graph_difference([_graph([r % 2]) for r in range(3)]) is None  # computed from the rank
    assert "differs between rank 1 and rank 0" in _graph_difference([_graph([r], r == 1) for r in range(2)])
    assert "differs between rank 1 and rank 0" in _graph_difference([_graph([0], r == 1) for r in range(2)])
    assert "2 nodes on rank 1, 3 on rank 0" in _graph_difference(
        [_graph([0]), types.SimpleNamespace(after=torch.fx.symbolic_trace(lambda x: x))]
    )


@pytest.mark.slow
@settings(max_examples=300, deadline=None, database=None)
@given(reduce_bias_cases())
@example(build_case(*SIMPLE))
def test_quiet_over_300_cases_and_wrong_twins_caught(case):
    result = pmverify.check_case(AllReduceBiasFusion, case)
    assert result.ok, result.violations
    if result.rewrite_count:
        assert not pmverify.check_case(FusesOnRankZeroOnly, case, oracles=["tensor_parallel"]).ok
