"""The audit over entries of every kind: a user's module's graph and lowering handlers recorded with
its rewrites, each located by (kind, module, name) with a pass its reproducer rebuilds; ``check_one``
dispatching on the kind (a graph or lowering entry to ``check_entry``, here a stand-in); Inductor's graph entries located for their reproducers by
``inductor_entry``."""

import sys
import types

import pytest

import pmverify
from pmverify._audit import check, worker
from pmverify._audit.sources import INDUCTOR, listing, locate, record_source
from pmverify._job.protocol import CheckRequest

SOURCE = "_graph_passes"


@pytest.fixture(scope="module")
def recorded():
    return record_source(SOURCE)


class _StandIn:
    """``pmverify._rewrites.entry_check`` until it lands: ``check_entry`` answers ``outcome`` (a result, or
    an exception it raises) and keeps what it was called with."""

    def __init__(self, outcome):
        self.outcome = outcome
        self.calls = []

    def check_entry(self, entry, **options):
        self.calls.append((entry, options))
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


@pytest.fixture
def stand_in(monkeypatch):
    def install(outcome):
        fake = _StandIn(outcome)
        module = types.ModuleType("pmverify._rewrites.entry_check")
        module.check_entry = fake.check_entry
        monkeypatch.setitem(sys.modules, "pmverify._rewrites.entry_check", module)
        return fake

    return install


def test_a_users_handlers_are_recorded_with_its_rewrites_kind_by_kind(recorded):
    assert [(e.kind, e.name, e.pass_name, e.handler) for e in listing(SOURCE, recorded)] == [
        ("replacement", "relu_relu", f"{SOURCE}.PASSES[0]", None),
        ("graph", "drop_neg[neg]", f"{SOURCE}.PASSES[0]", f"{SOURCE}.drop_neg"),
        ("graph", "drop_neg[Tensor.neg]", f"{SOURCE}.PASSES[0]", f"{SOURCE}.drop_neg"),
        ("lowering", "lower_abs", f"{SOURCE}.PASSES[1]", f"{SOURCE}.lower_abs"),
    ]
    assert [e.kind for e in record_source(SOURCE, kinds=("graph",))] == ["graph", "graph"]
    assert {e.torch_pass for e in recorded[:3]} == {("graph_test_pass", None)}


def test_a_graph_entry_is_located_by_kind_and_its_reproducers_pass_rebuilt(recorded):
    entry, source = locate(SOURCE, recorded, SOURCE, "drop_neg[Tensor.neg]", "graph")
    assert entry.kind == "graph" and entry.handler.__name__ == "drop_neg"
    namespace = {}
    exec(source, namespace)  # what the reproducer runs: the module recorded again, the entry alone
    rebuilt = [e for entries in namespace["PASS"].patterns.values() for e in entries]
    assert len(rebuilt) == 1 and rebuilt[0].handler.__name__ == "drop_neg"
    assert repr(rebuilt[0].pattern) == repr(entry.pattern)
    with pytest.raises(LookupError, match="no replacement entry"):
        locate(SOURCE, recorded, SOURCE, "drop_neg[neg]", "replacement")


def test_check_one_gives_a_graph_entry_to_check_entry(recorded, stand_in, tmp_path):
    fake = stand_in(types.SimpleNamespace(examples=6, rewritten_cases=4, outcomes={"extra_check": 1}, summary=None))
    entry, source = locate(SOURCE, recorded, SOURCE, "drop_neg[neg]", "graph")
    outcome = check.check_one(entry, source, max_examples=6, seed=3, repro_dir=tmp_path, reproducer_prelude="pass")
    assert outcome["status"] == "ok" and outcome["reason"] == "6 cases, 4 rewritten"
    ((called, options),) = fake.calls
    assert called is entry
    assert options == {
        "max_examples": 6,
        "seed": 3,
        "repro_dir": tmp_path,
        "pass_source": source,
        "settings": None,
        "reproducer_prelude": "pass",
        "device": None,  # (--device: where the entry's cases run)
    }


@pytest.mark.parametrize(
    ("error", "status", "reason"),
    [
        (pmverify.RewriteUnsatisfiable("m", "a frozen graph"), "unsatisfiable here", "a frozen graph"),
        (
            pmverify.RewriteNeverMatched("the pass rewrote nothing"),
            "finding",
            "never matched: the pass rewrote nothing",
        ),
        (ValueError("no"), "error", "check_entry raised ValueError: no"),
    ],
)
def test_each_outcome_of_check_entry_maps_to_its_status(recorded, stand_in, error, status, reason):
    stand_in(error)
    entry, source = locate(SOURCE, recorded, SOURCE, "drop_neg[neg]", "graph")
    outcome = check.check_one(entry, source, max_examples=2, seed=0)
    assert outcome["status"] == status and outcome["reason"].startswith(reason)
    if status == "finding":
        assert outcome["check"] == "check_entry"


def test_a_lowering_entry_is_checked_by_check_entry_with_few_cases(recorded, stand_in):
    fake = stand_in(types.SimpleNamespace(examples=3, rewritten_cases=3, outcomes={}, summary=None))
    entry, source = locate(SOURCE, recorded, SOURCE, "lower_abs", "lowering")
    outcome = check.check_one(entry, source, max_examples=10, seed=0)
    assert outcome["status"] == "ok"
    ((called, options),) = fake.calls
    assert called is entry and options["max_examples"] == check.LOWERING_MAX_EXAMPLES == 3


def test_the_worker_checks_an_inductor_graph_entry_with_a_pass_inductor_entry_rebuilds(stand_in, tmp_path):
    from pmverify._rewrites.inductor_rewrites import _recorded

    fake = stand_in(types.SimpleNamespace(examples=1, rewritten_cases=1, outcomes={}, summary=None))
    request = CheckRequest(INDUCTOR, "joint_graph", "pointless_view", 0, "graph")
    outcome = worker._check(
        {INDUCTOR: list(_recorded().values())}, request, {"max_examples": 1, "repro_dir": str(tmp_path)}
    )
    assert outcome["status"] == "ok", outcome
    ((entry, options),) = fake.calls
    assert entry is pmverify.inductor_entry("joint_graph", "pointless_view")
    assert options["pass_source"] == (
        "import pmverify\nPASS = pmverify.inductor_entry('joint_graph', 'pointless_view').pattern_pass()"
    )
