"""Faults in how a hand-written matcher matches and where it puts the replacement."""

from __future__ import annotations

import torch

from ._hand import HandRMSNorm

__all__ = ["HandRMSNormIgnoresExtraUsers", "HandRMSNormInsertedBeforeInputs"]


class HandRMSNormIgnoresExtraUsers(HandRMSNorm):
    """Bug kind: a match despite an extra user of an intermediate.

    Inductor's ``register_replacement`` records each pattern node's user count and does not match
    when an intermediate (``x.float()``, ``x²``, the mean, ``rsqrt``, the normalised product) is
    also used outside the pattern. This hand-written MiniMax-M2 RMS-norm matcher (see
    :mod:`pmverify.faults._hand`) skips that check: it fuses the chain anyway and leaves the
    intermediate (and what it reads) in the graph for its other user. Values stay right, but the
    norm is computed twice and the instance Inductor would leave alone is rewritten: the
    expectations oracle, on the ``extra_user`` near misses of ``qk_norm_cases`` (per-tensor form).
    Correct, and matching what the shipped pass matches, everywhere else.

    - ``config``: the :class:`QKNormConfig` to fuse for; None fuses every such chain.
    """

    allows_extra_users = True


class HandRMSNormInsertedBeforeInputs(HandRMSNorm):
    """Bug kind: a replacement inserted before one of its inputs is defined.

    A hand-written pass must insert the fused op after every node it reads (Inductor's
    ``ReplacementPatternEntry`` relies on the ``stable_topological_sort`` that follows post-grad
    passes for its multi-output replacements; a hand pass that does the same by accident leaves a
    graph that only a later sort repairs, or that is not a graph at all when the sort is skipped or
    meets a cycle). This MiniMax-M2 RMS-norm matcher (see :mod:`pmverify.faults._hand`) inserts the
    fused op right after the placeholders. Correct when the norm's input ``x`` is a graph input; when
    ``x`` is computed in the graph (``qk_norm_cases`` plant elementwise pre-ops, or a chained layer)
    the fused op comes before its input: the structure oracle reports the pair the pass left out of
    order (``RunPair.unsorted``); values are right once sorted. On in-place graphs it may also read
    an input before an earlier in-place write: the semantics oracle.

    - ``config``: the :class:`QKNormConfig` to fuse for; None fuses every such chain.
    """

    def _insert_before(self, graph: torch.fx.Graph, chain: list[torch.fx.Node]) -> torch.fx.Node:
        return next(node for node in graph.nodes if node.op != "placeholder")  # the bug: ahead of x
