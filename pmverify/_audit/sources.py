"""What ``pmverify audit`` audits: the pattern entries of a source, recorded in any process.

A source is named by a string, resolved in the audit's own process (to list the entries and refuse
bad usage) and again in each worker (to get the very entry objects back), so that only strings
cross the process boundary:

- ``inductor``: every entry Inductor's own pattern passes hold (:func:`pmverify.record_inductor`);
- ``MODULE``: a user's pass module, its entries recorded while it is imported;
- ``MODULE:ATTR``: a callable (dotted attribute) that builds the pass, its entries recorded while it
  runs (a pass that registers lazily, on first use, registers nothing at import).

An entry is a :class:`~pmverify._registry.entries.RecordedEntry` of a kind (``replacement``: a
``register_replacement`` call, recorded with :func:`pmverify.record_patterns`; ``graph``,
``lowering``: a ``register_graph_pattern`` / ``register_lowering_pattern`` handler, recorded as it
registers). Within a source, an entry is named by ``(module, name)``, unique across kinds: a
rewrite by :attr:`RecordedRewrite.module` and its name, a name several rewrites of the module share
with their example inputs' dtypes and trace function, ``gelu_mul[bfloat16, fwd_only]``, and a
number where those are shared too, ``gelu_mul[float32, fwd_only]#2``
(:func:`pmverify._rewrites.inductor_rewrites.unique_labels`); a handler by its module and qualified name,
with its pattern's root ops and a number where it is shared
(:func:`pmverify._registry.inductor_passes.entry_labels`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from .._registry.entries import KINDS, RecordedEntry
from .._registry.inductor_passes import entry_labels, handler_name, import_pass_modules, kind_of
from .._registry.record import RecordedRewrite, record_patterns
from .._rewrites.inductor_rewrites import record_inductor, trace_name, unique_labels
from ..errors import SourceError

__all__ = [
    "INDUCTOR",
    "SourceError",
    "AuditedRewrite",
    "record_entries",
    "record_source",
    "listing",
    "locate",
    "as_entries",
]

INDUCTOR = "inductor"


@dataclasses.dataclass(frozen=True)
class AuditedRewrite:
    """One entry of a source, as the audit names it: ``source`` (as given), ``module``, ``name``
    (with dtypes and trace when shared), ``trace_fn`` (a rewrite's trace function's name; ``""``
    for a handler), ``duplicate`` (:attr:`RecordedEntry.duplicate`), ``kind`` (one of
    :data:`~pmverify._registry.entries.KINDS`), ``pass_name`` (:attr:`RecordedEntry.pass_name`), ``handler``
    (a handler's ``module.qualname``; None for a rewrite)."""

    source: str
    module: str
    name: str
    trace_fn: str
    duplicate: bool
    kind: str = "replacement"
    pass_name: str | None = None
    handler: str | None = None

    @property
    def label(self) -> str:
        """``module/name``, what ``--rewrite`` globs are matched against (besides the name)."""
        return f"{self.module}/{self.name}"


def _import_module(name: str, spec: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any import failure of user code is bad usage
        raise SourceError(f"{spec!r}: cannot import {name}: {type(exc).__name__}: {exc}") from None


def _builder(spec: str) -> Any:
    """The callable ``MODULE:ATTR`` names (the module imported outside any recording)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SourceError(f"{spec!r} must be MODULE or MODULE:ATTR (e.g. mypkg.passes:build_pass)")
    value = _import_module(module_name, spec)
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise SourceError(f"{spec!r}: {module_name} has no attribute {attribute}") from None
    if not callable(value):
        raise SourceError(f"{spec!r} is {type(value).__name__}, not a callable that builds the pass")
    return value


def record_source(spec: str, kinds: Sequence[str] = KINDS) -> list[RecordedEntry]:
    """The entries of the ``kinds`` of source ``spec``, kind by kind, in registration order within
    a kind; their names do not depend on ``kinds``. A ``MODULE`` already imported in this process is
    imported again (``importlib.reload``: its code runs again, its module-level pass objects made
    anew). Raises :class:`SourceError` when it cannot be imported or run, or records no entry of
    those kinds."""
    if spec == INDUCTOR:
        return record_inductor(kinds=tuple(kinds))
    import_pass_modules()  # Inductor's own entries registered at import are not the source's
    if ":" in spec:
        build = _builder(spec)
        try:
            with record_patterns() as rewrites, _registered_entries() as handled:
                build()
        except Exception as exc:  # noqa: BLE001 - user code
            raise SourceError(f"{spec!r}: calling it raised {type(exc).__name__}: {exc}") from None
        what = "while it ran"
    else:
        loaded = sys.modules.get(spec)
        try:
            with record_patterns() as rewrites, _registered_entries() as handled:
                if loaded is not None:
                    importlib.reload(loaded)
                else:
                    importlib.import_module(spec)
        except Exception as exc:  # noqa: BLE001 - any import failure of user code is bad usage
            raise SourceError(f"{spec!r}: cannot import {spec}: {type(exc).__name__}: {exc}") from None
        what = "while it was imported"
    entries = [entry for entry in _user_entries(spec, list(rewrites), handled) if entry.kind in kinds]
    if not entries:
        hint = "" if ":" in spec else ": if it registers lazily, give MODULE:ATTR of a function that builds the pass"
        calls = " or ".join(_CALLS[kind] for kind in KINDS if kind in kinds)
        raise SourceError(f"{spec!r}: no {calls} call was recorded {what}{hint}")
    return entries


#: What registers an entry of each kind.
_CALLS = {
    "replacement": "register_replacement",
    "graph": "register_graph_pattern",
    "lowering": "register_lowering_pattern",
}


@contextlib.contextmanager
def _registered_entries() -> Iterator[list[tuple[Any, Any]]]:
    """Record every graph and lowering entry registered while the block runs (``PatternEntry.register``,
    which ``register_graph_pattern`` and ``register_lowering_pattern`` call): ``(entry, pass)`` in
    registration order, each entry once (the first pass it was registered into); Inductor's own
    (a handler of ``torch._inductor``, registered by a module of Inductor imported in the block)
    left out."""
    from .._compat import PatternEntry, PatternMatcherPass, ReplacementPatternEntry

    rows: list[tuple[Any, Any]] = []
    seen: set[int] = set()
    original = PatternEntry.register

    def register(self: Any, pass_dicts: Any, target: Any = None, prepend: bool = False) -> None:
        handler = getattr(self, "handler", None)
        inductors = (getattr(handler, "__module__", None) or "").startswith("torch._inductor.")
        if not isinstance(self, ReplacementPatternEntry) and not inductors and id(self) not in seen:
            seen.add(id(self))
            targets = pass_dicts if isinstance(pass_dicts, (list, tuple)) else [pass_dicts]
            rows.append((self, next((p for p in targets if isinstance(p, PatternMatcherPass)), None)))
        return original(self, pass_dicts, target, prepend)

    PatternEntry.register = register
    try:
        yield rows
    finally:
        PatternEntry.register = original


def _pass_named(spec: str, p: Any) -> str:
    """The pass ``p`` of source ``spec`` as Python names it (``mymod.PASS``, ``mymod.PASSES[1]``),
    else its ``pass_name``, else ``"?"``."""
    module_name = spec.partition(":")[0]
    module = sys.modules.get(module_name)
    for attribute, value in list(vars(module).items()) if module is not None else []:
        if value is p:
            return f"{module_name}.{attribute}"
        if type(value) in (list, tuple):
            for i, item in enumerate(value):
                if item is p:
                    return f"{module_name}.{attribute}[{i}]"
    return getattr(p, "pass_name", None) or "?"


def _torch_pass(p: Any) -> tuple[Any, Any]:
    return (getattr(p, "pass_name", None), getattr(p, "subsystem", None))


def _held(rewrite: RecordedRewrite) -> tuple[Any, Any]:
    """The pass a rewrite was registered into and the ``ReplacementPatternEntry`` holding the
    pattern it registered (None when it registered none)."""
    targets = rewrite.pass_dicts if isinstance(rewrite.pass_dicts, (list, tuple)) else [rewrite.pass_dicts]
    first = targets[0] if targets else None
    if rewrite.result is None or rewrite.result is False:
        return first, None
    for p in targets:
        for entries in list(getattr(p, "patterns", {}).values()):
            for entry in entries:
                if entry.pattern is rewrite.result:
                    return p, entry
    return first, None


def as_entries(spec: str, rewrites: list[RecordedRewrite]) -> list[RecordedEntry]:
    """A source's recorded ``rewrites`` as replacement entries, named as the audit names them."""
    entries = []
    for (module, name), rewrite in zip(unique_labels(rewrites), rewrites, strict=True):
        p, entry = _held(rewrite)
        entries.append(
            RecordedEntry(
                "replacement",
                entry,
                _pass_named(spec, p),
                module,
                name,
                duplicate=rewrite.duplicate,
                rewrite=rewrite,
                torch_pass=_torch_pass(p),
            )
        )
    return entries


def _user_entries(spec: str, rewrites: list[RecordedRewrite], handled: list[tuple[Any, Any]]) -> list[RecordedEntry]:
    replacements = as_entries(spec, rewrites)
    taken = {(entry.module, entry.name) for entry in replacements}
    labels = entry_labels([entry for entry, _ in handled], taken)
    others = [
        RecordedEntry(kind_of(entry), entry, _pass_named(spec, p), module, name, torch_pass=_torch_pass(p))
        for (entry, p), (module, name) in zip(handled, labels, strict=True)
    ]
    return replacements + [entry for kind in KINDS for entry in others if entry.kind == kind]


def _entries(spec: str, recorded: list[Any]) -> list[RecordedEntry]:
    """``recorded`` as entries: a list of :class:`RecordedRewrite` (a source's rewrites alone) is
    named as :func:`as_entries` names it."""
    if recorded and all(isinstance(item, RecordedRewrite) for item in recorded):
        return as_entries(spec, recorded)
    return recorded


def _handler_path(entry: RecordedEntry) -> str | None:
    handler = entry.handler
    if handler is None:
        return None
    module, name = handler_name(entry.entry)
    full = getattr(handler, "__module__", None) or module
    return f"{full}.{name}"


def listing(spec: str, recorded: list[Any]) -> list[AuditedRewrite]:
    """The audit's names of the entries ``recorded`` (all of source ``spec``'s, in order; or its
    rewrites alone)."""
    return [
        AuditedRewrite(
            spec,
            entry.module,
            entry.name,
            trace_name(entry.rewrite.trace_fn) if entry.rewrite is not None else "",
            entry.duplicate,
            entry.kind,
            entry.pass_name,
            _handler_path(entry),
        )
        for entry in _entries(spec, recorded)
    ]


def locate(
    spec: str, recorded: list[Any], module: str, name: str, kind: str = "replacement"
) -> tuple[RecordedEntry, str]:
    """The entry of ``recorded`` (all of source ``spec``'s, in order) the audit names ``(module,
    name)``, of ``kind``, and Python code defining ``PASS``, its one-entry ``PatternMatcherPass``,
    rebuilt from scratch: what the reproducers run, without edits. Raises ``LookupError`` when
    there is none."""
    entries = _entries(spec, recorded)
    position: dict[tuple[str, str], int] = {}
    for entry in entries:
        rewrite = entry.rewrite
        if rewrite is not None:
            key = (rewrite.module, rewrite.name)
            index = position[key] = position.get(key, -1) + 1
        if (entry.kind, entry.module, entry.name) == (kind, module, name):
            if rewrite is not None:
                return entry, _pass_source(spec, rewrite, (module, name), index)
            return entry, _entry_pass_source(spec, entry)
    raise LookupError(f"{spec!r} recorded no {kind} entry {module}/{name} in this process")


def _entry_pass_source(spec: str, entry: RecordedEntry) -> str:
    if spec == INDUCTOR:
        return f"import pmverify\nPASS = pmverify.inductor_entry{(entry.module, entry.name)!r}.pattern_pass()"
    return (
        "from pmverify._audit.sources import locate, record_source\n"
        f"# the {entry.kind} entry {entry.label} that {spec} registers\n"
        f"PASS = locate({spec!r}, record_source({spec!r}), {entry.module!r}, {entry.name!r}, {entry.kind!r})[0]"
        ".pattern_pass()"
    )


def _pass_source(spec: str, rewrite: RecordedRewrite, label: tuple[str, str], index: int) -> str:
    if spec == INDUCTOR:
        return f"import pmverify\nPASS = pmverify.inductor_rewrite{label!r}.pattern_pass()"
    key = (rewrite.module, rewrite.name)
    select = f"PASS = [r for r in rewrites if (r.module, r.name) == {key!r}][{index}].pattern_pass()"
    if ":" in spec:
        module_name, _, attribute = spec.partition(":")
        return (
            f"import pmverify\nfrom {module_name} import {attribute.split('.')[0]}\n"
            f"with pmverify.record_patterns() as rewrites:  # the rewrites {spec} registers\n"
            f"    {attribute}()\n{select}"
        )
    return (
        f"import importlib\nimport pmverify\n"
        f"with pmverify.record_patterns() as rewrites:  # the rewrites {spec} registers when imported\n"
        f"    importlib.import_module({spec!r})\n{select}"
    )


@contextlib.contextmanager
def record_entries(kinds: Sequence[str] = KINDS) -> Iterator[list[RecordedEntry]]:
    """Record the pattern entries of ``kinds`` (default every kind of
    :data:`~pmverify._registry.entries.KINDS`) a pass registers while the block runs; yield a list filled with
    them, as :class:`~pmverify._registry.entries.RecordedEntry` objects, when the block ends: what ``pmverify
    audit MODULE`` records, for a user's own pass (``register_replacement``, ``register_graph_pattern``
    and ``register_lowering_pattern`` calls; Inductor's own entries, which its modules register when
    first imported, are left out). Each entry holds its torch entry, the pass it was registered into
    (named by its ``pass_name``, or as its handler's module binds it) and a name unique in its
    module, as the audit names them; check one with ``pmverify._rewrites.entry_check.check_entry``. Raises
    ``InvalidArgument`` for a kind not in ``KINDS``. Example::

        with pmverify.record_entries(kinds=("graph",)) as entries:
            my_pass = MyPatternPass()  # registers lazily? trigger the registration inside the block
        for entry in entries:
            check_entry(entry)
    """
    from hypothesis.errors import InvalidArgument

    unknown = [kind for kind in kinds if kind not in KINDS]
    if isinstance(kinds, str) or unknown:
        raise InvalidArgument(f"kinds={kinds!r} must be a sequence of {', '.join(KINDS)}")
    import_pass_modules()  # Inductor's own entries registered at import are not the pass's
    entries: list[RecordedEntry] = []
    with record_patterns() as rewrites, _registered_entries() as handled:
        yield entries
    recorded = list(rewrites)
    modules = [handler_name(entry)[0] for entry, _ in handled] + [rewrite.module for rewrite in recorded]
    source = modules[0] if modules else ""
    entries.extend(entry for entry in _user_entries(source, recorded, handled) if entry.kind in kinds)
