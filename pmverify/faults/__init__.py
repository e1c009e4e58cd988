"""Faulty passes, each modelled on a public bug kind; pmverify must catch every one.

They are importable (so reproducers can rebuild them) and built like the shipped pass:
``verify(faults.QKNormWrongRoundingOrder, strategies.qk_norm_cases())``. One module per bug family:

- :mod:`.casts`: a replacement's dtype casts (cast order, fp32 upcast, weight dtype);
- :mod:`.buffers`: an uninitialized buffer;
- :mod:`.mutations`: mutation regions and ``auto_functionalized`` tuples;
- :mod:`.matching`: what a matcher matches and where it inserts (also a multi-output replacement
  left before its input, a finding only with ``strict_order``);
- :mod:`.scalars`: dropped scalar kwargs (with :func:`~.scalars.addmm_cases`), an ``alpha`` a
  pattern never names, a hard-coded eps;
- :mod:`.noop`: no-op elimination taking slices for the identity;
- :mod:`.reductions`: a dropped ``dtype=``, an ignored softmax dim;
- :mod:`.cache_keys`: a ``uuid()`` blind to the configuration;
- :mod:`.tensor_parallel`: the all-reduce QK norm's divisor, reduction and weight shards;
- :mod:`.kernels`: the fused op's Triton kernel (grid, column mask, chunk count), with faulty
  launchers that are drop-ins for ``qk_norm_triton``.

``__all__`` lists the faults only (``pmverify fuzz --target`` reads it); :data:`BANK` holds one
:class:`Fault` row per fault, with the oracles that must catch it and the case families to search
(what ``pmverify selfcheck`` runs).
"""

from __future__ import annotations

from ._bank import BANK as BANK
from ._bank import Fault as Fault
from ._bank import rotation as rotation
from .buffers import RMSNormUninitializedAccumulator
from .cache_keys import QKNormUuidIgnoresConfig
from .casts import QKNormCastsWeightToActivationDtype, QKNormDropsUpcast, QKNormWrongRoundingOrder
from .kernels import QKNormKernelGridCapped, QKNormKernelLeavesKOutUnwritten, QKNormKernelUnmaskedLoads
from .matching import FusedAddRMSNormLeftUnsorted, HandRMSNormIgnoresExtraUsers, HandRMSNormInsertedBeforeInputs
from .mutations import HandRMSNormIgnoresMutations, SwappedAutoFunctionalizedGetitems
from .noop import NoOpSliceEndMinusOne, NoOpSliceIgnoresStep
from .reductions import MeanDecompositionDropsDtype, SoftmaxFusionIgnoresDim
from .scalars import AddcmulFusionDropsAlpha, AddmmDropsScalars, RMSNormHardCodedEps
from .scalars import UnfuseAddmmConfig as UnfuseAddmmConfig
from .scalars import addmm_cases as addmm_cases
from .tensor_parallel import QKNormTPLeavesKUnreduced, QKNormTPReadsRankZeroWeights, QKNormWrongTPDivisor

__all__ = [
    "QKNormWrongRoundingOrder",
    "HandRMSNormIgnoresMutations",
    "SwappedAutoFunctionalizedGetitems",
    "QKNormDropsUpcast",
    "AddmmDropsScalars",
    "QKNormCastsWeightToActivationDtype",
    "RMSNormUninitializedAccumulator",
    "HandRMSNormIgnoresExtraUsers",
    "QKNormUuidIgnoresConfig",
    "HandRMSNormInsertedBeforeInputs",
    "QKNormWrongTPDivisor",
    "QKNormTPLeavesKUnreduced",
    "QKNormTPReadsRankZeroWeights",
    "QKNormKernelGridCapped",
    "QKNormKernelUnmaskedLoads",
    "QKNormKernelLeavesKOutUnwritten",
    "NoOpSliceEndMinusOne",
    "NoOpSliceIgnoresStep",
    "AddcmulFusionDropsAlpha",
    "MeanDecompositionDropsDtype",
    "RMSNormHardCodedEps",
    "FusedAddRMSNormLeftUnsorted",
    "SoftmaxFusionIgnoresDim",
]
