"""The fault bank: one row per fault, with the oracles that must catch it and where to look."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch
from hypothesis.strategies import SearchStrategy

from ..fusions.qk_norm.testing.target import rotation
from ._common import DtypesConfig
from .aliasing import ReinplaceReadsWhatItWrites
from .broadcasts import GELU_MUL_EXAMPLE as BROADCAST_GELU_MUL_EXAMPLE
from .broadcasts import GeluMulFlattensUnbroadcast
from .broadcasts import gelu_mul_pattern as broadcast_gelu_mul_pattern
from .buffers import RMSNormUninitializedAccumulator
from .cache_keys import QKNormUuidIgnoresConfig
from .casts import QKNormCastsWeightToActivationDtype, QKNormDropsUpcast, QKNormWrongRoundingOrder
from .defunctionalize import BlindDefunctionalization, DefuncConfig
from .dtypes import GELU_MUL_EXAMPLE, GeluMulConfig, GeluMulRegisteredAtFloat32Only, gelu_mul_pattern
from .dynamic import (
    HandHeadRMSNormIntViews,
    HeadRMSNormConfig,
    QKNormAppliesOutsideRange,
    QKNormBakesTokenHint,
    QKNormFakeImplConcreteRows,
    head_rms_norm_pattern,
)
from .identities import IdentityConfig, IdentityFoldingIgnoresPromotion
from .ignored_literals import TransposePairIgnoresDims
from .kernels import (
    QKNormKernelGridCapped,
    QKNormKernelLeavesKOutUnwritten,
    QKNormKernelUnmaskedLoads,
    validate_environment,
)
from .matching import (
    FusedAddRMSNormLeftUnsorted,
    HandRMSNormIgnoresExtraUsers,
    HandRMSNormInsertedBeforeInputs,
    add_rms_norm_pattern,
)
from .mutations import HandRMSNormIgnoresMutations, SwappedAutoFunctionalizedGetitems
from .noop import NoOpConfig, NoOpScatterUnpacksFiveArguments, NoOpSliceEndMinusOne, NoOpSliceIgnoresStep
from .reductions import MeanDecompositionDropsDtype, SoftmaxFusionIgnoresDim, softmax_pattern
from .scalars import (
    AddcmulFusionDropsAlpha,
    AddmmDropsScalars,
    RMSNormEpsConfig,
    RMSNormHardCodedEps,
    addcmul_pattern,
    addmm_cases,
    rms_norm_pattern,
)
from .shared_intermediates import SiluFusionReusesSigmoid
from .stale_regions import WriteBackHoistStaleRegions, hoisted_rms_norm_cases
from .tensor_parallel import QKNormTPLeavesKUnreduced, QKNormTPReadsRankZeroWeights, QKNormWrongTPDivisor
from .unbound_kwargs import MmAddDropsAlpha

__all__ = ["Fault", "BANK"]

Families = list[tuple[str, SearchStrategy]]


@dataclasses.dataclass(frozen=True)
class Fault:
    """One row of the bank.

    - ``pass_cls``: the faulty pass class, built per case as ``pass_cls(case.pass_config)``.
    - ``bug``: the bug kind, in a few words.
    - ``oracles``: the oracles that catch it (a detection by any other oracle alone is not one);
      ``"unfused"`` stands for the search's :class:`~pmverify.UnfusedWarning` (a fault that breaks no
      property: a group of instances it never rewrites), ``"crash"`` for ``check_case``'s own verdict.
    - ``families``: returns the ``(name, strategy)`` case families to search, in rotation (default
      the QK-norm fusion's :func:`~pmverify.fusions.qk_norm.testing.rotation`, what
      ``pmverify fuzz`` searches at tp_world 1).
    - ``requires``: None, or a check that raises ``RuntimeError`` saying what this machine lacks to
      run the fault (selfcheck reports it as an error, not as a search).
    - ``strict_order``: whether it is searched with ``verify(..., strict_order=True)`` (a fault
      only a pass manager without a sort between passes sees; default False).
    - ``entries``: None, or a function returning the pattern entries the pass registers
      (:func:`pmverify.record_entries` while it is built): selfcheck then searches each with
      ``check_entry``, on instances drawn from its own pattern, instead of ``families`` (what
      ``pmverify fuzz --target`` searches).
    """

    pass_cls: type
    bug: str
    oracles: tuple[str, ...]
    families: Callable[[], Families] = rotation
    requires: Callable[[], None] | None = None
    strict_order: bool = False
    entries: Callable[[], list[Any]] | None = None

    @property
    def name(self) -> str:
        return self.pass_cls.__name__


# The per-tensor hand matchers rewrite the transformers form only: the split forms' norms would be
# "planted instance not rewritten" findings that have nothing to do with their bugs.
_per_tensor = functools.partial(rotation, forms=("rms_norm",))


def _tensor_parallel() -> Families:
    """The all-reduce QK norm over tensor-parallel worlds of 1, 2, 4 and 8 ranks."""
    from ..fusions.qk_norm.testing import qk_norm_tp_cases

    return [("qk_norm_tp_cases", qk_norm_tp_cases())]


def _kernel(device: Any = None) -> Families:
    """The split forms (the rewrites the kernel faults replace) with more tokens than the fused
    kernel's grid covers without its grid-stride loop on ``device``. The default tiling
    (``launch_for``) has ``rows`` = 64, 32 or 16 per row block for the drawn widths (``rows ·
    (next_pow2(q_size) + next_pow2(kv_size))`` about 8192 elements, at most 64 rows) and 4 programs in
    Triton's interpreter (CPU cases, which a GPU machine runs on CUDA copies with the same tiling),
    so its grid covers at most 256 rows: 257..320 tokens. On a CUDA ``device`` the grid is 4
    programs per SM (528 on an H100), so the cases have more rows than ``programs · 64`` (34k on an
    H100; the widths stay small). The default widths (4..32-element heads, 1..8 heads) hold many
    that are not powers of two, for the other two faults. No bfloat16: Triton's interpreter casts
    float32 to bfloat16 by truncation, which the semantics oracle would flag in the correct kernel
    too (a finding that is not the fault's)."""
    from ..fusions.qk_norm.testing import qk_norm_cases

    min_tokens = 257
    if device is not None and torch.device(device).type == "cuda":
        from ..fusions.qk_norm import triton_impl

        index = torch.device(device).index or 0
        programs = torch.cuda.get_device_properties(index).multi_processor_count * triton_impl.PROGRAMS_PER_SM
        min_tokens = programs * triton_impl.MAX_ROWS + 1
    cases = qk_norm_cases(
        min_tokens=min_tokens,
        max_tokens=min_tokens + 63,
        dtypes=(torch.float32, torch.float16),
        forms=("qk_norm", "qk_norm_split3"),
    )
    return [("qk_norm_cases", cases)]


def _custom_ops() -> Families:
    """The QK-norm cases with mutating custom ops (``with_mutating_custom_ops``, v1 and v2): among
    them ``y = x.clone(); op(x, out=y)``, with the order-dependent ops."""
    from ..fusions.qk_norm.testing import qk_norm_cases
    from ..strategies import with_mutating_custom_ops

    return [("with_mutating_custom_ops", with_mutating_custom_ops(qk_norm_cases()))]


def _defunc() -> Families:
    """Random graphs with calls of a project's own mutable ops (:func:`~.defunctionalize.defunc_cases`:
    ``with_mutating_custom_ops(fx_graphs(), ops=..., examples=...)``), some with a reader of a
    written tensor's old value after the call."""
    from .defunctionalize import defunc_cases

    return [("with_mutating_custom_ops(ops=defunc_ops)", _with_config(defunc_cases(), DefuncConfig()))]


def _with_config(cases: SearchStrategy, config: Any) -> SearchStrategy:
    """``cases`` with ``pass_config=config`` (the faults are classes built per case from it)."""
    return cases.map(functools.partial(dataclasses.replace, pass_config=config))


#: The ops a no-op elimination rewrites (slices, scatters, views and reshapes in every form of the
#: graphs' level: post-grad graphs hold ``reshape`` only) and a few that read their results, so
#: that a slice taken for the identity changes a shape or a value downstream.
NOOP_OPS = ("slice", "slice_scatter", "view", "reshape", "aten_reshape", "unsafe_view", "neg", "add", "sum", "mm")


def _noop() -> Families:
    """Random graphs of :data:`NOOP_OPS`, 6 to 12 op nodes (:func:`~pmverify.strategies.fx_graphs`
    with ``ops=NOOP_OPS``: about 1.5 slices a graph), for a no-op elimination pass."""
    from ..strategies import fx_graphs

    return [("fx_graphs", _with_config(fx_graphs(ops=NOOP_OPS, min_nodes=6, max_nodes=12), NoOpConfig()))]


#: The ops an identity-folding peephole rewrites (number operands, casts, views and expands in
#: the forms of the graphs' level) and a reader of their results.
IDENTITY_OPS = (
    "mul_scalar",
    "add_scalar",
    "sub_scalar",
    "div_scalar",
    "pow",
    "convert_element_type",
    "to_copy",
    "view",
    "aten_reshape",
    "expand",
    "neg",
)


def _identities() -> Families:
    """Random graphs of :data:`IDENTITY_OPS`, 4 to 10 op nodes: ``fx_graphs`` draws identity
    constants (``x * 1.0`` of an int ``x`` among them) for a share of its number operands."""
    from ..strategies import fx_graphs

    return [("fx_graphs", _with_config(fx_graphs(ops=IDENTITY_OPS, min_nodes=4, max_nodes=10), IdentityConfig()))]


def _reductions() -> Families:
    """Random graphs of reductions (``dtype=`` given or not) and ops around them."""
    from ..strategies import fx_graphs

    ops = ("mean", "sum", "convert_element_type", "neg", "add", "mul", "view")
    return [("fx_graphs", _with_config(fx_graphs(ops=ops, max_nodes=12), DtypesConfig()))]


def _planted(
    pattern: Any, example: tuple[torch.Tensor, ...], vary: Any, config: Any, name: str
) -> Callable[[], Families]:
    """``planted(pattern, like(example, vary=vary))`` with its default arguments otherwise (near
    misses of every kind, random context graphs)."""

    def families() -> Families:
        from ..strategies import like, planted

        return [(f"planted({name})", planted(pattern, like(example, vary=vary), pass_config=config))]

    return families


def _dynamic_qk() -> Families:
    """The QK-norm cases with a symbolic token count (``qk_norm_cases(dynamic=True)``: T at the
    hint 11, its range what the graph allows, past ``config.max_tokens`` too)."""
    from ..fusions.qk_norm.testing import qk_norm_cases

    return [("qk_norm_cases[dynamic=True]", qk_norm_cases(dynamic=True))]


def _head_rms() -> Families:
    """Qwen3-style per-head RMS norms (:func:`~.dynamic.head_rms_norm_pattern`, ``x [T, H*D]``,
    ``w [D]``) planted with a symbolic token count: ``planted(..., dynamic="tokens")``."""
    from ..strategies import like, planted

    example = (torch.empty(8, 32, dtype=torch.bfloat16), torch.empty(8, dtype=torch.bfloat16))
    vary = {"t": [(0, 0)]}
    cases = planted(head_rms_norm_pattern, like(example, vary=vary), dynamic="tokens", pass_config=HeadRMSNormConfig())
    return [('planted(head_rms_norm, dynamic="tokens")', cases)]


def _hoisted_rms() -> Families:
    """RMS norms planted (at least one) in post-grad graphs with mutating custom ops, each mutated
    input copied back at the end or right after its op (:func:`~.stale_regions.hoisted_rms_norm_cases`)."""
    return [("with_mutating_custom_ops(planted(rms_norm))", hoisted_rms_norm_cases(min_instances=1, max_instances=2))]


_T, _H = [(0, 0)], [(0, -1)]


def _gelu_mul() -> Families:
    """The README recipe for a GELU-mul fusion whose users run float32 and bfloat16: ``planted`` over
    ``like`` of the float32 example inputs or of them in bfloat16 (``example_inputs=`` the float32
    ones, so a bfloat16 instance, traced with casts, is ``trace_differs``); its ``dtype`` near misses
    hold the pattern at float16 too."""

    from ..strategies import like, planted

    inputs = like(GELU_MUL_EXAMPLE, vary="duck", dtypes=[torch.float32, torch.bfloat16])
    cases = planted(gelu_mul_pattern, inputs, pass_config=GeluMulConfig())
    return [("planted(gelu_mul, float32 | bfloat16)", cases)]


_softmax = _planted(softmax_pattern, (torch.empty(4, 8), torch.empty(4, 8)), "duck", DtypesConfig(), "softmax")
_addcmul = _planted(addcmul_pattern, (torch.empty(4, 8),) * 3, "duck", DtypesConfig(), "addcmul")
_broadcast_gelu_mul = _planted(
    broadcast_gelu_mul_pattern, BROADCAST_GELU_MUL_EXAMPLE, "duck", DtypesConfig(), "gelu_mul"
)
_rms_eps = _planted(
    rms_norm_pattern,
    (torch.empty(8, 16), torch.empty(16)),
    {"t": _T, "h": [(0, 1), (1, 0)]},
    RMSNormEpsConfig(),
    "rms_norm",
)
_add_rms = _planted(
    add_rms_norm_pattern,
    (torch.empty(8, 16), torch.empty(8, 16), torch.empty(16)),
    {"t": [(0, 0), (1, 0)], "h": [(0, 1), (1, 1), (2, 0)]},
    DtypesConfig(),
    "add_rms_norm",
)


def _recorded(pass_cls: type) -> Callable[[], list[Any]]:
    """The graph entries ``pass_cls()`` registers, recorded (:func:`pmverify.record_entries`)."""

    def entries() -> list[Any]:
        import pmverify

        with pmverify.record_entries(kinds=("graph",)) as recorded:
            pass_cls()
        return recorded

    return entries


def _expr(pass_cls: type) -> Callable[[], Families]:
    """Instances drawn from ``pass_cls``'s entry's pattern (what ``check_entry`` searches), for
    ``pmverify fuzz --target``."""

    def families() -> Families:
        from ..strategies import expr_cases

        return [(f"expr_cases({pass_cls.pass_name})", expr_cases(pass_cls.pattern, name=pass_cls.pass_name))]

    return families


def _entry_fault(pass_cls: type, bug: str, oracles: tuple[str, ...]) -> Fault:
    """A row whose pass holds one graph entry, searched by ``check_entry``."""
    return Fault(pass_cls, bug, oracles, _expr(pass_cls), entries=_recorded(pass_cls))


#: Every fault, by name; add a row to add one.
BANK: dict[str, Fault] = {
    fault.name: fault
    for fault in (
        Fault(QKNormWrongRoundingOrder, "replacement drops the cast order", ("semantics", "structure")),
        Fault(HandRMSNormIgnoresMutations, "hand matcher ignores mutation regions",
              ("expectations", "mutation_barriers", "semantics"), _per_tensor),
        Fault(SwappedAutoFunctionalizedGetitems, "auto_functionalized getitems swapped",
              ("semantics", "functionalization")),
        Fault(QKNormDropsUpcast, "replacement drops the fp32 upcast", ("semantics",)),
        Fault(AddmmDropsScalars, "replacement drops beta/alpha kwargs", ("semantics",),
              lambda: [("addmm_cases", addmm_cases())]),
        Fault(QKNormCastsWeightToActivationDtype, "missing weight-dtype extra_check", ("structure", "semantics")),
        Fault(RMSNormUninitializedAccumulator, "uninitialized buffer (empty for zeros)", ("semantics",)),
        Fault(HandRMSNormIgnoresExtraUsers, "match despite an extra user, whose value is lost",
              ("semantics", "structure"), _per_tensor),
        Fault(QKNormUuidIgnoresConfig, "uuid ignores the config", ("cache_key",)),
        Fault(HandRMSNormInsertedBeforeInputs, "replacement inserted before its input", ("structure",), _per_tensor),
        Fault(QKNormWrongTPDivisor, "wrong tensor-parallel divisor", ("semantics",), _tensor_parallel),
        Fault(QKNormTPLeavesKUnreduced, "k left unreduced", ("semantics",), _tensor_parallel),
        Fault(QKNormTPReadsRankZeroWeights, "reads another rank's weight shard", ("semantics",), _tensor_parallel),
        Fault(QKNormKernelGridCapped, "kernel grid stops at a fixed number of blocks", ("semantics",), _kernel, validate_environment),
        Fault(QKNormKernelUnmaskedLoads, "kernel loads without the column mask", ("semantics",), _kernel, validate_environment),
        Fault(QKNormKernelLeavesKOutUnwritten, "kernel leaves k_out unwritten", ("semantics",), _kernel, validate_environment),
        Fault(NoOpSliceEndMinusOne, "no-op elimination drops slice(x, d, 0, -1)", ("structure", "semantics"), _noop),
        Fault(NoOpSliceIgnoresStep, "no-op elimination ignores the slice step", ("structure", "semantics"), _noop),
        Fault(NoOpScatterUnpacksFiveArguments, "no-op elimination unpacks five slice_scatter arguments", ("crash",),
              _noop),
        Fault(IdentityFoldingIgnoresPromotion, "identity folding (x * 1.0 -> x) ignores type promotion",
              ("structure", "semantics"), _identities),
        Fault(AddcmulFusionDropsAlpha, "rewrite drops the alpha its pattern never names",
              ("semantics", "expectations"), _addcmul),
        Fault(MeanDecompositionDropsDtype, "rewrite drops a reduction's dtype=", ("structure", "semantics"), _reductions),
        Fault(RMSNormHardCodedEps, "replacement hard-codes a nearby eps", ("semantics",), _rms_eps),
        Fault(FusedAddRMSNormLeftUnsorted, "multi-output replacement left before its input", ("structure",), _add_rms,
              strict_order=True),
        Fault(SoftmaxFusionIgnoresDim, "softmax fusion ignores the reduction dim", ("semantics", "expectations"),
              _softmax),
        Fault(QKNormBakesTokenHint, "replacement bakes a symbolic size's hint into a view",
              ("structure", "semantics"), _dynamic_qk),
        Fault(QKNormFakeImplConcreteRows, "fused op's fake impl returns a concrete row count", ("structure",),
              _dynamic_qk),
        Fault(QKNormAppliesOutsideRange, "pass applies outside its compile range",
              ("compile_ranges", "semantics"), _dynamic_qk),
        Fault(HandHeadRMSNormIntViews, "hand matcher compares view sizes with ints", ("expectations",), _head_rms),
        Fault(ReinplaceReadsWhatItWrites, "reinplacing lets an op read what it writes", ("aliasing", "semantics"),
              _custom_ops),
        Fault(WriteBackHoistStaleRegions, "entry moves a copy_, later entries match across it (stale regions)",
              ("mutation_barriers", "semantics"), _hoisted_rms),
        Fault(BlindDefunctionalization, "defunctionalizes in place though a later node reads the old operand",
              ("semantics", "mutation_barriers"), _defunc),
        Fault(GeluMulRegisteredAtFloat32Only, "fusion registered at float32 only, never fuses bfloat16 (never-fused dtype)",
              ("unfused",), _gelu_mul),
        Fault(GeluMulFlattensUnbroadcast, "replacement ignores a broadcast operand", ("semantics",), _broadcast_gelu_mul),
        _entry_fault(MmAddDropsAlpha, "graph handler drops the alpha its pattern does not bind", ("semantics",)),
        _entry_fault(TransposePairIgnoresDims, "graph handler assumes the dims its pattern ignores",
                     ("structure", "semantics")),
        _entry_fault(SiluFusionReusesSigmoid, "graph handler rewrites a _users=MULTIPLE node in place",
                     ("semantics",)),
    )
}  # fmt: skip
