"""Faults that only graphs with a symbolic token count show (torch.compile ``dynamic=True``, vLLM).

Every one is right on a graph of static sizes, which is all a test with a handful of hand-picked
shapes gives a pass; each goes wrong where the token count ``T`` is a ``SymInt``:

- :class:`QKNormBakesTokenHint`: a replacement that reads ``T`` as an int while it is traced, so
  the hint it had when the pass ran (``11``) is written into a ``view``;
- :class:`QKNormFakeImplConcreteRows`: a fused op whose fake implementation returns ``int(T)`` rows;
- :class:`QKNormAppliesOutsideRange`: a pass whose fused op is right for at most
  ``config.max_tokens`` rows and whose ``is_applicable_for_range`` says yes to every range;
- :class:`HandHeadRMSNormIntViews`: a hand-written matcher that compares a ``view``'s sizes with
  ints and so never matches a graph whose ``view`` holds the ``Sym`` token count.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..fusions.qk_norm import QKNormConfig, QKNormFusionPass
from ..fusions.qk_norm.config import output_dtype
from ..fusions.qk_norm.ops import validate_qk_norm_args
from ..fusions.qk_norm.patterns import Rewrite
from ._common import HandWrittenFault, aten, is_call, validate_config
from .casts import replaced

__all__ = [
    "QKNormBakesTokenHint",
    "QKNormFakeImplConcreteRows",
    "QKNormAppliesOutsideRange",
    "HandHeadRMSNormIntViews",
    "HeadRMSNormConfig",
    "head_rms_norm_pattern",
]


class QKNormBakesTokenHint(QKNormFusionPass):
    """Bug kind: a replacement that bakes the hint of a symbolic size into a reshape.

    Matches what the shipped pass matches; its replacement computes the fused op and then views
    ``q_out`` as ``[int(qkv.shape[0]), q_size]``. On a static graph that is the identity. Under
    ``dynamic=True`` the replacement is traced on the match's symbolic fake values: ``int()`` of
    the ``SymInt`` token count guards it equal to its hint and writes the hint into the ``view``,
    so the rewritten graph fails (or reshapes rows wrongly) at every other token count. The
    structure oracle (the guard the pass added, the output's lost symbolic size) and the semantics
    oracle at the other sizes.
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        q_size, kv_size, eps = config.q_size, config.kv_size, config.eps

        def qk_norm_baked(qkv, q_weight, k_weight):
            q_out, k_out = torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, q_size, kv_size, eps, False)
            tokens = int(qkv.shape[0])  # the bug: the SymInt read as an int
            return q_out.view(tokens, q_size), k_out, qkv.split([q_size, kv_size, kv_size], dim=-1)[2]

        return replaced(config, {"qk_norm": qk_norm_baked, "qk_norm_split3": qk_norm_baked})


@torch.library.custom_op("pmverify_faults::qk_norm_concrete_rows", mutates_args=())
def qk_norm_concrete_rows(
    qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, q_size: int, kv_size: int, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``pmverify::qk_norm`` (vLLM's rounding order) under another name, with a faulty fake
    implementation (see :class:`QKNormFakeImplConcreteRows`). Shapes as ``pmverify::qk_norm``:
    ``qkv [T, q_size + 2*kv_size]`` -> ``(q_out [T, q_size], k_out [T, kv_size])``."""
    q_out, k_out = torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, q_size, kv_size, eps, False)
    return q_out.clone(), k_out.clone()


@qk_norm_concrete_rows.register_fake
def _qk_norm_concrete_rows_fake(qkv, q_weight, k_weight, q_size, kv_size, eps):
    validate_qk_norm_args(qkv, q_weight, k_weight, q_size, kv_size, eps)
    rows = int(qkv.shape[0])  # the bug: a concrete row count (guards a symbolic one to its hint)
    return (
        qkv.new_empty((rows, q_size), dtype=output_dtype(qkv.dtype, q_weight.dtype, False)),
        qkv.new_empty((rows, kv_size), dtype=output_dtype(qkv.dtype, k_weight.dtype, False)),
    )


class QKNormFakeImplConcreteRows(QKNormFusionPass):
    """Bug kind: a fused op whose fake implementation returns a concrete row count.

    Matches what the shipped pass matches and replaces it with
    ``pmverify_faults::qk_norm_concrete_rows``, whose real implementation is right at every size
    but whose fake (meta) implementation makes its outputs ``int(qkv.shape[0])`` rows: under
    ``dynamic=True`` that guards the token count equal to its hint, and the fused op's outputs lose
    their symbolic size, so every later pass and Inductor's lowering see the hint. Values are right;
    the structure oracle (the guard, the lost symbolic sizes).
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        q_size, kv_size, eps = config.q_size, config.kv_size, config.eps

        def qk_norm_concrete(qkv, q_weight, k_weight):
            q_out, k_out = torch.ops.pmverify_faults.qk_norm_concrete_rows(
                qkv, q_weight, k_weight, q_size, kv_size, eps
            )
            return q_out, k_out, qkv.split([q_size, kv_size, kv_size], dim=-1)[2]

        return replaced(config, {"qk_norm": qk_norm_concrete, "qk_norm_split3": qk_norm_concrete})


class QKNormAppliesOutsideRange(QKNormFusionPass):
    """Bug kind: a pass that says it applies outside the range its fused op is right for.

    Its replacement stands for a fused kernel whose grid covers ``config.max_tokens`` rows: rows
    past that are left as they came in (the q and k parts of qkv, not normalised). That is what the
    shipped pass's ``is_applicable_for_range`` guards against (``end <= config.max_tokens``); this
    one says yes to every range (``return True``), as a pass written for static shapes does. Right
    for every graph of at most ``max_tokens`` tokens; for a symbolic token count, wrong at every
    size past it: the semantics oracle at those sizes and the compile-ranges oracle.
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        q_size, kv_size, eps, limit = config.q_size, config.kv_size, config.eps, config.max_tokens
        sizes = [q_size, kv_size, kv_size]

        def qk_norm_capped(qkv, q_weight, k_weight):
            q_out, k_out = torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, q_size, kv_size, eps, False)
            q, k, v = qkv.split(sizes, dim=-1)
            covered = (torch.arange(qkv.shape[0], device=qkv.device) < limit).unsqueeze(-1)
            return torch.where(covered, q_out, q.to(q_out.dtype)), torch.where(covered, k_out, k.to(k_out.dtype)), v

        return replaced(config, {"qk_norm": qk_norm_capped, "qk_norm_split3": qk_norm_capped})

    def is_applicable_for_range(self, compile_range: Any) -> bool:
        return True  # the bug: the fused op's row limit is not consulted


@dataclasses.dataclass(frozen=True)
class HeadRMSNormConfig:
    """What :class:`HandHeadRMSNormIntViews` fuses: per-head RMS norms of ``eps`` (default 1e-6)."""

    eps: float = 1e-6


def head_rms_norm_pattern(x, w):
    """Qwen3's per-head q/k norm as a pattern: ``x [T, H*D]`` viewed ``[T, H, D]``, RMS-normalised
    over ``D`` in float32 (eps 1e-6) times ``w [D]``, cast back and viewed ``[T, H*D]`` again.
    The token count is written into both views (``x.shape[0]``), as model code does."""
    tokens, width, head = x.shape[0], x.shape[1], w.shape[0]
    xf = x.view(tokens, width // head, head).float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (normed * w).to(x.dtype).view(tokens, width)


class HandHeadRMSNormIntViews(HandWrittenFault):
    """Bug kind: a hand matcher that compares a view's sizes with ints and never matches symbolic graphs.

    Fuses :func:`head_rms_norm_pattern` (``view -> _to_copy/convert -> pow -> mean -> add -> rsqrt
    -> mul -> mul -> convert -> view``) into ``pmverify::rms_norm`` on the ``[T, H, D]`` view. It
    checks the first view with ``list(view.args[1]) == [rows, heads, head]``, the rows read from the
    input's ``meta["val"]`` as an int. On a static graph the view's sizes are ints and it matches
    wherever Inductor's matcher would. With a symbolic token count the view's first size is the
    ``Sym`` placeholder (an FX node) and the rows a ``SymInt``: never equal, so the pass silently
    never matches (the expectations oracle: planted must-match instances left as they were).

    - ``config``: a :class:`HeadRMSNormConfig`; None fuses with eps 1e-6.
    """

    def __init__(self, config: HeadRMSNormConfig | None = None) -> None:
        validate_config(config, HeadRMSNormConfig)
        self.config = config
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        eps = 1e-6 if self.config is None else self.config.eps
        for view in list(graph.find_nodes(op="call_function", target=aten.view.default)):
            chain = _head_norm_chain(view, eps)
            if chain is None:
                continue
            w, out = chain["w"], chain["out"]
            with graph.inserting_after(out):
                fused = graph.call_function(torch.ops.pmverify.rms_norm.default, (view, w, eps, False))
            with graph.inserting_after(fused):
                flat = graph.call_function(aten.view.default, (fused, out.args[1]))
            out.replace_all_uses_with(flat)
            self.matched_count += 1
        graph.eliminate_dead_code()


def _is_cast(node: Any) -> bool:
    return is_call(node, torch.ops.prims.convert_element_type.default) or is_call(node, aten._to_copy.default)


def _only_user(node: torch.fx.Node) -> Any:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _head_norm_chain(view: torch.fx.Node, eps: float) -> dict[str, torch.fx.Node] | None:
    """The weight and last node of one :func:`head_rms_norm_pattern` instance (casts to and from
    float32 present or not, as in a float32 graph) starting at ``view``, or None."""
    x = view.args[0]
    val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if (
        not isinstance(val, torch.Tensor)
        or val.dim() != 2
        or val.dtype not in (torch.float32, torch.float16, torch.bfloat16)
    ):
        return None
    size = list(view.args[1])
    if len(size) != 3 or not isinstance(size[2], int) or size[2] < 1:
        return None
    rows, heads, head = val.shape[0], val.shape[1] // size[2], size[2]
    if size != [rows, heads, head]:  # the bug: a Sym node in the view is never equal to the SymInt rows
        return None
    up = _only_user(view) if _is_cast(_only_user(view)) else view
    users = list(up.users)
    square = next((u for u in users if is_call(u, aten.pow.Tensor_Scalar) and u.args[1] == 2), None)
    scale = next((u for u in users if is_call(u, aten.mul.Tensor) and u.args[0] is up), None)
    if square is None or scale is None or len(users) != 2:
        return None
    mean = _only_user(square)
    add = _only_user(mean) if is_call(mean, aten.mean.dim) and list(mean.args[1]) == [-1] else None
    rsqrt = _only_user(add) if is_call(add, aten.add.Tensor) and add.args[1] == eps else None
    if not is_call(rsqrt, aten.rsqrt.default) or scale.args[1] is not rsqrt:
        return None
    weighted = _only_user(scale)
    if not is_call(weighted, aten.mul.Tensor):
        return None
    w = weighted.args[1]
    down = _only_user(weighted) if _is_cast(_only_user(weighted)) else weighted
    out = _only_user(down)
    w_val = w.meta.get("val") if isinstance(w, torch.fx.Node) else None
    if not is_call(out, aten.view.default) or not isinstance(w_val, torch.Tensor) or tuple(w_val.shape) != (head,):
        return None
    if w_val.dtype not in (torch.float32, val.dtype) or down.meta["val"].dtype != val.dtype:
        return None
    return {"w": w, "out": out}
