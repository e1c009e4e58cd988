"""Running and emitting one call of :func:`~._expr_instances.expr_cases` (:class:`Calls`, a part
of the instance under construction): on fake tensors and on real zeros, its node added with its
``meta["val"]``, its pending tensor leaves made placeholders or frozen constants; ``getitem``,
``einsum`` and the consumer of the root."""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import snapshot_fake

from .._execution import quiet_fake_tensor_errors
from ._expr_leaves import NONZERO
from ._expr_shapes import Pending
from ._expr_targets import ExprUnsupported, Retry, base_name
from ._tensors import tensors

if TYPE_CHECKING:
    from ._expr_instances import _Instance

__all__ = ["Calls"]

#: Equations of the einsums drawn (a batched matmul, a pointwise product and reduction, a transpose...).
_EINSUM = ("bcn,bcnm->bcm", "ij,jk->ik", "bij,bjk->bik", "ij,ij->ij", "bhd,d->bhd", "ij->ji", "i,i->", "bij,j->bi")


class Calls:
    """Running and emitting calls: a part of :class:`~._expr_instances._Instance` (its ``draw``,
    ``b``, ``dtype``, ``real``, ``order``, ``getitem_next``, ``constants``, ``frozen`` and
    ``force_optional``)."""

    def run(self, fn: Any, args: tuple, kwargs: dict, op: str) -> Any:
        """The call's fake result, once it ran on fake tensors and on real ones (zeros of the drawn
        shapes and dtypes, and the real results of the nodes before): a fake kernel lets through
        what the CPU kernel refuses (an ``mm`` of two dtypes). Raises :class:`Retry` otherwise."""
        fake = self._call(fn, op, *_mapped(args, kwargs, lambda v: _faked(self, v)), mode=self.b.mode)
        real = self._call(fn, op, *_mapped(args, kwargs, self._real), mode=contextlib.nullcontext())
        self._last_real = real
        return fake

    def _call(self, fn: Any, op: str, args: tuple, kwargs: dict, *, mode: Any) -> Any:
        try:
            with mode, quiet_fake_tensor_errors(), torch.no_grad():
                if op == "call_method":
                    return getattr(args[0], fn)(*args[1:], **kwargs)
                return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure of the drawn call: draw again
            raise Retry(str(exc)) from None

    def _real(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self._real(v) for v in value]
        if isinstance(value, torch.fx.Node):
            if value in self.real:
                return self.real[value]
            meta = value.meta["val"]
            return torch.zeros(meta.shape, dtype=meta.dtype)
        if isinstance(value, Pending):
            if value.node is not None:
                return self._real(value.node)
            return torch.zeros(value.shape, dtype=value.dtype)
        return value

    def add_node(self, op: str, fn: Any, args: tuple, kwargs: dict, fake: Any) -> torch.fx.Node:
        args = tuple(self.materialise(a) for a in args)
        kwargs = {k: self.materialise(v) for k, v in kwargs.items()}
        name = base_name(fn) or "call"
        node = self.b.graph.create_node(op, fn, args, kwargs, name=name)
        value = [snapshot_fake(r) for r in fake] if isinstance(fake, (list, tuple)) else snapshot_fake(fake)
        node.meta["val"] = value
        node.meta["example_value"] = value
        self.real[node] = self._last_real
        self.order.append(node)
        return node

    def consumer(self, root: torch.fx.Node) -> torch.fx.Node | None:
        """A user of the instance's root, as a model has: ``root + root`` (``operator.add`` in a
        graph of ``torch`` calls, ``aten.add.Tensor`` in an aten graph); None for a root that is not
        one tensor."""
        value = root.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dtype == torch.bool:
            return None
        aten_graph = isinstance(root.target, torch._ops.OpOverload)
        target = torch.ops.aten.add.Tensor if aten_graph else operator.add
        with self.b.mode, quiet_fake_tensor_errors():
            fake = target(value, value)
        node = self.b.graph.create_node("call_function", target, (root, root), {}, name="add")
        node.meta["val"] = node.meta["example_value"] = snapshot_fake(fake)
        return node

    def einsum(self, p: Any, fn: Any) -> torch.fx.Node:
        """``torch.einsum(equation, *operands)`` as a traced graph holds it, the operands sized by
        the equation's letters."""
        equation = self.draw(st.sampled_from(_EINSUM))
        sizes: dict[str, int] = {}
        operands = []
        for term in equation.split("->")[0].split(","):
            shape = tuple(sizes.setdefault(c, self.draw(st.integers(1, 4))) for c in term)
            operands.append(Pending(shape, self.dtype))
        args = (equation, *operands)
        fake = self.run(fn, args, {}, p.op)
        return self.add_node(p.op, fn, args, {}, fake)

    def getitem(self, args: list[Any]) -> torch.fx.Node:
        parent = args[0]
        if not isinstance(parent, torch.fx.Node) or not isinstance(parent.meta.get("val"), (list, tuple)):
            raise ExprUnsupported("getitem of a value that is not a tuple")
        pieces = len(parent.meta["val"])
        if not pieces:
            raise Retry("no pieces")
        index = args[1]
        from .._compat import pattern_matcher as pm

        if isinstance(index, pm.PatternExpr):
            index = self.getitem_next.get(parent, 0)
            if index >= pieces or not self.draw(st.integers(0, 5)):
                index = self.draw(st.integers(0, pieces - 1))
            self.getitem_next[parent] = index + 1
        node = self.b.graph.create_node("call_function", operator.getitem, (parent, index), {}, name="getitem")
        node.meta["val"] = node.meta["example_value"] = parent.meta["val"][index]
        if parent in self.real:
            self.real[node] = self.real[parent][index]
        self.order.append(node)
        return node

    def materialise(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.materialise(v) for v in value]
        if isinstance(value, Pending):
            if value.node is None:
                elements = value.elements
                if elements is None and self.force_optional and value.dtype.is_floating_point:
                    elements = NONZERO  # an alpha= set on zeros shows nothing: the near miss is judged on values
                if self.frozen and self.b.inputs and (self.frozen == "all" or self.draw(st.integers(0, 7))):
                    value.node = self.constant(value.shape, value.dtype, elements)
                elif elements is not None:
                    value.node = self.b.new_input(value.shape, value.dtype, elements=elements).node
                else:
                    value.node = self.b.new_input(value.shape, value.dtype).node
                value.node.meta["example_value"] = value.node.meta["val"]
            return value.node
        return value

    def constant(self, shape: tuple[int, ...], dtype: torch.dtype, elements: Any) -> torch.fx.Node:
        """A frozen parameter: a ``get_attr`` of a constant drawn as an input is (after the inputs)."""
        real = self.draw(tensors(dtype, shape, elements=elements) if elements is not None else tensors(dtype, shape))
        name = f"_frozen_param{len(self.constants)}"
        self.constants[name] = real
        first_op = next((n for n in self.b.graph.nodes if n.op != "placeholder"), None)
        with self.b.graph.inserting_before(first_op) if first_op is not None else contextlib.nullcontext():
            node = self.b.graph.get_attr(name)
        node.meta["val"] = self.b.mode.from_tensor(real, static_shapes=True)
        return node


def _mapped(args: tuple, kwargs: dict, fn: Callable[[Any], Any]) -> tuple[tuple, dict]:
    return tuple(fn(a) for a in args), {k: fn(v) for k, v in kwargs.items()}


def _faked(instance: _Instance, value: Any) -> Any:
    if isinstance(value, list):
        return [_faked(instance, v) for v in value]
    if isinstance(value, torch.fx.Node):
        return value.meta["val"]
    if isinstance(value, Pending):
        if value.node is not None:
            return value.node.meta["val"]
        with instance.b.mode:
            if value.dtype == torch.int64:
                return torch.zeros(value.shape, dtype=value.dtype)
            return torch.empty(value.shape, dtype=value.dtype)
    return value
