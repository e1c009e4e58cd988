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
from collections.abc import Iterator
from typing import Any

import torch

from .._execution import RunPair
from ._violation import Violation

__all__ = ["builder_and_config", "check", "config_variants", "uuid_violations"]

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_CACHE: dict[tuple[Any, str], tuple[Violation, ...]] = {}
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
    except (ValueError, TypeError):
        return ...


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
    except (ValueError, TypeError):
        return False
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
