"""The cache-key oracle: uuids tell configs apart, equal configs share one, untestable passes are
left alone."""

from __future__ import annotations

import dataclasses

import pytest
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


@dataclasses.dataclass(frozen=True)
class NamedDtypesConfig:
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    eps: float = 1e-6


class NamedDtypesPass(SourceOnlyUuid):
    """Built from dtype names: a name it does not know raises AttributeError, not a config a user
    can give (the cache-key variant ``"float32_changed"``)."""

    def __init__(self, config: NamedDtypesConfig) -> None:
        self.dtypes = [getattr(torch, name) for name in config.dtypes]
        super().__init__(dataclasses.replace(CONFIG, eps=config.eps))


def test_a_variant_the_pass_cannot_be_built_from_is_no_verdict():
    (violation,) = uuid_violations(NamedDtypesPass, NamedDtypesConfig())
    assert "eps (1e-06 vs 2e-06)" in violation.message  # the field it can vary is still judged
    assert "dtypes" not in violation.message


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


@pytest.fixture
def per_case_only(monkeypatch):
    """The per-case check alone: the pattern entries of two configs taken as not comparable (as a
    hand pass's are)."""
    from pmverify.oracles import cache_key

    monkeypatch.setattr(cache_key, "_entries_differ", lambda cls, config, variant: ...)
    for cache in ("_ENTRIES", "_FOUND", "_MATTERED"):  # no field known to matter from earlier tests
        monkeypatch.setattr(cache_key, cache, {})


def test_a_field_the_uuid_ignores_is_a_finding_only_where_it_changes_the_rewritten_graph(per_case_only):
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


def test_a_failing_case_costs_one_match_not_one_a_field(monkeypatch, per_case_only):
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


# ---- graph-free: the pattern entries two configs register (issue 30) ----------------------------
# A pass built from a config with register_replacement, as a pass author writes one; its uuid
# hashes a fixed name only. ``eps`` is baked into the pattern (a literal), ``note`` only printed.


@dataclasses.dataclass(frozen=True)
class _RMSConfig:
    eps: float = 1e-6
    note: str = "rms"  # printed while the replacement traces, read by nothing else


def _rms_rewrites(config: _RMSConfig, fresh_closure: bool = False):
    eps = config.eps
    # a fresh list per build when asked: closures equal by value, never by identity
    dims = [-1] if fresh_closure else (-1,)

    def rms_pattern(x, w):
        return x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps) * w

    def rms_replacement(x, w):
        print(f"{config.note}: {x.shape}")  # noqa: T201  (what a logging-only field changes)
        return (x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)) * w

    return rms_pattern, rms_replacement


class _RMSPass:
    """Registers its pattern into a PatternMatcherPass of its own when built."""

    fresh_closure = False

    def __init__(self, config: _RMSConfig) -> None:
        from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

        self.config = config
        self.patterns = PatternMatcherPass()
        pattern, replacement = _rms_rewrites(config, type(self).fresh_closure)
        register_replacement(pattern, replacement, [torch.empty(8, 16), torch.empty(16)], fwd_only, self.patterns)
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = self.patterns.apply(graph)

    def uuid(self) -> str:
        return "rms-pass"  # the bug where a field changes a rewrite: no config field hashed


class _FreshClosureRMSPass(_RMSPass):
    fresh_closure = True


def _workaround_pattern(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _workaround_replacement(x, w, eps):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * w


class _WorkaroundRMSPass(_RMSPass):
    """eps registered through ``scalar_workaround`` from the config: a wildcard whatever its value,
    the replacement taking the matched one; the config's eps changes nothing the pass does."""

    def __init__(self, config: _RMSConfig) -> None:
        from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

        self.config = config
        self.patterns = PatternMatcherPass()
        example = [torch.empty(8, 16), torch.empty(16)]
        register_replacement(
            _workaround_pattern,
            _workaround_replacement,
            example,
            fwd_only,
            self.patterns,
            scalar_workaround={"eps": config.eps},
        )
        self.matched_count = 0


class _HandRMSPass:
    """The same rewrite by hand (no pattern entry): left to the per-case check."""

    def __init__(self, config: _RMSConfig) -> None:
        self.config = config

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            if node.target is torch.ops.aten.add.Tensor and node.args[1] == 1e-6 and self.config.eps != 1e-6:
                node.args = (node.args[0], self.config.eps)

    def uuid(self) -> str:
        return "hand-rms-pass"


def _rms_case(config, eps: float = 1e-6):
    """A graph of one RMSNorm with ``eps``, for passes built with ``config``."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pmverify import GraphCase

    def model(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    args = (torch.randn(4, 16), torch.randn(16))
    return GraphCase(make_fx(model)(*args), [args], pass_config=config)


def _entries_only(monkeypatch):
    """Fail if the per-case check runs: the verdict must come from the pattern entries."""
    from pmverify.oracles import cache_key

    def per_case(*args, **kwargs):
        raise AssertionError("the per-case check ran")

    monkeypatch.setattr(cache_key, "_same_graph", per_case)


def test_an_eps_the_uuid_ignores_is_found_from_the_pattern_entries_at_the_first_case(monkeypatch):
    """The entries of eps 1e-6 and 2e-6 differ in the pattern's constant: a finding on any case,
    without running either pass on it; the second time from the cache (no build)."""
    from pmverify.oracles import cache_key

    _entries_only(monkeypatch)
    (violation,) = check_case(_RMSPass, _rms_case(_RMSConfig()), oracles=["cache_key"]).violations
    assert "only in eps (1e-06 vs 2e-06), which changes the pattern entries" in violation.message
    assert "pattern entry rms_pattern: constant 1e-06 vs 2e-06 in the search pattern" in violation.message
    monkeypatch.setattr(cache_key, "_recorded_build", lambda *args: pytest.fail("built again"))
    (again,) = check_case(_RMSPass, _rms_case(_RMSConfig(), 3e-6), oracles=["cache_key"]).violations
    assert again.message == violation.message  # a case the pass never rewrites: the same verdict


def test_a_logging_only_field_and_equal_closures_are_quiet():
    """``note`` changes what the replacement prints, not what it traces; a fresh closure list
    per build is equal by value: the entries compare equal, and nothing else is a finding."""
    from pmverify.oracles.cache_key import _entries_differ

    for pass_cls in (_RMSPass, _FreshClosureRMSPass):
        assert _entries_differ(pass_cls, _RMSConfig(note="a"), _RMSConfig(note="b")) is None
        assert _entries_differ(pass_cls, _RMSConfig(), _RMSConfig()) is None
    # a scalar-workaround eps is a wildcard: another value is the same entry
    assert _entries_differ(_WorkaroundRMSPass, _RMSConfig(), _RMSConfig(eps=2e-6)) is None
    result = check_case(_WorkaroundRMSPass, _rms_case(_RMSConfig(), 2e-6), oracles=["cache_key"])
    assert result.ok, result.violations

    @dataclasses.dataclass(frozen=True)
    class NoteOnly:
        note: str = "rms"
        eps: float = 1e-6

    class NoteOnlyPass(_RMSPass):
        def uuid(self):
            return f"rms-pass eps={self.config.eps}"  # hashes eps, leaves out the logging field

    result = check_case(NoteOnlyPass, _rms_case(NoteOnly()), oracles=["cache_key"])
    assert result.ok, result.violations


def test_a_hand_pass_is_still_found_by_the_per_case_check():
    """No pattern entry to compare: the pass built with eps 2e-6 is run on the case, and its
    rewrite differs."""
    from pmverify.oracles.cache_key import _entries_differ

    assert _entries_differ(_HandRMSPass, _RMSConfig(), _RMSConfig(eps=2e-6)) is ...
    (violation,) = check_case(_HandRMSPass, _rms_case(_RMSConfig()), oracles=["cache_key"]).violations
    assert "only in eps (1e-06 vs 2e-06), which changes the rewritten graph of this case" in violation.message
