"""``QKNormFusionPass``: an Inductor ``CustomGraphPass`` that fuses MiniMax-style QK norms."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import logging
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from . import config as _config_module
from . import environment as _environment_module
from . import ops as _ops_module
from . import patterns as _patterns_module
from . import tp as _tp_module
from .config import QKNormConfig

logger = logging.getLogger(__name__)

__all__ = ["QKNormFusionPass"]


@functools.lru_cache(maxsize=64)
def _pattern_pass(pass_cls: type, config: QKNormConfig) -> Any:
    """Register the rewrites of ``config`` once per (pass class, config), lazily."""
    from torch._inductor import pattern_matcher as pm

    patterns = pm.PatternMatcherPass(pass_name=f"pmverify_{pass_cls.__name__}")
    for rewrite in pass_cls.rewrites(config):
        pm.register_replacement(
            rewrite.search_fn,
            rewrite.replace_fn,
            list(rewrite.example_inputs),
            pm.fwd_only,
            patterns,
            extra_check=rewrite.extra_check,
        )
    return patterns


class QKNormFusionPass(CustomGraphPass):
    """Replace MiniMax QK norms with ``torch.ops.pmverify.qk_norm`` / ``pmverify.rms_norm``.

    Install it as ``torch._inductor.config.post_grad_custom_post_pass`` or call it on a post-grad
    ``torch.fx.Graph``. After each call ``matched_count`` holds the number of rewrites made.
    ``uuid()`` hashes the source of the pass, its patterns and ops, and every config field, so that
    Inductor's FX graph cache never reuses a graph compiled under another config.

    A qkv activation that is a graph input mutated in place before the norms (``qkv.add_(1.0)``)
    reaches the pass, under ``torch.compile``, as ``add = aten.add(qkv, 1.0)``, one split of
    ``add`` per consumer, and ``copy_(qkv, add)`` between the k norm and the split that yields v.
    ``PatternMatcherPass.apply`` discards the split3 match there (it spans two mutation regions),
    so the ``qk_norm_split_qk`` rewrite matches the q and k norms alone, which lie in one region,
    and leaves v's split after the ``copy_``. No barrier is moved or ignored: a ``copy_`` between the
    q and the k norm still blocks the fusion. (Sinking the ``copy_`` to the output before matching
    would fuse more, soundly when nothing after it reads qkv, but the rewrite would then span two
    mutation regions of the graph the pass was given, which pmverify's mutation-barrier oracle and
    its ``mutation_inside`` ground truth forbid.)

    Symbolic token counts (vLLM's graphs, ``torch.compile(dynamic=True)``: a ``Sym(s0)``
    placeholder, ``[s0, width]`` activations, ``SymInt`` sizes in ``meta["val"]``) are matched in
    every form and rewritten without adding a guard: the fused ops' fake impls keep ``s0``, and a
    symbolic count is fused unless it is known to exceed ``config.max_tokens`` over its whole
    range (:func:`.patterns.should_fuse`). Which token ranges the fused graph serves is
    :meth:`is_applicable_for_range`'s answer, which vLLM asks before running the pass on a graph
    compiled for a range; a caller that does not ask (Inductor alone) gets the fused ops at every size.

    - ``config``: a :class:`QKNormConfig`; ``TypeError`` for anything else.

    Its reproducers (``pmverify``'s, which call ``reproducer_prelude()``) turn Triton's
    interpreter on without a GPU and keep ``PMVERIFY_QK_NORM_IMPL``, before anything imports triton.
    """

    #: The lines a reproducer of this pass runs before importing pmverify (see :mod:`.environment`).
    reproducer_prelude = staticmethod(_environment_module.reproducer_prelude)

    def __init__(self, config: QKNormConfig) -> None:
        if not isinstance(config, QKNormConfig):
            raise TypeError(f"config={config!r} must be a QKNormConfig")
        self.config = config
        self.matched_count = 0

    @classmethod
    def rewrites(cls, config: QKNormConfig) -> list[_patterns_module.Rewrite]:
        """The rewrites this pass registers (a subclass may override them)."""
        return _patterns_module.rewrites(config)

    @property
    def patterns(self) -> Any:
        """The ``PatternMatcherPass`` holding this config's rewrites (registered on first use).

        The rewrites do not depend on ``tp_rank`` (the per-rank graph is the same on every rank, and
        each rank's weight shard is a graph input), so the ranks of one world share them: a
        subclass's ``rewrites(config)`` must not read ``config.tp_rank`` (it gets rank 0's)."""
        return _pattern_pass(type(self), dataclasses.replace(self.config, tp_rank=0))

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = self.patterns.apply(graph)
        logger.debug("%s replaced %d patterns", type(self).__name__, self.matched_count)

    def is_applicable_for_range(self, compile_range: Any) -> bool:
        """Whether the fused path may be used for a compile range of token counts.

        ``compile_range`` is vLLM's ``Range(start, end)`` (anything with ``.end``), a ``(start,
        end)`` pair or an int (one size); ``end`` is inclusive. True only when ``end <=
        config.max_tokens``: the rewrite is then exact at every size of the range. Raises
        ``TypeError`` for anything without an end.
        """
        if isinstance(compile_range, int):
            end = compile_range
        elif isinstance(compile_range, tuple) and len(compile_range) == 2:
            end = compile_range[1]
        elif hasattr(compile_range, "end"):
            end = compile_range.end
        else:
            raise TypeError(f"compile_range={compile_range!r} has no end (Range, (start, end) or int)")
        return end <= self.config.max_tokens

    def uuid(self) -> str:
        digest = hashlib.sha256()
        modules = [_config_module, _ops_module, _patterns_module, _tp_module, inspect.getmodule(QKNormFusionPass)]
        for cls in type(self).__mro__:
            if cls is QKNormFusionPass:
                break
            modules.append(inspect.getmodule(cls))
        for module in modules:
            digest.update(inspect.getsource(module).encode())
        digest.update(type(self).__qualname__.encode())
        for name, value in self.config.fields().items():
            digest.update(f"{name}={value!r};".encode())
        return digest.hexdigest()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"
