"""Faults of identity folding: a peephole that folds ``x * 1`` to ``x`` where torch's type promotion
makes the result another dtype.

A peephole pass replaces an op whose result is its input (``x * 1``, ``x + 0``, ``x - 0``, ``x / 1``,
``x ** 1``, a cast to ``x``'s own dtype, a view, reshape or expand to ``x``'s own shape) by the input.
It is right only where the result has the input's dtype, shape and strides: ``x * 1.0`` of an int
``x`` is float32, ``x / 1`` of an int ``x`` too (true division). Inductor checks exactly that:
``remove_no_ops`` (joint_graph.py) replaces ``add``/``sub``/``mul``/``div`` by their input only where
the fake values agree in shape, dtype and device (and casts where only the dtype differs);
``remove_noop_ops`` (post_grad.py) only where ``same_meta`` holds (shape, strides, dtype...) and
folds ``pow`` for an int exponent 1 only. :class:`HandIdentityFolding` does it right;
:class:`IdentityFoldingIgnoresPromotion` leaves the dtype out, as a user's first peephole does.
"""

from __future__ import annotations

import dataclasses

import torch

from ._common import HandWrittenFault, aten, convert, validate_config

__all__ = ["IdentityConfig", "HandIdentityFolding", "IdentityFoldingIgnoresPromotion"]

#: ``target -> the constant argument 1 that makes it an identity`` (only the number: ``x + 0`` with
#: any ``alpha`` is ``x``; ``rsub`` and ``div`` with a rounding mode are not identities).
_ARITHMETIC = {
    aten.add.Tensor: 0,
    aten.add.Scalar: 0,
    aten.sub.Tensor: 0,
    aten.sub.Scalar: 0,
    aten.mul.Tensor: 1,
    aten.mul.Scalar: 1,
    aten.div.Tensor: 1,
    aten.div.Scalar: 1,
    aten.pow.Tensor_Scalar: 1,
}
_CASTS = (convert, aten._to_copy.default, aten.to.dtype)
_VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.expand.default)


@dataclasses.dataclass(frozen=True)
class IdentityConfig:
    """What an identity-folding peephole folds.

    - ``arithmetic``: ``x + 0``, ``x - 0``, ``x * 1``, ``x / 1``, ``x ** 1`` with a number (default True).
    - ``casts``: ``convert_element_type`` / ``_to_copy`` / ``to`` to ``x``'s dtype (default True).
    - ``views``: ``view`` / ``reshape`` / ``_unsafe_view`` / ``expand`` to ``x``'s shape (default True).
    """

    arithmetic: bool = True
    casts: bool = True
    views: bool = True


def _is_number(value: object, wanted: int) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == wanted


def _same_meta(node: torch.fx.Node, source: torch.fx.Node) -> bool:
    """Whether ``node``'s value has ``source``'s dtype, shape and strides (Inductor's ``same_meta``)."""
    a, b = node.meta.get("val"), source.meta.get("val")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    return (a.dtype, a.shape, a.stride(), a.device) == (b.dtype, b.shape, b.stride(), b.device)


class HandIdentityFolding(HandWrittenFault):
    """A correct identity-folding peephole (not a fault itself), a plain FX graph pass: each
    ``x + 0``, ``x - 0``, ``x * 1``, ``x / 1``, ``x ** 1`` (a number operand, int or float), cast to
    ``x``'s dtype and ``view`` / ``reshape`` / ``_unsafe_view`` / ``expand`` to ``x``'s shape is
    replaced by ``x`` where its result has ``x``'s dtype, shape and strides (:meth:`folds`).

    - ``config``: an :class:`IdentityConfig`; None takes the defaults. ``TypeError`` for anything else.
    """

    def __init__(self, config: IdentityConfig | None = None) -> None:
        validate_config(config, IdentityConfig)
        self.config = config
        self.matched_count = 0

    def folds(self, node: torch.fx.Node, source: torch.fx.Node, arithmetic: bool) -> bool:
        """Whether ``node`` (an identity by its arguments) can be replaced by ``source``."""
        return _same_meta(node, source)

    def __call__(self, graph: torch.fx.Graph) -> None:
        config = self.config or IdentityConfig()
        count = 0
        for node in list(graph.nodes):
            if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
                continue
            source, arithmetic = node.args[0], node.target in _ARITHMETIC
            if arithmetic and config.arithmetic:
                identity = len(node.args) == 2 and _is_number(node.args[1], _ARITHMETIC[node.target])
            elif node.target in _CASTS and config.casts:
                dtype = node.kwargs.get("dtype") if node.target is aten._to_copy.default else node.args[1]
                identity = dtype == source.meta["val"].dtype
            elif node.target in _VIEWS and config.views:
                identity = tuple(node.meta["val"].shape) == tuple(source.meta["val"].shape)
            else:
                continue
            if identity and self.folds(node, source, arithmetic):
                node.replace_all_uses_with(source)
                graph.erase_node(node)
                count += 1
        self.matched_count = count


class IdentityFoldingIgnoresPromotion(HandIdentityFolding):
    """Bug kind: a peephole that folds ``x * 1``, ``x + 0``, ``x - 0``, ``x / 1`` and ``x ** 1``
    without asking for the result's dtype.

    The peephole a new pass author writes first (issue 30's trial): an arithmetic identity is
    replaced by its input whatever torch's type promotion makes of it, so ``x * 1.0``, ``x + 0.0``,
    ``x ** 1.0`` and ``x / 1`` of an int ``x`` (float32 results) become the int ``x``. Right on
    floating values and on int values with int constants (but ``/``); casts and views it folds
    correctly. Found on :func:`~pmverify.strategies.fx_graphs` cases of the ops it folds, which draw
    identity constants (int and float) for int values too: an output's dtype changes (the structure
    oracle) and values downstream (the semantics oracle).

    - ``config``: an :class:`IdentityConfig`; None takes the defaults.
    """

    def folds(self, node: torch.fx.Node, source: torch.fx.Node, arithmetic: bool) -> bool:
        if arithmetic:
            return True  # the bug: x * 1.0 of an int x is float32
        return super().folds(node, source, arithmetic)
