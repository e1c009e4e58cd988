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
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.fusions.qk_norm.testing.cases import build_case, make_layer

CONFIG_F32 = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.float32, max_tokens=4)


def test_shipped_pass_preserves_semantics():
    # The property test of semantic preservation (plus structure and expectations) on random cases.
    count = 15  # as the ci profile draws; the nightly run draws thousands
    results = []
    summary = verify(QKNormFusionPass, qk_norm_cases(), max_examples=count, on_result=results.append)
    assert len(results) == count
    assert sum(r.rewrite_count for r in results) > 0
    assert isinstance(summary, pmverify.VerifySummary)
    assert summary.cases == count and summary.rewrites == sum(r.rewrite_count for r in results)
    assert summary.rewritten_cases == sum(r.rewritten for r in results) > 0 and summary.failing_cases == 0
    assert (
        summary.judged_counts["structure"] == count and summary.judged_counts["semantics"] == count - summary.void_cases
    )
    assert summary.planted_counts["must match"] >= summary.rewritten_cases
    assert summary.describe().startswith(f"{count} cases, {summary.rewritten_cases} rewritten")


def test_shipped_pass_with_fixed_config():
    config = QKNormConfig(q_size=24, kv_size=8, eps=1e-5, dtype=torch.bfloat16)
    verify(QKNormFusionPass(config), qk_norm_cases(config), max_examples=10)


@pytest.mark.slow  # end to end: runs in the slow step
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


@pytest.mark.slow  # end to end: runs in the slow step
def test_reproducer_exits_zero_once_the_pass_is_fixed(tmp_path):
    config = QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.bfloat16)
    with pytest.raises(PassVerificationError) as info:
        verify(QKNormWrongRoundingOrder, qk_norm_cases(config), max_examples=50, repro_dir=tmp_path)
    fixed = pmverify._findings.reproducer.write(
        info.value.case, QKNormFusionPass(config), info.value.violations, tmp_path / "fixed"
    )
    run = subprocess.run([sys.executable, str(fixed)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(cases=[1, 2]), "cases=\\[1, 2\\] must be a Hypothesis strategy"),
        (dict(max_examples=0), "max_examples=0 must be a positive int"),
        (dict(seed="abc"), "seed='abc' must be an int or None"),
        (dict(seed=True), "seed=True must be an int or None"),
        (dict(strict_order="yes"), "strict_order='yes' must be a bool"),
        (dict(allow_no_rewrites=1), "allow_no_rewrites=1 must be a bool"),
        (dict(oracles=[]), "oracles=\\[\\] asks no oracle"),
        (dict(shrink_budget_s=0), "shrink_budget_s=0 must be a positive number of seconds or None"),
        (dict(shrink_budget_s="1"), "shrink_budget_s='1' must be a positive number"),
        (dict(mode="eager"), "mode='eager' is not supported"),
        (dict(oracles=["nope"]), "oracles=\\['nope'\\]: unknown oracle 'nope'"),
        (dict(oracles=["semantics", 42]), "oracles=\\['semantics', 42\\]: 42 is neither an oracle name nor a callable"),
    ],
)
def test_bad_arguments(kwargs, message):
    args = dict(cases=st.nothing())
    args.update(kwargs)
    with pytest.raises(InvalidArgument, match=message):
        verify(QKNormFusionPass, **args)


@pytest.mark.parametrize("pass_", [None, 42, "QKNormFusionPass"])
def test_something_that_is_not_a_pass_is_refused_eagerly(pass_):
    case = build_case(CONFIG_F32, [make_layer(CONFIG_F32, "qk_norm", tokens=2)])
    with pytest.raises(InvalidArgument, match=f"pass_={pass_!r} is not a pass"):
        pmverify.check_case(pass_, case)
    with pytest.raises(InvalidArgument, match=f"pass_={pass_!r} is not a pass"):
        verify(pass_, st.just(case))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(case=object()), "case=<object object at .*> is not a GraphCase"),
        (dict(case=None), "case=None is not a GraphCase"),
        (dict(mode="eager"), "mode='eager' is not supported"),
        (dict(strict_order=1), "strict_order=1 must be a bool"),
        (dict(oracles=["nope"]), "oracles=\\['nope'\\]: unknown oracle 'nope'"),
        (dict(oracles="nope"), "oracles='nope': unknown oracle 'nope'"),
        (dict(oracles=[3.5]), "oracles=\\[3.5\\]: 3.5 is neither an oracle name nor a callable"),
        (dict(oracles=5), "oracles=5: expected None, an oracle name, or a list of oracle names and callables"),
        (dict(pass_=None, pass_factory=None), "pass_=None is not a pass"),
    ],
)
def test_check_case_bad_arguments(kwargs, message):
    """Every bad argument of ``check_case`` is an ``InvalidArgument`` naming it and its value."""
    case = build_case(CONFIG_F32, [make_layer(CONFIG_F32, "qk_norm", tokens=2)])
    args = {"pass_": _NoArgumentPass, "case": case, **kwargs}
    with pytest.raises(InvalidArgument, match=message):
        pmverify.check_case(**args)


class _NoArgumentPass:
    built = 0

    def __init__(self):
        type(self).built += 1

    def __call__(self, graph):
        pass


class _ConfiguredPass(_NoArgumentPass):
    def __init__(self, config):
        super().__init__()


def test_a_class_is_built_with_no_argument_when_the_case_carries_no_config():
    case = build_case(CONFIG_F32, [make_layer(CONFIG_F32, "qk_norm", tokens=2)])
    case.pass_config = None
    _NoArgumentPass.built = 0
    pmverify.check_case(_NoArgumentPass, case, oracles=["structure"])
    pmverify.check_case(_NoArgumentPass, case, oracles=["structure"])
    assert _NoArgumentPass.built == 2  # a fresh object per case
    with pytest.raises(
        ValueError, match="_ConfiguredPass is a class whose constructor takes arguments.*give a built pass"
    ):
        pmverify.check_case(_ConfiguredPass, case)
    with pytest.raises(InvalidArgument, match="strict_order=1 must be a bool"):
        pmverify.check_case(_NoArgumentPass, case, strict_order=1)


def test_failure_is_saved_and_replayed_first(tmp_path):
    from hypothesis import Phase, settings
    from hypothesis.database import InMemoryExampleDatabase

    db = InMemoryExampleDatabase()
    # saved as found: shrinking (what makes this search long) is not what this test is about
    unshrunk = settings(settings.default, database=db, phases=[Phase.explicit, Phase.reuse, Phase.generate])
    config = QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.bfloat16)
    search = functools.partial(
        verify, QKNormWrongRoundingOrder, qk_norm_cases(config), repro_dir=tmp_path, settings=unshrunk
    )
    with pytest.raises(PassVerificationError):
        search(max_examples=50, seed=3)  # seeded, as pmverify fuzz runs it: the database stays in use
    assert any(db.data.values()), "the failing case was not saved"
    checked = []
    with pytest.raises(PassVerificationError):
        # one example only: it can only fail this fast because the saved case is replayed first
        search(max_examples=1, seed=4, on_result=checked.append)
    assert not checked[0].ok


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


@pytest.mark.slow  # end to end: runs in the slow step
def test_flaky_pass_still_raises_pass_verification_error(tmp_path):
    config = QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.bfloat16)
    _WrongOnFirstCalls.calls = 0
    with pytest.raises(PassVerificationError) as info:
        verify(_WrongOnFirstCalls, qk_norm_cases(config, near_misses=False), max_examples=20, repro_dir=tmp_path)
    assert "flaky" in str(info.value)


@pytest.mark.slow  # end to end: runs in the slow step
def test_reproducer_of_unrebuildable_pass_says_so(tmp_path):
    config = QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.bfloat16)
    wrong = QKNormWrongRoundingOrder(config)

    def closure_pass(graph):
        wrong(graph)

    with pytest.raises(PassVerificationError) as info:
        verify(closure_pass, qk_norm_cases(config), max_examples=50, repro_dir=tmp_path)
    assert "pass_source" in str(info.value)
    # the first line counts the distinct failures where there are several; the pass is named next
    assert "test_reproducer_of_unrebuildable_pass_says_so.<locals>.closure_pass broke" in str(info.value)
    run = subprocess.run([sys.executable, str(info.value.reproducer)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "edit PASS" in run.stderr


def test_database_key_tells_passes_apart():
    """Two function passes (or two PatternMatcherPasses) must not share failures: a passing replay
    of one would delete the other's saved failures."""
    from torch._inductor.pattern_matcher import PatternMatcherPass

    from pmverify._engine.verify import database_key

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


# -- strict order, vacuous searches, other oracles' failures ---------------------------------------

_X = torch.randn(4, 3)


def _traced(fn):
    from torch._inductor.pattern_matcher import fwd_only

    return fwd_only(fn, [_X])


class MultiOutputSinPass:
    """Inductor's own register_replacement of ``(sin(a), cos(sin(a) * b))`` by an equal two-output
    replacement: the pattern entry inserts it before the match's first output, ahead of ``b``."""

    def __init__(self):
        from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

        def search(a, b):
            s = a.sin()
            return s, (s * b).cos()

        def replace(a, b):
            s = a.sin() + 0.0
            return s, (s * b).cos()

        self.patterns = PatternMatcherPass()
        register_replacement(search, replace, [torch.randn(4), torch.randn(4)], fwd_only, self.patterns)

    def __call__(self, graph):
        self.matched_count = self.patterns.apply(graph)


def _multi_output_case():
    def fn(x):
        s = x.sin()
        return s, (s * (x * 2)).cos()

    return pmverify.GraphCase(_traced(fn), [(_X,)])


def _run_reproducer(path, monkeypatch):
    """Run a reproducer script in this process (torch already imported); its exit status."""
    import runpy

    monkeypatch.setattr(sys, "path", list(sys.path))  # the script prepends its folders
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(path), run_name="__main__")
    return info.value.code


def test_strict_order_finds_a_pattern_entrys_disorder_and_keeps_its_failures_apart(tmp_path, monkeypatch):
    from hypothesis import settings
    from hypothesis.database import InMemoryExampleDatabase

    from pmverify._engine.verify import database_key

    db = InMemoryExampleDatabase()
    previous = settings.get_current_profile_name()
    settings.register_profile("pmverify-test-strict", settings.get_profile(previous), database=db)
    settings.load_profile("pmverify-test-strict")
    try:
        pass_, cases = MultiOutputSinPass(), st.just(_multi_output_case())
        with pytest.raises(PassVerificationError) as info:
            verify(pass_, cases, strict_order=True, repro_dir=tmp_path)
        assert [v.oracle for v in info.value.violations] == ["structure"]
        strict, default = database_key(pass_, cases, strict_order=True), database_key(pass_, cases)
        assert strict != default and db.data.get(strict) and not db.data.get(default)
        # the default search judges Inductor's order: quiet, and it leaves the strict search's failure saved
        summary = verify(pass_, cases, max_examples=1)
        assert summary.rewritten_cases == summary.cases == 1 and db.data.get(strict)
    finally:
        settings.load_profile(previous)
    script = info.value.reproducer.read_text()
    assert "mode='direct', strict_order=True)" in script
    assert _run_reproducer(info.value.reproducer, monkeypatch) == 1
    fixed = pmverify._findings.reproducer.write(info.value.case, pass_, info.value.violations, tmp_path / "default")
    assert _run_reproducer(fixed, monkeypatch) == 0  # the same case in Inductor's order


def _identity(graph):
    pass


def _recompute_sin(graph):
    """A correct rewrite: every ``sin`` recomputed by a new node."""
    for node in list(graph.find_nodes(op="call_function", target=torch.ops.aten.sin.default)):
        with graph.inserting_after(node):
            new = graph.call_function(torch.ops.aten.sin.default, node.args)
        node.replace_all_uses_with(new)
        graph.erase_node(node)


def test_a_search_that_rewrote_nothing_raises_rewrite_never_matched():
    cases = st.just(pmverify.GraphCase(_traced(lambda x: x.sin() + 1), [(_X,)]))
    with pytest.raises(pmverify.RewriteNeverMatched) as info:
        verify(_identity, cases, max_examples=3)
    error = info.value
    assert isinstance(error, pmverify.VacuousSearch) and error.result is None
    assert error.summary.cases == 1 and error.summary.rewritten_cases == 0
    message = str(error)
    assert message.startswith("verify(_identity, just(GraphCase(graph: 2 ops")
    assert "the pass rewrote nothing in the 1 case drawn (no pattern instance was planted)" in message
    assert "pass allow_no_rewrites=True" in message
    summary = verify(_identity, cases, max_examples=3, allow_no_rewrites=True)
    assert summary == pmverify.VerifySummary(cases=1, judged_counts={"structure": 1, "semantics": 1})
    assert summary.describe().startswith("1 cases, 0 rewritten, 0 void")  # no "(0 rewrites)"
    with pytest.raises(
        pmverify.RewriteNeverMatched, match=r"^verify\(_NoArgumentPass, just\(.{80,97}\.\.\.\): the pass"
    ):
        verify(_NoArgumentPass, cases, max_examples=3)  # the class's name, the strategy's repr cut short


def _sink(graph):
    """A correct reordering: each node moved to just before its first user (fresh-user trial)."""
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and node.users:
            first = min(node.users, key=lambda user: list(graph.nodes).index(user))
            first.prepend(node)


def test_a_pass_that_only_reorders_nodes_rewrote_the_graph():
    def program(x, y):
        a = x.sin()
        b = y.cos()
        return b + 1, a * 2

    x, y = torch.randn(3), torch.randn(3)
    from torch._inductor.pattern_matcher import fwd_only

    case = pmverify.GraphCase(fwd_only(program, [x, y]), [(x, y)])
    result = pmverify.check_case(_sink, case)
    assert result.ok and result.rewritten, result.violations
    summary = verify(_sink, st.just(case), max_examples=3)
    assert summary.rewritten_cases == 1


def test_a_search_whose_every_case_was_void_raises_all_cases_void():
    x = torch.tensor([[float("nan"), 1.0, 2.0]])
    cases = st.just(pmverify.GraphCase(_traced(lambda x: x.sin() + 1), [(x,)]))
    with pytest.raises(pmverify.AllCasesVoid) as info:
        verify(_recompute_sin, cases)
    assert info.value.summary.void_cases == info.value.summary.cases == 1
    assert "every one of the 1 case drawn was void (the float64 reference is NaN or Inf, first: " in str(info.value)
    assert verify(_recompute_sin, cases, allow_no_rewrites=True).judged_counts.get("semantics") is None


class StridesThenValues:
    """Wrong from ``config`` 3 up: the output comes back transposed (its strides change); from 4
    up, also doubled (its values change). Shrinking walks from a case breaking both to 3, which
    breaks the strides only."""

    def __init__(self, config):
        self.config = config

    def __call__(self, graph):
        if self.config < 3:
            return _recompute_sin(graph)
        aten = torch.ops.aten
        (output,) = graph.find_nodes(op="output")
        value = output.args[0]
        with graph.inserting_before(output):
            new = graph.call_function(aten.t.default, (value,))
            new = graph.call_function(aten.clone.default, (new,), {"memory_format": torch.contiguous_format})
            new = graph.call_function(aten.t.default, (new,))
            if self.config >= 4:
                new = graph.call_function(aten.mul.Tensor, (new, 2))
        output.args = (new,)


def test_each_distinct_failure_is_shrunk_to_its_own_case_most_severe_first(tmp_path, monkeypatch):
    from pmverify._engine.verify import fresh_settings

    gm = _traced(lambda x: x.sin() + 1)
    cases = st.integers(0, 8).map(lambda i: pmverify.GraphCase(gm, [(_X,)], pass_config=i))
    with pytest.raises(PassVerificationError) as info:  # (fresh: no saved failure replayed first)
        verify(StridesThenValues, cases, max_examples=30, seed=0, repro_dir=tmp_path, settings=fresh_settings())
    error = info.value
    # the semantic failure first, shrunk to its own smallest case (4), then the stride one (3)
    assert [failure.label for failure in error.failures] == ["semantics", "structure (strides)"]
    assert error.case.pass_config == 4 and [v.oracle for v in error.violations] == ["semantics", "structure"]
    assert error.failures[0].violations[0].oracle == "semantics"
    strides = error.failures[1]
    assert strides.shrunk and strides.case.pass_config == 3 and strides.key == ("structure", "strides")
    assert list(error.other_failures) == ["structure (strides)"]
    path = error.other_reproducers["structure (strides)"]
    assert path == strides.reproducer and path.name.startswith("repro_structure_") and path.parent == tmp_path
    assert error.reproducer.name.startswith("repro_semantics_")
    message = str(error)
    assert message.startswith("2 distinct failures, most severe first: semantics, structure (strides)\n")
    assert f"failure 2, structure (strides) (shrunk), on {strides.case!r}:\n  - structure: " in message
    assert f"  reproducer: {path}" in message and "shrinking:" not in message
    assert error.summary.failing_cases >= 2
    script = error.reproducer.read_text()
    assert f"#   structure (strides): {path}" in script
    assert _run_reproducer(path, monkeypatch) == 1


class StridesAlwaysDtypeSometimes:
    """Always transposes the output (its strides change); from ``config`` 5 up also casts it to
    float64 (its dtype changes): the stride finding fires on every case."""

    def __init__(self, config):
        self.config = config

    def __call__(self, graph):
        aten = torch.ops.aten
        (output,) = graph.find_nodes(op="output")
        value = output.args[0]
        with graph.inserting_before(output):
            new = graph.call_function(aten.t.default, (value,))
            new = graph.call_function(aten.clone.default, (new,), {"memory_format": torch.contiguous_format})
            new = graph.call_function(aten.t.default, (new,))
            if self.config >= 5:
                new = graph.call_function(torch.ops.prims.convert_element_type.default, (new, torch.float64))
        output.args = (new,)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_stride_change_on_every_case_does_not_hide_a_wrong_dtype(tmp_path, seed):
    from pmverify._engine.verify import fresh_settings

    gm = _traced(lambda x: x.sin() + 1)
    cases = st.integers(0, 9).map(lambda i: pmverify.GraphCase(gm, [(_X,)], pass_config=i))
    with pytest.raises(PassVerificationError) as info:
        verify(
            StridesAlwaysDtypeSometimes,
            cases,
            max_examples=40,
            seed=seed,
            repro_dir=tmp_path,
            settings=fresh_settings(),
            oracles=["structure"],
        )
    error = info.value
    assert [failure.key for failure in error.failures] == [("structure", "dtype/shape"), ("structure", "strides")]
    dtype, strides = error.failures
    assert error.case is dtype.case and dtype.case.pass_config == 5 and strides.case.pass_config == 0
    assert dtype.shrunk and strides.shrunk
    assert all(failure.reproducer is not None and failure.reproducer.exists() for failure in error.failures)
    assert "float64 after" in str(dtype.violations[0])


def _wrong_and_transposed(graph):
    """Adds 1 to the output and gives it column-major strides: wrong values and a stride change."""
    (output,) = graph.find_nodes(op="output")
    with graph.inserting_before(output):
        value = graph.call_function(torch.ops.aten.add.Tensor, (output.args[0], 1))
        value = graph.call_function(torch.ops.aten.t.default, (value,))
        value = graph.call_function(torch.ops.aten.clone.default, (value,), {"memory_format": torch.contiguous_format})
        output.args = (graph.call_function(torch.ops.aten.t.default, (value,)),)


def test_a_case_showing_several_findings_lists_the_most_severe_first():
    from torch._inductor.pattern_matcher import fwd_only

    x = torch.randn(3, 4)
    case = pmverify.GraphCase(fwd_only(lambda x: x.sin() + 1, [x]), [(x,)])
    result = pmverify.check_case(_wrong_and_transposed, case, oracles=["structure", "semantics"])
    assert {v.oracle for v in result.violations} == {"structure", "semantics"}
    error = PassVerificationError(result, None)
    assert [v.oracle for v in error.violations] == ["semantics", "structure"]
    assert str(error).index("semantics") < str(error).index("strides")


class CrashesOnSmallValuesOnLarge:
    """Raises for ``config`` below 2 (a form real graphs never hold, say) and doubles the output
    from 4 up: the crash shrinks smaller, the wrong values are the bug."""

    def __init__(self, config):
        self.config = config

    def __call__(self, graph):
        if self.config < 2:
            raise NotImplementedError("a form this pass never meets")
        if self.config >= 4:
            (output,) = graph.find_nodes(op="output")
            with graph.inserting_before(output):
                output.args = (graph.call_function(torch.ops.aten.mul.Tensor, (output.args[0], 2)),)


def test_a_crash_that_shrinks_smaller_does_not_hide_wrong_values(tmp_path):
    from pmverify._engine.verify import fresh_settings

    gm = _traced(lambda x: x.sin() + 1)
    cases = st.integers(0, 9).map(lambda i: pmverify.GraphCase(gm, [(_X,)], pass_config=i))
    with pytest.raises(PassVerificationError) as info:
        verify(
            CrashesOnSmallValuesOnLarge,
            cases,
            max_examples=40,
            seed=0,
            repro_dir=tmp_path,
            settings=fresh_settings(),
            oracles=["semantics"],
        )
    error = info.value
    assert [failure.label for failure in error.failures] == ["semantics", "crash"]
    assert error.case.pass_config == 4 and error.failures[1].case.pass_config == 0
    assert all(failure.shrunk and failure.reproducer.exists() for failure in error.failures)


class _SlowToShrink:
    """Wrong values (doubled) when ``config`` (a list of ints) holds a non-zero, and slow (0.05 s a
    case, a quarter of a second with its checks): its failures take many slow steps to shrink."""

    def __init__(self, config):
        self.config = config

    def __call__(self, graph):
        import time

        time.sleep(0.05)
        if any(self.config):
            (output,) = graph.find_nodes(op="output")
            with graph.inserting_before(output):
                output.args = (graph.call_function(torch.ops.aten.mul.Tensor, (output.args[0], 2)),)


def _chain_case(config):
    def fn(x):
        for _ in config:
            x = x + 1
        return x

    return pmverify.GraphCase(_traced(fn), [(_X,)], pass_config=list(config))


def test_a_shrink_budget_stops_shrinking_and_says_how_far_it_got(tmp_path, capsys):
    import re

    import hypothesis

    from pmverify._engine.verify import fresh_settings

    cases = st.lists(st.integers(0, 3), min_size=10, max_size=16).filter(any).map(_chain_case)
    with pytest.raises(PassVerificationError) as info:
        verify(
            _SlowToShrink,
            cases,
            max_examples=1,
            seed=0,
            repro_dir=tmp_path,
            # one failure: no more generation after it (Hypothesis' ten calls at least), shrinking at once
            settings=fresh_settings(hypothesis.settings(report_multiple_bugs=False)),
            oracles=["semantics"],
            shrink_budget_s=0.5,
        )
    error = info.value  # (shrinking it to the end takes 25 cases, 6 s here)
    (failure,) = error.failures
    assert not failure.shrunk and failure.case is error.case
    nodes, first = map(int, re.fullmatch(r"at (\d+) nodes \(from (\d+)\)", failure.note).groups())
    assert nodes == len(error.case.gm.graph.nodes) and 12 <= nodes <= first <= 18
    assert error.shrink_note.startswith("shrinking stopped at its time limit of 0.5 s (")
    assert error.shrink_note.endswith(f": semantics {failure.note}")
    assert f"shrinking: {error.shrink_note}" in str(error)
    assert error.reproducer is not None and error.reproducer.exists()
    assert "five minutes" not in capsys.readouterr().out  # Hypothesis' warning, untrue here


def test_verifys_shrink_budget_is_capped_by_the_environment(monkeypatch):
    import hypothesis
    from hypothesis.internal.conjecture import engine

    from pmverify._engine.verify import fresh_settings

    limits = []
    cases = st.just(pmverify.GraphCase(_traced(lambda x: x.sin()), [(_X,)]))
    search = dict(
        settings=fresh_settings(hypothesis.settings(max_examples=1)),
        allow_no_rewrites=True,
        on_case=lambda case: limits.append(engine.MAX_SHRINKING_SECONDS),
    )
    monkeypatch.setenv("PMVERIFY_SHRINK_BUDGET", "7")
    verify(_identity, cases, **search)
    verify(_identity, cases, shrink_budget_s=5, **search)
    verify(_identity, cases, shrink_budget_s=None, **search)
    assert limits == [7, 5, 7]
    for text in ("soon", "-1", "inf"):
        monkeypatch.setenv("PMVERIFY_SHRINK_BUDGET", text)
        with pytest.raises(ValueError, match=rf"PMVERIFY_SHRINK_BUDGET='{text}' is not a positive number of seconds"):
            verify(_identity, cases, **search)


def _scaled_case(scales):
    x = torch.randn(4)
    from torch._inductor.pattern_matcher import fwd_only

    return pmverify.GraphCase(fwd_only(lambda x: x * scales[0], [x]), [(x,)], label=repr(scales))


def test_a_seeded_search_draws_the_same_whatever_the_process_imported(tmp_path, monkeypatch):
    """Hypothesis draws about 5 % of its numbers from constants in the source of the local modules
    loaded so far; a module imported between two runs of one seed must not change their draws."""
    floats = st.lists(st.floats(-10, 10), min_size=16, max_size=16)

    def drawn():
        seen = []
        verify(
            lambda gm: None,
            st.builds(_scaled_case, floats),
            max_examples=40,
            seed=3,
            on_case=lambda case: seen.append(case.label),
            allow_no_rewrites=True,
            oracles=["semantics"],
        )
        return seen

    first = drawn()
    constants = ", ".join(f"{i + 0.123456789:.9f}" for i in range(-9, 10))
    (tmp_path / "_many_constants.py").write_text(f"VALUES = [{constants}]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import _many_constants  # noqa: F401 - a local module full of float constants, loaded now

    assert drawn() == first


# -- settings: the caller's, composed; nothing global changed ---------------------------------------


def _numbered_cases():
    gm = _traced(lambda x: x.sin() + 1)
    return st.integers(0, 1000).map(lambda i: pmverify.GraphCase(gm, [(_X,)], pass_config=i))


def test_the_callers_max_examples_hold_and_the_argument_beats_them():
    from hypothesis import settings

    before = settings.default
    cases = _numbered_cases()
    assert verify(_recompute_sin, cases, settings=settings(max_examples=4, database=None)).cases == 4
    assert verify(_recompute_sin, cases, max_examples=2, settings=settings(max_examples=50, database=None)).cases == 2
    assert settings.default is before


def test_the_callers_database_keeps_the_failure_under_pmverifys_key(tmp_path):
    from hypothesis import settings
    from hypothesis.database import InMemoryExampleDatabase

    from pmverify._engine.verify import database_key

    before = settings.default
    db = InMemoryExampleDatabase()
    cases = _numbered_cases()
    with pytest.raises(PassVerificationError):
        verify(StridesThenValues, cases, seed=0, repro_dir=tmp_path, settings=settings(max_examples=50, database=db))
    assert db.data.get(database_key(StridesThenValues, cases)), "the failure was not saved under pmverify's key"
    assert settings.default is before and settings.default.database is not db
    checked = []
    with pytest.raises(PassVerificationError):  # replayed first: one example is enough
        verify(
            StridesThenValues,
            cases,
            max_examples=1,
            seed=1,
            repro_dir=tmp_path,
            on_result=checked.append,
            settings=settings(database=db),
        )
    assert checked[0].violations


def test_settings_that_are_not_settings_are_refused():
    with pytest.raises(InvalidArgument, match="settings=.* must be a hypothesis.settings or None"):
        verify(_recompute_sin, _numbered_cases(), settings={"max_examples": 3})
