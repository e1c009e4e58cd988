"""Faults of no-op elimination: slices taken for the identity when they are not.

A no-op elimination pass (Inductor's ``remove_noop_ops`` in post_grad.py, vLLM's
``NoOpEliminationPass``) replaces a view or slice whose result is its input by the input, so that
later pattern passes see through it. :class:`HandNoOpElimination` does it right; each fault breaks
its slice rule the way a published pass once did.
"""

from __future__ import annotations

import dataclasses
import sys

import torch

from ._common import HandWrittenFault, aten, validate_config

__all__ = [
    "NoOpConfig",
    "HandNoOpElimination",
    "NoOpSliceEndMinusOne",
    "NoOpSliceIgnoresStep",
    "NoOpScatterUnpacksFiveArguments",
]

#: What dynamo writes for an open end (``x[a:]``): ``sys.maxsize``.
OPEN_END = sys.maxsize
_VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)


@dataclasses.dataclass(frozen=True)
class NoOpConfig:
    """What a no-op elimination pass removes.

    - ``views``: ``view`` / ``reshape`` / ``_unsafe_view`` to the input's own shape (default True).
    - ``slices``: ``aten.slice.Tensor`` covering the whole dim (default True).
    - ``scatters``: ``aten.slice_scatter`` whose source covers the whole input (default True).
    """

    views: bool = True
    slices: bool = True
    scatters: bool = True


def _static_shape(node: torch.fx.Node) -> tuple[int, ...] | None:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or not all(isinstance(s, int) for s in value.shape):
        return None
    return tuple(value.shape)


def _slice_args(node: torch.fx.Node) -> tuple[torch.fx.Node, int, int | None, int | None, int]:
    """``(input, dim, start, end, step)`` of an ``aten.slice.Tensor`` call, read by the op's schema
    (positional or keyword, defaults filled in)."""
    values = _arguments(node)
    return values["self"], values["dim"], values["start"], values["end"], values["step"]


def _same_layout(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    """Whether the values of ``a`` and ``b`` have one static shape and stride."""
    va, vb = (n.meta.get("val") if isinstance(n, torch.fx.Node) else None for n in (a, b))
    if not isinstance(va, torch.Tensor) or not isinstance(vb, torch.Tensor):
        return False
    return _static_shape(a) is not None and (va.shape, va.stride()) == (vb.shape, vb.stride())


def _arguments(node: torch.fx.Node) -> dict:
    """The arguments of a call by its op's schema names (positional or keyword, defaults filled in)."""
    values = {}
    for i, argument in enumerate(node.target._schema.arguments):
        if i < len(node.args):
            values[argument.name] = node.args[i]
        elif argument.name in node.kwargs:
            values[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            values[argument.name] = argument.default_value
    return values


class HandNoOpElimination(HandWrittenFault):
    """A correct no-op elimination (not a fault itself): a view or reshape to its input's own shape,
    and a slice whose result has its input's shape (it then covers the whole dim: start 0, step 1
    or a dim of size 1), are replaced by their input; a ``slice_scatter`` whose source has its
    input's shape and strides (it then overwrites every element) by its source. Static shapes only.
    Arguments are read by the op's schema, defaults filled in: a ``slice_scatter`` is written with
    4, 5 or 6 arguments (``torch.slice_scatter(x, y, dim, start)``, ``x[a:b].copy_(y)``,
    ``x[::2].copy_(y)``).

    - ``config``: a :class:`NoOpConfig`; None takes the defaults. ``TypeError`` for anything else.
    """

    def __init__(self, config: NoOpConfig | None = None) -> None:
        validate_config(config, NoOpConfig)
        self.config = config
        self.matched_count = 0

    def slice_is_noop(self, size: int, start: int | None, end: int | None, step: int, same_shape: bool) -> bool:
        """Whether ``x.slice(dim, start, end, step)`` is ``x``, for a dim of ``size`` elements;
        ``same_shape``: whether the slice's result has ``x``'s shape."""
        return same_shape

    def scatter_arguments(self, node: torch.fx.Node) -> dict:
        """The arguments of a ``slice_scatter`` call by name, defaults filled in."""
        return _arguments(node)

    def __call__(self, graph: torch.fx.Graph) -> None:
        config = self.config or NoOpConfig()
        count = 0
        for node in list(graph.nodes):
            if node.op != "call_function" or not node.args:
                continue
            source = node.args[0]
            shape, source_shape = _static_shape(node), _static_shape(source)
            if shape is None or source_shape is None:
                continue
            if node.target in _VIEWS and config.views:
                noop = shape == source_shape
            elif node.target is aten.slice.Tensor and config.slices:
                source, dim, start, end, step = _slice_args(node)
                size = source_shape[dim]
                noop = self.slice_is_noop(size, start, end, step, shape == source_shape)
            elif node.target is aten.slice_scatter.default and config.scatters:
                source = self.scatter_arguments(node)["src"]
                noop = _same_layout(source, node)
            else:
                continue
            if noop:
                node.replace_all_uses_with(source)
                graph.erase_node(node)
                count += 1
        self.matched_count = count


class NoOpSliceEndMinusOne(HandNoOpElimination):
    """Bug kind: a no-op elimination that drops ``slice(x, d, 0, -1)``.

    Modelled on vLLM's ``NoOpEliminationPass`` before it was fixed (vLLM issue 17078): one helper
    judged both reshape sizes and slice ends, and for a reshape -1 means "the rest", so a slice
    ending at -1 (``x[:-1]``, which drops the last element) was taken for the whole dim. Here a
    slice from 0 with step 1 is removed when its end is None, at least the dim's size, or -1.
    Correct on every other slice; on ``x[:-1]`` the slice's users read one more element: shapes
    change downstream (the structure oracle: re-propagated meta and output shapes) and values (the
    semantics oracle), on :func:`~pmverify.strategies.fx_graphs` cases, whose slices may end at -1.

    - ``config``: a :class:`NoOpConfig`; None takes the defaults.
    """

    def slice_is_noop(self, size: int, start: int | None, end: int | None, step: int, same_shape: bool) -> bool:
        return start in (0, None) and step == 1 and (end is None or end == -1 or end >= size)  # the bug: -1


class NoOpSliceIgnoresStep(HandNoOpElimination):
    """Bug kind: a no-op elimination that ignores the slice's step.

    Modelled on the first no-op rule for ``aten.slice`` in Inductor's ``remove_noop_ops``, which
    looked at start and end only: a slice from 0 to the end (None, the size or more, or dynamo's
    ``sys.maxsize`` for ``x[a:]``) is removed whatever its step, so ``x[::2]`` becomes ``x``.
    Correct for step 1; with step > 1 on a dim of more than one element the result changes shape
    (the structure oracle) and values (the semantics oracle), on
    :func:`~pmverify.strategies.fx_graphs` cases, whose slices may step by 2.

    - ``config``: a :class:`NoOpConfig`; None takes the defaults.
    """

    def slice_is_noop(self, size: int, start: int | None, end: int | None, step: int, same_shape: bool) -> bool:
        return start in (0, None) and (end is None or end >= size)  # the bug: step is never read


class NoOpScatterUnpacksFiveArguments(HandNoOpElimination):
    """Bug kind: a no-op elimination that unpacks five arguments of ``slice_scatter``.

    Modelled on vLLM's ``NoOpEliminationPass``, which reads ``slice_scatter`` as ``base, view, dim,
    start, end = node.args[:5]``: here ``input, src, dim, start, end = node.args``. Right for the
    five-argument form functionalization writes for ``x[a:b].copy_(y)``; it raises (a crash of the
    pass) on the forms torch.compile also writes: four arguments for an explicit
    ``torch.slice_scatter(x, y, dim, start)`` (trailing defaults omitted) and six for a step
    (``x[::2].copy_(y)``). Found by :func:`~pmverify.strategies.fx_graphs` cases holding
    ``slice_scatter`` at the default level ``"post_grad"``.

    - ``config``: a :class:`NoOpConfig`; None takes the defaults.
    """

    def scatter_arguments(self, node: torch.fx.Node) -> dict:
        inp, src, dim, start, end = node.args  # the bug: 4 and 6 arguments are post-grad forms too
        return {"self": inp, "src": src, "dim": dim, "start": start, "end": end, "step": 1}
