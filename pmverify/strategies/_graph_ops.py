"""The op table of :func:`~pmverify.strategies.fx_graphs`: what each op applies to and what it emits.

Every entry (a :class:`GraphOp`, see :mod:`._ops_core`) says which values it applies to
(``accepts``: dtype kind, rank, sizes, contiguity, value bound), which fresh input shapes it applies
to (``fresh``: a graph can always grow by any op, on a new input if no value fits), how many op
nodes it adds (``cost``) and how it emits them (``emit``: draws its argument form and other
operands, then adds ``call_function`` nodes on ``torch.ops.aten`` / ``torch.ops.prims`` overloads,
as in Inductor's post-grad graphs and make_fx traces). The families:

- elementwise (:mod:`._ops_elementwise`): unary ops, scalar operands in every overload, binary ops
  with type promotion and ``alpha``, ``div`` with ``rounding_mode``, ``where`` and masks,
  comparisons, ``clamp`` forms, casts (``convert_element_type``, ``_to_copy``, ``to``;
  :mod:`._ops_casts`), ``gelu``, ``addcmul``;
- reductions and scans (:mod:`._ops_reductions`): ``sum mean amax amin var std argmax softmax
  log_softmax cumsum cumprod`` with ``keepdim``, ``dtype=``, ``correction=``;
- views (:mod:`._ops_views`): ``view reshape aten_reshape unsafe_view permute transpose t
  unsqueeze squeeze flatten unflatten expand as_strided clone``;
- slicing and indexing (:mod:`._ops_slicing`): ``slice select narrow unbind split cat
  slice_scatter select_scatter index_select gather``;
- contractions (:mod:`._ops_contraction`): ``mm bmm matmul addmm baddbmm``;
- creation (:mod:`._ops_creation`): ``full ones zeros empty_fill arange full_like ones_like
  zeros_like scalar_tensor``.

Each op (:data:`OP_LEVELS`) and argument form (``START_FORMS``, ``SCATTER_FORMS``,
``CREATION_FORMS``, ``CLAMP_FORMS``, ``WHERE_FORMS``...) is tagged with the levels (:data:`LEVELS`)
whose graphs hold it; a :class:`~._ops_core.Builder` draws only its level's.

A share of number operands, clamp bounds, cast dtypes and view sizes (1 in
:data:`~._ops_core.IDENTITY_SHARE`) are identities: ``x * 1``, ``x + 0``, ``x * 0``, a clamp at the
dtype's limits, a cast to the value's own dtype, a view to its own shape (what a peephole folds).

Values stay finite by construction: every value carries a ``bound`` on its magnitude (a new input's
is its real magnitude, at least 2 for floats), each op computes the bound of its result, and an op
applies only where that bound stays under the cap of the result's dtype (:func:`bound_cap`: 1024 in
float16, far below its 65504; 2**40 in float32). Ops with a partial domain are emitted with a guard:
``log(|x| + 1)``, ``x / (|y| + 1)``; ``exp`` applies only to values bounded by 4; ``mean``,
``amax``, ``var``, ``argmax`` and softmax never reduce an empty dim; index tensors hold indices in
range. Values have rank 0..4 and at most :data:`MAX_NUMEL` elements; every value's dtype is one of
the case's dtypes (the bool masks ``where`` builds for itself aside).
"""

from __future__ import annotations

import dataclasses

import torch

from ._ops_contraction import CONTRACTION_OPS
from ._ops_core import (
    BOUND_CAP,
    EVERY_LEVEL,
    LEVELS,
    MAX_NUMEL,
    MAX_RANK,
    MAX_SIDE,
    POST_GRAD,
    PRE_GRAD,
    GraphOp,
    Val,
    bound_cap,
)
from ._ops_creation import CREATION_OPS
from ._ops_elementwise import ELEMENTWISE_OPS
from ._ops_reductions import REDUCTION_OPS
from ._ops_slicing import SLICING_OPS
from ._ops_views import VIEW_OPS

__all__ = [
    "GRAPH_OPS",
    "GRAPH_DTYPES",
    "GraphOp",
    "LEVELS",
    "OP_LEVELS",
    "OPS",
    "Val",
    "BOUND_CAP",
    "MAX_NUMEL",
    "MAX_RANK",
    "MAX_SIDE",
    "bound_cap",
]

#: The levels whose graphs hold each op's node forms, where not every level's (measured on torch
#: 2.13: the graph ``post_grad_custom_post_pass`` receives from torch.compile, and make_fx's with and
#: without ``pre_dispatch``). Post-grad graphs hold ``prims.convert_element_type`` for every cast;
#: ``reshape.default`` for ``view``, ``flatten``, ``unflatten``, ``_unsafe_view`` and AOT's
#: ``clone`` + ``_unsafe_view`` (Inductor's ``view_to_reshape``); ``permute`` for ``t`` and
#: ``transpose``; ``slice`` for ``narrow``; ``index.Tensor`` for ``index_select``; ``full`` for
#: ``ones``, ``zeros``, ``empty`` + ``fill``, ``scalar_tensor`` and the ``*_like`` ops;
#: ``prims.iota`` for ``arange``; ``mm`` / ``bmm`` between ``reshape`` / ``expand`` for
#: ``matmul``; ``where.self`` on a 0-d ``full`` for ``masked_fill`` and a number branch;
#: ``bitwise_not`` / ``bitwise_and`` for the logical ops on bools; and decompose ``gelu``,
#: ``std`` (``var`` + ``sqrt``), ``softmax`` and ``log_softmax``. Argument forms within an op
#: carry their own tags (``START_FORMS``, ``SCATTER_FORMS``, ``CREATION_FORMS``...).
OP_LEVELS: dict[str, frozenset[str]] = {
    "convert_element_type": POST_GRAD,
    **dict.fromkeys(
        ("to_copy", "gelu", "where_scalar", "masked_fill", "logical_not", "logical_and", "std", "softmax"),
        PRE_GRAD,
    ),
    **dict.fromkeys(("log_softmax", "view", "reshape", "unsafe_view", "transpose", "t", "flatten"), PRE_GRAD),
    **dict.fromkeys(("unflatten", "narrow", "index_select", "matmul", "ones", "zeros", "empty_fill"), PRE_GRAD),
    **dict.fromkeys(("arange", "full_like", "ones_like", "zeros_like", "scalar_tensor"), PRE_GRAD),
}

#: The op table, simplest first.
OPS: tuple[GraphOp, ...] = tuple(
    dataclasses.replace(op, levels=OP_LEVELS.get(op.name, EVERY_LEVEL))
    for op in ELEMENTWISE_OPS + REDUCTION_OPS + VIEW_OPS + SLICING_OPS + CONTRACTION_OPS + CREATION_OPS
)

#: Names of the ops :func:`~pmverify.strategies.fx_graphs` draws, simplest first.
GRAPH_OPS: tuple[str, ...] = tuple(op.name for op in OPS)

#: Dtypes :func:`~pmverify.strategies.fx_graphs` draws values in, simplest first.
GRAPH_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.bool)
