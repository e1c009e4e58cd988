"""The cache-key oracle: uuids tell configs apart, equal configs share one, untestable passes are
left alone."""

from __future__ import annotations

import dataclasses

import torch

from pmverify import check_case
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.testing.cases import build_case, make_layer
from pmverify.oracles.cache_key import config_variants, uuid_violations

CONFIG = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.float32, max_tokens=4)


class SourceOnlyUuid(QKNormFusionPass):
    def uuid(self):
        return "hash of the source only"


class RandomUuid(QKNormFusionPass):
    _count = 0

    def uuid(self):
        RandomUuid._count += 1
        return f"call {RandomUuid._count}"


class NoCache(QKNormFusionPass):
    def uuid(self):
        return None


def test_shipped_pass_tells_every_field_apart():
    assert uuid_violations(QKNormFusionPass, CONFIG) == []


def test_uuid_ignoring_config_is_reported_once_with_every_field():
    (violation,) = uuid_violations(SourceOnlyUuid, CONFIG)
    assert violation.oracle == "cache_key"
    for field in ("q_size (8 vs 9)", "eps (1e-06 vs 2e-06)", "dtype (torch.float32 vs torch.float16)", "tp_world"):
        assert field in violation.message
    assert "tp_rank" not in violation.message  # tp_rank=1 with tp_world=1 is refused: skipped


def test_unstable_uuid_is_reported():
    (violation,) = uuid_violations(RandomUuid, CONFIG)
    assert "differs for equal configs" in violation.message


def test_passes_without_a_cache_key_are_not_judged():
    assert uuid_violations(NoCache, CONFIG) == []
    assert uuid_violations(QKNormFusionPass, None) == []  # TypeError building it: not judged


def test_variants_change_one_field_each():
    variants = list(config_variants(CONFIG))
    names = ["q_size", "kv_size", "eps", "dtype", "max_tokens", "tp_world", "group_name"]  # tp_rank + 1 is refused
    assert [name for name, *_ in variants] == names
    for name, value, changed, variant in variants:
        assert getattr(variant, name) == changed != value
        assert {f.name for f in dataclasses.fields(CONFIG) if getattr(variant, f.name) != getattr(CONFIG, f.name)} == {
            name
        }
    assert [name for name, *_ in config_variants({"eps": 1e-6, "fused": True, "op": object()})] == ["eps", "fused"]


def test_through_check_case():
    case = build_case(CONFIG, [make_layer(CONFIG, "qk_norm", tokens=2)])
    assert check_case(QKNormFusionPass, case, oracles=["cache_key"]).ok
    result = check_case(SourceOnlyUuid, case, oracles=["cache_key"])
    assert [v.oracle for v in result.violations] == ["cache_key"]


def test_a_field_the_uuid_ignores_is_a_finding_only_where_it_changes_the_rewritten_graph():
    """Through ``check_case`` the pass built with each same-uuid config is applied to the case too:
    a field that leaves the rewritten graph as it was (a group name on one rank, a token limit the
    case stays under) is no finding there (the fresh-user trial's logging flag), one that changes
    it (eps baked into the replacement) is."""
    case = build_case(CONFIG, [make_layer(CONFIG, "qk_norm", tokens=2)])
    (violation,) = check_case(SourceOnlyUuid, case, oracles=["cache_key"]).violations
    # the first field, in the config's order, whose change changes the rewrite: q_size's no longer matches
    assert "only in q_size (8 vs 9), which changes the rewritten graph of this case" in violation.message
    assert "group_name" not in violation.message and "max_tokens" not in violation.message
    (unjudged,) = uuid_violations(SourceOnlyUuid, CONFIG)  # without a case: every field
    assert "group_name" in unjudged.message and "max_tokens" in unjudged.message


@dataclasses.dataclass(frozen=True)
class _Inner:
    eps: float = 1e-6


@dataclasses.dataclass(frozen=True)
class _Outer:
    epsilons: tuple = (1e-5, 1e-6)
    names: list = dataclasses.field(default_factory=lambda: ["q", "k"])
    inner: _Inner = _Inner()
    empty: tuple = ()


def test_tuple_list_and_nested_dataclass_fields_are_varied():
    """vLLM's configs hold tuples of epsilons and nested configs: each is varied in its first
    changeable element or field (an empty tuple cannot be)."""
    variants = {name: changed for name, _, changed, _ in config_variants(_Outer())}
    assert variants == {"epsilons": (2e-5, 1e-6), "names": ["q_changed", "k"], "inner": _Inner(eps=2e-6)}


def test_a_failing_case_costs_one_match_not_one_a_field(monkeypatch):
    """The field that changed an earlier case's rewrite is tried first: a case it changes too is a
    finding after one match of a variant pass (QKNormUuidIgnoresConfig took 48.8 s to search and
    shrink with a match per field per case), and a field no case showed is tried after it."""
    from pmverify.oracles import cache_key

    case = build_case(CONFIG, [make_layer(CONFIG, "qk_norm", tokens=2)])
    monkeypatch.setitem(cache_key._MATTERED, SourceOnlyUuid, ["eps"])
    tried = []
    same_graph = cache_key._same_graph
    monkeypatch.setattr(
        cache_key, "_same_graph", lambda cls, variant, pair: tried.append(variant) or same_graph(cls, variant, pair)
    )
    (violation,) = check_case(SourceOnlyUuid, case, oracles=["cache_key"]).violations
    assert "only in eps (1e-06 vs 2e-06), which changes" in violation.message
    assert len(tried) == 1
    tried.clear()
    assert check_case(QKNormFusionPass, case, oracles=["cache_key"]).ok and not tried  # its uuid tells all apart
