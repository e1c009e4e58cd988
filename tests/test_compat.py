"""pmverify._compat: the one door to private internals; the example-database key wrapper (its keys,
golden: stable across releases of pmverify and Hypothesis); the message when an internal moved."""

from __future__ import annotations

import contextlib
import time

import hypothesis
import pytest
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase

from pmverify._compat import (
    InternalMoved,
    KeyedDatabase,
    counted_clock,
    internal,
    keyed,
    max_shrinking_seconds,
    set_max_shrinking_seconds,
)
from pmverify._verify import database_key


def test_a_keyed_database_keeps_a_tests_keys_under_its_own():
    inner = InMemoryExampleDatabase()
    db = KeyedDatabase(inner, b"pm")
    test_key = bytes(range(48))  # (what Hypothesis derives from a test's source: any bytes)
    db.save(test_key, b"a")
    db.save(test_key + b".secondary", b"b")
    db.save(test_key + b".pareto", b"c")
    assert {key: set(values) for key, values in inner.data.items()} == {
        b"pm": {b"a"},
        b"pm.secondary": {b"b"},
        b"pm.pareto": {b"c"},
    }
    assert list(db.fetch(b"another test key")) == [b"a"]
    db.move(test_key, test_key + b".secondary", b"a")
    assert set(inner.data[b"pm.secondary"]) == {b"a", b"b"} and not set(inner.data[b"pm"])
    db.delete(test_key + b".pareto", b"c")
    assert not set(inner.data[b"pm.pareto"])
    assert keyed(None, b"pm") is None and keyed(inner, b"pm") == db


@pytest.mark.parametrize(
    ("inner", "key"), [("db", b"k"), (InMemoryExampleDatabase(), b""), (InMemoryExampleDatabase(), "k")]
)
def test_a_keyed_database_refuses_bad_arguments(inner, key):
    with pytest.raises(TypeError):
        KeyedDatabase(inner, key)


def _golden_pass(graph):
    pass


_golden_pass.__module__, _golden_pass.__qualname__ = "mypasses", "fuse"


@pytest.mark.parametrize(
    ("mode", "strict_order", "expected"),
    [
        # sha256 of "pmverify.verify:mypasses.fuse:just(1)", then with ":strict_order", ":compiled"
        ("direct", False, "f563902faa2019d7b25067d9a51e577a9da37bd3b399abe1376da944d29bc881"),
        ("direct", True, "d5573af3a14ea6909f3e04162247ab32ad7f775606fdcae3d514afa9a5f525fd"),
        ("compiled", False, "c6025f6494b6d51b2e69aeeadfee522fd1d167667ef0a487a4d5927c85c0b2ca"),
    ],
)
def test_database_keys_are_golden(mode, strict_order, expected):
    """The key of a fixed pass and strategy, hard-coded: a change of it loses every failure saved in
    every shared database (a nightly job's, a team's Redis), so it must be deliberate."""
    assert database_key(_golden_pass, st.just(1), mode, strict_order).hex() == expected


def test_an_internal_that_moved_says_which_why_and_where_it_was_read():
    with pytest.raises(InternalMoved) as info:
        internal("hypothesis.internal.conjecture.engine", "NoSuchThing", "a job bounds shrinking by its budget")
    message = str(info.value)
    assert message.startswith("hypothesis.internal.conjecture.engine.NoSuchThing is gone from hypothesis ")
    assert "pmverify read it at 6.170.17; a job bounds shrinking by its budget" in message
    assert info.value.internal == "hypothesis.internal.conjecture.engine.NoSuchThing"
    with pytest.raises(InternalMoved, match="no_such_module"):
        internal("torch.no_such_module", "x", "why")


def test_a_shrink_budget_lowers_hypothesis_limit_within_its_block_and_never_raises_it():
    from hypothesis.internal.conjecture import engine

    from pmverify._compat import max_shrinking_seconds

    before = engine.MAX_SHRINKING_SECONDS
    with max_shrinking_seconds(0.5) as limit:
        assert limit == engine.MAX_SHRINKING_SECONDS == 0.5
        with max_shrinking_seconds(100.0) as inner:  # a lower limit already set (a job's) holds
            assert inner == 0.5
        with max_shrinking_seconds(None) as inner:
            assert inner == 0.5
    assert engine.MAX_SHRINKING_SECONDS == before


def test_the_engines_stop_reason_and_discarded_draws_are_read_and_an_outer_collector_still_gets_the_statistics():
    from hypothesis import assume, given, settings
    from hypothesis.statistics import collector

    from pmverify._compat import finished_exit_reason, search_statistics

    outer = []

    @settings(max_examples=20, database=None, derandomize=True)
    @given(st.integers(0, 10**6))
    def passes(n):
        assume(n % 2 == 0)

    with collector.with_value(outer.append), search_statistics() as statistics:
        passes()
    assert statistics.stopped == outer[0]["stopped-because"] and statistics.stopped != finished_exit_reason()
    # the odd draws, rejected by assume: counted apart from the 20 valid ones
    assert statistics.drawn == statistics.discarded + 20 and statistics.discarded > 0


def _shrunk(*, stall: bool, counted: bool) -> list[int]:
    """The list a seeded search shrinks a failure (sum over 100) to, under a shrinking limit of 1 s
    (wall clock) or 1000 clock reads (:func:`counted_clock`); ``stall``: the machine stalls 1.1 s on
    the first shrinking call."""
    failed, stalled = [], []

    @hypothesis.settings(database=None, max_examples=100, report_multiple_bugs=False)
    @hypothesis.seed(0)
    @hypothesis.given(st.lists(st.integers(0, 100), min_size=1))
    def search(xs):
        if stall and failed and not stalled:  # the first call after the first failure: shrinking's
            stalled.append(True)
            time.sleep(1.1)
        if sum(xs) > 100:
            failed.append(xs)
            raise AssertionError(xs)

    with counted_clock() if counted else contextlib.nullcontext(), max_shrinking_seconds(None):
        set_max_shrinking_seconds(1000 if counted else 1)
        with pytest.raises(AssertionError) as info:
            search()
    return info.value.args[0]


def test_a_counted_clock_makes_a_shrink_independent_of_the_machines_speed():
    """Under a time limit a stall cuts shrinking (the audit's reasons drifted between runs); timed
    in its own clock reads, Hypothesis shrinks alike."""
    assert _shrunk(stall=True, counted=True) == _shrunk(stall=False, counted=True) == [1, 100]
    assert _shrunk(stall=True, counted=False) != _shrunk(stall=False, counted=False)


def test_a_counted_clock_jumps_past_every_limit_after_its_wall_limit_and_is_restored():
    from hypothesis.internal.conjecture import engine

    before = engine.time
    with counted_clock(0.05) as clock:
        assert engine.time is clock and [clock.perf_counter(), clock.monotonic()] == [1.0, 2.0] and not clock.cut
        time.sleep(0.06)
        assert clock.perf_counter() > 10**9 and clock.cut
    assert engine.time is before
