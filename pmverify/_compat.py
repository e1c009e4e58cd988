"""The one door to the private torch and Hypothesis internals pmverify relies on.

Every use of an internal goes through a named function here, so that a release that moves one
fails in one place with a clear message (:class:`InternalMoved`: which internal, why pmverify needs
it, the version it was read at and the version installed) rather than deep in a search. Importing
this module imports neither torch nor Hypothesis' internals: each is imported when first used.

Where a public route exists pmverify takes it, and nothing of it is here: a search's seed is
``hypothesis.seed``; its example-database key is :class:`KeyedDatabase` (a public
``ExampleDatabase`` wrapper; only the layout of Hypothesis' sub-keys is assumed, see there);
``torch.compiler.reset()``; a schema's mutated arguments from ``alias_info.is_write``.

What stays private, and why (read at Hypothesis :data:`HYPOTHESIS_READ_AT`, torch :data:`TORCH_READ_AT`):

- ``hypothesis.internal.conjecture.providers._get_local_constants`` (:func:`no_local_constants`):
  no setting turns off the constants Hypothesis draws from the source of the modules imported so
  far; a seeded search must depend on its seed only. Does nothing when it is gone.
- ``hypothesis.internal.conjecture.engine.MAX_SHRINKING_SECONDS``
  (:func:`set_max_shrinking_seconds`, :func:`max_shrinking_seconds`): Hypothesis' shrinking time
  limit has no setting; the jobs bound a shrink by their budget, ``verify`` by its ``shrink_budget_s``.
- ``hypothesis.internal.conjecture.engine.time`` (:func:`counted_clock`): the engine's clock, read
  for its shrinking time limit and to stop looking for more bugs 10 s after the first; the audit
  makes both counts of test calls, so that a finding's shrunk case depends on its seed only.
- ``hypothesis.statistics.collector`` (:func:`search_statistics`): why the engine stopped (its
  shrinking cut by the time limit, or done) and how many draws the strategy rejected, read from the
  statistics Hypothesis reports; and
  ``hypothesis.reporting`` (:func:`without_slow_shrinking_warning`): its "more than five minutes"
  warning, untrue under a shrink budget.
- ``hypothesis.internal.conjecture.engine.ExitReason`` (:func:`finished_exit_reason`): whether a
  shrink reached its fixed point, read from the statistics Hypothesis reports.
- ``hypothesis.control.current_build_context().data.choices`` (:func:`current_choices`): the
  choice sequence of the case being run, which the job saves before a case that may kill its process.
- ``_hypothesis_internal_use_seed`` on a test (:func:`pin_seed`): what ``hypothesis.seed`` sets,
  without the ``database=None`` it also sets; the pytest plugin pins the seed of other people's
  tests and must leave their settings (and database) alone.
- ``torch.testing._internal.distributed.multi_threaded_pg`` and
  ``torch._C._distributed_c10d._set_thread_isolation_mode`` (:func:`threaded_process_group`): the
  one in-process process group that computes real collectives; torch's own tests use it.
- ``torch.utils._python_dispatch._disable_current_modes`` (:func:`outside_dispatch_modes`): how
  Inductor itself leaves the active fake modes to make a plain tensor while tracing.
- ``torch.fx.passes.shape_prop._extract_tensor_metadata`` (:func:`tensor_metadata`): the
  ``meta["tensor_meta"]`` make_fx gives each node, which a handler may read (quantization's weight
  prepacking reads its input's); pmverify's drawn graphs are given it before a pass runs.
- ``torch._dispatch.python.enable_python_dispatcher`` (:func:`python_dispatcher`): symbolic
  shapes are traced and propagated under it, as ``compile_fx`` does (the metas of ``baddbmm`` and
  ``addcmul`` take ``SymInt`` sizes only through their Python decompositions).
- ``torch._C._ExcludeDispatchKeyGuard``, ``torch._sync``, ``torch._from_functional_tensor``
  (:func:`functionalize_key_excluded`, :func:`from_functional`): running a program under a fresh
  ``FunctionalTensorMode`` and reading back its values, as AOTAutograd does for mutated inputs
  (the functionalization strategies' ground truth).
- ``torch._library.simple_registry``, ``torch._higher_order_ops.auto_functionalize``
  (:func:`has_fake_kernel`, :func:`can_auto_functionalize`): which custom ops fake tensors trace
  and functionalization wraps in ``auto_functionalized``.

The names of :data:`PRIVATE`, which the rest of pmverify imports from here (``from pmverify._compat
import FakeTensorMode``, ``pattern_matcher``, ``pytree``...), each imported when read (a
module ``__getattr__``: importing this module imports none of them; Inductor's pattern matcher
takes seconds to import), :class:`InternalMoved` when one is gone. None has a public route at torch
:data:`TORCH_READ_AT`:

- Inductor's pattern matcher (``torch._inductor.pattern_matcher``: ``PatternMatcherPass``, the
  pattern entries, ``fwd_only`` / ``joint_fwd_bwd``, ``is_match``, ``is_mutation_op``,
  ``stable_topological_sort``), its pass protocol (``torch._inductor.custom_graph_pass``), its
  decompositions (``torch._inductor.decomposition``) and ``decompose_auto_functionalized``
  (``torch._inductor.fx_passes.post_grad``): the API the passes under test are written in and run by;
  torch has no public module for it.
- ``torch._inductor.config``, ``torch._dynamo.config``, ``torch._functorch.config``: the settings a
  compile runs under (the custom pass slots, the caches); ``torch.compiler.config`` holds none.
- Fake and functional tensors (``torch._subclasses.fake_tensor``,
  ``torch._subclasses.functional_tensor``), the tracing context (``torch._guards``:
  ``tracing``, ``TracingContext``, ``detect_fake_mode``) and a symbol's source
  (``torch._dynamo.source.ConstantSource``): values and symbolic sizes propagated as Inductor
  propagates them (``torch.fx.experimental.proxy_tensor`` only re-imports ``FakeTensorMode``).
- ``torch._higher_order_ops.auto_functionalize.get_mutable_args``: which arguments an op in an
  ``auto_functionalized`` node mutates, as Inductor reads them.
- ``torch._library.custom_ops``, ``torch._library.simple_registry``: the module that defined a
  custom op (``torch.library`` records it, exposes no lookup).
- ``torch._prims_common.is_non_overlapping_and_dense_or_false``: a layout test that takes symbolic
  sizes (no ``Tensor`` method does).
- ``torch.utils._pytree`` (``pytree``; ``torch.utils.pytree`` is not in torch 2.13) and
  ``torch.utils._triton`` (``triton_utils``: the gates' device queries).
- ``hypothesis.statistics.collector`` (``statistics_collector``): a job reads whether a shrink
  finished (see :func:`search_statistics`).

Left outside this door: ``torch._ops.OpOverload`` / ``OpOverloadPacket`` / ``HigherOrderOperator``
read as attributes (the types of ``torch.ops`` entries; no public name), ``torch.ops._c10d_functional``
(an op namespace, not a module), and ``fusions/`` and ``faults/``: users of the tool (they may not
import ``pmverify._*``), which import Inductor's pass-writing API and fake tensors as any pass
project does. ``hypothesis.vendor.pretty`` is Hypothesis' documented printer.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
from collections.abc import Iterable, Iterator
from typing import Any

from hypothesis.database import ExampleDatabase

__all__ = [
    "CountedClock",
    "HYPOTHESIS_READ_AT",
    "TORCH_READ_AT",
    "InternalMoved",
    "KeyedDatabase",
    "SearchStatistics",
    "counted_clock",
    "current_choices",
    "from_functional",
    "functionalize_key_excluded",
    "finished_exit_reason",
    "internal",
    "keyed",
    "max_shrinking_seconds",
    "no_local_constants",
    "outside_dispatch_modes",
    "pin_seed",
    "python_dispatcher",
    "search_statistics",
    "tensor_metadata",
    "set_max_shrinking_seconds",
    "threaded_process_group",
    "very_slow_shrinking_reason",
    "without_slow_shrinking_warning",
]

#: The versions the internals below were read at.
HYPOTHESIS_READ_AT = "6.170.17"
TORCH_READ_AT = "2.13.0"


class InternalMoved(RuntimeError):
    """A private torch / Hypothesis internal pmverify relies on is not where it was read.

    ``internal``: its dotted name; ``why``: what pmverify needs it for. The message names both, the
    version it was read at and the version installed."""

    def __init__(self, internal: str, why: str, cause: BaseException) -> None:
        self.internal, self.why = internal, why
        dist = internal.split(".")[0]
        read_at = HYPOTHESIS_READ_AT if dist == "hypothesis" else TORCH_READ_AT
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            installed = "not installed"
        super().__init__(
            f"{internal} is gone from {dist} {installed} (pmverify read it at {read_at}; {why}): "
            f"{type(cause).__name__}: {cause}. Install {dist}=={read_at}, or report it to pmverify."
        )


def internal(module: str, attribute: str, why: str) -> Any:
    """``module.attribute``, imported now; :class:`InternalMoved` when it is not there."""
    try:
        parent = importlib.import_module(module)
        if hasattr(parent, attribute):
            return getattr(parent, attribute)
        if hasattr(parent, "__path__"):  # a submodule not imported yet
            return importlib.import_module(f"{module}.{attribute}")
        raise AttributeError(f"module {module!r} has no attribute {attribute!r}")
    except (ImportError, AttributeError) as exc:
        raise InternalMoved(f"{module}.{attribute}", why, exc) from None


_PATTERN_MATCHER = "passes under test are written in Inductor's pattern matcher and run by it"
_PASS_PROTOCOL = "a pass is installed in a compile as Inductor's custom graph pass"
_CONFIG = "compiles run with the custom pass slots and caches set"
_FAKE = "values and symbolic sizes are propagated with fake tensors, as Inductor does"
_FUNCTIONAL = "functionalization strategies run a program under FunctionalTensorMode, as AOTAutograd does"
_AUTO_FUNCTIONALIZED = "the oracles read auto_functionalized nodes as Inductor does"
_OP_ORIGIN = "a custom op's defining module is read from torch.library's records"
_PYTREE = "nested values (tuples of tensors, node metas) are mapped with torch's pytree"

#: name -> (dotted path, why): the private torch / Hypothesis names the rest of pmverify imports
#: from here; each is imported when read (:func:`__getattr__`). See the module docstring.
PRIVATE: dict[str, tuple[str, str]] = {
    # Inductor's pattern matcher: imported on first use only (it takes seconds)
    "pattern_matcher": ("torch._inductor.pattern_matcher", _PATTERN_MATCHER),
    "PatternMatcherPass": ("torch._inductor.pattern_matcher.PatternMatcherPass", _PATTERN_MATCHER),
    "PatternEntry": ("torch._inductor.pattern_matcher.PatternEntry", _PATTERN_MATCHER),
    "ReplacementPatternEntry": ("torch._inductor.pattern_matcher.ReplacementPatternEntry", _PATTERN_MATCHER),
    "GraphPatternEntry": ("torch._inductor.pattern_matcher.GraphPatternEntry", _PATTERN_MATCHER),
    "LoweringPatternEntry": ("torch._inductor.pattern_matcher.LoweringPatternEntry", _PATTERN_MATCHER),
    "fwd_only": ("torch._inductor.pattern_matcher.fwd_only", _PATTERN_MATCHER),
    "joint_fwd_bwd": ("torch._inductor.pattern_matcher.joint_fwd_bwd", _PATTERN_MATCHER),
    "is_match": ("torch._inductor.pattern_matcher.is_match", _PATTERN_MATCHER),
    "is_mutation_op": ("torch._inductor.pattern_matcher.is_mutation_op", _PATTERN_MATCHER),
    "stable_topological_sort": ("torch._inductor.pattern_matcher.stable_topological_sort", _PATTERN_MATCHER),
    "select_decomp_table": ("torch._inductor.decomposition.select_decomp_table", _PATTERN_MATCHER),
    "decompose_auto_functionalized": (
        "torch._inductor.fx_passes.post_grad.decompose_auto_functionalized",
        _AUTO_FUNCTIONALIZED,
    ),
    "CustomGraphPass": ("torch._inductor.custom_graph_pass.CustomGraphPass", _PASS_PROTOCOL),
    "get_custom_graph_passes": ("torch._inductor.custom_graph_pass.get_custom_graph_passes", _PASS_PROTOCOL),
    # compile settings
    "inductor_config": ("torch._inductor.config", _CONFIG),
    "dynamo_config": ("torch._dynamo.config", _CONFIG),
    "functorch_config": ("torch._functorch.config", _CONFIG),
    # fake and functional tensors, tracing
    "FakeTensor": ("torch._subclasses.fake_tensor.FakeTensor", _FAKE),
    "FakeTensorMode": ("torch._subclasses.fake_tensor.FakeTensorMode", _FAKE),
    "DynamicOutputShapeException": ("torch._subclasses.fake_tensor.DynamicOutputShapeException", _FAKE),
    "UnsupportedOperatorException": ("torch._subclasses.fake_tensor.UnsupportedOperatorException", _FAKE),
    "TracingContext": ("torch._guards.TracingContext", _FAKE),
    "tracing": ("torch._guards.tracing", _FAKE),
    "detect_fake_mode": ("torch._guards.detect_fake_mode", _FAKE),
    "ConstantSource": ("torch._dynamo.source.ConstantSource", _FAKE),
    "is_non_overlapping_and_dense_or_false": (
        "torch._prims_common.is_non_overlapping_and_dense_or_false",
        "a layout test that takes symbolic sizes",
    ),
    "FunctionalTensor": ("torch._subclasses.functional_tensor.FunctionalTensor", _FUNCTIONAL),
    "FunctionalTensorMode": ("torch._subclasses.functional_tensor.FunctionalTensorMode", _FUNCTIONAL),
    "get_mutable_args": ("torch._higher_order_ops.auto_functionalize.get_mutable_args", _AUTO_FUNCTIONALIZED),
    # where a custom op was defined
    "custom_ops": ("torch._library.custom_ops", _OP_ORIGIN),
    "simple_registry": ("torch._library.simple_registry", _OP_ORIGIN),
    # utilities
    "pytree": ("torch.utils._pytree", _PYTREE),
    "triton_utils": ("torch.utils._triton", "the gates answer Triton's device queries as on a CUDA machine"),
    # Hypothesis
    "statistics_collector": ("hypothesis.statistics.collector", "a job reads whether a shrink finished"),
}


def __getattr__(name: str) -> Any:
    """A name of :data:`PRIVATE`, read from its module now, at each read (not kept here: what a
    test or a user monkeypatches there is what pmverify reads, as a direct import would);
    :class:`InternalMoved` when it is gone."""
    found = _FOUND.get(name)
    if found is not None:
        return getattr(*found)
    try:
        path, why = PRIVATE[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module, _, attribute = path.rpartition(".")
    value = internal(module, attribute, why)
    _FOUND[name] = (importlib.import_module(module), attribute)
    return value


#: name -> (its module, its attribute name), once :func:`__getattr__` found it.
_FOUND: dict[str, tuple[Any, str]] = {}


def __dir__() -> list[str]:
    return sorted({*globals(), *PRIVATE})


# -- Hypothesis ------------------------------------------------------------------------------------


@contextlib.contextmanager
def no_local_constants() -> Iterator[None]:
    """Within the block, Hypothesis draws none of the constants it collects from the source of the
    "local" modules loaded so far (``hypothesis.internal.conjecture.providers._get_local_constants``:
    about 5 % of its numbers, from every module in ``sys.modules`` outside site-packages and the
    standard library, gathered anew whenever ``sys.modules`` grows). Those make a seeded search draw
    differently depending on what the process imported before it (a test alone or in the suite; an
    audit worker's first rewrite or its tenth), where pmverify's searches must depend on their seed
    only. Hypothesis' global constants (0, 1, inf, the float boundaries...) are still drawn. Nothing
    changes when the internal is not there (another Hypothesis version)."""
    try:
        from hypothesis.internal.conjecture import providers

        original, cache, empty = providers._get_local_constants, providers.CONSTANTS_CACHE.cache, providers.Constants()
    except (ImportError, AttributeError):
        yield
        return
    providers._get_local_constants = lambda: empty
    cache.clear()  # the permitted constants of each choice type, local ones included
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.clear()


def set_max_shrinking_seconds(seconds: float) -> None:
    """Bound Hypothesis' shrinking of the next failure to ``seconds`` (at least 1; Hypothesis times
    it from when shrinking starts). Raises :class:`InternalMoved` when the limit moved."""
    engine = internal("hypothesis.internal.conjecture", "engine", "a job bounds shrinking by its budget")
    if not hasattr(engine, "MAX_SHRINKING_SECONDS"):
        raise InternalMoved(
            "hypothesis.internal.conjecture.engine.MAX_SHRINKING_SECONDS",
            "a job bounds shrinking by its budget",
            AttributeError("no MAX_SHRINKING_SECONDS"),
        )
    engine.MAX_SHRINKING_SECONDS = max(1, int(seconds))


@contextlib.contextmanager
def max_shrinking_seconds(seconds: float | None) -> Iterator[float]:
    """Within the block, Hypothesis' shrinking of a search's failures stops after ``seconds`` (a
    float > 0) at most, timed from when shrinking starts: the limit in force (Hypothesis' own, 300 s,
    or a lower one a job set with :func:`set_max_shrinking_seconds`) holds where it is lower, and is
    restored after; None leaves it. Yields the limit in force within the block. Raises
    :class:`InternalMoved` when the limit moved."""
    why = "verify bounds shrinking by shrink_budget_s"
    engine = internal("hypothesis.internal.conjecture", "engine", why)
    if not hasattr(engine, "MAX_SHRINKING_SECONDS"):
        raise InternalMoved(
            "hypothesis.internal.conjecture.engine.MAX_SHRINKING_SECONDS",
            why,
            AttributeError("no MAX_SHRINKING_SECONDS"),
        )
    before = engine.MAX_SHRINKING_SECONDS
    if seconds is not None:
        engine.MAX_SHRINKING_SECONDS = min(before, seconds)  # read once, as a number, when shrinking starts
    try:
        yield engine.MAX_SHRINKING_SECONDS
    finally:
        engine.MAX_SHRINKING_SECONDS = before


class CountedClock:
    """What :func:`counted_clock` gives Hypothesis' engine as its ``time`` module: ``perf_counter()``
    and ``monotonic()`` read one second more at each read, or 10**9 more from the first read
    ``wall_limit_s`` seconds of real time after the block was entered (then ``cut`` is True: past
    any limit the engine set); the rest is the ``time`` module's."""

    def __init__(self, wall_limit_s: float | None) -> None:
        import time

        self._time = time
        self._deadline = None if wall_limit_s is None else time.monotonic() + wall_limit_s
        self.reads = 0
        self.cut = False

    def _read(self) -> float:
        if self._deadline is not None and self._time.monotonic() > self._deadline:
            self.cut = True
        self.reads += 1 if not self.cut else 10**9  # past any limit the engine set before
        return float(self.reads)

    perf_counter = monotonic = _read

    def __getattr__(self, name: str) -> Any:
        return getattr(self._time, name)


@contextlib.contextmanager
def counted_clock(wall_limit_s: float | None = None) -> Iterator[CountedClock]:
    """Within the block, Hypothesis' engine times itself by its own reads of its clock, one second
    each (:class:`CountedClock`), not by the wall clock: it reads it about once per test call while
    shrinking (its limit, ``MAX_SHRINKING_SECONDS``, becomes about that many shrinking calls) and
    once per case it generates after the first failure (it stops looking for more bugs after about
    10 such cases, not 10 s). A search then depends on its seed only, not on how fast this machine
    ran it. ``wall_limit_s``: a safety net; once that much real time has passed the clock jumps
    past every limit (shrinking stops at once, as at its limit) and the yielded clock's ``cut`` is
    True; None: no net. Raises :class:`InternalMoved` when the engine's clock moved."""
    why = "the audit times Hypothesis in test calls, so that a finding's shrunk case depends on its seed only"
    engine = internal("hypothesis.internal.conjecture", "engine", why)
    before = getattr(engine, "time", None)
    if before is None or not hasattr(before, "perf_counter") or not hasattr(before, "monotonic"):
        raise InternalMoved(
            "hypothesis.internal.conjecture.engine.time", why, AttributeError("no time module in the engine")
        )
    clock = CountedClock(wall_limit_s)
    engine.time = clock
    try:
        yield clock
    finally:
        engine.time = before


#: The start of the warning Hypothesis prints when its shrinking time limit cuts a shrink.
_SLOW_SHRINKING_WARNING = "WARNING: Hypothesis has spent more than five minutes working to shrink"


@contextlib.contextmanager
def without_slow_shrinking_warning() -> Iterator[None]:
    """Within the block, Hypothesis' warning that shrinking stopped after "more than five minutes"
    is not printed (``hypothesis.reporting``): under a lower limit (``verify``'s shrink budget) it is
    untrue, and the error says how far shrinking got instead. Everything else is reported as before."""
    from hypothesis.reporting import current_reporter, with_reporter

    outer = current_reporter()

    def filtered(text: Any) -> None:
        if not str(text).startswith(_SLOW_SHRINKING_WARNING):
            outer(text)

    with with_reporter(filtered):
        yield


class SearchStatistics:
    """What :func:`search_statistics` read from the statistics Hypothesis reports of a search:
    ``stopped`` its ``"stopped-because"`` (see :func:`finished_exit_reason`,
    :func:`very_slow_shrinking_reason`; None when it reported none), ``discarded`` the draws the
    strategy rejected (``assume``, ``filter``: test cases of status ``invalid`` or ``overrun``)
    outside shrinking, ``drawn`` all the test cases outside shrinking."""

    def __init__(self) -> None:
        self.stopped: str | None = None
        self.discarded = 0
        self.drawn = 0

    def read(self, statistics: dict[str, Any]) -> None:
        self.stopped = statistics.get("stopped-because")
        cases = [
            case
            for phase, stats in statistics.items()
            if phase.endswith("-phase") and phase != "shrink-phase" and isinstance(stats, dict)
            for case in stats.get("test-cases", ())
        ]
        self.drawn = len(cases)
        self.discarded = sum(case.get("status") in ("invalid", "overrun") for case in cases)


@contextlib.contextmanager
def search_statistics() -> Iterator[SearchStatistics]:
    """Yield a :class:`SearchStatistics` that holds, once the block's Hypothesis test has run, what
    its statistics say. A collector already set (a job's, the pytest plugin's) still gets them."""
    from hypothesis.statistics import collector

    found = SearchStatistics()
    outer = collector.value

    def note(statistics: dict[str, Any]) -> None:
        found.read(statistics)
        if outer is not None:
            outer(statistics)

    with collector.with_value(note):
        yield found


def very_slow_shrinking_reason() -> str:
    """The ``"stopped-because"`` value of Hypothesis' statistics when its shrinking time limit cut
    the shrinking. Raises :class:`InternalMoved`."""
    reason = internal("hypothesis.internal.conjecture.engine", "ExitReason", "verify tells a cut shrink")
    return reason.very_slow_shrinking.value


def finished_exit_reason() -> str:
    """The ``"stopped-because"`` value of Hypothesis' statistics when its engine ended with nothing
    left to do (its shrinker at its fixed point), not at a limit. Raises :class:`InternalMoved`."""
    reason = internal("hypothesis.internal.conjecture.engine", "ExitReason", "a job tells a finished shrink")
    return reason.finished.value


def current_choices() -> bytes | None:
    """The Hypothesis choice sequence of the case being run, as the example database stores it;
    None where this Hypothesis does not expose it (then a case that kills the worker is reported
    without a reproducer)."""
    try:
        from hypothesis.control import current_build_context
        from hypothesis.database import choices_to_bytes

        return choices_to_bytes(current_build_context().data.choices)
    except (ImportError, AttributeError):  # pragma: no cover - Hypothesis internals moved
        return None


def pin_seed(test: Any, seed: int) -> bool:
    """Seed the Hypothesis test ``test`` (a ``@given`` function) with ``seed`` unless it has a seed
    of its own, keeping its settings and example database (``hypothesis.seed`` would set
    ``database=None``); return whether it was seeded."""
    if getattr(test, "_hypothesis_internal_use_seed", None) is not None:
        return False
    test._hypothesis_internal_use_seed = seed
    return True


class KeyedDatabase(ExampleDatabase):
    """The example database ``inner`` seen by one Hypothesis test under the key ``key``: whatever key
    Hypothesis derives for the test (from its source: it changes with every edit of the function
    and with the Hypothesis release), its examples are kept under ``key``, and its sub-keys
    (``<test key>.secondary``, ``<test key>.pareto``) under ``key.secondary``, ``key.pareto``.
    A test that runs on this database must be the only one that does.

    Why: pmverify names a search by what it searches (the pass and the strategy, see
    ``pmverify._engine.verify.database_key``), so that every search of the same pass on the same strategy
    (a test, ``pmverify fuzz``, another machine) replays the same failures. The one assumption on
    Hypothesis is the layout of its sub-keys (``b".".join((test key, name))``, read at
    :data:`HYPOTHESIS_READ_AT`)."""

    SUB_KEYS = (b"secondary", b"pareto")

    def __init__(self, inner: ExampleDatabase, key: bytes) -> None:
        super().__init__()
        if not isinstance(inner, ExampleDatabase):
            raise TypeError(f"inner={inner!r} must be a hypothesis.database.ExampleDatabase")
        if not isinstance(key, bytes) or not key:
            raise TypeError(f"key={key!r} must be non-empty bytes")
        self.inner, self.key = inner, key

    def __repr__(self) -> str:
        return f"KeyedDatabase({self.inner!r}, {self.key!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyedDatabase) and (self.inner, self.key) == (other.inner, other.key)

    def __hash__(self) -> int:
        return hash((KeyedDatabase, self.key))

    def mapped(self, key: bytes) -> bytes:
        """The key of ``inner`` that the test's ``key`` stands for."""
        head, dot, tail = key.rpartition(b".")
        return b".".join((self.key, tail)) if dot and tail in self.SUB_KEYS else self.key

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.mapped(key), value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(self.mapped(key))

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.mapped(key), value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.mapped(src), self.mapped(dest), value)


def keyed(database: ExampleDatabase | None, key: bytes) -> ExampleDatabase | None:
    """``database`` under ``key`` (:class:`KeyedDatabase`), or None for no database."""
    return None if database is None else KeyedDatabase(database, key)


# -- torch -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def threaded_process_group() -> Iterator[Any]:
    """Install torch's threaded process group (``multi_threaded_pg._install_threaded_pg``) with the
    C++ group registry isolated per thread (``_set_thread_isolation_mode``: else every rank
    registers its default group under the same name and resolves the last rank's group) for the
    duration of the block; yields its ``ProcessLocalGroup`` class. Raises :class:`InternalMoved`."""
    why = "tensor-parallel cases run real collectives in one process"
    mtpg = internal("torch.testing._internal.distributed", "multi_threaded_pg", why)
    isolate = internal("torch._C._distributed_c10d", "_set_thread_isolation_mode", why)
    install, uninstall = mtpg._install_threaded_pg, mtpg._uninstall_threaded_pg
    install()
    isolate(True)
    try:
        yield mtpg.ProcessLocalGroup
    finally:
        isolate(False)
        uninstall()


def outside_dispatch_modes() -> Any:
    """A context manager leaving every active torch dispatch mode (fake, functional...) for its
    block. Raises :class:`InternalMoved`."""
    why = "a recorded example input is made as a plain tensor while tracing"
    return internal("torch.utils._python_dispatch", "_disable_current_modes", why)()


def tensor_metadata(value: Any) -> Any:
    """``value``'s ``TensorMetadata``, what ``make_fx`` stores as a node's ``meta["tensor_meta"]``.
    Raises :class:`InternalMoved`."""
    why = "a drawn graph's nodes carry tensor_meta, as the graphs Inductor's passes see do"
    return internal("torch.fx.passes.shape_prop", "_extract_tensor_metadata", why)(value)


def python_dispatcher() -> Any:
    """A context manager enabling torch's Python dispatcher for its block, as Inductor's
    ``compile_fx`` does around symbolic tracing. Raises :class:`InternalMoved`."""
    why = "symbolic shapes are traced and propagated as compile_fx does"
    return internal("torch._dispatch.python", "enable_python_dispatcher", why)()


def functionalize_key_excluded() -> Any:
    """A guard excluding the ``Functionalize`` dispatch key for its block, so that a fresh
    ``FunctionalTensorMode`` inside does the functionalization. Raises :class:`InternalMoved`."""
    import torch

    guard = internal("torch._C", "_ExcludeDispatchKeyGuard", "functionalization strategies run AOTAutograd's way")
    return guard(torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize))


def from_functional(tensor: Any) -> Any:
    """The plain tensor a ``FunctionalTensor`` holds, its pending mutations applied. Raises
    :class:`InternalMoved`."""

    why = "functionalization strategies read back a functionalized program's values"
    internal("torch", "_sync", why)(tensor)
    return internal("torch", "_from_functional_tensor", why)(tensor.elem)


def has_fake_kernel(op: Any) -> bool:
    """Whether ``op`` (an ``OpOverload``) has a fake kernel: one registered with
    ``torch.library.register_fake`` (held in ``torch._library.simple_registry``) or a ``Meta``
    kernel. Raises :class:`InternalMoved`."""
    import torch

    why = "with_mutating_custom_ops(ops=) takes an op only when fake tensors can trace it"
    registry = internal("torch._library.simple_registry", "singleton", why)
    if registry.find(op._name).fake_impl.kernel is not None:
        return True
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Meta"))


def can_auto_functionalize(op: Any) -> bool:
    """Whether functionalization turns a call of ``op`` into ``auto_functionalized``: a mutable
    op whose schema torch's ``auto_functionalize`` supports. Raises :class:`InternalMoved`."""
    why = "with_mutating_custom_ops(ops=) takes only ops functionalization wraps in auto_functionalized"
    return bool(internal("torch._higher_order_ops.auto_functionalize", "can_auto_functionalize", why)(op))
