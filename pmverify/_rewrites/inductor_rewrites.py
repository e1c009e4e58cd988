"""``record_inductor``: every entry Inductor's own pattern passes hold (rewrites, graph and lowering
handlers), recorded in a clean state.

Inductor registers most of its entries lazily: ``joint_graph.lazy_init`` (``pad_mm``, ``fuse_attention``,
``misc_patterns``), ``post_grad.lazy_init`` and ``freezing_patterns.lazy_init`` each run once per
process (``init_once_fakemode`` wraps them in ``functools.cache``, and so are the initialisers
they call), inside a ``FakeTensorMode``, registering into module-level ``PatternMatcherPass``
objects. :func:`record_inductor` runs them again in a sandbox: Inductor's pattern passes emptied,
its ``fx_passes`` caches swapped for fresh ones, its module-level registries saved; all is put
back afterwards, so the rewrites are recorded as a fresh process registers them (duplicates
skipped against each other only) and Inductor's own state is what it was, initialised or not (a
cached initialiser that another module imported is swapped there for the same fresh cache). The
entries its modules register when imported are read from the passes before the sandbox, less
those the initialisers register again (:func:`pmverify._registry.inductor_passes.entry_key`).

Why not record the lazy initialisers as they run: they run once a process, and a process that
compiled something has run them already.
"""

from __future__ import annotations

import collections
import contextlib
import difflib
import functools
import gc
import importlib
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

from .._registry.entries import KINDS, RecordedEntry
from .._registry.inductor_passes import (
    bound_passes,
    entry_key,
    entry_labels,
    held_entries,
    import_pass_modules,
    kind_of,
    pass_config,
)
from .._registry.record import RecordedRewrite, record_patterns

__all__ = ["record_inductor", "inductor_entry", "inductor_rewrite", "trace_name", "unique_labels"]

_PASSES = "torch._inductor.fx_passes"
#: The initialisers record_inductor runs, in Inductor's order (module, function).
_INITIALISERS = (("joint_graph", "lazy_init"), ("post_grad", "lazy_init"), ("freezing_patterns", "lazy_init"))
#: What the initialisers import on their first run (read at torch 2.13), imported before the
#: sandbox so that a module's own import-time registrations are never taken for the sandbox's.
_LAZY_IMPORTS = (
    "pad_mm",
    "fuse_attention",
    "misc_patterns",
    "binary_folding",
    "mkldnn_fusion",
    "quantization",
    "decompose_mem_bound_mm",
)
#: The attributes of a ``PatternMatcherPass`` that registering fills (read at torch 2.13).
_PASS_STATE = ("patterns", "seen_patterns")


def _modules() -> list[types.ModuleType]:
    """Inductor's pattern matcher and its pattern-pass modules, as loaded now."""
    return [
        module
        for name, module in list(sys.modules.items())
        if module is not None
        and (name == "torch._inductor.pattern_matcher" or name == _PASSES or name.startswith(_PASSES + "."))
    ]


def _pattern_passes() -> list[Any]:
    from .._compat import PatternMatcherPass

    # type(), not isinstance(): isinstance on some of torch's objects (reduce_op) warns
    return [obj for obj in gc.get_objects() if issubclass(type(obj), PatternMatcherPass)]


def _is_registry(value: Any) -> bool:
    return isinstance(value, (list, dict, collections.abc.MutableSet))


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else list(value)


def _same(value: Any, saved: Any) -> bool:
    """Whether a registry holds, by identity, what was saved of it."""
    if len(value) != len(saved):
        return False
    if isinstance(value, dict):
        return all(key in value and value[key] is item for key, item in saved.items())
    if isinstance(value, list):
        return all(a is b for a, b in zip(value, saved, strict=True))
    return all(item in value for item in saved)


def _put_back(value: Any, saved: Any) -> None:
    if isinstance(value, list):
        value[:] = saved
    elif isinstance(value, dict):
        value.clear()
        value.update(saved)
    else:
        value.clear()
        for item in saved:
            value.add(item)


def _fresh_cache(wrapper: Any) -> Any:
    """A new, empty cache of the function ``wrapper`` caches (with its name and module)."""
    parameters = wrapper.cache_parameters()
    return functools.lru_cache(maxsize=parameters["maxsize"], typed=parameters["typed"])(wrapper.__wrapped__)


@contextlib.contextmanager
def _sandbox() -> Iterator[None]:
    """Run the block as if Inductor's pattern passes had never been initialised; put Inductor's
    state back on exit (also on an exception): every ``PatternMatcherPass``'s registrations, each
    module-level binding, list, dict and set of the pattern matcher and of ``fx_passes`` (the
    ``functools`` caches of the initialisers are swapped for fresh ones inside), and a pattern pass
    made inside the block is emptied (so that Inductor's own later initialisation, which made it
    again, registers into an empty one)."""
    modules = _modules()
    bindings = {module: dict(vars(module)) for module in modules}
    registries = {
        (module, key): _copy(value)
        for module, namespace in bindings.items()
        for key, value in namespace.items()
        if _is_registry(value) and not key.startswith("__")
    }
    passes = _pattern_passes()
    states = {id(p): (p, {name: getattr(p, name) for name in _PASS_STATE}) for p in passes}
    names = {module.__name__ for module in modules}
    fresh: dict[int, Any] = {}  # a cache imported by another module is swapped there for the same fresh one
    try:
        for module, namespace in bindings.items():
            for key, value in namespace.items():
                if isinstance(value, functools._lru_cache_wrapper) and getattr(value, "__module__", None) in names:
                    if id(value) not in fresh:
                        fresh[id(value)] = _fresh_cache(value)
                    setattr(module, key, fresh[id(value)])
        for p, _ in states.values():
            for name in _PASS_STATE:
                setattr(p, name, collections.defaultdict(list))
        yield
    finally:
        for p in _pattern_passes():
            if id(p) not in states:
                for name in _PASS_STATE:
                    setattr(p, name, collections.defaultdict(list))
        for p, state in states.values():
            for name, value in state.items():
                setattr(p, name, value)
        for (module, key), saved in registries.items():
            value = getattr(module, key, None)
            if value is bindings[module][key] and not _same(value, saved):
                _put_back(value, saved)
        for module, namespace in bindings.items():
            current = vars(module)
            for key, value in namespace.items():
                if current.get(key, value) is not value and not isinstance(value, types.ModuleType):
                    setattr(module, key, value)


def record_inductor(kinds: Sequence[str] = KINDS) -> list[RecordedEntry]:
    """Return every entry of the ``kinds`` (default all: ``"replacement"``, ``"graph"``,
    ``"lowering"``; :data:`pmverify._registry.entries.KINDS`) that Inductor's own pattern passes hold at the
    installed torch, as :class:`~pmverify._registry.entries.RecordedEntry`, kind by kind in that order:

    - ``"replacement"``: each ``register_replacement`` call of ``joint_graph.lazy_init`` (``pad_mm``,
      ``fuse_attention``, with its pre-serialized patterns, ``misc_patterns``), ``post_grad.lazy_init``
      and ``freezing_patterns.lazy_init``, in registration order (the same every run): ``rewrite``
      its :class:`RecordedRewrite` (its fake example inputs re-created as plain tensors), ``entry``
      the ``ReplacementPatternEntry`` it registered, None and ``duplicate`` where Inductor skipped it
      as a duplicate (it is registered nowhere);
    - ``"graph"`` / ``"lowering"``: each ``GraphPatternEntry`` / ``LoweringPatternEntry`` of a
      ``PatternMatcherPass`` bound at module level in ``torch._inductor.fx_passes`` (those its modules
      register when imported, as post_grad's lowerings and split_cat's pre-grad passes, and those of
      the lazy initialisers), each once, pass by pass (:mod:`pmverify._registry.inductor_passes`); named by
      its handler (``module``, ``name``: ``("binary_folding", "folded_op[add.Tensor]")``). Inductor
      skips no graph or lowering entry: none is a ``duplicate``.

    Each names its pass (``pass_name``: ``"post_grad.pass_patterns[2]"``), the pass's ``(pass_name,
    subsystem)`` and the config options that enable the pass. The initialisers run again, in a
    sandbox, as a fresh process runs them: whether or not Inductor was initialised in this process,
    the same entries are recorded and Inductor's own pattern passes, caches and registries are left
    as they were (see :mod:`pmverify._rewrites.inductor_rewrites`). They run outside inference mode and with
    grad enabled (where Inductor skips its training rewrites). Every module of
    ``torch._inductor.fx_passes`` is imported first. Names do not depend on ``kinds``. Takes a few
    seconds; not thread-safe (as :func:`record_patterns`). Raises ``InvalidArgument`` for kinds not
    in :data:`~pmverify._registry.entries.KINDS`.

    Example::

        for entry in pmverify.record_inductor(kinds=("graph",)):
            print(entry.pass_name, entry.label)
    """
    from .._validation import validate_choices

    chosen = validate_choices("kinds", kinds, KINDS)
    return [entry for entry in _record_all() if entry.kind in chosen]


def _record_all() -> list[RecordedEntry]:
    """Every entry of every kind, kind by kind (see :func:`record_inductor`)."""
    import torch

    for name in ("joint_graph", "post_grad", "freezing_patterns", *_LAZY_IMPORTS):
        with contextlib.suppress(ImportError):  # mkldnn_fusion needs a build with mkldnn
            importlib.import_module(f"{_PASSES}.{name}")
    import_pass_modules()
    saved = held_entries(bound_passes())
    with torch.inference_mode(False), torch.enable_grad(), _sandbox(), record_patterns() as rewrites:
        for module, function in _INITIALISERS:
            getattr(sys.modules[f"{_PASSES}.{module}"], function)()
        passes = bound_passes()
        fresh = held_entries(passes)
    replacements = _replacements(list(rewrites), fresh, passes)
    taken = {(entry.module, entry.name) for entry in replacements}
    return replacements + _handled(saved, fresh, [name for name, _ in passes], taken)


def _replacements(
    rewrites: list[RecordedRewrite], fresh: list[tuple[str, Any, Any]], passes: list[tuple[str, Any]]
) -> list[RecordedEntry]:
    """The recorded ``rewrites`` as entries: each with the ``ReplacementPatternEntry`` that holds
    the pattern it returned (None for a duplicate) and the pass it was registered into."""
    by_pattern = {id(entry.pattern): (name, p, entry) for name, p, entry in fresh if kind_of(entry) == "replacement"}
    names = {id(p): name for name, p in passes}
    entries = []
    for (module, name), rewrite in zip(unique_labels(rewrites), rewrites, strict=True):
        held = by_pattern.get(id(rewrite.result)) if rewrite.result is not False else None
        if held is not None:
            pass_name, p, entry = held
        else:
            targets = rewrite.pass_dicts if isinstance(rewrite.pass_dicts, (list, tuple)) else [rewrite.pass_dicts]
            p, entry = targets[0], None
            pass_name = names.get(id(p), "?")
        entries.append(
            RecordedEntry(
                "replacement",
                entry,
                pass_name,
                module,
                name,
                config=_config(pass_name),
                duplicate=rewrite.duplicate,
                rewrite=rewrite,
                torch_pass=(getattr(p, "pass_name", None), getattr(p, "subsystem", None)),
            )
        )
    return entries


def _handled(
    saved: list[tuple[str, Any, Any]], fresh: list[tuple[str, Any, Any]], order: list[str], taken: set[tuple[str, str]]
) -> list[RecordedEntry]:
    """The graph and lowering entries, kind by kind, pass by pass in ``order``: in each pass those
    registered at import (held before the sandbox, less those the initialisers register again, by
    :func:`entry_key`, when this process had run them), then the initialisers'; labelled apart
    from the replacements' labels ``taken``."""
    fresh = [row for row in fresh if kind_of(row[2]) != "replacement"]
    again = {entry_key(entry) for _, _, entry in fresh}
    kept = [row for row in saved if kind_of(row[2]) != "replacement" and entry_key(row[2]) not in again]
    rank = {name: i for i, name in enumerate(order)}
    rows = sorted(kept + fresh, key=lambda row: rank.get(row[0], len(rank)))  # stable: saved first in a pass
    labels = entry_labels([entry for _, _, entry in rows], taken)
    entries = [
        RecordedEntry(
            kind_of(entry),
            entry,
            pass_name,
            module,
            name,
            config=_config(pass_name),
            torch_pass=(p.pass_name, p.subsystem),
        )
        for (pass_name, p, entry), (module, name) in zip(rows, labels, strict=True)
    ]
    return [entry for kind in KINDS for entry in entries if entry.kind == kind]


def _config(pass_name: str) -> tuple[str, ...]:
    try:
        return pass_config(pass_name)
    except LookupError:
        return ("?",)


def trace_name(trace_fn: Any) -> str:
    """The name of a rewrite's trace function (``fwd_only``, ``joint_fwd_bwd``; a
    ``functools.partial``'s function's; a callable object's class's)."""
    while isinstance(trace_fn, functools.partial):
        trace_fn = trace_fn.func
    return getattr(trace_fn, "__name__", None) or type(trace_fn).__name__


def _flavour(rewrite: RecordedRewrite) -> str:
    """``dtype, trace``: the dtypes of the example inputs (distinct, in order, ``/``-joined; left
    out when no input is a tensor) and the trace function's name, as in ``bfloat16, fwd_only``."""
    import torch

    dtypes = dict.fromkeys(
        str(value.dtype).removeprefix("torch.") for value in rewrite.example_inputs if isinstance(value, torch.Tensor)
    )
    trace = trace_name(rewrite.trace_fn)
    return f"{'/'.join(dtypes)}, {trace}" if dtypes else trace


def unique_labels(rewrites: list[RecordedRewrite]) -> list[tuple[str, str]]:
    """``(module, name)`` of each rewrite, so that each pair names one rewrite. A name that one
    rewrite of its module has is kept as it is; a name that several share (a pass registering one
    search function per dtype or trace) gets their dtypes and trace function, ``gelu_mul[bfloat16,
    fwd_only]`` (see :func:`_flavour`), and where those are shared too, a number in recording
    order among the rewrites that share them: ``gelu_mul[float32, fwd_only]#2``. A label depends
    only on the rewrites of its own name, so that registering another rewrite leaves it as it was."""
    by_name = collections.Counter((r.module, r.name) for r in rewrites)
    flavours = [_flavour(r) if by_name[r.module, r.name] > 1 else "" for r in rewrites]
    by_flavour = collections.Counter((r.module, r.name, f) for r, f in zip(rewrites, flavours, strict=True))
    seen: collections.Counter[tuple[str, str, str]] = collections.Counter()
    labels = []
    for rewrite, flavour in zip(rewrites, flavours, strict=True):
        key = (rewrite.module, rewrite.name, flavour)
        seen[key] += 1
        name = f"{rewrite.name}[{flavour}]" if flavour else rewrite.name
        labels.append((rewrite.module, f"{name}#{seen[key]}" if by_flavour[key] > 1 else name))
    return labels


@functools.cache
def _recorded() -> dict[tuple[str, str], RecordedEntry]:
    return {(entry.module, entry.name): entry for entry in record_inductor()}


def _missing(recorded: dict[tuple[str, str], Any], module: str, name: str, what: str) -> LookupError:
    names = [n for m, n in recorded if m == module]
    if names:
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.0)
        return LookupError(
            f"Inductor's {module} registers no {what} {name!r} at this torch; the closest of its {len(names)}: "
            f"{', '.join(close)}"
        )
    modules = sorted({m for m, _ in recorded})
    return LookupError(
        f"module={module!r} is not one of Inductor's pattern modules at this torch: {', '.join(modules)}"
    )


def inductor_rewrite(module: str, name: str) -> RecordedRewrite:
    """Return Inductor's rewrite ``name`` of pass module ``module`` (as :attr:`RecordedRewrite.module`
    and :attr:`RecordedRewrite.name` say, e.g. ``inductor_rewrite("fuse_attention",
    "_sfdp_pattern_1")``), from :func:`record_inductor`, recorded once a process: the same object
    every call (its :meth:`~RecordedRewrite.pattern_pass` is built once). What ``pmverify audit``'s
    reproducers rebuild their pass with::

        PASS = pmverify.inductor_rewrite("fuse_attention", "_sfdp_pattern_1").pattern_pass()

    Raises ``LookupError`` naming the closest rewrites of ``module`` (or the modules) when there is
    no such rewrite at the installed torch."""
    rewrites = {key: entry for key, entry in _recorded().items() if entry.kind == "replacement"}
    entry = rewrites.get((module, name))
    if entry is None:
        raise _missing(rewrites, module, name, "rewrite")
    return entry.rewrite


def inductor_entry(module: str, name: str) -> RecordedEntry:
    """Return Inductor's pattern entry ``name`` of module ``module``, of any kind (as
    :attr:`RecordedEntry.module` and :attr:`RecordedEntry.name` say, e.g. ``inductor_entry("joint_graph",
    "pointless_view")``), from :func:`record_inductor`, recorded once a process: the same object every
    call (its :meth:`~RecordedEntry.pattern_pass` is built once). What ``pmverify audit``'s
    reproducers of graph entries rebuild their pass with::

        PASS = pmverify.inductor_entry("joint_graph", "pointless_view").pattern_pass()

    Raises ``LookupError`` naming the closest entries of ``module`` (or the modules) when there is
    no such entry at the installed torch."""
    recorded = _recorded()
    entry = recorded.get((module, name))
    if entry is None:
        raise _missing(recorded, module, name, "pattern entry")
    return entry
