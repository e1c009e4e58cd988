"""The tensor-parallel oracle: identical rewrites on every rank, all-reduces accounted for by matches."""

import dataclasses
import time

import pytest
import torch

import pmverify
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.testing.tp_cases import build_case, make_layer
from pmverify.oracles import tensor_parallel
from pmverify.oracles.tensor_parallel import all_reduce_count

CONFIG = QKNormConfig.for_heads(8, 2, 4, tp_world=4, dtype=torch.float32)


def _case(layers=1, config=CONFIG):
    return build_case(config, [make_layer(config, tokens=3) for _ in range(layers)], seed=1)


class FusesOnRankZeroOnly(QKNormFusionPass):
    """Rewrites only where it was built for rank 0 (say, a pass that reads its world from a global
    set on the first rank). Every rank still makes one ``[T, 2]`` all-reduce, so nothing hangs, but
    rank 0's fused op reduces sums of squares and the others the pattern's means."""

    def __call__(self, graph):
        if self.config.tp_rank == 0:
            super().__call__(graph)
        else:
            self.matched_count = 0


class FusesAndDropsAnotherAllReduce(QKNormFusionPass):
    """Fuses, then drops an all-reduce no match covered (routes its ``wait_tensor``'s users to the
    un-reduced input, as a pass that believes that reduction redundant would)."""

    def __call__(self, graph):
        super().__call__(graph)
        for node in list(graph.nodes):
            if node.target == torch.ops._c10d_functional.wait_tensor.default:
                reduce = node.args[0]
                node.replace_all_uses_with(reduce.args[0])
                graph.erase_node(node)
                graph.erase_node(reduce)
                break


def test_quiet_on_the_shipped_pass():
    result = pmverify.check_case(QKNormFusionPass, _case(2))
    assert result.ok and result.rewrite_count == 2
    assert all(all_reduce_count(run.after.graph.nodes) == 0 for run in (result.pair, *result.pair.ranks))


def test_flags_a_pass_that_rewrites_on_some_ranks_only():
    result = pmverify.check_case(FusesOnRankZeroOnly, _case())
    by_oracle = {v.oracle: v.message for v in result.violations}
    assert set(by_oracle) == {"tensor_parallel", "semantics"}  # sums and means reduced together: garbage
    assert by_oracle["tensor_parallel"] == "matches differ across ranks: rank 1 reported 0 matches, rank 0 1"


def test_flags_an_all_reduce_no_match_accounts_for():
    case = _case(2)
    pass_config = dataclasses.replace(case.pass_config, max_tokens=2)  # only ...
    case = dataclasses.replace(case, pass_config=pass_config)  # ... so nothing matches: both all-reduces stay
    result = pmverify.check_case(FusesAndDropsAnotherAllReduce, case, oracles=["tensor_parallel"])
    assert result.rewrite_count == 0 and result.ok  # no recorded match: not judged
    result = pmverify.check_case(FusesAndDropsAnotherAllReduce, _case(2), oracles=["tensor_parallel"])
    assert result.rewrite_count == 2 and result.ok  # both fused: no all-reduce left to drop
    mixed = build_case(CONFIG, [make_layer(CONFIG, tokens=3), make_layer(CONFIG, "eps", tokens=3)], seed=1)
    result = pmverify.check_case(FusesAndDropsAnotherAllReduce, mixed, oracles=["tensor_parallel", "semantics"])
    messages = [v.message for v in result.violations if v.oracle == "tensor_parallel"]
    assert messages == ["the pass removed 2 all-reduce(s) from the graph; its 1 match(es) account for 1"]
    assert any(v.oracle == "semantics" for v in result.violations)


def test_single_rank_and_crashed_runs_are_not_judged():
    config = QKNormConfig.for_heads(8, 2, 4, tp_world=1, dtype=torch.float32)
    result = pmverify.check_case(FusesOnRankZeroOnly, _case(config=config), oracles=["tensor_parallel"])
    assert result.ok and not result.pair.ranks
    assert tensor_parallel.check(dataclasses.replace(result.pair, after=None)) == []


def _fail_on_rank(x):
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 reads an out-of-bounds shard")
    return x


class FailsOnRankOne(QKNormFusionPass):
    """Fuses, and routes the first input through a check that raises on rank 1 at run time, ahead
    of the collectives the other ranks wait in."""

    def __call__(self, graph):
        super().__call__(graph)
        first = next(iter(graph.find_nodes(op="placeholder")))
        with graph.inserting_after(first):
            checked = graph.call_function(_fail_on_rank, (first,))
        first.replace_all_uses_with(checked, delete_user_cb=lambda user: user is not checked)


class ExtraAllReduceOnRankOne(QKNormFusionPass):
    """Fuses; on rank 1 also all-reduces the first input at the end of the graph, a collective no
    other rank calls: rank 1 waits for ranks that have returned."""

    def __call__(self, graph):
        super().__call__(graph)
        if self.config.tp_rank == 1:
            first = next(iter(graph.find_nodes(op="placeholder")))
            with graph.inserting_before(next(iter(graph.find_nodes(op="output")))):
                reduce = graph.call_function(torch.ops._c10d_functional.all_reduce.default, (first, "sum", "0"))
                graph.call_function(torch.ops._c10d_functional.wait_tensor.default, (reduce,))


def test_a_rank_that_raises_is_a_semantics_finding_naming_it():
    result = pmverify.check_case(FailsOnRankOne, _case(), oracles=["semantics"])
    assert [v.message for v in result.violations] == [
        "graph after the pass failed on the tensor-parallel world: rank 1 of world 4 (backend 'threaded') raised "
        "RuntimeError: rank 1 reads an out-of-bounds shard; ranks [0, 2, 3] were released from a collective"
    ]


def test_ranks_waiting_on_each_other_are_a_finding_not_a_hang():
    result = pmverify.check_case(ExtraAllReduceOnRankOne, _case(), oracles=["semantics", "tensor_parallel"])
    by_oracle = {v.oracle: v.message for v in result.violations}
    assert by_oracle["semantics"].startswith(
        "graph after the pass failed on the tensor-parallel world: ranks [1] wait in a collective that "
        "ranks [0, 2, 3] returned without calling"
    )
    assert "rank 1: the pass removed 0 all-reduce(s)" in by_oracle["tensor_parallel"]
    assert pmverify.check_case(QKNormFusionPass, _case()).ok  # the world is still usable


class ExtraMaxReduce(QKNormFusionPass):
    """Fuses with an extra all-reduce (max) of the already reduced sums in its replacement."""

    @classmethod
    def rewrites(cls, config):
        from pmverify.faults.tensor_parallel import _normed, _split, _with_tp
        from pmverify.fusions.qk_norm.tp import all_reduce

        def replacement(qkv, q_weight, k_weight):
            qf, kf, v = _split(config, qkv)
            sums = all_reduce(torch.stack([qf.pow(2).sum(-1), kf.pow(2).sum(-1)], dim=-1), config.group_name)
            sums = all_reduce(sums, config.group_name, "max")
            q_ms, k_ms = (
                sums[:, :1] / (config.q_size * config.tp_world),
                sums[:, 1:] / (config.kv_size * config.tp_world),
            )
            return _normed(config, qf, q_ms, q_weight), _normed(config, kf, k_ms, k_weight), v

        return _with_tp(config, replacement)


class ExtraMaxReduceOnRankZero(QKNormFusionPass):
    def __call__(self, graph):
        pass_ = ExtraMaxReduce(self.config) if self.config.tp_rank == 0 else QKNormFusionPass(self.config)
        pass_(graph)
        self.matched_count = pass_.matched_count


def test_the_message_names_what_differs_between_ranks():
    result = pmverify.check_case(ExtraMaxReduceOnRankZero, _case(), oracles=["tensor_parallel", "semantics"])
    by_oracle = {v.oracle: v.message for v in result.violations}
    assert "inserted" in by_oracle["tensor_parallel"] and "on rank 1" in by_oracle["tensor_parallel"]
    assert "ranks [0] wait in a collective that ranks [1, 2, 3] returned without calling" in by_oracle["semantics"]


def _slow(x):
    time.sleep(1.0)  # a rank slower than the world's timeout, as on a loaded machine
    return x


class SlowAfterTheFusion(QKNormFusionPass):
    """Fuses, then runs a slow identity on the first input: correct, but slower than the timeout."""

    def __call__(self, graph):
        super().__call__(graph)
        first = next(iter(graph.find_nodes(op="placeholder")))
        with graph.inserting_before(next(iter(graph.find_nodes(op="output")))):
            graph.call_function(_slow, (first,))


def test_a_world_past_its_timeout_is_an_error_of_the_run_not_a_finding(monkeypatch):
    from pmverify.distributed import TIMEOUT_ENV, SPMDTimeoutError

    monkeypatch.setenv(TIMEOUT_ENV, "0.2")
    with pytest.raises(SPMDTimeoutError, match=r"did not finish within timeout_s=0\.2 s") as info:
        pmverify.check_case(SlowAfterTheFusion, _case(), oracles=["semantics", "tensor_parallel"])
    assert f"${TIMEOUT_ENV}" in str(info.value) and "not a finding" in str(info.value)
    monkeypatch.setenv(TIMEOUT_ENV, "600")  # the setting raised: the same case and pass are quiet
    assert pmverify.check_case(SlowAfterTheFusion, _case(), oracles=["semantics", "tensor_parallel"]).ok
