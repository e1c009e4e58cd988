"""Faults in rewrites of reductions: a dropped ``dtype=``, an ignored reduction dim."""

from __future__ import annotations

import math

import torch

from ._common import DtypesConfig, HandWrittenFault, aten, is_call, validate_config

__all__ = ["MeanDecompositionDropsDtype", "HandSoftmaxFusion", "SoftmaxFusionIgnoresDim", "softmax_pattern"]


def _val(node: object) -> torch.Tensor | None:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


class _ReductionRewrite(HandWrittenFault):
    def __init__(self, config: DtypesConfig | None = None) -> None:
        validate_config(config, DtypesConfig)
        self.config = config
        self.matched_count = 0

    def _rewrites(self, out: torch.Tensor) -> bool:
        return out.dtype in (self.config or DtypesConfig()).dtypes


class MeanDecompositionDropsDtype(_ReductionRewrite):
    """Bug kind: a rewrite that drops a reduction's ``dtype=``.

    A hand-written pass that decomposes ``aten.mean.dim(x, dims, keepdim, dtype=...)`` into
    ``sum(x, dims, keepdim) / n`` (so that a later pass can fuse the sum) but builds the ``sum``
    from ``x``, ``dims`` and ``keepdim`` alone: the ``dtype=`` keyword, which the pattern it was
    written against never carried, is lost. Exact for a mean without ``dtype=``; with one (an fp16
    mean accumulated and returned in fp32, say) the result has the input's dtype: the structure
    oracle (output and meta dtypes) and the semantics oracle, on
    :func:`~pmverify.strategies.fx_graphs` cases, whose reductions may carry ``dtype=``.

    - ``config``: a :class:`~pmverify.faults._common.DtypesConfig`; None takes the defaults.
    """

    def __call__(self, graph: torch.fx.Graph) -> None:
        count = 0
        for node in list(graph.find_nodes(op="call_function", target=aten.mean.dim)):
            x, out = node.args[0], _val(node)
            xv = _val(x)
            if xv is None or out is None or not self._rewrites(out):
                continue
            dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
            keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
            reduced = range(xv.dim()) if not dims else [d % max(xv.dim(), 1) for d in dims]
            count_ = math.prod(xv.shape[d] for d in reduced) if xv.dim() else 1
            if count_ == 0:
                continue
            with graph.inserting_before(node):  # the bug: node.kwargs["dtype"] is never read
                total = graph.call_function(aten.sum.dim_IntList, (x, dims, keepdim))
                mean = graph.call_function(aten.div.Tensor, (total, float(count_)))
            total.meta["val"] = mean.meta["val"] = out
            node.replace_all_uses_with(mean)
            graph.erase_node(node)
            count += 1
        self.matched_count = count


def softmax_pattern(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The scaled softmax over the last dim that :class:`SoftmaxFusionIgnoresDim` fuses:
    ``softmax(x * scale, -1)``, which Inductor's tracer writes as ``amax``, ``sub``, ``exp``, ``sum``
    and ``div``. ``x``: ``[..., N]``; ``scale``: broadcasting to ``x``."""
    return torch.softmax(x * scale, -1)


class HandSoftmaxFusion(_ReductionRewrite):
    """A correct hand-written softmax fusion (not a fault itself): it walks the graph for softmax as
    Inductor's tracer decomposes it, ``div(exp(sub(x, amax(x, dims, True))), sum(exp(...), dims,
    True))`` with both ``dims`` the last dim, and points the users of ``div`` at
    ``aten._softmax.default(x, -1, False)``. It leaves the matched nodes, now dead, for Inductor's
    dead-code elimination, as pattern handlers do.

    - ``config``: a :class:`~pmverify.faults._common.DtypesConfig`; None takes the defaults.
    """

    def dims_ok(self, rank: int, amax_dims: object, sum_dims: object) -> bool:
        """Whether the chain's reductions run over the last dim only (``rank``: the input's)."""
        last = [rank - 1]
        return all(isinstance(d, (list, tuple)) and [i % rank for i in d] == last for d in (amax_dims, sum_dims))

    def __call__(self, graph: torch.fx.Graph) -> None:
        count = 0
        for div in list(graph.find_nodes(op="call_function", target=aten.div.Tensor)):
            exp, total = div.args
            if not (is_call(exp, aten.exp.default) and is_call(total, aten.sum.dim_IntList)):
                continue
            sub = exp.args[0]
            if total.args[0] is not exp or not is_call(sub, aten.sub.Tensor):
                continue
            x, amax = sub.args
            if not is_call(amax, aten.amax.default) or amax.args[0] is not x:
                continue
            chain = [amax, sub, exp, total, div]
            if any(set(n.users) - set(chain) for n in chain[:-1]):
                continue  # an intermediate is read outside the chain
            if amax.args[2:] != (True,) or total.args[2:] != (True,) or total.kwargs:
                continue
            xv = _val(x)
            if xv is None or xv.dim() == 0 or _val(div) is None or not self._rewrites(_val(div)):
                continue
            if not self.dims_ok(xv.dim(), amax.args[1], total.args[1]):
                continue
            with graph.inserting_before(div):
                fused = graph.call_function(aten._softmax.default, (x, -1, False))
            fused.meta["val"] = div.meta["val"]
            div.replace_all_uses_with(fused)
            count += 1
        self.matched_count = count


class SoftmaxFusionIgnoresDim(HandSoftmaxFusion):
    """Bug kind: a softmax fusion that ignores the reduction dim.

    :class:`HandSoftmaxFusion` without its check of the reductions' dims: it checks the chain's ops
    and wiring and fuses it into a softmax over the last dim, whatever ``dims`` the ``amax`` and the
    ``sum`` reduce. Exact for a softmax over the last dim; over any other dim (or a chain whose
    ``amax`` and ``sum`` reduce different dims) it normalises the wrong rows: the semantics oracle,
    and the expectations oracle for a ``dim`` near miss Inductor's own matcher would leave, on
    ``planted(softmax_pattern, ...)`` cases.

    - ``config``: a :class:`~pmverify.faults._common.DtypesConfig`; None takes the defaults.
    """

    def dims_ok(self, rank: int, amax_dims: object, sum_dims: object) -> bool:
        return True  # the bug: the reductions' dims are never read
