"""Walking a ``PatternExpr`` for :func:`~._expr_instances.expr_cases`: its calls' targets
(:func:`pattern_targets`, :func:`undrawable`), their names and schemas, the sub-patterns each
holds."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "ExprUnsupported",
    "Retry",
    "base_name",
    "children",
    "getitem_parent",
    "is_factory",
    "is_quantize",
    "is_sub_pattern",
    "overloads",
    "pattern_targets",
    "schema_kind",
    "op_schemas",
    "target_name",
    "undrawable",
]


def is_quantize(fn: Any) -> bool:
    return (
        isinstance(fn, torch._ops.OpOverload) and fn.namespace == "quantized_decomposed" and "quantize_per" in str(fn)
    )


class ExprUnsupported(Exception):
    """A pattern pmverify cannot draw instances of (message: what and why)."""


class Retry(Exception):
    """One try of a node's arguments failed; draw them again."""


def pattern_targets(pattern: Any) -> list[str]:
    """The targets of ``pattern``'s calls, outermost first (``["aten.add.Tensor", "aten.mm.default"]``)."""
    from .._compat import pattern_matcher as pm

    out: list[str] = []
    seen: set[int] = set()

    def walk(p: Any) -> None:
        if id(p) in seen:
            return
        seen.add(id(p))
        if isinstance(p, pm._TargetExpr):
            out.append(target_name(p.fns[0]))
        for child in children(p):
            walk(child)

    walk(pattern)
    return out


#: Ops whose CPU kernels trust their arguments (prepacked weights, matching RNN weight shapes): a
#: drawn call may crash the process rather than raise, so pmverify draws none.
_UNCHECKED_NAMESPACES = ("mkldnn", "onednn")


def undrawable(pattern: Any) -> str | None:
    """Why pmverify draws no instance of ``pattern`` (one line), or None when it does: a target of
    :data:`_UNCHECKED_NAMESPACES` (``onednn.qlinear_pointwise`` wants weights prepacked by
    ``onednn.qlinear_prepack``; ``aten.mkldnn_rnn_layer`` does not check its weights' shapes)."""
    from .._compat import pattern_matcher as pm

    seen: set[int] = set()
    stack = [pattern]
    while stack:
        p = stack.pop()
        if id(p) in seen:
            continue
        seen.add(id(p))
        if isinstance(p, pm._TargetExpr):
            for fn in p.fns:
                if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                    name = str(fn)
                    if name.split(".")[0] in _UNCHECKED_NAMESPACES or "mkldnn" in name.split(".")[1]:
                        return (
                            f"its pattern calls {name}, whose CPU kernel trusts its arguments (prepacked "
                            "weights, matching shapes): a drawn call may crash the process, so pmverify draws none"
                        )
        stack.extend(children(p))
    return None


def children(p: Any) -> list[Any]:
    from .._compat import pattern_matcher as pm

    if isinstance(p, pm.MultiOutputPattern):
        return [o for o in p.outputs if o is not None]
    if isinstance(p, pm.RepeatedExpr):
        return [p.inner_pattern]
    if isinstance(p, pm.ListOf):
        return [p.pattern]
    if isinstance(p, pm._TargetArgsExpr):
        return [a for a in p.flat_args_kwargs[0] if isinstance(a, pm.PatternExpr)]
    return []


def target_name(fn: Any) -> str:
    if isinstance(fn, str):
        return f"Tensor.{fn}"
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(fn)
    module = getattr(fn, "__module__", None) or ""
    return f"{module.replace('_operator', 'operator')}.{getattr(fn, '__name__', repr(fn))}".lstrip(".")


def base_name(fn: Any) -> str:
    if isinstance(fn, str):
        return fn
    if isinstance(fn, torch._ops.OpOverload):
        return fn._schema.name.split("::")[-1]
    if isinstance(fn, torch._ops.OpOverloadPacket):
        return fn._qualified_op_name.split("::")[-1]
    return getattr(fn, "__name__", "")


def op_schemas(fn: Any) -> list[Any]:
    """The schemas a call of ``fn`` may follow: its own (an overload), else ``aten::NAME``'s."""
    if isinstance(fn, torch._ops.OpOverload):
        return [fn._schema]
    if fn is operator.getitem:
        return []
    name = base_name(fn)
    try:
        schemas = list(torch._C._jit_get_schemas_for_operator(f"aten::{name}"))
    except RuntimeError:
        return []
    return [
        s
        for s in schemas
        if s.arguments
        and schema_kind(s.arguments[0]).startswith("Tensor")
        and not s.overload_name.endswith("out")
        and "Dimname" not in str(s)
        and not any(a.alias_info is not None and a.alias_info.is_write for a in s.arguments)
        or isinstance(fn, torch._ops.OpOverload)
    ]


def overloads(fns: Sequence[Any]) -> list[Any]:
    """The targets a node may have: the overloads and plain callables of ``fns`` (an op packet only
    where its pattern lists nothing else); of an op's overloads, those on tensors (a first argument
    that is a ``Tensor``, no ``out=``), as a traced graph holds them."""
    chosen = [fn for fn in fns if not isinstance(fn, torch._ops.OpOverloadPacket)]
    on_tensors = [fn for fn in chosen if not isinstance(fn, torch._ops.OpOverload) or _on_tensors(fn)]
    return on_tensors or chosen or list(fns)


def _on_tensors(op: torch._ops.OpOverload) -> bool:
    arguments = op._schema.arguments
    if not arguments or any(a.alias_info is not None and a.alias_info.is_write and a.kwarg_only for a in arguments):
        return False
    return schema_kind(arguments[0]).startswith("Tensor") and "complex" not in str(op._schema)


def schema_kind(arg: Any) -> str:
    """A schema argument's type as the schema writes it: ``Tensor``, ``Tensor?``, ``int[]``,
    ``Tensor?[]``, ``ScalarType?``, ``Scalar``."""

    def spell(text: str) -> str:
        if text.startswith("Optional[") and text.endswith("]"):
            return spell(text[len("Optional[") : -1]) + "?"
        if text.startswith("List[") and text.endswith("]"):
            return spell(text[len("List[") : -1]) + "[]"
        return {"number": "Scalar"}.get(text, text)

    return spell(str(getattr(arg, "real_type", arg.type)))


def is_factory(fn: Any) -> bool:
    """Whether ``fn`` is an op that takes no tensor (``aten.full``, ``aten.arange``...): a factory."""
    schema = getattr(fn, "_schema", None)
    return schema is not None and not any("Tensor" in str(a.type) for a in schema.arguments)


def is_sub_pattern(value: Any) -> bool:
    from .._compat import pattern_matcher as pm

    return isinstance(value, (pm._TargetExpr, pm.ListOf, pm.MultiOutputPattern, pm.RepeatedExpr))


def getitem_parent(node: Any) -> Any:
    if isinstance(node, torch.fx.Node) and node.target is operator.getitem:
        return node.args[0]
    return None
