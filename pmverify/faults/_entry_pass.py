"""The base of the faults whose pass holds one ``register_graph_pattern`` entry (a hand-written handler)."""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.pattern_matcher import Match, PatternMatcherPass, register_graph_pattern

from ._common import DtypesConfig, HandWrittenFault, validate_config

__all__ = ["GraphEntryPass"]


class GraphEntryPass(HandWrittenFault):
    """A pass holding a ``PatternMatcherPass`` (``self.patterns``) into which it registers, when built,
    one graph entry: ``register_graph_pattern(pattern, extra_check=..., pass_dict=self.patterns)(handler)``,
    as Inductor's passes register theirs. The entry fires on matches whose root has a dtype of
    ``config.dtypes`` that :meth:`should_rewrite` accepts; calling the pass applies the patterns.

    - ``config``: a :class:`~pmverify.faults._common.DtypesConfig`; None takes the defaults.
      ``TypeError`` for anything else.
    """

    #: The entry's ``PatternExpr``, its handler ``(match, *args, **kwargs)`` and the pass's name.
    pattern: Any
    handler: Any
    pass_name: str

    def __init__(self, config: DtypesConfig | None = None) -> None:
        validate_config(config, DtypesConfig)
        self.config = config
        self.matched_count = 0
        self.patterns = PatternMatcherPass(pass_name=self.pass_name)
        dtypes = (config or DtypesConfig()).dtypes
        should_rewrite = type(self).should_rewrite

        def extra_check(match: Match) -> bool:
            value = match.output_node().meta.get("val")
            return isinstance(value, torch.Tensor) and value.dtype in dtypes and should_rewrite(match)

        register_graph_pattern(self.pattern, extra_check=extra_check, pass_dict=self.patterns)(type(self).handler)

    @staticmethod
    def should_rewrite(match: Match) -> bool:
        """Whether the handler may run on ``match`` (default: always)."""
        return True

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count += self.patterns.apply(graph)
