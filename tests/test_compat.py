"""pmverify._compat: the one door to private internals; the example-database key wrapper (its keys,
golden: stable across releases of pmverify and Hypothesis); the message when an internal moved; no
module but ``_compat`` imports a private torch / Hypothesis module."""

from __future__ import annotations

import ast
import contextlib
import pathlib
import subprocess
import sys
import time

import hypothesis
import pytest
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase

from pmverify import _compat
from pmverify._compat import (
    InternalMoved,
    KeyedDatabase,
    counted_clock,
    internal,
    keyed,
    max_shrinking_seconds,
    set_max_shrinking_seconds,
)
from pmverify._engine.verify import database_key


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


# -- the one door ----------------------------------------------------------------------------------

PACKAGE = pathlib.Path(_compat.__file__).parent
#: Hypothesis' internal modules (``hypothesis.X``); its public ones are ``hypothesis`` itself,
#: ``strategies``, ``errors``, ``database``, ``stateful``, ``provisional``, ``extra.*`` and the
#: documented printer ``vendor.pretty``. (As /work/notes/compat_codemod.py has it.)
HYPOTHESIS_INTERNAL = {
    "internal",
    "core",
    "control",
    "statistics",
    "reporting",
    "utils",
    "configuration",
    "entry_points",
}
#: Users of the tool, as any pass project: they import Inductor's pass-writing API and fake
#: tensors themselves, and may not import ``pmverify._*`` (the forbidden contract).
USERS = ("fusions", "faults")


def is_private(dotted: str) -> bool:
    """A torch or hypothesis path with a ``_``-prefixed component, or in a Hypothesis internal module."""
    parts = dotted.split(".")
    if parts[0] not in ("torch", "hypothesis"):
        return False
    if any(part.startswith("_") for part in parts):
        return True
    return parts[0] == "hypothesis" and len(parts) > 1 and parts[1] in HYPOTHESIS_INTERNAL


def private_imports(source: str) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of each private name ``source`` imports (at any depth, lazily too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if is_private(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(node.lineno, name) for name in names if is_private(name)]
    return found


@pytest.mark.parametrize(
    ("dotted", "private"),
    [
        ("torch._inductor.pattern_matcher", True),
        ("torch.utils._pytree", True),
        ("torch._subclasses.fake_tensor.FakeTensorMode", True),
        ("torch.testing._internal.distributed", True),
        ("hypothesis.internal.conjecture.engine", True),
        ("hypothesis.statistics.collector", True),
        ("hypothesis.control.current_build_context", True),
        ("hypothesis._settings", True),
        ("torch.fx.experimental.symbolic_shapes.ShapeEnv", False),
        ("torch.library.custom_op", False),
        ("torch.compiler.reset", False),
        ("hypothesis.strategies", False),
        ("hypothesis.settings", False),
        ("hypothesis.errors.InvalidArgument", False),
        ("hypothesis.vendor.pretty.pretty", False),
        ("numpy._core", False),
    ],
)
def test_what_counts_as_private(dotted, private):
    assert is_private(dotted) is private


def test_private_imports_finds_lazy_and_aliased_imports_and_private_names_of_public_modules():
    source = (
        "import torch\nimport torch.utils._pytree as pytree\nfrom torch.utils import _triton, checkpoint\n"
        "def f():\n    import torch._dynamo.config\n    from hypothesis.statistics import collector\n"
        "from ._compat import FakeTensorMode\nfrom torch.fx import GraphModule\n"
    )
    assert private_imports(source) == [
        (2, "torch.utils._pytree"),
        (3, "torch.utils._triton"),
        (5, "torch._dynamo.config"),
        (6, "hypothesis.statistics.collector"),
    ]


def test_no_module_but_compat_imports_a_private_torch_or_hypothesis_module():
    """Every private torch / Hypothesis name the tool uses is imported from ``pmverify._compat``
    (add it to ``_compat.PRIVATE``, with why; /work/notes/compat_codemod.py rewrites the imports)."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "_compat.py" or path.parent != PACKAGE
        if path.relative_to(PACKAGE).parts[0] not in USERS
        for line, name in private_imports(path.read_text())
    ]
    assert found == []


def test_every_name_through_the_door_is_private_and_named_with_why():
    tree = ast.parse(pathlib.Path(_compat.__file__).read_text())
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    defined |= {
        t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
    }
    for name, (path, why) in _compat.PRIVATE.items():
        assert is_private(path), f"{name}: {path} is public: import it directly"
        assert why and not name.startswith("_") and name not in defined, name


def test_importing_compat_imports_no_torch_and_reads_a_private_name_when_first_used():
    code = (
        "import sys; import pmverify._compat as c; assert 'torch' not in sys.modules, 'torch'\n"
        "import torch.utils._pytree as p; assert c.pytree is p\n"
        "assert 'torch._inductor.pattern_matcher' not in sys.modules, 'pattern matcher'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr


def test_a_private_name_is_read_from_its_module_at_each_read_so_a_monkeypatch_there_is_seen(monkeypatch):
    """(oracles/test_functionalization.py monkeypatches Inductor's decompose_auto_functionalized
    and expects the oracle to call the patched one, as a function-local import did.)"""
    import torch._guards

    assert _compat.detect_fake_mode is torch._guards.detect_fake_mode

    def patched(inputs=None):
        return None

    monkeypatch.setattr(torch._guards, "detect_fake_mode", patched)
    assert _compat.detect_fake_mode is patched


def test_a_private_name_that_moved_says_which_why_and_where_and_an_unknown_one_is_an_attribute_error(monkeypatch):
    monkeypatch.setitem(_compat.PRIVATE, "moved", ("torch._no_such_module.thing", "a test needs it"))
    with pytest.raises(InternalMoved, match=r"torch\._no_such_module\.thing is gone from torch .*a test needs it"):
        _compat.moved  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_name"):
        _compat.no_such_name  # noqa: B018


@pytest.mark.slow  # imports Inductor's pattern matcher (~7 s)
def test_every_name_through_the_door_is_where_it_was_read():
    for name in _compat.PRIVATE:
        assert getattr(_compat, name) is not None
