"""verify(): passes on the shipped pass, raises with a runnable reproducer on a faulty one."""

import functools
import subprocess
import sys

import pytest
import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify import PassVerificationError, verify
from pmverify.faults import QKNormWrongRoundingOrder
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.strategies import qk_norm_cases
from pmverify.strategies._qk_norm import _build_case, _layer

CONFIG_F32 = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.float32, max_tokens=4)


def test_shipped_pass_preserves_semantics():
    # The property test of semantic preservation (plus structure and expectations) on random cases.
    results = []
    verify(QKNormFusionPass, qk_norm_cases(), max_examples=30, on_result=results.append)
    assert len(results) == 30
    assert sum(r.matches for r in results) > 0


def test_shipped_pass_with_fixed_config():
    config = QKNormConfig(q_size=24, kv_size=8, eps=1e-5, dtype=torch.bfloat16)
    verify(QKNormFusionPass(config), qk_norm_cases(config), max_examples=10)


def test_wrong_rounding_order_is_found_with_runnable_reproducer(tmp_path):
    config = QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.bfloat16)
    with pytest.raises(PassVerificationError) as info:
        verify(QKNormWrongRoundingOrder, qk_norm_cases(config), max_examples=50, repro_dir=tmp_path)
    error = info.value
    assert isinstance(error, AssertionError)
    assert error.violations and {v.oracle for v in error.violations} <= {"semantics", "structure"}
    assert error.case.pass_config == config
    assert error.reproducer is not None and error.reproducer.parent == tmp_path
    assert str(error.reproducer) in str(error)
    run = subprocess.run([sys.executable, str(error.reproducer)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr[-3000:]
    assert "VIOLATION" in run.stdout
    first = error.violations[0]
    assert f"VIOLATION {first.oracle}:" in run.stdout
    dot = error.reproducer.with_suffix(".dot")
    assert dot in error.pictures and f"picture: {dot}" in str(error)
    text = dot.read_text()
    assert "cluster_before" in text and "cluster_after" in text
    assert "qk_norm" in text  # the fused op inserted, marked in the graph after the pass


def test_reproducer_exits_zero_once_the_pass_is_fixed(tmp_path):
    config = QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.bfloat16)
    with pytest.raises(PassVerificationError) as info:
        verify(QKNormWrongRoundingOrder, qk_norm_cases(config), max_examples=50, repro_dir=tmp_path)
    fixed = pmverify._reproducer.write(
        info.value.case, QKNormFusionPass(config), info.value.violations, tmp_path / "fixed"
    )
    run = subprocess.run([sys.executable, str(fixed)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(cases=[1, 2]), "cases=\\[1, 2\\] must be a Hypothesis strategy"),
        (dict(max_examples=0), "max_examples=0 must be a positive int"),
    ],
)
def test_bad_arguments(kwargs, message):
    args = dict(cases=st.nothing())
    args.update(kwargs)
    with pytest.raises(InvalidArgument, match=message):
        verify(QKNormFusionPass, **args)


@pytest.mark.parametrize("pass_", [None, 42, "QKNormFusionPass"])
def test_something_that_is_not_a_pass_is_refused_eagerly(pass_):
    case = _build_case(CONFIG_F32, [_layer(CONFIG_F32, "qk_norm", tokens=2)])
    with pytest.raises(TypeError, match="is not a pass"):
        pmverify.check_case(pass_, case)
    with pytest.raises(TypeError, match="is not a pass"):
        verify(pass_, st.just(case))


def test_failure_is_saved_and_replayed_first(tmp_path):
    from hypothesis import settings
    from hypothesis.database import InMemoryExampleDatabase

    db = InMemoryExampleDatabase()
    previous = settings.get_current_profile_name()
    settings.register_profile("pmverify-test-db", settings.get_profile(previous), database=db)
    settings.load_profile("pmverify-test-db")
    try:
        config = QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.bfloat16)
        with pytest.raises(PassVerificationError):
            # seeded, as pmverify fuzz runs it: the database must stay in use all the same
            verify(QKNormWrongRoundingOrder, qk_norm_cases(config), max_examples=50, seed=3, repro_dir=tmp_path)
        assert any(db.data.values()), "the failing case was not saved"
        checked = []
        with pytest.raises(PassVerificationError):
            # one example only: it can only fail this fast because the saved case is replayed first
            verify(
                QKNormWrongRoundingOrder,
                qk_norm_cases(config),
                max_examples=1,
                seed=4,
                repro_dir=tmp_path,
                on_result=checked.append,
            )
        assert not checked[0].ok
    finally:
        settings.load_profile(previous)


class _WrongOnFirstCalls(QKNormFusionPass):
    """Wrong (drops the rewrite's cast order) on its first calls only: Hypothesis sees it as flaky."""

    calls = 0

    def __call__(self, graph):
        type(self).calls += 1
        if type(self).calls <= 3:
            QKNormWrongRoundingOrder(self.config)(graph)
            self.matched_count = 1
        else:
            super().__call__(graph)


def test_flaky_pass_still_raises_pass_verification_error(tmp_path):
    config = QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.bfloat16)
    _WrongOnFirstCalls.calls = 0
    with pytest.raises(PassVerificationError) as info:
        verify(_WrongOnFirstCalls, qk_norm_cases(config, near_misses=False), max_examples=20, repro_dir=tmp_path)
    assert "flaky" in str(info.value)


def test_reproducer_of_unrebuildable_pass_says_so(tmp_path):
    config = QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.bfloat16)
    wrong = QKNormWrongRoundingOrder(config)

    def closure_pass(graph):
        wrong(graph)

    with pytest.raises(PassVerificationError) as info:
        verify(closure_pass, qk_norm_cases(config), max_examples=50, repro_dir=tmp_path)
    assert "pass_source" in str(info.value)
    assert str(info.value).startswith("test_reproducer_of_unrebuildable_pass_says_so.<locals>.closure_pass broke")
    run = subprocess.run([sys.executable, str(info.value.reproducer)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "edit PASS" in run.stderr


def test_database_key_tells_passes_apart():
    """Two function passes (or two PatternMatcherPasses) must not share failures: a passing replay
    of one would delete the other's saved failures."""
    from torch._inductor.pattern_matcher import PatternMatcherPass

    from pmverify._verify import database_key

    def first(graph):
        pass

    def second(graph):
        pass

    cases = qk_norm_cases()
    keys = {
        database_key(first, cases),
        database_key(second, cases),
        database_key(PatternMatcherPass(pass_name="a"), cases),
        database_key(PatternMatcherPass(pass_name="b"), cases),
        database_key(QKNormFusionPass, cases),
        database_key(QKNormFusionPass, qk_norm_cases(forms=["rms_norm"])),
        database_key(functools.partial(first), cases),
        database_key(functools.partial(second), cases),
    }
    assert len(keys) == 8
    assert database_key(first, cases) == database_key(first, cases)
    assert database_key(QKNormFusionPass, cases, "compiled") != database_key(QKNormFusionPass, cases)
