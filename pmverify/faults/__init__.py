"""Faulty passes, each modelled on a public bug kind; pmverify must catch every one.

They are importable (so reproducers can rebuild them) and built like the shipped pass:
``verify(faults.QKNormWrongRoundingOrder, qk_norm_cases())`` (the shipped pass's cases,
``pmverify.fusions.qk_norm.testing.qk_norm_cases``). One module per bug family:

- :mod:`.casts`: a replacement's dtype casts (cast order, fp32 upcast, weight dtype);
- :mod:`.buffers`: an uninitialized buffer;
- :mod:`.mutations`: mutation regions and ``auto_functionalized`` tuples;
- :mod:`.aliasing`: a reinplacing that lets an op read what it writes;
- :mod:`.matching`: what a matcher matches and where it inserts (also a multi-output replacement
  left before its input, a finding only with ``strict_order``);
- :mod:`.scalars`: dropped scalar kwargs (with :func:`~.scalars.addmm_cases`), an ``alpha`` a
  pattern never names, a hard-coded eps;
- :mod:`.noop`: no-op elimination taking slices for the identity;
- :mod:`.identities`: identity folding (``x * 1`` -> ``x``) ignoring type promotion;
- :mod:`.reductions`: a dropped ``dtype=``, an ignored softmax dim;
- :mod:`.cache_keys`: a ``uuid()`` blind to the configuration;
- :mod:`.tensor_parallel`: the all-reduce QK norm's divisor, reduction and weight shards;
- :mod:`.kernels`: the fused op's Triton kernel (grid, column mask, chunk count), with faulty
  launchers that are drop-ins for ``qk_norm_triton``;
- :mod:`.dynamic`: bugs only a symbolic token count shows (a baked hint, a fake impl's concrete
  rows, a pass applying past its range, a matcher comparing view sizes with ints);
- :mod:`.stale_regions`: a pattern entry that moves a mutation, and later entries matching across
  it on stale mutation regions;
- :mod:`.defunctionalize`: a defunctionalization of a project's own mutable ops that rewrites in
  place though a later node reads the old operand (with the correct pass it should be);
- :mod:`.unbound_kwargs`, :mod:`.ignored_literals`, :mod:`.shared_intermediates`: hand-written
  ``register_graph_pattern`` handlers (one entry a pass, :mod:`._entry_pass`) that drop an ``alpha``
  their pattern does not bind, assume dims their pattern holds as ``Ignored()``, rewrite a
  ``_users=MULTIPLE`` node in place; their bank rows are searched by ``check_entry``.

``__all__`` lists the faults only (``pmverify fuzz --target`` takes their names); :data:`BANK` holds one
:class:`Fault` row per fault, with the oracles that must catch it and the case families to search
(what ``pmverify selfcheck`` runs); :mod:`.target` makes each fault a ``pmverify fuzz`` target.
"""

from __future__ import annotations

from pmverify.lazy import lazy_attributes

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
    "NoOpScatterUnpacksFiveArguments",
    "IdentityFoldingIgnoresPromotion",
    "AddcmulFusionDropsAlpha",
    "MeanDecompositionDropsDtype",
    "RMSNormHardCodedEps",
    "FusedAddRMSNormLeftUnsorted",
    "SoftmaxFusionIgnoresDim",
    "QKNormBakesTokenHint",
    "QKNormFakeImplConcreteRows",
    "QKNormAppliesOutsideRange",
    "HandHeadRMSNormIntViews",
    "ReinplaceReadsWhatItWrites",
    "WriteBackHoistStaleRegions",
    "BlindDefunctionalization",
    "GeluMulRegisteredAtFloat32Only",
    "GeluMulFlattensUnbroadcast",
    "MmAddDropsAlpha",
    "TransposePairIgnoresDims",
    "SiluFusionReusesSigmoid",
]

#: Where each name lives, imported on first use (PEP 562): importing this package imports neither
#: triton nor Inductor, so that :func:`.target.fuzz_targets` can set up Triton's interpreter first.
_HOMES = {
    "BANK": "._bank",
    "Fault": "._bank",
    "RMSNormUninitializedAccumulator": ".buffers",
    "GeluMulFlattensUnbroadcast": ".broadcasts",
    "GeluMulFlattens": ".broadcasts",
    "QKNormUuidIgnoresConfig": ".cache_keys",
    "QKNormCastsWeightToActivationDtype": ".casts",
    "QKNormDropsUpcast": ".casts",
    "QKNormWrongRoundingOrder": ".casts",
    "QKNormKernelGridCapped": ".kernels",
    "QKNormKernelLeavesKOutUnwritten": ".kernels",
    "QKNormKernelUnmaskedLoads": ".kernels",
    "FusedAddRMSNormLeftUnsorted": ".matching",
    "HandRMSNormIgnoresExtraUsers": ".matching",
    "HandRMSNormInsertedBeforeInputs": ".matching",
    "HandRMSNormIgnoresMutations": ".mutations",
    "SwappedAutoFunctionalizedGetitems": ".mutations",
    "NoOpSliceEndMinusOne": ".noop",
    "NoOpSliceIgnoresStep": ".noop",
    "NoOpScatterUnpacksFiveArguments": ".noop",
    "IdentityFoldingIgnoresPromotion": ".identities",
    "HandIdentityFolding": ".identities",
    "IdentityConfig": ".identities",
    "MeanDecompositionDropsDtype": ".reductions",
    "SoftmaxFusionIgnoresDim": ".reductions",
    "AddcmulFusionDropsAlpha": ".scalars",
    "AddmmDropsScalars": ".scalars",
    "RMSNormHardCodedEps": ".scalars",
    "UnfuseAddmmConfig": ".scalars",
    "addmm_cases": ".scalars",
    "QKNormTPLeavesKUnreduced": ".tensor_parallel",
    "QKNormTPReadsRankZeroWeights": ".tensor_parallel",
    "QKNormWrongTPDivisor": ".tensor_parallel",
    "QKNormBakesTokenHint": ".dynamic",
    "QKNormFakeImplConcreteRows": ".dynamic",
    "QKNormAppliesOutsideRange": ".dynamic",
    "HandHeadRMSNormIntViews": ".dynamic",
    "HeadRMSNormConfig": ".dynamic",
    "ReinplaceReadsWhatItWrites": ".aliasing",
    "head_rms_norm_pattern": ".dynamic",
    "WriteBackHoistStaleRegions": ".stale_regions",
    "BlindDefunctionalization": ".defunctionalize",
    "Defunctionalization": ".defunctionalize",
    "DefuncConfig": ".defunctionalize",
    "GeluMulRegisteredAtFloat32Only": ".dtypes",
    "GeluMulFusion": ".dtypes",
    "GeluMulConfig": ".dtypes",
    "gelu_mul_pattern": ".dtypes",
    "MmAddDropsAlpha": ".unbound_kwargs",
    "MmAddToAddmm": ".unbound_kwargs",
    "mm_add_pattern": ".unbound_kwargs",
    "TransposePairIgnoresDims": ".ignored_literals",
    "TransposePairElimination": ".ignored_literals",
    "transpose_pair_pattern": ".ignored_literals",
    "SiluFusionReusesSigmoid": ".shared_intermediates",
    "SiluFusion": ".shared_intermediates",
    "silu_pattern": ".shared_intermediates",
}


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
