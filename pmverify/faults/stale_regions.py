"""A pattern pass whose first entry moves a mutation and whose later entries then read stale
mutation regions.

:class:`HoistedWriteBackRMSNorm` is a correct two-entry ``PatternMatcherPass``: entry 1
(``register_graph_pattern`` on ``aten.copy_.default``) moves the write-back ``copy_(input, new)``
that AOTAutograd puts at the end of a post-grad graph up to right after the last node that still
reads the input's old value (or ``new``, whichever is later), so that the buffer can be freed
early; entry 2 (``register_replacement``) rewrites the RMS norm of :func:`~.scalars.rms_norm_pattern`.
``PatternMatcherPass.apply`` visits nodes last to first, so entry 1 runs on the ``copy_`` at the
end before entry 2 runs on the norms above it; a hoisted ``copy_`` may land between the nodes of
a norm (one that reads the input before the ``copy_`` and is finished after it). Inductor numbers
mutation regions once, when the pass starts (``compute_mutation_region_ids``: only when the first
node carries no ``mutation_region_id``), and renumbers them after an entry only when the entry
inserted or erased a mutating node (``_GraphMutationTracker``), not when it moved one. The correct
pass renumbers them itself after the move, so entry 2 rightly refuses the norm the ``copy_`` now
splits ("pattern match crosses mutation barrier - discard"). :class:`WriteBackHoistStaleRegions`
does not: entry 2 matches across the ``copy_`` and its replacement, inserted at the norm's last
node (after the ``copy_``), reads the input's new value.
"""

from __future__ import annotations

import dataclasses
import functools
import operator

import torch

from ._common import HandWrittenFault, aten, validate_config
from .scalars import RMSNormEpsConfig, rms_norm_pattern_with

__all__ = ["HoistedWriteBackRMSNorm", "WriteBackHoistStaleRegions"]


def _rms_norm_pow(eps: float):
    """The RMS norm of :func:`~.scalars.rms_norm_pattern` with ``pow(-0.5)`` for ``rsqrt``: the
    same values in float32 (within an ulp), other nodes, so the rewrite shows in the graph."""

    def rms_norm_replacement(x, w):
        xf = x.float()
        return ((xf * (xf.pow(2).mean(-1, keepdim=True) + eps).pow(-0.5)) * w).to(x.dtype)

    return rms_norm_replacement


def _is_view(target) -> bool:
    """Whether a node with this target returns a view of its first input: ``getitem`` (of a
    ``split``...) or an aten overload whose schema aliases its input."""
    return target is operator.getitem or (isinstance(target, torch._ops.OpOverload) and target.is_view)


def _readers(value: torch.fx.Node, skip: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes reading ``value``'s storage: its users and, through views (``is_view``) and
    in-place ops (which return the tensor they write), the users of those; ``skip`` left out."""
    from torch._inductor.pattern_matcher import is_mutation_op

    readers, stack, seen = [], [value], set()
    while stack:
        node = stack.pop()
        for user in node.users:
            if user is skip or user in seen:
                continue
            seen.add(user)
            readers.append(user)
            if user.op == "call_function" and (_is_view(user.target) or is_mutation_op(user)):
                stack.append(user)
    return readers


def _hoist_point(copy: torch.fx.Node, dst: torch.fx.Node, src: torch.fx.Node) -> torch.fx.Node | None:
    """The node after which ``copy`` (``copy_(dst, src)``) can go: the last of ``src`` and the
    readers of ``dst``'s old value; None when that is ``copy``'s own place, when a reader is the
    output or lies after ``copy``, or when a mutating node between writes ``dst`` (or reads it)."""
    from torch._inductor.pattern_matcher import is_mutation_op

    readers = _readers(dst, copy)
    if any(reader.op == "output" or reader > copy for reader in readers):
        return None
    point = max([src, *readers])
    if point.next is copy:
        return None
    touched = {dst, *readers}
    node = point.next
    while node is not copy:
        if is_mutation_op(node) and any(arg in touched for arg in node.all_input_nodes):
            return None
        node = node.next
    return point


@functools.lru_cache(maxsize=8)
def _patterns(eps: float, renumbers: bool):
    """The two-entry ``PatternMatcherPass`` (see the module docstring); ``renumbers``: whether
    entry 1 recomputes the mutation regions after moving a ``copy_``."""
    from torch._inductor import pattern_matcher as pm

    patterns = pm.PatternMatcherPass(pass_name=f"pmverify_hoisted_write_back_{'ok' if renumbers else 'stale'}")

    def is_write_back(match: pm.Match) -> bool:
        dst = match.kwargs["dst"]
        return isinstance(dst, torch.fx.Node) and dst.op == "placeholder"

    @pm.register_graph_pattern(
        pm.CallFunction(aten.copy_.default, pm.KeywordArg("dst"), pm.KeywordArg("src")),
        extra_check=is_write_back,
        pass_dict=patterns,
    )
    def hoist_write_back(match: pm.Match, dst: torch.fx.Node, src: torch.fx.Node) -> None:
        copy = match.output_node()
        point = _hoist_point(copy, dst, src)
        if point is None:
            return
        point.append(copy)  # moved, not re-created: Inductor's tracker does not see it
        if renumbers:
            pm.compute_mutation_region_ids(copy.graph)  # the bug (when False): regions left stale

    def is_plain_float32(match: pm.Match) -> bool:
        # inputs and every matched node in float32, and no matched node with keyword arguments:
        # Inductor's matcher ignores the keywords a pattern does not hold (mean's dtype=, add's
        # alpha=), which the replacement would drop
        nodes = [*(match.kwargs.get(name) for name in ("x", "w")), *match.nodes]
        values = [node.meta.get("val") if isinstance(node, torch.fx.Node) else None for node in nodes]
        plain = not any(node.kwargs for node in match.nodes)
        return plain and all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in values)

    example = [torch.empty(8, 16), torch.empty(16)]
    pm.register_replacement(
        rms_norm_pattern_with(eps), _rms_norm_pow(eps), example, pm.fwd_only, patterns, extra_check=is_plain_float32
    )
    return patterns


class HoistedWriteBackRMSNorm(HandWrittenFault):
    """A correct two-entry pattern pass (not a fault): it hoists each graph input's write-back
    ``copy_`` to right after the last reader of the input's old value, renumbers Inductor's
    mutation regions, and rewrites RMS norms (``x [T, H]``, ``w [H]``, float32, eps
    ``config.eps``) into the same norm with ``pow(-0.5)``; see the module docstring.
    ``matched_count``: ``PatternMatcherPass.apply``'s count (moves and rewrites).

    - ``config``: an :class:`~.scalars.RMSNormEpsConfig`; None takes the defaults. ``TypeError``
      for anything else.
    """

    #: Whether entry 1 renumbers the mutation regions after a move.
    renumbers_regions = True

    def __init__(self, config: RMSNormEpsConfig | None = None) -> None:
        validate_config(config, RMSNormEpsConfig)
        self.config = config
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        eps = (self.config or RMSNormEpsConfig()).eps
        self.matched_count = _patterns(eps, self.renumbers_regions).apply(graph)


class WriteBackHoistStaleRegions(HoistedWriteBackRMSNorm):
    """Bug kind: a pattern entry moves a mutation and later entries match across it (stale
    mutation regions).

    :class:`HoistedWriteBackRMSNorm` without the renumbering: its first entry moves a graph
    input's write-back ``copy_`` up, between the nodes of an RMS norm that reads the input, and
    leaves ``mutation_region_id`` as Inductor computed it when the pass started (it recomputes it
    after an entry only when the entry inserted or erased a mutating node, not when it moved one).
    The RMS-norm entry then matches across the ``copy_``; its replacement, inserted at the norm's
    last node after the ``copy_``, reads the input's new value. Shows on post-grad graphs with a
    mutating custom op inside a planted norm whose input it writes, copied back at the end
    (``with_mutating_custom_ops(planted(rms_norm_pattern, ...))``): the semantics oracle (the norm
    reads the new value) and the mutation_barriers oracle (the read moved across the ``copy_``).

    - ``config``: an :class:`~.scalars.RMSNormEpsConfig`; None takes the defaults.
    """

    renumbers_regions = False


def hoisted_rms_norm_cases(**planted_kwargs: object):
    """Post-grad graphs for these passes: ``planted(rms_norm_pattern, like((x [8, 16], w [16])))``
    (tokens and width varied) with 1..2 mutating custom ops (``with_mutating_custom_ops``), each
    mutated graph input copied back at the end of the graph or right after its op;
    ``pass_config=RMSNormEpsConfig()``. ``planted_kwargs`` go to ``planted``."""
    from ..strategies import like, planted, with_mutating_custom_ops
    from .scalars import rms_norm_pattern

    example = (torch.empty(8, 16), torch.empty(16))
    vary = {"t": [(0, 0)], "h": [(0, 1), (1, 0)]}
    cases = planted(rms_norm_pattern, like(example, vary=vary), pass_config=RMSNormEpsConfig(), **planted_kwargs)
    return with_mutating_custom_ops(cases).map(functools.partial(dataclasses.replace, pass_config=RMSNormEpsConfig()))
