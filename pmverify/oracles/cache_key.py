"""Cache-key oracle: a pass's ``uuid()`` tells its configurations apart, and only them.

Inductor's FX graph cache keys a compiled graph on, among others, the ``uuid()`` of the custom
passes installed (``CustomGraphPass``, ``torch/_inductor/custom_graph_pass.py``). Two passes built
with different configurations (another eps, dtype, width, tensor-parallel size) rewrite the same
graph differently; if their uuids are equal, a later compile under one config silently reuses the
graph compiled under the other (vLLM's MiniMax QK-norm pass hashes its source only). Equal
configurations must give equal uuids, or the cache never hits.

The pass under test is rebuilt as ``type(pass_)(config)`` from its configuration (``pass_.config``,
else ``case.pass_config``), or, when a pass factory taking a config built it
(``verify(pass_factory=...)``), as ``factory(config)`` from the case's ``pass_config`` (a factory
taking no argument: ``pass_.config`` and the class, as for a pass given built), and from variants of
it that differ in one field each:

- a dataclass or a dict config: each field in turn; ``bool`` flipped, ``int`` + 1, ``float`` × 2
  (1.0 for 0), ``torch.dtype`` another floating dtype, ``str`` suffixed, an ``Enum`` another member,
  a tuple or list with its first changeable element changed, a nested dataclass with its first
  changeable field changed;
  variants the config or the pass refuses (``ValueError``, ``TypeError``) are skipped;
- an equal copy (``copy.deepcopy``).

A config field whose change keeps the uuid is a finding only where it changes what the pass does:
in direct mode the pass built with the changed config is applied to the case too, and a field
whose change leaves the rewritten graph as it was (a logging flag, a field another pass reads) is
not one on that case; a field that changes it (another eps baked into the replacement, a pattern
that no longer matches) is. In compiled mode every such field is a finding.

Graph-free first (:func:`entries_violation`): for a pass whose rewrites are ``register_replacement``
entries, the registrations of the passes built with the config and with a same-uuid variant (each
run once on an empty graph, for a pass that registers on first use) are recorded and compared by
their search patterns and replacement graphs, traced on the same example inputs; a difference is
the finding on any case, cached per pass and config pair. Entries that are equal or cannot be
compared leave the field to the per-case check below.

Not judged: a pass without ``uuid()`` or whose ``uuid()`` is None (Inductor bypasses its cache),
one without a configuration, one that cannot be rebuilt from it. The uuids are compared once per
pass class and configuration (milliseconds, no graph); on a case, the fields whose change keeps the
uuid are tried one by one, those that changed an earlier case's rewrite first, and the first that
changes this case's rewrite is the finding (one match a failing case, not one a field); a pass
built from a variant config is built once and reused across cases, as a pass given built is.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import inspect
import re
from collections.abc import Iterator
from typing import Any

import torch

from .._execution import RunPair
from ._violation import Violation

__all__ = ["applies", "builder_and_config", "check", "config_variants", "uuid_violations"]

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_CACHE: dict[tuple[Any, str], tuple[Violation, ...]] = {}
#: per pass class (or factory) and config: the violation :func:`entries_violation` found, or None
_FOUND: dict[tuple[Any, str], Violation | None] = {}
#: per pass class (or factory): the config fields found to change a case's rewrite, in order found
_MATTERED: dict[Any, list[str]] = {}
#: the passes built from config variants, per class (or factory) and config (see :func:`_built`)
_BUILT: dict[tuple[Any, str], Any] = {}
_MAX_BUILT = 64


def _changed(value: Any) -> Any:
    """A value of the same kind as ``value`` that differs from it, or ``...`` when none is known."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 if value else 1.0
    if isinstance(value, torch.dtype):
        return next(d for d in _FLOAT_DTYPES if d != value)
    if isinstance(value, str):
        return value + "_changed"
    if isinstance(value, enum.Enum):
        return next((member for member in type(value) if member != value), ...)
    if isinstance(value, (tuple, list)):  # the first element that can be changed, changed
        for i, item in enumerate(value):
            if (changed := _changed(item)) is not ...:
                items = [*value[:i], changed, *value[i + 1 :]]
                try:
                    return type(value)(items)
                except TypeError:  # a named tuple
                    return type(value)(*items)
        return ...
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a nested config
        return next((variant for *_, variant in config_variants(value)), ...)
    return ...


def config_variants(config: Any) -> Iterator[tuple[str, Any, Any, Any]]:
    """``(field, value, changed value, config with that field changed)`` for each field of a
    dataclass or dict ``config`` that :func:`_changed` knows how to change."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
    elif isinstance(config, dict):
        fields = dict(config)
    else:
        return
    for name, value in fields.items():
        changed = _changed(value)
        if changed is ...:
            continue
        try:
            if isinstance(config, dict):
                variant = {**config, name: changed}
            else:
                variant = dataclasses.replace(config, **{name: changed})
        except (ValueError, TypeError):
            continue
        yield name, value, changed, variant


def _uuid_of(cls: Any, config: Any) -> Any:
    try:
        return cls(config).uuid()
    except Exception:  # noqa: BLE001 - a config the pass cannot be built from (a string field changed
        return ...  # to one it does not know): not a config a user can give, so no verdict on it


def _built(cls: Any, variant: Any) -> Any:
    """``cls(variant)``, built once per pass class (or factory) and config, and reused on every
    case as ``verify`` reuses a pass given built: a build may trace patterns (tenths of a second),
    a match takes milliseconds. Raises what ``cls`` raises."""
    key = (cls, f"{type(variant).__qualname__}:{variant!r}")
    if key not in _BUILT:
        if len(_BUILT) >= _MAX_BUILT:
            _BUILT.clear()
        _BUILT[key] = cls(variant)
    return _BUILT[key]


def _same_graph(cls: Any, variant: Any, pair: RunPair) -> bool:
    """Whether the pass built with ``variant`` rewrites ``pair``'s case into the graph ``pair``'s
    pass did (same code); False where that cannot be told (no ``reapply``, compiled mode)."""
    if pair.reapply is None or pair.after is None:
        return False
    try:
        after = pair.reapply(_built(cls, variant))
    except Exception:  # noqa: BLE001 - the variant's pass does not run here: no evidence it differs
        return True
    return after is not None and after.code == pair.after.code


def uuid_violations(cls: Any, config: Any, pair: RunPair | None = None, name: str | None = None) -> list[Violation]:
    """The cache-key violations of pass class (or pass factory) ``cls`` built with ``config``
    (uncached); with ``pair``, a field whose change keeps the uuid counts only where it changes the
    rewritten graph of ``pair``'s case, and the first such field found is the finding (the fields
    that changed an earlier case's rewrite are tried first). ``name``: the pass's class name in the
    messages (default ``cls.__name__``)."""
    name = cls.__name__ if name is None else name
    uuid = _uuid_of(cls, config)
    if uuid is ... or uuid is None:
        return []
    violations = []
    again = _uuid_of(cls, copy.deepcopy(config))
    if again != uuid:
        violations.append(
            Violation(
                "cache_key",
                f"{name}.uuid() differs for equal configs ({uuid!r} vs {again!r}): Inductor's FX graph "
                "cache never hits",
            )
        )
    suspects = [suspect for suspect in config_variants(config) if _uuid_of(cls, suspect[3]) == uuid]
    if pair is not None:
        # one field that changes this case's rewrite makes the finding: those that did before first
        known = _MATTERED.setdefault(cls, [])
        suspects.sort(key=lambda suspect: known.index(suspect[0]) if suspect[0] in known else len(known))
        suspects = next(([s] for s in suspects if not _same_graph(cls, s[3], pair)), [])
        if suspects and suspects[0][0] not in known:
            known.append(suspects[0][0])
    same = [f"{field} ({value!r} vs {changed!r})" for field, value, changed, _ in suspects]
    if same:
        which = ", which changes the rewritten graph of this case" if pair is not None else ""
        violations.append(
            Violation(
                "cache_key",
                f"{name}.uuid() is the same for configs differing only in {', '.join(same)}{which}: "
                "Inductor's FX graph cache would reuse a graph compiled under another config",
            )
        )
    return violations


def applies(pair: RunPair) -> bool:
    """Whether this oracle has something to judge on ``pair`` (whose pass ran): the pass has
    ``uuid()`` and was built with a configuration (:func:`builder_and_config`)."""
    return callable(getattr(pair.pass_, "uuid", None)) and builder_and_config(pair)[1] is not None


def check(pair: RunPair) -> list[Violation]:
    """Return the cache-key violations of the pass of ``pair`` (a ``RunPair``)."""
    pass_ = pair.pass_
    if not callable(getattr(pass_, "uuid", None)) or isinstance(pass_, type):
        return []
    builder, config = builder_and_config(pair)
    if config is None:
        return []
    name = type(pass_).__name__
    key = (builder, f"{type(config).__qualname__}:{config!r}")
    if key not in _CACHE:
        _CACHE[key] = tuple(uuid_violations(builder, config, name=name))
    if not _CACHE[key] or pair.reapply is None:
        return list(_CACHE[key])
    if key not in _FOUND:  # graph-free: a same-uuid field that changes the pattern entries registered
        uuid = _uuid_of(builder, config)
        suspects = [suspect for suspect in config_variants(config) if _uuid_of(builder, suspect[3]) == uuid]
        _FOUND[key] = entries_violation(builder, config, suspects, name)
    if (violation := _FOUND[key]) is not None:
        # the same for every case: found at the first, in milliseconds after it
        return [*_CACHE[key][:-1], violation]  # an unstable uuid's violation kept, the same-uuid one named
    return uuid_violations(builder, config, pair, name)  # which fields matter depends on the case


def builder_and_config(pair: RunPair) -> tuple[Any, Any]:
    """``(what builds the pass from a config, that config)`` for ``pair``'s pass: a pass factory
    taking a config and the case's ``pass_config``; else its class and ``pass_.config``, or the
    case's ``pass_config`` unless a factory taking no argument built the pass (that config is then
    not the pass's). ``config`` None: nothing to vary."""
    built, pass_ = pair.built_from, pair.pass_
    factory = built is not None and not isinstance(built[0], type)
    if factory and built[1] is not None:
        return built
    config = getattr(pass_, "config", None)
    if config is None and not factory:
        config = pair.case.pass_config
    return type(pass_), config


# ---- graph-free: the pattern entries two configs register ---------------------------------------
#: per (pass class or factory, config, variant): the verdict of :func:`_entries_differ` (None: same
#: entries; ``...``: not comparable)
_ENTRIES: dict[tuple[Any, str, str], Any] = {}
#: per (pass class or factory, config): the rewrites its build registered (see :func:`_recorded_build`)
_RECORDS: dict[tuple[Any, str], list[Any] | None] = {}
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _text(value: Any) -> str:
    """``str(value)`` without object addresses (``<function f at 0x7f..>`` → ``<function f>``)."""
    return _ADDRESS.sub("", str(value))


def _recorded_build(cls: Any, config: Any) -> list[Any] | None:
    """The ``register_replacement`` calls made while ``cls(config)`` is built and run once on an
    empty graph (a pass that registers lazily, on first use), recorded once per pass class (or
    factory) and config; None when it registered nothing (a hand pass; a registration made before
    and cached by the pass per config) or failed."""
    key = (cls, f"{type(config).__qualname__}:{config!r}")
    if key not in _RECORDS:
        if len(_RECORDS) >= _MAX_BUILT:
            _RECORDS.clear()
        _RECORDS[key] = _record_build(cls, config)
    return _RECORDS[key]


def _record_build(cls: Any, config: Any) -> list[Any] | None:
    from .._registry.record import record_patterns

    graph = torch.fx.Graph()
    graph.output(graph.placeholder("x"))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)  # a graph a pass runs on has its module
    try:
        with record_patterns() as records:
            pass_ = cls(config)
            pass_(module.graph)
    except Exception:  # a pass that refuses an empty graph or a config: not comparable here
        return None
    records = [r for r in records if r.result is not False]
    return records or None


def _rewrite_form(record: Any, inputs: tuple[Any, ...]) -> tuple[str, str]:
    """``(the search pattern with its constants, the replacement's code)`` of a recorded rewrite,
    both traced on ``inputs`` (the search function's arguments) as Inductor traces them when it
    re-checks a match: the pattern printed as Inductor prints it, its scalar-workaround arguments
    given its own workaround values (wildcards, whatever their value), the replacement given
    ``inputs`` as they are (at a match, the matched values)."""
    from .._compat import pattern_matcher as pm

    names = list(inspect.signature(record.search_fn).parameters)
    workaround = dict(record.scalar_workaround or {})
    own = [workaround[n] if n in workaround else value for n, value in zip(names, inputs, strict=False)]
    search = record.trace_fn(record.search_fn, own)
    pattern = pm.fx_to_pattern(
        search, argnames=names, exclusive_arg_names=record.exclusive_arg_names, scalar_workaround=workaround
    )
    replacement = record.trace_fn(record.replace_fn, list(inputs))
    return _text(pm.PatternPrettyPrinter.run(pattern)), _text(replacement.code)


def _entries_differ(cls: Any, config: Any, variant: Any) -> Any:
    """What differs between the pattern entries ``cls(config)`` and ``cls(variant)`` register (both
    built and recorded afresh), as ``"pattern entry NAME: WHAT"``; None when they are the same, and
    ``...`` when they cannot be compared (a hand pass, a registration cached from an earlier build,
    a rewrite that does not trace here). Each rewrite of one is paired with the rewrite of the other
    that has the same search, replacement and trace function names (in order), and both are traced
    on the first one's example inputs: the search pattern (constants included) and the replacement
    graph must be the same, order of registration apart. An ``extra_check`` (and whatever the pass
    does besides its pattern entries) is left to the per-case check: whether it changes a rewrite
    is a property of the graph."""
    ours, theirs = _recorded_build(cls, config), _recorded_build(cls, variant)
    if ours is None or theirs is None:
        return ...
    if len(ours) != len(theirs):
        return f"{len(ours)} pattern entries vs {len(theirs)}"

    def key(record: Any) -> tuple[str, str, str]:
        return _qualname(record.search_fn), _qualname(record.replace_fn), _qualname(record.trace_fn)

    pending = list(theirs)
    pairs = []
    for record in ours:
        other = next((r for r in pending if key(r) == key(record)), None)
        if other is None:
            return ...  # another function registered: not told apart by value here
        pending.remove(other)
        pairs.append((record, other))
    try:
        for record, other in pairs:
            inputs = record.search_args
            if len(inspect.signature(other.search_fn).parameters) != len(inputs):
                return ...
            (pattern, replacement), (pattern2, replacement2) = (_rewrite_form(r, inputs) for r in (record, other))
            if pattern != pattern2:
                return f"pattern entry {record.name}: {_first_difference(pattern, pattern2, 'the search pattern')}"
            if replacement != replacement2:
                return f"pattern entry {record.name}: {_first_difference(replacement, replacement2, 'the replacement')}"
    except Exception:  # a rewrite that does not trace outside the pass's own setting: not comparable
        return ...
    return None


def _first_difference(ours: str, theirs: str, where: str) -> str:
    """The first difference between two texts, in ``where``: the differing part of the first line
    that differs, and that line (``"constant 1e-06 vs 1e-05 in the search pattern (`add = ...`)"``)."""
    for line, other in zip(ours.splitlines(), theirs.splitlines(), strict=False):
        if line != other:
            start = next(
                (i for i, (a, b) in enumerate(zip(line, other, strict=False)) if a != b), min(len(line), len(other))
            )
            end = 0
            while end < min(len(line), len(other)) - start and line[-1 - end] == other[-1 - end]:
                end += 1
            # widen to whole tokens (a number, a name)
            while start and (line[start - 1].isalnum() or line[start - 1] in "._-+"):
                start -= 1
            part, part2 = line[start : len(line) - end], other[start : len(other) - end]
            while end and (line[len(line) - end].isalnum() or line[len(line) - end] in "._-+"):
                part, part2, end = part + line[len(line) - end], part2 + other[len(other) - end], end - 1
            kind = "constant " if _is_number(part) and _is_number(part2) else ""
            return f"{kind}{_short(part, 40)} vs {_short(part2, 40)} in {where} (`{_short(line)}`)"
    return f"{len(ours.splitlines())} lines vs {len(theirs.splitlines())} in {where}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _short(line: str, limit: int = 120) -> str:
    line = line.strip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _qualname(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _twice_changed(config: Any, field: str, changed: Any) -> tuple[Any, Any]:
    """``(the field's value changed once more, config with it)`` (``(..., ...)`` when none)."""
    again = _changed(changed)
    if again is ... or again == getattr(config, field, None if not isinstance(config, dict) else config.get(field)):
        return ..., ...
    try:
        if isinstance(config, dict):
            return again, {**config, field: again}
        return again, dataclasses.replace(config, **{field: again})
    except (ValueError, TypeError):
        return ..., ...


def _entries_verdict(cls: Any, config: Any, variant: Any) -> Any:
    key = (cls, f"{type(config).__qualname__}:{config!r}", f"{type(variant).__qualname__}:{variant!r}")
    if key not in _ENTRIES:
        _ENTRIES[key] = _entries_differ(cls, config, variant)
    return _ENTRIES[key]


def entries_violation(cls: Any, config: Any, suspects: list[tuple[str, Any, Any, Any]], name: str) -> Violation | None:
    """The violation of the first same-uuid field among ``suspects`` whose change changes the
    pattern entries the pass registers (graph-free, cached per pass and config pair), or None.
    Where ``config``'s own registration cannot be recorded again (a pass caching its pattern pass
    per config, built before), the variant is compared with one whose field is changed once more
    and whose uuid is the same too: two configs the cache confuses as well."""
    uuid = _uuid_of(cls, config)
    known = _MATTERED.setdefault(cls, [])  # fields that mattered before (on a case, or here) first
    suspects = sorted(suspects, key=lambda suspect: known.index(suspect[0]) if suspect[0] in known else len(known))
    for field, value, changed, variant in suspects:
        verdict = _entries_verdict(cls, config, variant)
        if verdict is ... and _recorded_build(cls, config) is None:  # config's own registration cached
            again, variant2 = _twice_changed(config, field, changed)
            if variant2 is ... or _uuid_of(cls, variant2) != uuid:
                continue
            value, changed, verdict = changed, again, _entries_verdict(cls, variant, variant2)
        if isinstance(verdict, str):
            if field not in known:
                known.append(field)
            return Violation(
                "cache_key",
                f"{name}.uuid() is the same for configs differing only in {field} ({value!r} vs {changed!r}), "
                f"which changes the pattern entries the pass registers ({verdict}): Inductor's FX graph "
                "cache would reuse a graph compiled under another config",
            )
    return None
