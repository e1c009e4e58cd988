"""MiniMax-style QK-norm fusion: config, pass, fused ops and the rewrites they implement; its
cases, fuzz target and real-model check in :mod:`.testing` and :mod:`.real_model`.

Importing the package registers the fused ops (``torch.ops.pmverify.*``, :mod:`.ops`); the pass
and its patterns load on first use (PEP 562), so that importing the package or a submodule
(:mod:`.environment`, :mod:`.testing`) imports neither triton nor Inductor, and a fuzz target can
set up Triton's interpreter first.
"""

from __future__ import annotations

from pmverify.lazy import lazy_attributes

from . import ops
from .config import QKNormConfig

__all__ = ["QKNormConfig", "QKNormFusionPass", "ops", "rewrites"]

_HOMES = {"QKNormFusionPass": ".fusion_pass", "rewrites": ".patterns"}


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
