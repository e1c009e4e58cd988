"""A fault whose replacement ignores a broadcast, with its correct twin.

Outside the QK-norm domain: a GELU(tanh)-mul fusion registered with ``register_replacement`` on
same-shape example inputs ``x[T, H]``, ``y[T, H]``; ``planted(gelu_mul_pattern, like(...))`` also
draws the broadcast forms the pattern runs on (``y[H]``, ``y[1, H]``, ``x[T, 1]``, expanded inputs...).
"""

from __future__ import annotations

import functools
import math

import torch

from ._common import DtypesConfig, HandWrittenFault, validate_config

__all__ = ["GeluMulFlattensUnbroadcast", "GeluMulFlattens", "gelu_mul_pattern", "GELU_MUL_EXAMPLE"]

#: The example inputs the fusion registers its pattern with: ``x[T, H]``, ``y[T, H]``, one shape.
GELU_MUL_EXAMPLE = (torch.empty(4, 8), torch.empty(4, 8))


def gelu_mul_pattern(x, y):
    """``gelu(x, approximate="tanh") * y``: what the fusions rewrite (``y`` broadcasts)."""
    return torch.nn.functional.gelu(x, approximate="tanh") * y


def _flat_kernel(expand: bool):
    """The replacement: one 1-D elementwise loop over the output's elements (as a flat kernel
    launches), its operands read at the flat index. ``expand``: each operand expanded to the
    output's shape first (right); else flattened as it is and padded with zeros, as a kernel's
    masked loads read past a smaller operand (the bug: right only where both have one shape)."""

    def gelu_mul_flat(x, y):
        shape = torch.broadcast_shapes(x.shape, y.shape)
        n = math.prod(shape)

        def flat(t):
            if expand:
                return t.expand(shape).reshape(-1)
            f = t.reshape(-1)
            return torch.nn.functional.pad(f, (0, n - f.numel()))

        return (torch.nn.functional.gelu(flat(x), approximate="tanh") * flat(y)).view(shape)

    return gelu_mul_flat


@functools.lru_cache(maxsize=8)
def _patterns(expand: bool, dtypes: tuple[torch.dtype, ...]):
    from torch._inductor import pattern_matcher as pm

    def can_fuse(match) -> bool:
        # the README recipe's check: the pattern holds no keyword argument, so none may be matched
        value = match.output_node().meta.get("val")
        if any(node.kwargs for node in match.nodes):
            return False
        return isinstance(value, torch.Tensor) and value.dtype in dtypes

    patterns = pm.PatternMatcherPass(pass_name=f"pmverify_GeluMulFlat{'' if expand else 'Unbroadcast'}")
    pm.register_replacement(
        gelu_mul_pattern, _flat_kernel(expand), list(GELU_MUL_EXAMPLE), pm.fwd_only, patterns, extra_check=can_fuse
    )
    return patterns


class GeluMulFlattens(HandWrittenFault):
    """The correct twin of :class:`GeluMulFlattensUnbroadcast`: its flat kernel expands each operand
    to the output's shape before reading it at the flat index.

    - ``config``: a :class:`~pmverify.faults._common.DtypesConfig` (the output dtypes it rewrites);
      None takes the defaults.
    """

    _expand = True

    def __init__(self, config: DtypesConfig | None = None) -> None:
        validate_config(config, DtypesConfig)
        self.config = config
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        dtypes = (self.config or DtypesConfig()).dtypes
        self.matched_count = _patterns(self._expand, tuple(dtypes)).apply(graph)


class GeluMulFlattensUnbroadcast(GeluMulFlattens):
    """Bug kind: a replacement that ignores a broadcast.

    A ``register_replacement`` GELU(tanh)-mul fusion (:func:`gelu_mul_pattern`, registered on
    ``x[4, 8]``, ``y[4, 8]``) whose replacement is a flat elementwise kernel that reads each operand
    at the output's flat index, as if it had the output's shape (zeros past its end, as masked loads
    give): exact where ``x`` and ``y`` have one shape (what the examples and a hand test hold); wrong
    values wherever Inductor's matcher matches a broadcast operand (``y[H]``, ``y[1, H]``,
    ``x[T, 1]``...: the pattern's trace is the same there). The semantics oracle, on
    ``planted(gelu_mul_pattern, like(GELU_MUL_EXAMPLE, vary="duck"))``, whose draws hold broadcast
    forms.

    - ``config``: a :class:`~pmverify.faults._common.DtypesConfig`; None takes the defaults.
    """

    _expand = False
