"""One call of a project's own mutable custom op (``with_mutating_custom_ops(ops=...)``) drawn into
a case, in the functional form post-grad graphs hold.

The drawn target (a graph input, a buffer or a view of either) takes one tensor arg of a call that
:func:`~._user_ops.candidates` accepts for it. Each other mutated arg is a new graph input, an
input or buffer of its layout, a ``clone`` of one, or a fresh ``empty`` / ``empty_like`` buffer
where the op only writes it; two or more mutated args of one layout but their last dim may instead
be chunks of one fused tensor (``split_with_sizes`` along the last dim, a trailing chunk left
unwritten), as vLLM's rotary embedding writes q and k of a fused qkv (v1 writes them back with
``slice_scatter``; v2 names the fused base in ``_all_bases``). Read-only tensor args are new inputs
(values in the range their example gives) or, for floating args drawn in [-2, 2), inputs and
buffers of their layout. The call is traced on its own under functionalization, as
``_auto_functionalized`` traces pmverify's own ops, and spliced in. Each mutated base may gain a
reader of its *old* value after the call (a ``clone`` returned as an output): legal in a functional
graph, and what an in-place rewrite that ignores later readers gets wrong.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._case import MutationSite
from .._compat import from_functional, functionalize_key_excluded
from ._mutations import Editor, apply_view, meta_val
from ._user_ops import Call, TensorArg, UserOp, call_kwargs, candidates, verdict

__all__ = ["add_user_op"]

_Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]


@dataclasses.dataclass(frozen=True)
class _Snippet:
    """What is traced: ``call`` at ``version``, placeholders of ``layouts`` (``n_bases`` mutated bases
    then read-only operands), and the ``source`` of each tensor arg, by name:
    ``("base", i, view)``, ``("split", i, sizes, k)``, ``("operand", j, view)``,
    ``("empty", shape, dtype, device)``, ``("empty_like", j)`` or ``("clone", j)``."""

    call: Call
    version: int
    layouts: tuple[_Layout, ...]
    n_bases: int
    sources: tuple[tuple[str, Any], ...]


def _layout(value: torch.Tensor) -> _Layout:
    return tuple(value.shape), tuple(value.stride()), value.dtype


def _flat(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for t in result if isinstance(t, torch.Tensor)]
    return []


@functools.lru_cache(maxsize=256)
def _trace(snippet: _Snippet) -> torch.fx.GraphModule:
    """The functional graph of ``snippet``: placeholders = bases then operands; output = op
    outputs, new bases, then new values of the buffers made inside (empties and clones)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from .._compat import FunctionalTensor, FunctionalTensorMode

    sources = dict(snippet.sources)
    n_bases = snippet.n_bases

    def program(tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        bases, operands = tensors[:n_bases], tensors[n_bases:]
        splits: dict[int, Any] = {}
        made, values = [], {}
        for name, value in snippet.call.args:
            if not isinstance(value, TensorArg):
                continue
            kind, *rest = sources[name]
            if kind == "base":
                values[name] = bases[rest[0]] if rest[1] is None else apply_view(bases[rest[0]], rest[1])
            elif kind == "operand":
                values[name] = operands[rest[0]] if rest[1] is None else apply_view(operands[rest[0]], rest[1])
            elif kind == "split":
                i, sizes, k = rest
                if i not in splits:
                    splits[i] = torch.ops.aten.split_with_sizes.default(bases[i], list(sizes), -1)
                values[name] = splits[i][k]
            else:
                if kind == "empty":
                    shape, dtype, device = rest
                    values[name] = torch.empty(shape, dtype=dtype, device=device)
                elif kind == "empty_like":
                    values[name] = torch.empty_like(operands[rest[0]])
                else:
                    values[name] = operands[rest[0]].clone()
                made.append(values[name])
        return _flat(snippet.call.op(**call_kwargs(snippet.call, values))), made

    def run(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with functionalize_key_excluded(), FunctionalTensorMode():
            wrapped = [FunctionalTensor.to_functional(t) for t in tensors]
            outputs, made = program(wrapped)
            return tuple(from_functional(t) for t in [*outputs, *wrapped[:n_bases], *made])

    examples = [torch.empty_strided(shape, stride, dtype=dtype) for shape, stride, dtype in snippet.layouts]
    with torch._inductor.config.patch(enable_auto_functionalized_v2=snippet.version == 2):
        gm = make_fx(run, tracing_mode="fake")(*examples)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def _meta(spec: TensorArg) -> torch.Tensor:
    return torch.empty_strided(spec.shape, spec.stride, dtype=spec.dtype, device="meta")


def _new_input(editor: Editor, spec: TensorArg) -> torch.fx.Node:
    """A new graph input of ``spec``'s layout holding values in its range, the same on every rank."""
    node = editor.new_input("act", spec.shape, spec.dtype)
    value = spec.fill(editor.generator)
    for rank in editor.inputs:
        rank[-1] = value.clone()
    node.meta["val"] = value
    return node


def _same(editor: Editor, slot: torch.fx.Node, spec: TensorArg, exclude: set) -> list[torch.fx.Node]:
    return [n for n in editor.same_like(slot, _meta(spec), exclude) if tuple(meta_val(n).stride()) == spec.stride]


def _fusable(specs: list[TensorArg]) -> bool:
    first = specs[0]
    return all(
        len(s.shape) >= 1
        and s.dtype == first.dtype
        and s.shape[:-1] == first.shape[:-1]
        and s.stride == tuple(torch.empty(s.shape, device="meta").stride())
        for s in specs
    )


def _bind(draw: Any, editor: Editor, slot: torch.fx.Node, call: Call, anchor: tuple) -> tuple[list, list, dict]:
    """(bases, operands, source by arg name) for ``call``; ``anchor`` = (kind, base, view)."""
    _, target_node, view = anchor
    write_only = verdict(call).write_only
    bases: list[torch.fx.Node] = []
    operands: list[torch.fx.Node] = []
    sources: dict[str, Any] = {}
    used: set[torch.fx.Node] = set()

    def base_index(node: torch.fx.Node) -> int:
        if node not in bases:
            bases.append(node)
        used.add(node)
        return bases.index(node)

    def operand_index(node: torch.fx.Node) -> int:
        operands.append(node)
        return len(operands) - 1

    tensor_args = [(name, v) for name, v in call.args if isinstance(v, TensorArg)]
    mutated = [name for name, _ in tensor_args if name in _mutated_names(call)]
    if call.anchor is not None:
        if call.anchor in mutated:
            sources[call.anchor] = ("base", base_index(target_node), view)
        else:
            sources[call.anchor] = ("operand", operand_index(target_node), view)
            used.add(target_node)
    rest = [name for name in mutated if name not in sources]
    specs = [call.value(name) for name in rest]
    if len(rest) >= 2 and _fusable(specs) and draw(st.booleans()):
        sizes = (*(s.shape[-1] for s in specs), specs[-1].shape[-1])
        shape = (*specs[0].shape[:-1], sum(sizes))
        fused_spec = TensorArg(shape, tuple(torch.empty(shape, device="meta").stride()), specs[0].dtype, -2.0, 2.0)
        choices = [None, *_same(editor, slot, fused_spec, used)] if fused_spec.dtype.is_floating_point else [None]
        fused = draw(st.sampled_from(choices))
        i = base_index(_new_input(editor, fused_spec) if fused is None else fused)
        for k, name in enumerate(rest):
            sources[name] = ("split", i, sizes, k)
    for name in [n for n in mutated if n not in sources]:
        spec = call.value(name)
        same = _same(editor, slot, spec, used) if spec.dtype.is_floating_point else []
        forms = ["new", *(["empty"] if name in write_only else []), *(["same"] if same else []), "clone"]
        form = draw(st.sampled_from(forms))
        if form == "new":
            sources[name] = ("base", base_index(_new_input(editor, spec)), None)
        elif form == "same":
            sources[name] = ("base", base_index(draw(st.sampled_from(same))), None)
        elif form == "clone":
            source = draw(st.sampled_from([None, *same]))
            source = _new_input(editor, spec) if source is None else source
            used.add(source)
            sources[name] = ("clone", operand_index(source))
        else:
            sources[name] = ("empty", spec.shape, spec.dtype, "cpu")
    for name, spec in tensor_args:
        if name in sources:
            continue
        scale_like = (spec.low, spec.high) != (-2.0, 2.0)
        same = [] if scale_like or not spec.dtype.is_floating_point else _same(editor, slot, spec, used)
        node = draw(st.sampled_from([None, *same]))
        sources[name] = ("operand", operand_index(_new_input(editor, spec) if node is None else node), None)
    # An empty buffer of an operand's layout is written as vLLM writes it: empty_like(operand).
    for name, source in list(sources.items()):
        if source[0] == "empty":
            spec = call.value(name)
            like = [j for j, n in enumerate(operands) if _layout(meta_val(n)) == (spec.shape, spec.stride, spec.dtype)]
            if like and draw(st.booleans()):
                sources[name] = ("empty_like", like[0])
    return bases, operands, sources


def _mutated_names(call: Call) -> set[str]:
    return {arg.name for arg in call.op._schema.arguments if arg.alias_info is not None and arg.alias_info.is_write}


def _hop_arg(hop: torch.fx.Node, name: str) -> torch.fx.Node | None:
    """The node ``hop`` (an auto_functionalized node) takes as mutated arg ``name``."""
    if f"_{name}_base_index" in hop.kwargs:
        return hop.kwargs["_all_bases"][hop.kwargs[f"_{name}_base_index"]]
    value = hop.kwargs.get(name)
    return value if isinstance(value, torch.fx.Node) else None


def add_user_op(
    draw: Any, editor: Editor, uops: tuple[UserOp, ...], versions: tuple[int, ...], copies: list, early_ok: bool
) -> None:
    """Draw one call of an op of ``uops`` into ``editor``'s graph (see the module docstring); a
    mutated graph input's ``copy_`` is added right after it or left in ``copies`` for the end."""
    from ._auto_functionalized import _return, _rewire, _splice

    placement, index, slot = editor.draw_slot(draw)
    kind, base, view, target = editor.draw_target(draw, slot, read_later=False, instance=index)
    options = [(uop, call) for uop in uops for call in candidates(uop, target)]
    if not options:
        names = ", ".join(str(uop.op) for uop in uops)
        raise InvalidArgument(
            f"no call of {names} on a {tuple(target.shape)} {target.dtype} tensor is accepted by the op's "
            "kernels; pass examples={op: [example args, ...]}"
        )
    uop, call = draw(st.sampled_from(options))
    version = draw(st.sampled_from(versions))
    bases, operands, sources = _bind(draw, editor, slot, call, (kind, base, view))
    snippet = _Snippet(
        call, version, tuple(_layout(meta_val(n)) for n in bases + operands), len(bases), tuple(sources.items())
    )
    added, results = _splice(editor, slot, _trace(snippet), bases + operands)
    hop = next(n for n in added if isinstance(n.target, torch._ops.HigherOrderOperator))
    made = [name for name, _ in call.args if sources.get(name, ("",))[0] in ("empty", "empty_like", "clone")]
    n_out = len(results) - len(bases) - len(made)
    outputs, new_bases, new_made = results[:n_out], results[n_out : n_out + len(bases)], results[n_out + len(bases) :]
    added_set = set(added)
    label = f"{hop.target.name()}({uop.name})"
    early = (
        early_ok
        and any(b.op == "placeholder" for b in bases)
        and not any(editor.views_read_from(b, slot) for b in bases if b.op == "placeholder")
        and draw(st.booleans())
    )
    returned = list(outputs) + list(new_made)
    for name in made:
        node = _hop_arg(hop, name)
        if node is not None:
            editor.mutations.append(MutationSite(hop.name, label, node.name))
    readers = []
    for old, new in zip(bases, new_bases, strict=True):
        editor.mutated.add(old)
        editor.mutations.append(MutationSite(hop.name, label, old.name))
        _rewire(editor, old, new, slot, added_set)
        # A reader of the old value after the call: what an in-place rewrite must not overwrite.
        if draw(st.booleans()):
            with editor.graph.inserting_before(slot):
                reader = editor.graph.call_function(torch.ops.aten.clone.default, (old,))
            reader.meta["val"] = meta_val(old).clone()
            readers.append(reader)
        if old.op == "placeholder":
            if early:
                with editor.graph.inserting_before(slot):
                    node = editor.graph.create_node(
                        "call_function", torch.ops.aten.copy_.default, (old, new), name="copy_"
                    )
                editor.mutations.append(MutationSite(node.name, "aten.copy_.default", old.name))
            else:
                copies.append((old, new))
        elif not new.users:
            returned.append(new)
    _return(editor, [n for n in [*returned, *readers] if not n.users])
    forms = ",".join(f"{name}={source[0]}" for name, source in sources.items())
    editor.tags.append(
        f"{uop.name}@v{version}:{placement}({forms}{', old read' if readers else ''}{', early copy_' if early else ''})"
    )
