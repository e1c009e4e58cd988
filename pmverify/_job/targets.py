"""What the fuzzing job verifies: fuzz targets, and the small protocol a target implements.

A target is a :class:`FuzzTarget`: the pass, the case families searched in rotation, and what the
target needs around them (its environment set-up, its reproducers' prelude, an extra check). A
user's target implements the protocol by building one::

    # mypkg/fuzzing.py
    from pmverify import FuzzTarget

    def my_target():
        return FuzzTarget(MyFusionPass, [("my_cases", my_cases())])

and is fuzzed with ``pmverify fuzz --target mypkg.fuzzing:my_target``. (a :class:`FuzzTarget` object, or a function called with no arguments that returns one). A plain pass
also works,
``--target mypkg.passes:MyFusionPass --cases mypkg.cases:my_cases``: its target has that one
family and needs nothing set up; and so does a pass factory, a function called with no arguments
that returns the pass (``--target mypkg.passes:make_pass``, vLLM's ``Pass(vllm_config)``): the
pass is built from it per case. A factory taking the case's ``pass_config`` is given as
``FuzzTarget(pass_factory=..., families=...)``.

Names on the command line are strings, resolved twice: once in the job's own process to refuse
bad usage before anything starts (:func:`check`), and again in each worker process that runs the
target (:func:`load`), so that nothing but strings crosses the process boundary. Built-in names
(``qk_norm``, the faults of pmverify's bank) come from the *target sources* of
:data:`DEFAULT_SOURCES`, which are spec strings too: this module imports none of them, and the
tool imports nothing of the shipped pass or of the fault bank unless a target asks for it.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import TargetError
from ..targets import EndCheck, FuzzTarget

__all__ = [
    "TargetError",
    "FuzzTarget",
    "EndCheck",
    "Target",
    "DEFAULT_SOURCES",
    "DEFAULT_TARGET",
    "check",
    "load",
    "builtin_names",
    "resolve",
]

#: Where the built-in target names come from: ``MODULE:ATTRIBUTE`` of functions called with no
#: arguments that return a mapping of name -> a function building that :class:`FuzzTarget`
#: (raising ``ValueError`` / ``RuntimeError`` when what they declare cannot run here). Searched in
#: order, each imported only when the names before it did not hold the one asked for.
DEFAULT_SOURCES = ("pmverify.fusions.qk_norm.testing:fuzz_targets", "pmverify.faults.target:fuzz_targets")
#: The target ``pmverify fuzz`` searches without ``--target``: the shipped pass.
DEFAULT_TARGET = "qk_norm"


@dataclasses.dataclass(frozen=True)
class Target:
    """A target as the job's worker process holds it: the :class:`FuzzTarget` resolved from
    ``name`` (as given on the command line), its families as a list."""

    name: str
    fuzz: FuzzTarget

    @property
    def pass_(self) -> Any:
        """The pass under test as :func:`pmverify.verify` takes it: ``pass_``, or ``pass_factory``
        as a :class:`~pmverify._findings.factory.PassFactory`."""
        if self.fuzz.pass_factory is None:
            return self.fuzz.pass_
        from .._findings.factory import as_factory

        return as_factory(self.fuzz.pass_factory)

    @property
    def families(self) -> list[tuple[str, Any]]:
        return list(self.fuzz.families)

    @property
    def pass_source(self) -> str | None:
        return self.fuzz.pass_source

    @property
    def strict_order(self) -> bool:
        return self.fuzz.strict_order

    @property
    def reproducer_prelude(self) -> str | None:
        return self.fuzz.reproducer_prelude

    @property
    def allow_unfused(self) -> tuple[str, ...]:
        """The group keys ``allow_unfused`` silences (``"dtype bfloat16"``...), sorted."""
        from .._findings.summary import validate_allow_unfused

        return tuple(sorted(validate_allow_unfused(self.fuzz.allow_unfused)))


def resolve(spec: str, what: str) -> Any:
    """The object ``spec`` = ``MODULE:ATTRIBUTE`` names (the attribute may be dotted), imported
    by name. Raises :class:`TargetError` naming ``what`` (``--target``) for a spec without a colon,
    a module that cannot be imported, or a missing attribute."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise TargetError(f"{what}={spec!r} must be MODULE:ATTRIBUTE (e.g. mypkg.passes:MyFusionPass)")
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure of user code is bad usage
        raise TargetError(f"{what}={spec!r}: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise TargetError(f"{what}={spec!r}: {module_name} has no attribute {attribute}") from None
    return value


def _strategy(spec: str) -> Any:
    """The case strategy ``module:attribute`` names: a ``SearchStrategy`` of ``GraphCase``, or a
    function called with no arguments that returns one."""
    from hypothesis.strategies import SearchStrategy

    value = resolve(spec, "--cases")
    if not isinstance(value, SearchStrategy) and callable(value):
        try:
            value = value()
        except Exception as exc:  # noqa: BLE001 - user code
            raise TargetError(f"--cases={spec!r}: calling it raised {type(exc).__name__}: {exc}") from None
    if not isinstance(value, SearchStrategy):
        raise TargetError(
            f"--cases={spec!r} is {type(value).__name__}, not a Hypothesis strategy of GraphCase "
            "(or a function returning one)"
        )
    return value


def _provided(source: str) -> Mapping[str, Callable[[], FuzzTarget]]:
    try:
        return resolve(source, "target source")()
    except (ValueError, RuntimeError) as exc:
        if isinstance(exc, TargetError):
            raise
        raise TargetError(f"target source {source}: {exc}") from None


def _builtin(name: str, sources: Sequence[str]) -> Callable[[], FuzzTarget]:
    """The factory of built-in target ``name``: from the first of ``sources`` that has it."""
    seen: list[str] = []
    for source in sources:
        provided = _provided(source)
        if name in provided:
            return provided[name]
        seen.extend(provided)
    raise TargetError(f"--target={name!r} is unknown; choose {', '.join(seen)}, or MODULE:ATTRIBUTE of a pass")


def builtin_names(sources: Sequence[str] = DEFAULT_SOURCES) -> list[str]:
    """The built-in target names of ``sources`` (``qk_norm`` and the faults of
    ``pmverify.faults.BANK`` by default), in order. Imports every source."""
    return list(dict.fromkeys(name for source in sources for name in _provided(source)))


def _set_up(name: str, target: FuzzTarget) -> None:
    if target.set_up is None:
        return
    try:
        target.set_up()
    except (ValueError, RuntimeError) as exc:
        raise TargetError(f"--target={name}: {exc}") from None


def _built(name: str, factory: Callable[[], Any]) -> FuzzTarget:
    try:
        target = factory()
    except TargetError:
        raise
    except (ValueError, RuntimeError) as exc:  # the target cannot run here (its set-up says why)
        raise TargetError(f"--target={name}: {exc}") from None
    if not isinstance(target, FuzzTarget):
        raise TargetError(f"--target={name!r} built {type(target).__name__}, not a FuzzTarget")
    return target


def load(name: str, cases: str | None = None, *, sources: Sequence[str] = DEFAULT_SOURCES) -> Target:
    """Resolve ``name``: a built-in name of ``sources``, or ``module:attribute`` of a
    :class:`FuzzTarget`, of a function returning one, or of a user pass (which needs ``cases``:
    ``module:attribute`` of its case strategy), then run the target's ``set_up``. Raises
    :class:`TargetError` for an unknown name, a user pass without ``cases``, ``cases`` given to a
    target that declares its own families, an import that fails, objects that are not a target,
    a pass or a strategy, and a target that cannot run here (``ValueError`` / ``RuntimeError`` of
    its factory or set-up)."""
    from hypothesis.errors import InvalidArgument

    from .._engine.apply import validate_pass

    if ":" not in name:
        target = _built(name, _builtin(name, sources))
        _set_up(name, target)
        return Target(name, target)
    value = resolve(name, "--target")
    if callable(value) and not isinstance(value, (type, FuzzTarget)) and _is_factory(value) and cases is not None:
        return _pass_factory_target(name, value, cases)
    if isinstance(value, FuzzTarget) or (callable(value) and not isinstance(value, type) and _is_factory(value)):
        target = value if isinstance(value, FuzzTarget) else _built(name, value)
        if cases is not None:
            raise TargetError(f"--cases={cases!r} is only for a pass: --target={name!r} declares its own families")
        _set_up(name, target)
        return Target(name, target)
    try:
        validate_pass(value)
    except InvalidArgument:
        raise TargetError(
            f"--target={name!r} is {type(value).__name__}, not a pass (a class built per case "
            "from case.pass_config, a PatternMatcherPass, or a callable on a torch.fx.Graph) or a FuzzTarget"
        ) from None
    if cases is None:
        raise TargetError(f"--target={name!r} is a user pass: give its case strategy as --cases MODULE:ATTRIBUTE")
    from .._findings.reproducer import import_source

    return Target(name, FuzzTarget(value, [(cases, _strategy(cases))], pass_source=import_source(name)))


def _pass_factory_target(name: str, factory: Callable[[], Any], cases: str) -> Target:
    """The target of ``--target`` naming a function with no arguments and ``--cases``: a pass factory
    when what it returns is a pass (called once here to tell). Raises :class:`TargetError` when it
    raises, returns a :class:`FuzzTarget` (which declares its own families) or no pass."""
    from hypothesis.errors import InvalidArgument

    from .._engine.apply import validate_pass

    try:
        built = factory()
    except Exception as exc:  # noqa: BLE001 - user code
        raise TargetError(f"--target={name!r}: calling it raised {type(exc).__name__}: {exc}") from None
    if isinstance(built, FuzzTarget):
        raise TargetError(f"--cases={cases!r} is only for a pass: --target={name!r} declares its own families")
    try:
        validate_pass(built)
    except InvalidArgument:
        raise TargetError(
            f"--target={name!r} built {type(built).__name__}: neither a FuzzTarget nor a pass (a pass factory "
            "returns a pass object)"
        ) from None
    try:
        return Target(name, FuzzTarget(pass_factory=factory, families=[(cases, _strategy(cases))]))
    except ValueError as exc:
        raise TargetError(f"--target={name!r}: {exc}") from None


def _is_factory(value: Any) -> bool:
    """Whether ``value`` is a function called with no arguments (a target factory), as opposed to
    a pass, which takes a ``torch.fx.Graph``."""
    import inspect

    try:
        parameters = inspect.signature(value).parameters.values()
    except (TypeError, ValueError):
        return False
    return not any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def check(names: list[str], cases: str | None) -> None:
    """Resolve every target once, in this process, so that bad usage is refused before any worker
    starts; also refuses a ``cases`` that no target uses. The environment variables the targets'
    set-ups (or sources) set here are undone afterwards: each worker process is started from the
    job's own environment and runs only its own target's set-up (a user's target run beside
    ``qk_norm`` gets no ``TRITON_INTERPRET`` from it)."""
    environment = dict(os.environ)
    try:
        for name in names:
            load(name, cases)
    finally:
        os.environ.clear()
        os.environ.update(environment)
    if cases is not None and not any(":" in name for name in names):
        raise TargetError(f"--cases={cases!r} is only for a user pass given as --target MODULE:ATTRIBUTE")
