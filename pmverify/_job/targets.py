"""What the fuzzing job verifies: the shipped pass, a fault of the bank, or a user's pass.

A target is named on the command line by a string, resolved twice: once in the job's own process
to refuse bad usage before anything starts (:func:`check`), and again in each worker process that
runs it (:func:`load`), so that nothing but strings crosses the process boundary.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

__all__ = ["TargetError", "Target", "check", "load", "builtin_names"]

SHIPPED = "qk_norm"
#: The world sizes the shipped pass is fuzzed on, one rotation batch each (besides tp_world 1).
TP_WORLDS = (2, 4, 8)


class TargetError(ValueError):
    """A target the job cannot run: the message is one line, fit for ``pmverify fuzz: ...``."""


@dataclasses.dataclass(frozen=True)
class Target:
    """A target as the job's worker process holds it.

    - ``name``: as given on the command line (``qk_norm``, a fault's name, or ``module:attribute``).
    - ``pass_``: the pass (a class built per case from ``case.pass_config``, or a pass object).
    - ``families``: the ``(name, strategy)`` case families searched in rotation.
    - ``real_model``: whether the compiled tiny MiniMax-M2 check applies (a pass built from a
      ``QKNormConfig``).
    - ``pass_source``: for a user's pass, code importing it by name for the reproducers
      (``from mypkg.passes import MyPass``), so that they get the very object; None otherwise.
    - ``strict_order``: searched with ``strict_order=True`` whatever ``--strict-order`` says (a
      fault whose bank row asks for it).
    """

    name: str
    pass_: Any
    families: list[tuple[str, Any]]
    real_model: bool
    pass_source: str | None = None
    strict_order: bool = False


def builtin_names() -> list[str]:
    """``qk_norm`` and the names of the faults of :data:`pmverify.faults.BANK`."""
    from ..faults import BANK

    return [SHIPPED, *BANK]


def _import(spec: str, what: str) -> Any:
    """The object ``module:attribute`` (the attribute may be dotted) names."""
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

    value = _import(spec, "--cases")
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


def _shipped_families() -> list[tuple[str, Any]]:
    """Plain graphs, their in-place form, their functional form with mutating custom ops
    (auto_functionalized), each followed by the all-reduce form on one tensor-parallel world size,
    so that a run of six batches has checked tp_world 2, 4 and 8."""
    from hypothesis import strategies as st

    from ..faults import rotation
    from ..strategies import qk_norm_tp_cases

    tp = [(f"qk_norm_tp_cases[tp_world={world}]", qk_norm_tp_cases(tp_world=st.just(world))) for world in TP_WORLDS]
    return [family for pair in zip(rotation(), tp, strict=True) for family in pair]


def _takes_qk_norm_config(pass_: Any) -> bool:
    from ..fusions.qk_norm import QKNormConfig

    if not isinstance(pass_, type):
        return False
    try:
        pass_(QKNormConfig(q_size=8, kv_size=4))
    except (TypeError, ValueError):
        return False
    return True


def load(name: str, cases: str | None = None) -> Target:
    """Resolve ``name`` (``qk_norm``, a fault of the bank, or ``module:attribute`` of a user pass,
    which needs ``cases``: ``module:attribute`` of its case strategy). Raises :class:`TargetError`
    for an unknown name, a user pass without ``cases``, an import that fails, or objects that are
    not a pass and a strategy; ``RuntimeError``-based ``requires`` checks of kernel faults become a
    :class:`TargetError` too."""
    from .._apply import check_pass
    from ..faults import BANK

    if name == SHIPPED:
        from ..fusions.qk_norm import QKNormFusionPass

        return Target(name, QKNormFusionPass, _shipped_families(), real_model=True)
    if name in BANK:
        fault = BANK[name]
        if fault.requires is not None:
            try:
                fault.requires()
            except RuntimeError as exc:
                raise TargetError(f"--target={name}: {exc}") from None
        return Target(
            name,
            fault.pass_cls,
            fault.families(),
            real_model=_takes_qk_norm_config(fault.pass_cls),
            strict_order=fault.strict_order,
        )
    if ":" not in name:
        raise TargetError(
            f"--target={name!r} is unknown; choose qk_norm, a fault ({', '.join(BANK)}), or MODULE:ATTRIBUTE of a pass"
        )
    pass_ = _import(name, "--target")
    try:
        check_pass(pass_)
    except TypeError:
        raise TargetError(
            f"--target={name!r} is {type(pass_).__name__}, not a pass (a class built per case from "
            "case.pass_config, a PatternMatcherPass, or a callable on a torch.fx.Graph)"
        ) from None
    if cases is None:
        raise TargetError(f"--target={name!r} is a user pass: give its case strategy as --cases MODULE:ATTRIBUTE")
    from .._reproducer import import_source

    return Target(name, pass_, [(cases, _strategy(cases))], real_model=False, pass_source=import_source(name))


def check(names: list[str], cases: str | None) -> None:
    """Resolve every target once, in this process, so that bad usage is refused before any worker
    starts; also refuses a ``cases`` that no target uses."""
    for name in names:
        load(name, cases)
    if cases is not None and not any(":" in name for name in names):
        raise TargetError(f"--cases={cases!r} is only for a user pass given as --target MODULE:ATTRIBUTE")
