"""What ``pmverify audit`` audits: the rewrites of a source, recorded in any process.

A source is named by a string, resolved in the audit's own process (to list the rewrites and refuse
bad usage) and again in each worker (to get the very rewrite objects back), so that only strings
cross the process boundary:

- ``inductor``: every rewrite Inductor's own pattern passes register (:func:`pmverify.record_inductor`);
- ``MODULE``: a user's pass module, its rewrites recorded while it is imported;
- ``MODULE:ATTR``: a callable (dotted attribute) that builds the pass, its rewrites recorded while it
  runs (a pass that registers lazily, on first use, registers nothing at import).

Within a source, a rewrite is named by ``(module, name)``: :attr:`RecordedRewrite.module` and its
name; a name several rewrites of the module share gets their example inputs' dtypes and trace
function, ``gelu_mul[bfloat16, fwd_only]``, and a number where those are shared too,
``gelu_mul[float32, fwd_only]#2`` (:func:`pmverify._inductor_rewrites.unique_labels`).
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Any

from .._inductor_rewrites import record_inductor, trace_name, unique_labels
from .._record import RecordedRewrite, record_patterns

__all__ = ["INDUCTOR", "SourceError", "AuditedRewrite", "record_source", "listing", "locate"]

INDUCTOR = "inductor"


class SourceError(ValueError):
    """A source the audit cannot record: the message is one line, fit for ``pmverify audit: ...``."""


@dataclasses.dataclass(frozen=True)
class AuditedRewrite:
    """One rewrite of a source, as the audit names it: ``source`` (as given), ``module``, ``name``
    (with dtypes and trace when shared), ``trace_fn`` (its name), ``duplicate`` (:attr:`RecordedRewrite.duplicate`)."""

    source: str
    module: str
    name: str
    trace_fn: str
    duplicate: bool

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


def record_source(spec: str) -> list[RecordedRewrite]:
    """The rewrites of source ``spec``, in registration order. A ``MODULE`` already imported in this
    process is imported again (``importlib.reload``: its code runs again, its module-level pass
    objects made anew). Raises :class:`SourceError` when it cannot be imported or run, or records
    no rewrite."""
    if spec == INDUCTOR:
        return [entry.rewrite for entry in record_inductor(kinds=("replacement",))]
    if ":" in spec:
        build = _builder(spec)
        try:
            with record_patterns() as rewrites:
                build()
        except Exception as exc:  # noqa: BLE001 - user code
            raise SourceError(f"{spec!r}: calling it raised {type(exc).__name__}: {exc}") from None
        what = "while it ran"
    else:
        loaded = sys.modules.get(spec)
        try:
            with record_patterns() as rewrites:
                if loaded is not None:
                    importlib.reload(loaded)
                else:
                    importlib.import_module(spec)
        except Exception as exc:  # noqa: BLE001 - any import failure of user code is bad usage
            raise SourceError(f"{spec!r}: cannot import {spec}: {type(exc).__name__}: {exc}") from None
        what = "while it was imported"
    if not rewrites:
        hint = "" if ":" in spec else ": if it registers lazily, give MODULE:ATTR of a function that builds the pass"
        raise SourceError(f"{spec!r}: no register_replacement call was recorded {what}{hint}")
    return list(rewrites)


def listing(spec: str, rewrites: list[RecordedRewrite]) -> list[AuditedRewrite]:
    """The audit's names of ``rewrites`` (all of source ``spec``, in order)."""
    return [
        AuditedRewrite(spec, module, name, trace_name(rewrite.trace_fn), rewrite.duplicate)
        for (module, name), rewrite in zip(unique_labels(rewrites), rewrites, strict=True)
    ]


def locate(spec: str, rewrites: list[RecordedRewrite], module: str, name: str) -> tuple[RecordedRewrite, str]:
    """The rewrite of ``rewrites`` (all of source ``spec``, in order) the audit names ``(module,
    name)``, and Python code defining ``PASS``, its one-rewrite ``PatternMatcherPass``, rebuilt
    from scratch: what the reproducers run, without edits. Raises ``LookupError`` when there is none."""
    position: dict[tuple[str, str], int] = {}
    for label, rewrite in zip(unique_labels(rewrites), rewrites, strict=True):
        key = (rewrite.module, rewrite.name)
        index = position[key] = position.get(key, -1) + 1
        if label == (module, name):
            return rewrite, _pass_source(spec, rewrite, label, index)
    raise LookupError(f"{spec!r} recorded no rewrite {module}/{name} in this process")


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
