"""Faults in a pass's cache key (``uuid()``), which Inductor's FX graph cache keys compiled graphs on."""

from __future__ import annotations

import hashlib
import inspect

from ..fusions.qk_norm import QKNormFusionPass
from ..fusions.qk_norm import config as _config_module
from ..fusions.qk_norm import fusion_pass as _fusion_pass_module
from ..fusions.qk_norm import ops as _ops_module
from ..fusions.qk_norm import patterns as _patterns_module

__all__ = ["QKNormUuidIgnoresConfig"]


class QKNormUuidIgnoresConfig(QKNormFusionPass):
    """Bug kind: a ``uuid()`` that ignores the pass's configuration.

    vLLM's MiniMax QK-norm pass hashes its source files only, so two passes built for another eps,
    dtype, width or tensor-parallel size share a uuid, and Inductor's FX graph cache reuses a graph
    compiled under one config for the other. This pass rewrites exactly as the shipped pass does (no
    graph ever shows the bug); its ``uuid()`` hashes the sources of the fusion's modules and of this
    one, not ``config``. The cache_key oracle builds the pass for the case's config and for variants
    differing in one field, and reports equal uuids for different configs.
    """

    def uuid(self) -> str:
        digest = hashlib.sha256()
        for module in (_config_module, _ops_module, _patterns_module, _fusion_pass_module):
            digest.update(inspect.getsource(module).encode())
        digest.update(inspect.getsource(QKNormUuidIgnoresConfig).encode())  # the bug: no config fields
        return digest.hexdigest()
