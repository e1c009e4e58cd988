"""Pattern-matcher fusions written as vLLM writes them: ``register_replacement(pattern,
replacement, example_inputs, fwd_only, patterns)`` into one ``PatternMatcherPass`` per pass object,
patterns and replacements calling out-variant ops through ``auto_functionalized`` with ``empty``
result buffers.

Inductor's matcher takes every int, float, list and dtype literal of a pattern as a wildcard, so the
epsilon and the buffers' dtypes are checked in ``extra_check`` (:func:`_same_literals`): a correct
pass refuses an instance whose epsilon or buffer dtypes differ from those its replacement writes.

- :class:`RMSNormQuantFusionPass`: ``rms_norm`` then ``static_scaled_fp8_quant`` (with its scale
  input) -> ``rms_norm_static_fp8_quant``. Bug: :class:`ScaleInvertedQuantFusionPass`.
- :class:`FusedAddRMSNormQuantFusionPass`: ``fused_add_rms_norm`` then the quant ->
  ``fused_add_rms_norm_static_fp8_quant``, returning the quantized output and the new residual.
  Bug: :class:`OldResidualQuantFusionPass`.
- :class:`AllReduceRMSNormFusionPass`: ``all_reduce`` then ``rms_norm`` -> ``all_reduce_rms_norm``
  with this rank's ``tp_rank``. Bug: :class:`RankZeroAllReduceFusionPass`.
- :class:`EpsilonBlindUuidQuantFusionPass`: the correct quant fusion whose ``uuid()`` leaves out
  ``epsilon``, which its patterns read (a cache-key bug).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import torch
from torch._higher_order_ops.auto_functionalize import auto_functionalized
from torch._inductor.pattern_matcher import Match, PatternMatcherPass, fwd_only, register_replacement
from torch._subclasses.fake_tensor import FakeTensorMode

from .config import VStyleConfig, VStylePass
from .ops import ops

RMS = ops.rms_norm.default
FUSED_ADD_RMS = ops.fused_add_rms_norm.default
QUANT = ops.static_scaled_fp8_quant.default
RMS_QUANT = ops.rms_norm_static_fp8_quant.default
FUSED_ADD_RMS_QUANT = ops.fused_add_rms_norm_static_fp8_quant.default
ALL_REDUCE = ops.all_reduce.default
ALL_REDUCE_RMS = ops.all_reduce_rms_norm.default
_NORMS = (RMS, FUSED_ADD_RMS)


def _example(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype)


def _dtype(node: Any) -> torch.dtype | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val.dtype if isinstance(val, torch.Tensor) else None


def _same_literals(config: VStyleConfig, *, epsilon: bool = True):
    """An ``extra_check`` accepting a match whose ``auto_functionalized`` norms have the config's
    epsilon, whose norm writes into a buffer of its input's dtype, and whose quant writes the
    config's ``quant_dtype``: the literals the matcher does not compare."""

    def check(match: Match) -> bool:
        for node in match.nodes:
            if node.target is not auto_functionalized:
                continue
            op, kwargs = node.args[0], node.kwargs
            if epsilon and op in _NORMS and kwargs.get("epsilon") != config.epsilon:
                return False
            if op is RMS and _dtype(kwargs["result"]) != _dtype(kwargs["input"]):
                return False
            if op is QUANT and _dtype(kwargs["result"]) != config.quant_dtype:
                return False
        return True

    return check


class _FusionPass(VStylePass):
    """Registers its patterns once per object, into its own ``PatternMatcherPass``."""

    def __init__(self, config: VStyleConfig) -> None:
        super().__init__(config)
        self.patterns = PatternMatcherPass(pass_name=type(self).__name__)
        # as vLLM's ``enable_fake_mode``: patterns are traced on fake tensors, so that tracing never
        # runs a kernel (the collective's would need a process group)
        with FakeTensorMode():
            self.register()

    @abc.abstractmethod
    def register(self) -> None:
        """Register the fusion's patterns into ``self.patterns``."""

    def apply(self, graph: torch.fx.Graph) -> int:
        return self.patterns.apply(graph)


class RMSNormQuantFusionPass(_FusionPass):
    uses: ClassVar[tuple[str, ...]] = ("epsilon", "quant_dtype")

    def quant_scale(self, scale: torch.Tensor) -> torch.Tensor:
        return scale

    def literal_check(self):
        return _same_literals(self.config)

    def register(self) -> None:
        eps, quant_dtype = self.config.epsilon, self.config.quant_dtype

        def rms_quant_pattern(input: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor):
            normed = auto_functionalized(RMS, result=torch.empty_like(input), input=input, weight=weight, epsilon=eps)
            result = torch.empty(input.shape, dtype=quant_dtype)
            return auto_functionalized(QUANT, result=result, input=normed[1], scale=scale)[1]

        def rms_quant_replacement(input: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor):
            result = torch.empty(input.shape, dtype=quant_dtype)
            fused = auto_functionalized(
                RMS_QUANT, result=result, input=input, weight=weight, scale=self.quant_scale(scale), epsilon=eps
            )
            return fused[1]

        example = [_example(5, 16), _example(16), _example(1)]
        register_replacement(
            rms_quant_pattern,
            rms_quant_replacement,
            example,
            fwd_only,
            self.patterns,
            extra_check=self.literal_check(),
        )


class ScaleInvertedQuantFusionPass(RMSNormQuantFusionPass):
    """Bug: hands the fused op ``1 / scale``, multiplying by the scale where the quant divides."""

    def quant_scale(self, scale: torch.Tensor) -> torch.Tensor:
        return scale.reciprocal()


class EpsilonUncheckedQuantFusionPass(RMSNormQuantFusionPass):
    """Bug: its ``extra_check`` leaves out epsilon, which the matcher does not compare, so it fuses
    a norm of another epsilon with the config's baked into the replacement."""

    def literal_check(self):
        return _same_literals(self.config, epsilon=False)


class EpsilonBlindUuidQuantFusionPass(RMSNormQuantFusionPass):
    """Bug: the uuid leaves out ``epsilon``, which the patterns and replacement bake in."""

    uses: ClassVar[tuple[str, ...]] = ("quant_dtype",)


class FusedAddRMSNormQuantFusionPass(_FusionPass):
    uses: ClassVar[tuple[str, ...]] = ("epsilon", "quant_dtype")

    def routed(self, fused: Any, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The replacement's outputs: the quantized result and the new residual."""
        return fused[1], fused[2]

    def register(self) -> None:
        eps, quant_dtype = self.config.epsilon, self.config.quant_dtype

        def fused_add_rms_quant_pattern(input, residual, weight, scale):
            normed = auto_functionalized(FUSED_ADD_RMS, input=input, residual=residual, weight=weight, epsilon=eps)
            result = torch.empty(input.shape, dtype=quant_dtype)
            quantized = auto_functionalized(QUANT, result=result, input=normed[1], scale=scale)
            return quantized[1], normed[2]

        def fused_add_rms_quant_replacement(input, residual, weight, scale):
            result = torch.empty(input.shape, dtype=quant_dtype)
            fused = auto_functionalized(
                FUSED_ADD_RMS_QUANT,
                result=result,
                input=input,
                residual=residual,
                weight=weight,
                scale=scale,
                epsilon=eps,
            )
            return self.routed(fused, residual)

        example = [_example(5, 16), _example(5, 16), _example(16), _example(1)]
        register_replacement(
            fused_add_rms_quant_pattern,
            fused_add_rms_quant_replacement,
            example,
            fwd_only,
            self.patterns,
            extra_check=_same_literals(self.config),
        )


class OldResidualQuantFusionPass(FusedAddRMSNormQuantFusionPass):
    """Bug: returns the residual as it was read, not the sum the fused op writes into it."""

    def routed(self, fused: Any, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return fused[1], residual


class AllReduceRMSNormFusionPass(_FusionPass):
    uses: ClassVar[tuple[str, ...]] = ("epsilon", "tp_rank", "tp_world", "group_name")

    def fused_rank(self) -> int:
        return self.config.tp_rank

    def register(self) -> None:
        config = self.config

        def all_reduce_rms_pattern(input: torch.Tensor, weight: torch.Tensor):
            total = ALL_REDUCE(input, config.group_name)
            normed = auto_functionalized(
                RMS, result=torch.empty_like(total), input=total, weight=weight, epsilon=config.epsilon
            )
            return normed[1]

        def all_reduce_rms_replacement(input: torch.Tensor, weight: torch.Tensor):
            fused = auto_functionalized(
                ALL_REDUCE_RMS,
                result=torch.empty_like(input),
                input=input,
                weight=weight,
                epsilon=config.epsilon,
                group_name=config.group_name,
                tp_rank=self.fused_rank(),
                tp_world=config.tp_world,
            )
            return fused[1]

        register_replacement(
            all_reduce_rms_pattern,
            all_reduce_rms_replacement,
            [_example(5, 16), _example(16)],
            fwd_only,
            self.patterns,
            extra_check=_same_literals(config),
        )


class RankZeroAllReduceFusionPass(AllReduceRMSNormFusionPass):
    """Bug: every rank tells the fused op it is rank 0."""

    def fused_rank(self) -> int:
        return 0


class HandRMSQuantFusionPass(VStylePass):
    """The quant fusion written by hand (no pattern matcher), as vLLM's older passes walk the graph:
    ``auto_functionalized(rms_norm)`` whose new result only the quant reads becomes one
    ``auto_functionalized(rms_norm_static_fp8_quant)`` with the config's epsilon, the quant's own
    result buffer and scale. It refuses a norm of another epsilon (:attr:`checks_epsilon`)."""

    uses: ClassVar[tuple[str, ...]] = ("epsilon",)
    checks_epsilon: ClassVar[bool] = True

    def apply(self, graph: torch.fx.Graph) -> int:
        import operator

        count = 0
        for quant in list(graph.nodes):
            if quant.target is not auto_functionalized or quant.args[0] is not QUANT:
                continue
            normed = quant.kwargs["input"]
            if not (isinstance(normed, torch.fx.Node) and normed.target is operator.getitem and normed.args[1] == 1):
                continue
            norm = normed.args[0]
            if norm.target is not auto_functionalized or norm.args[0] is not RMS or len(normed.users) != 1:
                continue
            if len(norm.users) != 1 or (self.checks_epsilon and norm.kwargs["epsilon"] != self.config.epsilon):
                continue
            kwargs = {
                "result": quant.kwargs["result"],
                "input": norm.kwargs["input"],
                "weight": norm.kwargs["weight"],
                "scale": quant.kwargs["scale"],
                "epsilon": self.config.epsilon,
            }
            with graph.inserting_before(quant):
                fused = graph.call_function(auto_functionalized, (RMS_QUANT,), kwargs)
            fused.meta.update(quant.meta)
            quant.replace_all_uses_with(fused)
            graph.erase_node(quant)
            graph.erase_node(normed)
            graph.erase_node(norm)
            count += 1
        return count


class EpsilonIgnoringHandFusionPass(HandRMSQuantFusionPass):
    """Bug: fuses a norm of any epsilon, baking the config's into the fused op."""

    checks_epsilon: ClassVar[bool] = False
