"""``RecordedEntry``: one entry of an Inductor pattern pass, as :func:`pmverify.record_inductor` records it.

Inductor's pattern passes (``PatternMatcherPass``) hold three kinds of entry, each a ``PatternExpr``
(``entry.pattern``) with an ``extra_check`` and what runs on a match:

- ``"replacement"`` (``ReplacementPatternEntry``, from ``register_replacement``): a traced replacement
  graph; recorded with the ``register_replacement`` call (:class:`~pmverify.RecordedRewrite`);
- ``"graph"`` (``GraphPatternEntry``, from ``register_graph_pattern``): a hand-written ``handler(match,
  *args, **kwargs)`` that edits the FX graph (``joint_graph.pointless_view``, ``post_grad.addmm``,
  ``split_cat``'s normalisations, binary folding, mkldnn and quantization fusions);
- ``"lowering"`` (``LoweringPatternEntry``, from ``register_lowering_pattern``): a handler that lowers
  the match to Inductor IR while the graph is lowered; it cannot run on an FX graph alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["KINDS", "RecordedEntry"]

#: The kinds of entry, in the order the audit lists them.
KINDS = ("replacement", "graph", "lowering")


@dataclasses.dataclass(eq=False)
class RecordedEntry:
    """One entry of an Inductor pattern pass.

    - ``kind``: one of :data:`KINDS`.
    - ``entry``: the torch ``PatternEntry`` itself (``GraphPatternEntry``...), as registered.
    - ``pass_name``: where Inductor holds it, as Python reads it from ``torch._inductor.fx_passes``:
      ``"joint_graph.patterns"``, ``"post_grad.pass_patterns[2]"``,
      ``"split_cat.PRE_GRAD_PATTERNS['normalization_pass']"``, ``"freezing_patterns.pass_patterns[0]"``.
    - ``module``, ``name``: the handler's module (last part: ``"joint_graph"``) and a name unique
      within the module (the handler's name, with the pattern's ops where handlers are shared).
    - ``config``: the ``torch._inductor.config`` options that enable its pass (``"pattern_matcher"``,
      ``"freezing"``, ``"pre_grad_fusion_options['normalization_pass']"``), empty when always on.
    - ``duplicate``: the pass skipped it as a duplicate of an entry registered before (it never fires).
    - ``rewrite``: for a ``"replacement"``, its :class:`~pmverify.RecordedRewrite` (None otherwise).
    - ``torch_pass``: ``(pass_name, subsystem)`` of the ``PatternMatcherPass`` holding it (None, None
      for most), given to :meth:`pattern_pass`'s pass.
    """

    kind: str
    entry: Any
    pass_name: str
    module: str
    name: str
    config: tuple[str, ...] = ()
    duplicate: bool = False
    rewrite: Any = None
    torch_pass: tuple[str | None, str | None] = (None, None)
    _pass: Any = dataclasses.field(default=None, init=False, repr=False)

    @property
    def pattern(self) -> Any:
        """The entry's ``PatternExpr``."""
        return self.entry.pattern

    @property
    def extra_check(self) -> Any:
        """The entry's ``extra_check(match) -> bool``."""
        return self.entry.extra_check

    @property
    def handler(self) -> Any:
        """What runs on a match: the handler of a graph or lowering entry, None for a replacement."""
        return getattr(self.entry, "handler", None)

    @property
    def label(self) -> str:
        """``module/name``."""
        return f"{self.module}/{self.name}"

    def pattern_pass(self) -> Any:
        """A ``PatternMatcherPass`` holding this entry alone (made on first use and cached: do not
        register into it), with the ``pass_name`` of the pass Inductor holds it in, so that a
        handler counting into ``counters["inductor"]`` by pass name counts as in Inductor."""
        if self._pass is None:
            from .._compat import PatternMatcherPass

            name, subsystem = self.torch_pass
            isolated = PatternMatcherPass(pass_name=name, subsystem=subsystem)
            self.entry.register(isolated)
            self._pass = isolated
        return self._pass
