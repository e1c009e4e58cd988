"""A hand-written RMS-norm matcher (no ``PatternMatcherPass``), the base of the hand-matcher faults.

It walks the graph for transformers' MiniMax-M2 RMS norm in aten form,
``mul(weight, convert(mul(xf, rsqrt(add(mean(pow(xf, 2), [-1], True), eps))), dtype))`` with
``xf = convert(x, float32)`` (no converts for float32), and replaces it with
``torch.ops.pmverify.rms_norm(x, weight, eps, True)``. Done right (this class), it checks what the
shipped pass checks (dtype, widths, eps, weight, single users, contiguity, tokens) and what
``PatternMatcherPass.apply`` checks (the chain lies in one mutation region), inserts the fused op
at the chain's last node and erases the chain. Each fault subclass breaks one of these steps.
"""

from __future__ import annotations

import torch

from ..fusions.qk_norm import QKNormConfig
from ..fusions.qk_norm.config import SUPPORTED_DTYPES
from ._common import HandWrittenFault, aten, convert, is_call, validate_config

__all__ = ["HandRMSNorm"]

Chain = tuple[list[torch.fx.Node], torch.fx.Node, torch.fx.Node, float]


def mutation_regions(graph: torch.fx.Graph) -> dict[torch.fx.Node, int]:
    """Each node's mutation region, as Inductor's ``compute_mutation_region_ids`` numbers them
    (a new region at each node ``is_mutation_op`` calls a mutation)."""
    from torch._inductor.pattern_matcher import is_mutation_op

    regions, region = {}, 0
    for node in graph.nodes:
        region += bool(is_mutation_op(node))
        regions[node] = region
    return regions


class HandRMSNorm(HandWrittenFault):
    """A correct hand-written RMS-norm matcher (see the module docstring); not a fault itself.

    - ``config``: the :class:`QKNormConfig` to fuse for; None fuses every such chain, whatever its
      dtype, width and eps. ``TypeError`` for anything else.
    """

    #: Skip a chain that spans two mutation regions (Inductor's mutation barrier).
    respects_mutations = True
    #: Fuse a chain even when an intermediate has a user outside it.
    allows_extra_users = False
    #: Hand such a user the fused result in place of the intermediate (else it keeps the intermediate).
    rewires_extra_users = False

    def __init__(self, config: QKNormConfig | None = None) -> None:
        validate_config(config)
        self.config = config
        self.matched_count = 0

    def _chain(self, last: torch.fx.Node) -> Chain | None:
        """(chain nodes in graph order, x, weight, eps) when ``last`` ends an RMS norm chain."""
        if not is_call(last, aten.mul.Tensor) or len(last.args) != 2:
            return None
        weight, y = last.args
        normed, cast = (y.args[0], y) if is_call(y, convert) else (y, None)
        if not is_call(normed, aten.mul.Tensor):
            return None
        xf, rstd = normed.args
        if is_call(xf, aten.rsqrt.default):
            xf, rstd = rstd, xf
        if not is_call(rstd, aten.rsqrt.default):
            return None
        add = rstd.args[0]
        if not is_call(add, aten.add.Tensor) or not isinstance(add.args[1], float):
            return None
        mean = add.args[0]
        if not is_call(mean, aten.mean.dim) or list(mean.args[1]) != [-1] or mean.args[2:] != (True,):
            return None
        sq = mean.args[0]
        if not is_call(sq, aten.pow.Tensor_Scalar) or sq.args != (xf, 2):
            return None
        up = xf if is_call(xf, convert) and xf.args[1] == torch.float32 else None
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
        if not self.allows_extra_users and any(set(node.users) - inner for node in chain[:-1]):
            return False  # an intermediate escapes
        if chain[0].target is convert:
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

    def _insert_before(self, graph: torch.fx.Graph, chain: list[torch.fx.Node]) -> torch.fx.Node:
        """The node the fused op goes before: the chain's last node."""
        return chain[-1]

    def __call__(self, graph: torch.fx.Graph) -> None:
        regions = mutation_regions(graph) if self.respects_mutations else None
        count = 0
        for node in list(graph.find_nodes(op="call_function", target=aten.mul.Tensor)):
            if node._erased:
                continue
            found = self._chain(node)
            if found is None or not self._can_fuse(*found):
                continue
            chain, x, weight, eps = found
            if regions is not None and len({regions[n] for n in chain}) != 1:
                continue  # the chain crosses a mutation barrier
            with graph.inserting_before(self._insert_before(graph, chain)):
                fused = graph.call_function(torch.ops.pmverify.rms_norm.default, (x, weight, eps, True))
            fused.meta["val"] = node.meta["val"]  # same shape, dtype and strides as the chain's result
            node.replace_all_uses_with(fused)
            if self.rewires_extra_users:
                for inner in chain[:-1]:
                    for user in [user for user in inner.users if user not in chain]:
                        user.replace_input_with(inner, fused)
            for dead in reversed(chain):
                if not dead.users:
                    graph.erase_node(dead)
            count += 1
        self.matched_count = count
