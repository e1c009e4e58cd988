"""Faulty passes, each modelled on a public bug kind; pmverify must catch every one.

They are importable (so reproducers can rebuild them) and built like the shipped pass:
``verify(faults.QKNormWrongRoundingOrder, strategies.qk_norm_cases())``.
"""

from __future__ import annotations

import hashlib
import inspect
import operator
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from .fusions.qk_norm import QKNormConfig, QKNormFusionPass
from .fusions.qk_norm.config import SUPPORTED_DTYPES
from .fusions.qk_norm.patterns import Rewrite, rewrites

__all__ = ["QKNormWrongRoundingOrder", "HandRMSNormIgnoresMutations", "SwappedAutoFunctionalizedGetitems"]


class QKNormWrongRoundingOrder(QKNormFusionPass):
    """Bug kind: a replacement that drops the pattern's cast order.

    Every rewrite matches as the shipped pass does, but its replacement applies the weight on the
    other side of the cast back to the activation dtype (``weight * y.to(dtype)`` for vLLM's
    ``(y * weight).to(dtype)`` and the reverse). Exact for float32; off by up to an ulp on many
    elements for bf16/fp16, and with a float32 weight on bf16 activations the output dtype changes.
    """

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[Rewrite]:
        q_size, kv_size, eps = config.q_size, config.kv_size, config.eps

        def qk_norm_wrong_order(qkv, q_weight, k_weight):
            q_out, k_out = torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, q_size, kv_size, eps, True)
            return q_out, k_out, qkv.split([q_size, kv_size, kv_size], dim=-1)[2]

        def rms_norm_wrong_order(x, weight):
            return torch.ops.pmverify.rms_norm(x, weight, eps, False)

        wrong = {
            "qk_norm": qk_norm_wrong_order,
            "qk_norm_split3": qk_norm_wrong_order,
            "rms_norm": rms_norm_wrong_order,
        }
        return [Rewrite(r.name, r.search_fn, wrong[r.name], r.example_inputs, r.extra_check) for r in rewrites(config)]


def _check_config(config: Any) -> None:
    if config is not None and not isinstance(config, QKNormConfig):
        raise TypeError(f"config={config!r} must be a QKNormConfig or None")


def _uuid(pass_: Any) -> str:
    """Hash of this module's source, the shipped fusion's sources, the class and every config field."""
    digest = hashlib.sha256(inspect.getsource(inspect.getmodule(_uuid)).encode())
    if pass_.config is not None:
        digest.update(QKNormFusionPass(pass_.config).uuid().encode())
    digest.update(type(pass_).__qualname__.encode())
    for name, value in (pass_.config.fields() if pass_.config is not None else {}).items():
        digest.update(f"{name}={value!r};".encode())
    return digest.hexdigest()


_aten = torch.ops.aten
_convert = torch.ops.prims.convert_element_type.default


def _call(node: Any, target: Any) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is target


class HandRMSNormIgnoresMutations(CustomGraphPass):
    """Bug kind: a hand-written matcher that ignores mutation regions.

    It walks the graph itself (no ``PatternMatcherPass``) for transformers' MiniMax-M2 RMS norm in
    aten form, ``mul(weight, convert(mul(xf, rsqrt(add(mean(pow(xf, 2), [-1], True), eps))), dtype))``
    with ``xf = convert(x, float32)`` (no converts for float32), and replaces it with
    ``torch.ops.pmverify.rms_norm(x, weight, eps, True)`` inserted at the chain's last node. It
    checks what the shipped pass checks (dtype, widths, eps, weight, single users, contiguity,
    tokens) but not whether an in-place op sits between the chain's nodes, the check Inductor makes
    with mutation regions ("pattern match crosses mutation barrier - discard" in
    ``PatternMatcherPass.apply``) and graph-walking custom passes skip. Correct on functional graphs;
    when ``x`` is written between the first and the last node, the fused op reads the new ``x``.

    - ``config``: the :class:`QKNormConfig` to fuse for; None fuses every such chain, whatever its
      dtype, width and eps.
    """

    def __init__(self, config: QKNormConfig | None = None) -> None:
        _check_config(config)
        self.config = config
        self.matched_count = 0

    def _chain(self, last: torch.fx.Node) -> tuple[list[torch.fx.Node], torch.fx.Node, torch.fx.Node, float] | None:
        """(chain nodes in graph order, x, weight, eps) when ``last`` ends an RMS norm chain."""
        if not _call(last, _aten.mul.Tensor) or len(last.args) != 2:
            return None
        weight, y = last.args
        normed, cast = (y.args[0], y) if _call(y, _convert) else (y, None)
        if not _call(normed, _aten.mul.Tensor):
            return None
        xf, rstd = normed.args
        if _call(xf, _aten.rsqrt.default):
            xf, rstd = rstd, xf
        if not _call(rstd, _aten.rsqrt.default):
            return None
        add = rstd.args[0]
        if not _call(add, _aten.add.Tensor) or not isinstance(add.args[1], float):
            return None
        mean = add.args[0]
        if not _call(mean, _aten.mean.dim) or list(mean.args[1]) != [-1] or mean.args[2:] != (True,):
            return None
        sq = mean.args[0]
        if not _call(sq, _aten.pow.Tensor_Scalar) or sq.args != (xf, 2):
            return None
        up = xf if _call(xf, _convert) and xf.args[1] == torch.float32 else None
        x = up.args[0] if up is not None else xf
        if (cast is None) != (up is None) or not isinstance(weight, torch.fx.Node):
            return None
        chain = [n for n in (up, sq, mean, add, rstd, normed, cast, last) if n is not None]
        return chain, x, weight, add.args[1]

    def _can_fuse(self, chain: list[torch.fx.Node], x: torch.fx.Node, weight: torch.fx.Node, eps: float) -> bool:
        xv, wv, out = x.meta.get("val"), weight.meta.get("val"), chain[-1].meta.get("val")
        if not all(isinstance(v, torch.Tensor) for v in (xv, wv, out)) or xv.dim() < 1:
            return False
        inner = set(chain)
        if any(set(node.users) - inner for node in chain[:-1]):
            return False  # an intermediate escapes
        if chain[0].target is _convert:
            if xv.dtype == torch.float32 or chain[-2].args[1] != xv.dtype:
                return False
        elif xv.dtype != torch.float32:
            return False
        width = xv.shape[-1]
        fusable = (
            xv.dtype in SUPPORTED_DTYPES
            and xv.is_contiguous()
            and tuple(wv.shape) == (width,)
            and wv.dtype in (torch.float32, xv.dtype)
            and out.dtype == torch.promote_types(wv.dtype, xv.dtype)
        )
        config = self.config
        if config is None or not fusable:
            return fusable
        return (
            xv.dtype == config.dtype
            and width in (config.q_size, config.kv_size)
            and eps == config.eps
            and xv.numel() // width <= config.max_tokens
        )

    def __call__(self, graph: torch.fx.Graph) -> None:
        count = 0
        for node in list(graph.find_nodes(op="call_function", target=_aten.mul.Tensor)):
            if node._erased:
                continue
            found = self._chain(node)
            if found is None or not self._can_fuse(*found):
                continue
            chain, x, weight, eps = found
            with graph.inserting_before(node):  # at the chain's last node: the bug
                fused = graph.call_function(torch.ops.pmverify.rms_norm.default, (x, weight, eps, True))
            node.replace_all_uses_with(fused)
            for dead in reversed(chain):
                graph.erase_node(dead)
            count += 1
        self.matched_count = count

    def uuid(self) -> str:
        return _uuid(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"


class SwappedAutoFunctionalizedGetitems(CustomGraphPass):
    """Bug kind: a replacement that routes the wrong element of an ``auto_functionalized`` tuple.

    Fusion passes over post-grad graphs (vLLM's, which rebuild ``auto_functionalized`` nodes and
    remap their ``getitem`` users by hand-written tuple indices) must send each user the element
    it read: ``(op outputs..., new values of the mutated args...)``. This pass runs the shipped
    QK-norm fusion (when given a config), then, on each ``auto_functionalized_v2`` node, swaps the
    indices of the first two ``getitem`` users whose elements have the same shape and dtype, so the
    graph stays well formed and only values are wrong: the users of one mutated arg (or of the op's
    output) get another's new value. ``matched_count`` is the fusion's count.

    - ``config``: the :class:`QKNormConfig` of the QK-norm fusion run first; None runs none.
    """

    def __init__(self, config: QKNormConfig | None = None) -> None:
        _check_config(config)
        self.config = config
        self.matched_count = 0
        self.swapped = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = 0
        if self.config is not None:
            fusion = QKNormFusionPass(self.config)
            fusion(graph)
            self.matched_count = fusion.matched_count
        self.swapped = 0
        v2 = torch.ops.higher_order.auto_functionalized_v2
        for node in graph.find_nodes(op="call_function", target=v2):
            getitems = sorted(
                (u for u in node.users if u.target is operator.getitem and isinstance(u.meta.get("val"), torch.Tensor)),
                key=lambda u: u.args[1],
            )
            pair = next(
                (
                    (a, b)
                    for i, a in enumerate(getitems)
                    for b in getitems[i + 1 :]
                    if a.meta["val"].shape == b.meta["val"].shape and a.meta["val"].dtype == b.meta["val"].dtype
                ),
                None,
            )
            if pair is not None:
                a, b = pair
                a.args, b.args = (node, b.args[1]), (node, a.args[1])
                self.swapped += 1

    def uuid(self) -> str:
        return _uuid(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"
