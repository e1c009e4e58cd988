"""What the functionalization oracle's checks share: the ``auto_functionalized`` /
``auto_functionalized_v2`` nodes of a graph, what each element of their result tuple is, and the
ranks whose rewritten graphs are checked (see :mod:`pmverify.oracles.functionalization`)."""

from __future__ import annotations

import operator
from typing import Any

import torch

from .._execution import deterministic_fill

__all__ = [
    "AUTO_FUNCTIONALIZED",
    "af_getitem",
    "af_nodes",
    "checked_ranks",
    "describe_element",
    "element_descriptions",
    "in_world",
    "is_af",
    "on_rank",
    "op_name",
]

#: The auto_functionalized higher-order ops, v1 then v2.
AUTO_FUNCTIONALIZED = (torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2)


def af_nodes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The auto_functionalized nodes of ``graph`` in graph order (two index look-ups when none)."""
    if not any(graph.find_nodes(op="call_function", target=target) for target in AUTO_FUNCTIONALIZED):
        return []
    return [node for node in graph.nodes if is_af(node)]


def is_af(node: Any) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in AUTO_FUNCTIONALIZED


def af_getitem(node: Any) -> tuple[torch.fx.Node, Any] | None:
    """``(af node, index)`` when ``node`` is a getitem of an auto_functionalized node."""
    if (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target is operator.getitem
        and len(node.args) == 2
        and is_af(node.args[0])
    ):
        return node.args[0], node.args[1]
    return None


def op_name(af: torch.fx.Node) -> str:
    op = af.args[0] if af.args else af.kwargs.get("_mutable_op")
    return getattr(op, "_name", None) or getattr(op, "__name__", None) or str(op)


def element_descriptions(af: torch.fx.Node) -> list[str] | None:
    """What each element of ``af``'s result tuple is, from the op's schema and the node's kwargs
    (``["output 0", "new value of base 0, `x_1` (arg `x`)"]``); None for an op without a schema."""
    op = af.args[0] if af.args else af.kwargs.get("_mutable_op")
    if not isinstance(op, torch._ops.OpOverload):
        return None
    schema = op._schema
    mutable = [arg.name for arg in schema.arguments if arg.alias_info is not None and arg.alias_info.is_write]
    returns = schema.returns
    if not returns:
        outs = ["output 0, None: the op returns nothing"]
    else:
        outs = [f"output {i}" + (f" `{r.name}`" if r.name else "") for i, r in enumerate(returns)]
    if af.target is torch.ops.higher_order.auto_functionalized:
        news = []
        for name in mutable:
            value = af.kwargs.get(name)
            news.append(f"new value of `{name}`" + (f" (`{value.name}`)" if isinstance(value, torch.fx.Node) else ""))
        return outs + news
    if torch._library.utils.is_out(op):
        return [f"out argument `{name}`" for name in mutable]
    bases = af.kwargs.get("_all_bases") or []
    news = []
    for k, base in enumerate(bases):
        users = [
            key[1 : -len("_base_index")]
            for key, value in af.kwargs.items()
            if key.endswith("_base_index") and (value == k or (isinstance(value, (list, tuple)) and k in value))
        ]
        text = f"new value of base {k}" + (f", `{base.name}`" if isinstance(base, torch.fx.Node) else "")
        news.append(text + (f" (arg {', '.join(f'`{u}`' for u in users)})" if users else ""))
    return outs + news


def describe_element(af: torch.fx.Node, index: Any) -> str:
    names = element_descriptions(af)
    if isinstance(index, int) and names is not None and -len(names) <= index < len(names):
        return f"element {index} of `{af.name}` ({names[index]})"
    return f"element {index!r} of `{af.name}` ({op_name(af)})"


# --- ranks -----------------------------------------------------------------------------------


def checked_ranks(pair: Any) -> range:
    """The ranks whose rewritten graphs are checked: every rank of a tensor-parallel case in direct
    mode (each has its own, :func:`rank_pair`), else rank 0."""
    return range(pair.case.tp_world) if pair.compiled is None and pair.case.tp_world > 1 else range(1)


def in_world(pair: Any, fn: Any, args_per_rank: list[tuple]) -> list[Any]:
    """``fn(*args_per_rank[r])`` for each rank of :func:`checked_ranks`: a tensor-parallel case's in one
    threaded world of all its ranks (as the semantics oracle runs them), so that its collectives
    reduce over every rank, not over one rank's rows alone. Only graph runs go in ``fn``: fake
    propagation and graph edits are not thread-safe and are done before, rank by rank. Raises
    :class:`~pmverify.distributed.SPMDError` where the world fails."""
    if len(args_per_rank) == 1:
        return [fn(*args_per_rank[0])]
    from ..distributed import run_spmd

    with deterministic_fill():
        return run_spmd(fn, len(args_per_rank), args_per_rank)


def on_rank(rank: int, pair: Any, message: str) -> str:
    return f"rank {rank}: {message}" if len(checked_ranks(pair)) > 1 else message
