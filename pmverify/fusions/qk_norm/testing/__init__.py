"""The QK-norm fusion's testing side: its case strategies, its fuzz target, its environment.

- :func:`qk_norm_cases` / :func:`qk_norm_tp_cases`: random graphs with MiniMax QK norms planted
  (single-rank, and per-rank tensor-parallel), on one layer model (:mod:`.layers`);
- :func:`fuzz_target` / :func:`fuzz_targets`: the fusion as a ``pmverify fuzz`` target (families,
  set-up of Triton's interpreter, reproducer prelude, real-model check), reached by name;
- :func:`rotation`: the single-rank families the target (and the fault bank) rotates through;
  :func:`dynamic_rotation`: the target's families with a symbolic token count.

Names load on first use (PEP 562): importing this package imports neither triton nor Inductor,
so that a fuzz target's set-up runs first.
"""

from __future__ import annotations

from pmverify.lazy import lazy_attributes

__all__ = [
    "qk_norm_cases",
    "qk_norm_tp_cases",
    "QK_NORM_FORMS",
    "QK_NORM_NEAR_MISS_KINDS",
    "QK_NORM_TP_NEAR_MISS_KINDS",
    "draw_layers",
    "fuzz_target",
    "fuzz_targets",
    "rotation",
    "dynamic_rotation",
    "TP_WORLDS",
    "DYNAMIC_TP_WORLD",
]

_HOMES = {
    "qk_norm_cases": ".cases",
    "QK_NORM_FORMS": ".cases",
    "QK_NORM_NEAR_MISS_KINDS": ".cases",
    "qk_norm_tp_cases": ".tp_cases",
    "QK_NORM_TP_NEAR_MISS_KINDS": ".tp_cases",
    "draw_layers": ".layers",
    "fuzz_target": ".target",
    "fuzz_targets": ".target",
    "rotation": ".target",
    "dynamic_rotation": ".target",
    "TP_WORLDS": ".target",
    "DYNAMIC_TP_WORLD": ".target",
}


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
