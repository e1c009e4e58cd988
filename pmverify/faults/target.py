"""The fault bank as ``pmverify fuzz`` targets and ``pmverify selfcheck``'s bank, reached by name
(``pmverify.faults.target:fuzz_targets``, ``pmverify.faults.target:bank``).

Every fault runs on the QK-norm fusion's environment (the kernel faults' Triton kernels need the
interpreter without a GPU): :func:`bank` turns it on before the bank, and with it triton, is
imported. This module imports neither.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..fusions.qk_norm import environment

__all__ = ["bank", "fuzz_target", "fuzz_targets"]


def bank() -> dict[str, Any]:
    """:data:`pmverify.faults.BANK`, imported after the fusion's environment set-up (Triton's
    interpreter on without a GPU). Raises ``ValueError`` / ``RuntimeError`` when the fused ops the
    faults build on cannot run here (:func:`~pmverify.fusions.qk_norm.environment.set_up`)."""
    environment.set_up()
    from ._bank import BANK

    return BANK


def _takes_qk_norm_config(pass_: Any) -> bool:
    from ..fusions.qk_norm import QKNormConfig

    if not isinstance(pass_, type):
        return False
    try:
        pass_(QKNormConfig(q_size=8, kv_size=4))
    except (TypeError, ValueError):
        return False
    return True


def fuzz_target(name: str) -> Any:
    """The fault ``name`` of the bank as a :class:`pmverify.FuzzTarget`: its row's families and
    strict order, the fusion's set-up and reproducer prelude, and the real-model check (skipped for
    a fault not built from a ``QKNormConfig``). Raises ``KeyError`` for an unknown name,
    ``ValueError`` / ``RuntimeError`` when the fault cannot run here (the fusion's set-up, the
    row's ``requires``)."""
    from pmverify import FuzzTarget

    from ..fusions.qk_norm.testing.target import real_model_check

    fault = bank()[name]
    if fault.requires is not None:
        fault.requires()
    skipped = None if _takes_qk_norm_config(fault.pass_cls) else f"{name} is not built from a QKNormConfig"
    return FuzzTarget(
        fault.pass_cls,
        fault.families(),
        set_up=environment.set_up,
        reproducer_prelude=environment.reproducer_prelude(),
        end_check=real_model_check(skipped),
        strict_order=fault.strict_order,
    )


def fuzz_targets() -> dict[str, Callable[[], Any]]:
    """The bank's target source: each fault's name -> its :func:`fuzz_target`."""
    return {name: functools.partial(fuzz_target, name) for name in bank()}
