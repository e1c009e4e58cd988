"""Correct passes whose own matcher is not the planted function's (issue 28, item 3), each with a
wrong twin: a pattern covering a part of the planted function, a fill value taken as a wildcard
(``scalar_workaround``, or a hand matcher reading it from the node), a hand fusion that keeps an
intermediate for its other reader, and a hand RMS norm that leaves the token limit to
``is_applicable_for_range``."""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

from pmverify.faults._hand import HandRMSNorm

aten = torch.ops.aten

# ------------------------------------------------------------- a pattern covering part of the planted function


def rms_norm_then_scale_pattern(x, w, y):
    """The planted function: an RMS norm (eps 1e-6) times ``w``, then times ``y`` and 0.5
    (``x``, ``y``: ``[T, H]``; ``w``: ``[H]``)."""
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w) * y * 0.5


RMS_THEN_SCALE_EXAMPLE = (torch.empty(8, 16), torch.empty(16), torch.empty(8, 16))
RMS_THEN_SCALE_VARY = {"t": [(0, 0), (2, 0)], "h": [(0, 1), (1, 0), (2, 1)]}


def _refuse_keywords(match) -> bool:
    return not any(node.kwargs for node in match.nodes)


def rms_norm_only(eps: float = 1e-6) -> PatternMatcherPass:
    """A ``register_replacement`` pass for the RMS norm alone (``x * rsqrt(mean(x²) + eps) * w``,
    eps a literal): the head of the planted function, whose tail (``* y * 0.5``) it never reads.
    Correct at eps 1e-6; at another eps it never matches the planted function (the wrong twin)."""

    def search(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def replace(x, w):
        return x * (torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w)

    patterns = PatternMatcherPass(pass_name=f"rms_norm_only_{eps:g}")
    register_replacement(
        search, replace, [torch.empty(8, 16), torch.empty(16)], fwd_only, patterns, extra_check=_refuse_keywords
    )
    return patterns


# ------------------------------------------------------------------------ a fill value taken as a wildcard


def masked_add_pattern(x, mask, y):
    """The planted function: ``x`` filled with -1e4 where ``mask``, plus ``y`` (``[T, H]`` each,
    ``mask`` bool). Traced, the fill value is the argument of a ``scalar_tensor`` that ``where``
    reads."""
    return x.masked_fill(mask, -10000.0) + y


MASKED_ADD_EXAMPLE = (torch.empty(4, 8), torch.empty(4, 8, dtype=torch.bool), torch.empty(4, 8))


def _masked_add_search(x, mask, y, value):
    return x.masked_fill(mask, value) + y


def _masked_add_replacement(x, mask, y, value):
    return torch.where(mask, y + value, x + y)


def _masked_add_hard_coded(x, mask, y, value):
    return torch.where(mask, y - 10000.0, x + y)  # the bug: the fill value is a wildcard


def _a_number(match) -> bool:
    """A number for the fill value, no keyword argument the pattern does not hold (``alpha=`` on the
    add: Inductor's matcher ignores it), and the fill tensor in the result's dtype."""
    fills = [node for node in match.nodes if node.target is aten.scalar_tensor.default]
    return (
        not isinstance(match.kwargs.get("value"), torch.fx.Node)
        and not any(node.kwargs for node in match.nodes if node not in fills)
        and all(fill.kwargs.get("dtype") == match.output_node().meta["val"].dtype for fill in fills)
    )


def masked_add_wildcard(hard_coded: bool = False) -> PatternMatcherPass:
    """A ``register_replacement`` pass for ``masked_fill(x, mask, value) + y`` with
    ``scalar_workaround={"value": -1e4}``: it matches any fill value, and its replacement uses the
    one it matched. ``hard_coded``: the wrong twin, whose replacement uses -1e4 whatever it matched."""
    patterns = PatternMatcherPass(pass_name="masked_add_hard_coded" if hard_coded else "masked_add")
    register_replacement(
        _masked_add_search,
        _masked_add_hard_coded if hard_coded else _masked_add_replacement,
        [torch.empty(4, 8), torch.empty(4, 8, dtype=torch.bool), torch.empty(4, 8)],
        fwd_only,
        patterns,
        extra_check=_a_number,
        scalar_workaround={"value": -10000.0},
    )
    return patterns


def _fill_input_search(x, mask, y, fill):
    return torch.where(mask, fill, x) + y


def _fill_input_replacement(x, mask, y, fill):
    return torch.where(mask, y + fill, x + y)


def masked_add_fill_input() -> PatternMatcherPass:
    """A ``register_replacement`` pass for ``where(mask, fill, x) + y`` with the fill value a 0-d
    tensor input of its pattern: it matches the ``scalar_tensor`` a traced ``masked_fill`` fills
    with, at any value, and its replacement adds the one it matched."""

    def same_dtype(match) -> bool:
        fill, out = match.kwargs["fill"].meta.get("val"), match.output_node().meta["val"]
        return _refuse_keywords(match) and isinstance(fill, torch.Tensor) and fill.dtype == out.dtype

    patterns = PatternMatcherPass(pass_name="masked_add_fill_input")
    register_replacement(
        _fill_input_search,
        _fill_input_replacement,
        [torch.empty(4, 8), torch.empty(4, 8, dtype=torch.bool), torch.empty(4, 8), torch.empty(())],
        fwd_only,
        patterns,
        extra_check=same_dtype,
    )
    return patterns


def _only(node: Any, target: Any, arity: int) -> bool:
    return (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target is target
        and len(node.args) == arity
        and not node.kwargs
    )


class HandMaskedAdd:
    """A hand-written pass for ``add(where(mask, scalar_tensor(value), x), y)`` (a ``masked_fill``
    then an add, as traced): reads the fill value from the node (any number), replaces them with
    ``where(mask, y + value, x + y)``. Its matcher is unknown to pmverify. ``hard_coded``: the wrong
    twin, which adds -1e4 whatever the fill value."""

    hard_coded = False

    def __init__(self) -> None:
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        count = 0
        for add in list(graph.find_nodes(op="call_function", target=aten.add.Tensor)):
            if not _only(add, aten.add.Tensor, 2) or not _only(add.args[0], aten.where.self, 3):
                continue
            where, y = add.args
            mask, fill, x = where.args
            if not isinstance(fill, torch.fx.Node) or fill.target is not aten.scalar_tensor.default:
                continue
            value = fill.args[0] if len(fill.args) == 1 else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or len(where.users) > 1:
                continue
            vals = [n.meta.get("val") for n in (x, mask, y, add, fill)]
            if not all(isinstance(v, torch.Tensor) for v in vals) or len({tuple(v.shape) for v in vals[:4]}) != 1:
                continue
            if vals[1].dtype != torch.bool or len({vals[0].dtype, vals[2].dtype, vals[3].dtype, vals[4].dtype}) != 1:
                continue
            with graph.inserting_before(add):
                filled = graph.call_function(aten.add.Tensor, (y, -10000.0 if self.hard_coded else value))
                kept = graph.call_function(aten.add.Tensor, (x, y))
                new = graph.call_function(aten.where.self, (mask, filled, kept))
            new.meta["val"] = add.meta["val"]
            add.replace_all_uses_with(new)
            graph.erase_node(add)
            graph.erase_node(where)
            if not fill.users:
                graph.erase_node(fill)
            count += 1
        self.matched_count = count


class HandMaskedAddHardCoded(HandMaskedAdd):
    hard_coded = True


# ------------------------------------------------------------ a fusion that keeps an intermediate for another reader


def sigmoid_gate_pattern(x):
    """The planted function: ``x * sigmoid(1.702 * x)`` (the sigmoid GELU approximation)."""
    return x * torch.sigmoid(x * 1.702)


class HandSigmoidGate:
    """A hand-written fusion of ``mul(x, sigmoid(mul(x, 1.702)))`` into ``silu(1.702 x) / 1.702``
    that, unlike Inductor's matcher, also fuses when an intermediate has another reader: it leaves
    that intermediate (and what it reads) in the graph for it, computed twice. ``drops_intermediate``:
    the wrong twin, which hands the other readers of ``sigmoid(1.702 x)`` the fused result instead."""

    drops_intermediate = False

    def __init__(self) -> None:
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        count = 0
        for out in list(graph.find_nodes(op="call_function", target=aten.mul.Tensor)):
            if out._erased or not _only(out, aten.mul.Tensor, 2):
                continue
            x, gate = out.args
            if not _only(gate, aten.sigmoid.default, 1) or not _only(gate.args[0], aten.mul.Tensor, 2):
                continue
            scaled = gate.args[0]
            if scaled.args != (x, 1.702):
                continue
            vals = [n.meta.get("val") for n in (x, out)]
            if not all(isinstance(v, torch.Tensor) for v in vals) or vals[0].dtype != torch.float32:
                continue
            if tuple(vals[0].shape) != tuple(vals[1].shape) or vals[1].dtype != torch.float32:
                continue
            with graph.inserting_before(out):
                fused = graph.call_function(
                    aten.div.Tensor,
                    (
                        graph.call_function(aten.silu.default, (graph.call_function(aten.mul.Tensor, (x, 1.702)),)),
                        1.702,
                    ),
                )
            fused.meta["val"] = out.meta["val"]
            out.replace_all_uses_with(fused)
            graph.erase_node(out)
            if self.drops_intermediate and gate.users:
                gate.replace_all_uses_with(fused)  # the bug: its other readers get the fused result
            for dead in (gate, scaled):
                if not dead.users:
                    graph.erase_node(dead)
            count += 1
        self.matched_count = count


class HandSigmoidGateDropsIntermediate(HandSigmoidGate):
    drops_intermediate = True


# ------------------------------------------------------------- the token limit left to is_applicable_for_range


class HandRMSNormByRange(HandRMSNorm):
    """A hand-written RMS-norm fusion (:class:`~pmverify.faults._hand.HandRMSNorm`) that, as
    vLLM's passes do, leaves the token limit to ``is_applicable_for_range`` (``end <=
    config.max_tokens``) instead of checking the rows it fuses: correct, since vLLM runs it only on
    graphs compiled for such ranges and its fused op is exact at any row count."""

    def _can_fuse(self, chain, x, weight, eps) -> bool:
        config = self.config
        try:
            self.config = None if config is None else _UnlimitedTokens(config)
            return super()._can_fuse(chain, x, weight, eps)
        finally:
            self.config = config

    def is_applicable_for_range(self, compile_range: Any) -> bool:
        return self.config is None or compile_range.end <= self.config.max_tokens


class HandRMSNormIgnoringRange(HandRMSNormByRange):
    """The wrong twin: no token check and no ``is_applicable_for_range`` either."""

    is_applicable_for_range = None  # type: ignore[assignment]


class _UnlimitedTokens:
    """A config whose ``max_tokens`` admits every row count, the rest read from ``config``."""

    def __init__(self, config: Any) -> None:
        self._config = config

    def __getattr__(self, name: str) -> Any:
        return 1 << 62 if name == "max_tokens" else getattr(self._config, name)
