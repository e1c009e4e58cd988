"""MiniMax-style QK-norm fusion: config, pass, fused ops and the rewrites they implement."""

from . import ops
from .config import QKNormConfig
from .fusion_pass import QKNormFusionPass
from .patterns import rewrites

__all__ = ["QKNormConfig", "QKNormFusionPass", "ops", "rewrites"]
