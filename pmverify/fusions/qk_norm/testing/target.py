"""The QK-norm fusion as a fuzz target (``pmverify fuzz``'s default, ``--target qk_norm``).

:func:`fuzz_targets` is the target source the job reaches by name
(``pmverify.fusions.qk_norm.testing:fuzz_targets``); it imports nothing of triton or Inductor, so
that the target's set-up (Triton's interpreter without a GPU) runs before them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import environment

__all__ = [
    "TP_WORLDS",
    "DYNAMIC_TP_WORLD",
    "rotation",
    "dynamic_rotation",
    "fuzz_target",
    "fuzz_targets",
    "real_model_check",
]

#: The world sizes the shipped pass is fuzzed on, one rotation batch each (besides tp_world 1).
TP_WORLDS = (2, 4, 8)
#: The world size of the tensor-parallel family with a symbolic token count.
DYNAMIC_TP_WORLD = 2


def rotation(**qk_norm_kwargs: Any) -> list[tuple[str, Any]]:
    """The single-rank case families the fuzz target rotates through, ``(name, strategy)`` in
    order: plain ``qk_norm_cases(**qk_norm_kwargs)``, their in-place form ``with_mutations(...)``
    and their functional form with mutating custom ops ``with_mutating_custom_ops(...)``. Raises
    ``hypothesis.errors.InvalidArgument`` for arguments :func:`.qk_norm_cases` refuses."""
    from ....strategies import with_mutating_custom_ops, with_mutations
    from .cases import qk_norm_cases

    return [
        ("qk_norm_cases", qk_norm_cases(**qk_norm_kwargs)),
        ("with_mutations", with_mutations(qk_norm_cases(**qk_norm_kwargs))),
        ("with_mutating_custom_ops", with_mutating_custom_ops(qk_norm_cases(**qk_norm_kwargs))),
    ]


def dynamic_rotation() -> list[tuple[str, Any]]:
    """The case families with a symbolic token count the fuzz target rotates through, ``(name,
    strategy)``: ``qk_norm_cases(dynamic=True)`` and ``qk_norm_tp_cases(dynamic=True)`` on
    :data:`DYNAMIC_TP_WORLD` ranks."""
    from hypothesis import strategies as st

    from .cases import qk_norm_cases
    from .tp_cases import qk_norm_tp_cases

    return [
        ("qk_norm_cases[dynamic=True]", qk_norm_cases(dynamic=True)),
        (
            f"qk_norm_tp_cases[tp_world={DYNAMIC_TP_WORLD},dynamic=True]",
            qk_norm_tp_cases(tp_world=st.just(DYNAMIC_TP_WORLD), dynamic=True),
        ),
    ]


def real_model_check(skipped: str | None = None) -> Any:
    """The compiled tiny MiniMax-M2 check (:func:`..real_model.check_minimax_m2`) as an
    :class:`pmverify.EndCheck`, run on the target's pass (a class built from a ``QKNormConfig``)
    twice: static (``dynamic=False``) and with a symbolic token dim (``dynamic=True``), on the job's
    ``--device`` (default CPU). Its result
    sums the two runs' matches and elapsed time, takes the larger error, is ``ok`` when both are,
    and holds each run's result under ``"static"`` and ``"dynamic"``. ``skipped``: why it does not
    apply to the target (reported as skipped)."""
    from pmverify import EndCheck

    def run(pass_factory: Any, device: Any = None) -> dict:
        from pmverify.targets import jsonable

        from ..real_model import check_minimax_m2

        static = jsonable(check_minimax_m2(pass_factory=pass_factory, device=device))
        if static.get("skipped"):
            return static
        dynamic = jsonable(check_minimax_m2(pass_factory=pass_factory, dynamic=True, device=device))
        errors = [run["max_abs_err"] for run in (static, dynamic)]
        return {
            **static,
            "matches": static["matches"] + dynamic["matches"],
            "expected_matches": static["expected_matches"] + dynamic["expected_matches"],
            "fused_ops": static["fused_ops"] + dynamic["fused_ops"],
            "max_abs_err": None if None in errors else max(errors),
            "exact": static["exact"] and dynamic["exact"],
            "ok": static["ok"] and dynamic["ok"],
            "elapsed_s": static["elapsed_s"] + dynamic["elapsed_s"],
            "detail": f"static: {static['detail']}; dynamic: {dynamic['detail']}",
            "static": static,
            "dynamic": dynamic,
        }

    return EndCheck(
        "minimax_m2",
        "tiny MiniMax-M2 with the pass, compiled with and without it, static and with a dynamic token dim",
        run,
        skipped,
    )


def fuzz_target() -> Any:
    """The shipped :class:`~pmverify.fusions.qk_norm.QKNormFusionPass` as a
    :class:`pmverify.FuzzTarget`: static and dynamic families alternate with tensor-parallel
    ones: plain graphs, then the all-reduce form on 2 ranks; plain graphs with a symbolic token
    count (:func:`dynamic_rotation`), then the all-reduce form with one; the in-place form, then 4
    ranks; the functional form with mutating custom ops (auto_functionalized), then 8 ranks. A run
    of eight batches has checked tp_world 2, 4 and 8 and symbolic token counts at tp_world 1 and 2;
    the real-model check, static and dynamic, at the end. Runs the fusion's environment set-up
    first (:func:`..environment.set_up`: raises ``ValueError`` / ``RuntimeError`` when the fused
    ops cannot run here)."""
    environment.set_up()
    from hypothesis import strategies as st

    from pmverify import FuzzTarget

    from ..fusion_pass import QKNormFusionPass
    from .tp_cases import qk_norm_tp_cases

    tp = [(f"qk_norm_tp_cases[tp_world={world}]", qk_norm_tp_cases(tp_world=st.just(world))) for world in TP_WORLDS]
    (plain, *wrapped), (dynamic, dynamic_tp) = rotation(), dynamic_rotation()
    single = [plain, dynamic, *wrapped]
    tp.insert(1, dynamic_tp)
    families = [family for pair in zip(single, tp, strict=True) for family in pair]
    return FuzzTarget(
        QKNormFusionPass,
        families,
        set_up=environment.set_up,
        reproducer_prelude=environment.reproducer_prelude(),
        end_check=real_model_check(),
    )


def fuzz_targets() -> dict[str, Callable[[], Any]]:
    """The fusion's target source: ``{"qk_norm": fuzz_target}``."""
    return {"qk_norm": fuzz_target}
