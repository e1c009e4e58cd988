"""vLLM-like mutating custom ops on CPU (namespace ``pmverify_fused_norm``) and post-grad graphs of
them, for tests of correct passes over ``auto_functionalized`` nodes: fusions of two of them into
one, and the defunctionalization that vLLM's ``FixFunctionalizationPass`` does.

Every op writes its results into buffers it is given, as vLLM's kernels do (``Tensor(a!) result``);
float32 ``[T, H]`` activations, ``[H]`` weights; the norm is ``x * rsqrt(mean(x**2) + eps) * w``,
the "quant" rounds ``x / scale`` to integers in [-8, 8] (float32). A fused op computes exactly what
its parts compute, in the same order, so a fusion is bit-identical.

- ``rms_norm(result!, input, weight, epsilon)``: ``result = norm(input)``.
- ``fused_add_rms_norm(input!, residual!, weight, epsilon)``: ``residual += input; input = norm(residual)``.
- ``quant(result!, input, scale)``: ``result = quant(input)``.
- ``add_quant(result!, input, residual, scale)``: ``result = quant(input + residual)`` (reads ``residual``).
- ``rms_norm_quant(result!, input, weight, scale, epsilon)``: ``result = quant(norm(input))``.
- ``rms_norm_add_quant(result!, input, residual, weight, scale, epsilon)``:
  ``result = quant(norm(input) + residual)``.
- ``fused_add_rms_norm_quant(result!, input, residual!, weight, scale, epsilon)``:
  ``residual += input; result = quant(norm(residual))`` (``input`` only read, as vLLM's
  ``fused_add_rms_norm_static_fp8_quant``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

NAMESPACE = "pmverify_fused_norm"
EPS = 1e-6
SCALE = 0.25


def _norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _quant(x: Tensor, scale: float) -> Tensor:
    return (x / scale).round().clamp(-8.0, 8.0)


def _define() -> None:
    lib = f"{NAMESPACE}::"

    @torch.library.custom_op(lib + "rms_norm", mutates_args=("result",))
    def rms_norm(result: Tensor, input: Tensor, weight: Tensor, epsilon: float) -> None:
        result.copy_(_norm(input, weight, epsilon))

    @torch.library.custom_op(lib + "fused_add_rms_norm", mutates_args=("input", "residual"))
    def fused_add_rms_norm(input: Tensor, residual: Tensor, weight: Tensor, epsilon: float) -> None:
        residual.add_(input)
        input.copy_(_norm(residual, weight, epsilon))

    @torch.library.custom_op(lib + "quant", mutates_args=("result",))
    def quant(result: Tensor, input: Tensor, scale: float) -> None:
        result.copy_(_quant(input, scale))

    @torch.library.custom_op(lib + "add_quant", mutates_args=("result",))
    def add_quant(result: Tensor, input: Tensor, residual: Tensor, scale: float) -> None:
        result.copy_(_quant(input + residual, scale))

    @torch.library.custom_op(lib + "rms_norm_quant", mutates_args=("result",))
    def rms_norm_quant(result: Tensor, input: Tensor, weight: Tensor, scale: float, epsilon: float) -> None:
        result.copy_(_quant(_norm(input, weight, epsilon), scale))

    @torch.library.custom_op(lib + "rms_norm_add_quant", mutates_args=("result",))
    def rms_norm_add_quant(
        result: Tensor, input: Tensor, residual: Tensor, weight: Tensor, scale: float, epsilon: float
    ) -> None:
        result.copy_(_quant(_norm(input, weight, epsilon) + residual, scale))

    @torch.library.custom_op(lib + "fused_add_rms_norm_quant", mutates_args=("result", "residual"))
    def fused_add_rms_norm_quant(
        result: Tensor, input: Tensor, residual: Tensor, weight: Tensor, scale: float, epsilon: float
    ) -> None:
        residual.add_(input)
        result.copy_(_quant(_norm(residual, weight, epsilon), scale))

    for defined in (
        rms_norm,
        fused_add_rms_norm,
        quant,
        add_quant,
        rms_norm_quant,
        rms_norm_add_quant,
        fused_add_rms_norm_quant,
    ):
        defined.register_fake(lambda *args, **kwargs: None)


def ops() -> Any:
    """``torch.ops.pmverify_fused_norm``, the ops defined once per process."""
    if not hasattr(getattr(torch.ops, NAMESPACE), "rms_norm"):
        _define()
    return getattr(torch.ops, NAMESPACE)


AF = torch.ops.higher_order.auto_functionalized
AF2 = torch.ops.higher_order.auto_functionalized_v2
HOPS = (AF, AF2)


def post_grad(program: Callable[..., Any], examples: list[Tensor], mutated: int, version: int) -> torch.fx.GraphModule:
    """The post-grad graph of ``program`` on ``examples`` as AOTAutograd hands it to Inductor: traced
    under functionalization (``auto_functionalized`` when ``version`` is 1, ``_v2`` when 2), each
    of the first ``mutated`` inputs copied back (``copy_``) at the end of the graph."""
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from pmverify._compat import from_functional, functionalize_key_excluded

    def run(*tensors: Tensor) -> tuple[Tensor, ...]:
        with functionalize_key_excluded(), FunctionalTensorMode():
            wrapped = [FunctionalTensor.to_functional(t) for t in tensors]
            results = [*program(*wrapped), *wrapped[:mutated]]
            return tuple(from_functional(r) for r in results)

    ops()
    with torch._inductor.config.patch(enable_auto_functionalized_v2=version == 2):
        gm = make_fx(run, tracing_mode="fake")(*examples)
    graph = gm.graph
    output = graph.output_node()
    results = list(output.args[0])
    outputs, new = results[: len(results) - mutated], results[len(results) - mutated :]
    placeholders = graph.find_nodes(op="placeholder")
    with graph.inserting_before(output):
        for base, value in zip(placeholders[:mutated], new, strict=True):
            if value is not base:  # an input the program did not write
                graph.call_function(torch.ops.aten.copy_.default, (base, value))
    output.args = (tuple(outputs),)
    graph.eliminate_dead_code()
    gm.recompile()
    return gm


def hops(graph: torch.fx.Graph, name: str) -> list[torch.fx.Node]:
    """The ``auto_functionalized`` / ``_v2`` nodes of op ``name``, in graph order."""
    return [n for n in graph.nodes if n.target in HOPS and n.args[0].__name__.split(".")[0] == name]


def mutated_args(node: torch.fx.Node) -> dict[str, torch.fx.Node]:
    """``{name: the tensor written}`` of an ``auto_functionalized`` / ``_v2`` node whose mutated
    args are whole tensors (v2: each is its base)."""
    schema = node.args[0]._schema
    names = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if node.target is AF:
        return {name: node.kwargs[name] for name in names}
    bases = node.kwargs["_all_bases"]
    return {name: bases[node.kwargs[f"_{name}_base_index"]] for name in names}


def whole(node: torch.fx.Node) -> bool:
    """Whether every tensor an ``auto_functionalized`` / ``_v2`` node writes is a whole tensor (no
    view: v1 takes no view node, v2 no view metadata)."""
    from pmverify._fx import is_view

    if node.target is AF:
        return not any(is_view(n.target) for n in mutated_args(node).values() if n.op == "call_function")
    views = [k for k in node.kwargs if k.startswith("_") and not k.endswith("_base_index") and k != "_all_bases"]
    return not views


def call_args(node: torch.fx.Node) -> dict[str, Any]:
    """Every argument of the op an ``auto_functionalized`` / ``_v2`` node calls, by name (its
    mutated args as the tensors written)."""
    schema = node.args[0]._schema
    written = mutated_args(node)
    return {a.name: written.get(a.name, node.kwargs.get(a.name)) for a in schema.arguments}


def elements(node: torch.fx.Node) -> dict[int, torch.fx.Node]:
    """``{index: getitem user}`` of an ``auto_functionalized`` / ``_v2`` node."""
    return {u.args[1]: u for u in node.users if u.target is operator.getitem}


def functionalized_call(graph: torch.fx.Graph, node: torch.fx.Node, op: Any, args: dict[str, Any]) -> torch.fx.Node:
    """A new ``auto_functionalized`` node of ``op`` with ``args`` (by name), in ``node``'s version,
    inserted where the graph is inserting."""
    schema = op._schema
    names = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if node.target is AF:
        return graph.call_function(AF, (op,), dict(args))
    kwargs = {k: v for k, v in args.items() if k not in names}
    bases = []
    for name in names:
        kwargs[f"_{name}_base_index"] = len(bases)
        bases.append(args[name])
    kwargs["_all_bases"] = bases
    return graph.call_function(AF2, (op,), kwargs)


def defunctionalize(graph: torch.fx.Graph) -> None:
    """vLLM's ``FixFunctionalizationPass`` for the ops of this module, v1 and v2: each
    ``auto_functionalized`` node replaced by a direct call of its op on the tensors it writes
    (inserted at the node), the ``getitem`` users of the new values rewired to those tensors.
    Correct only where nothing reads a written tensor's old value after the node (the caller
    picks such graphs, as vLLM's model code guarantees). Nodes writing a view are left alone."""
    for node in [n for n in graph.nodes if n.target in HOPS]:
        if node.args[0].namespace != NAMESPACE or not whole(node):
            continue
        _call_in_place(graph, node)


def _call_in_place(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Replace ``node`` by a call of its op on the tensors it writes, inserted at ``node``; its
    elements' users read the call's output (element 0 of an op returning one tensor) or the tensor
    written (the other elements: v1 in schema order, v2 in ``_all_bases`` order)."""
    schema = node.args[0]._schema
    outputs = len(schema.returns) or 1
    written = list(node.kwargs["_all_bases"]) if node.target is AF2 else list(mutated_args(node).values())
    with graph.inserting_before(node):
        call = graph.call_function(node.args[0], (), call_args(node))
    for index, user in elements(node).items():
        user.replace_all_uses_with(call if index < outputs else written[index - outputs])
        graph.erase_node(user)
    graph.erase_node(node)


def _readers(tensor: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes reading ``tensor``: its users and, through views, theirs."""
    from pmverify._fx import is_view

    found, stack = [], [tensor]
    while stack:
        for user in stack.pop().users:
            found.append(user)
            if user.op == "call_function" and (
                is_view(user.target) or user.target is torch.ops.aten._unsafe_view.default
            ):
                stack.append(user)  # _unsafe_view: a view its schema does not declare
    return found


def reinplace(graph: torch.fx.Graph) -> int:
    """A safe defunctionalization of every ``auto_functionalized`` / ``_v2`` node of any op (what
    Inductor's reinplacing does with its copies, without them): the node becomes its op called in
    place (:func:`defunctionalize`) when each tensor it writes is a whole tensor passed once, no
    node reads it after the node (through views), and, for a graph input, the value written back
    into it (``copy_``) is this node's element or the end of a chain of such nodes from it (the
    ``copy_`` then copies the input into itself). Returns the number of nodes replaced."""
    from pmverify._fx import flat_nodes

    count = 0
    for node in [n for n in graph.nodes if n.target in HOPS]:
        if not whole(node):
            continue
        schema = node.args[0]._schema
        outputs = len(schema.returns) or 1
        written = list(node.kwargs["_all_bases"]) if node.target is AF2 else list(mutated_args(node).values())
        taken = flat_nodes((node.args, node.kwargs))
        if any(taken.count(t) != 1 for t in written):
            continue
        ok = True
        for index, tensor in enumerate(written):
            element = elements(node).get(index + outputs)
            allowed = {node}
            if tensor.op == "placeholder":
                end = element  # follow the chain of nodes writing this element in turn
                while end is not None:
                    nxt = [
                        u
                        for u in end.users
                        if u.target in HOPS
                        and end
                        in (list(u.kwargs.get("_all_bases", ())) if u.target is AF2 else list(mutated_args(u).values()))
                    ]
                    if len(nxt) != 1:
                        break
                    later = nxt[0]
                    bases = (
                        list(later.kwargs["_all_bases"]) if later.target is AF2 else list(mutated_args(later).values())
                    )
                    end = elements(later).get(bases.index(end) + (len(later.args[0]._schema.returns) or 1))
                copies = [
                    u
                    for u in tensor.users
                    if u.target is torch.ops.aten.copy_.default and len(u.args) > 1 and u.args[1] is end
                ]
                if end is None or not copies:
                    ok = False
                    break
                allowed.update(copies)
            if any(reader > node and reader not in allowed for reader in _readers(tensor)):
                ok = False
                break
        if ok:
            _call_in_place(graph, node)
            count += 1
    return count


#: (first op, second op reading the first's element 1) -> the fused op, as vLLM's norm-quant fusions
FUSIONS = {
    ("rms_norm", "quant"): "rms_norm_quant",
    ("rms_norm", "add_quant"): "rms_norm_add_quant",
    ("fused_add_rms_norm", "quant"): "fused_add_rms_norm_quant",
}


def _base(node: Any) -> Any:
    from pmverify._fx import is_view

    while isinstance(node, torch.fx.Node) and node.op == "call_function" and is_view(node.target) and node.args:
        node = node.args[0]
    return node


def _written_between(first: torch.fx.Node, last: torch.fx.Node, tensors: set[Any]) -> bool:
    """Whether a mutating node strictly between ``first`` and ``last`` writes one of ``tensors``
    (compared through views)."""
    from torch._inductor.pattern_matcher import is_mutation_op

    bases = {_base(t) for t in tensors}
    node = first.next
    while node is not last:
        if node.op == "call_function" and is_mutation_op(node) and node.args and _base(node.args[0]) in bases:
            return True
        node = node.next
    return False


def fuse(graph: torch.fx.Graph, careful: bool = True) -> int:
    """Fuse each pair of :data:`FUSIONS` (``auto_functionalized`` nodes ``A`` and ``B``, ``B``
    reading ``A``'s element 1 and nothing else reading it) into one ``auto_functionalized`` node of
    the fused op, in ``B``'s version, inserted at ``B``: it writes ``B``'s result (and ``A``'s
    residual, whose element it provides). ``careful``: decline when a node between ``A`` and ``B``
    writes a tensor that the fused node reads, or reads ``A``'s new residual (the correct pass);
    when False, fuse anyway (wrong there: the fused node reads the tensor after the write). Returns
    the number of fusions."""
    count = 0
    for b in [n for n in graph.nodes if n.target in HOPS]:
        b_args = call_args(b)
        source = b_args.get("input")
        if not (isinstance(source, torch.fx.Node) and source.target is operator.getitem):
            continue
        a = source.args[0]
        if a.target not in HOPS or len(source.users) != 1:
            continue
        fused = FUSIONS.get((a.args[0]._opname, b.args[0]._opname))
        if fused is None:
            continue
        a_args = call_args(a)
        args = {"result": b_args["result"], "input": a_args["input"], "weight": a_args["weight"]}
        if "residual" in a_args or "residual" in b_args:
            args["residual"] = a_args.get("residual", b_args.get("residual"))
        args.update(scale=b_args["scale"], epsilon=a_args["epsilon"])
        a_elements = elements(a)
        new_residual = a_elements.get(2)
        if careful:
            read = {v for v in args.values() if isinstance(v, torch.fx.Node)}
            early = new_residual is not None and any(u < b for u in new_residual.users)
            if early or _written_between(a, b, read):
                continue
        op = getattr(ops(), fused).default
        with graph.inserting_before(b):
            node = functionalized_call(graph, b, op, {k: args[k] for k in (a.name for a in op._schema.arguments)})
            result = graph.call_function(operator.getitem, (node, 1))
            residual = graph.call_function(operator.getitem, (node, 2)) if new_residual is not None else None
        elements(b)[1].replace_all_uses_with(result)
        if new_residual is not None:
            new_residual.replace_all_uses_with(residual)
        for dead in (*elements(b).values(), b, *a_elements.values(), a):
            graph.erase_node(dead)
        count += 1
    return count


def write_backs_early(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each write-back ``copy_`` moved up to right after the node computing its value
    (as ``with_mutating_custom_ops(write_backs="anywhere")`` places some)."""
    for copy in list(gm.graph.find_nodes(op="call_function", target=torch.ops.aten.copy_.default)):
        copy.args[1].append(copy)
    gm.recompile()
    return gm


#: The steps of a :func:`layer_cases` program, simplest first.
STEPS = ("norm_quant", "read_residual", "norm_add_quant", "add_norm_quant", "write_input")


def layer_program(steps: tuple[str, ...], buffers: str) -> Callable[..., tuple[Tensor, ...]]:
    """A program ``(x, r, w) -> outputs`` of vLLM-like layers, one per step: ``norm_quant``
    (``rms_norm`` into a buffer, ``quant`` of it into another), ``norm_add_quant`` (``rms_norm``,
    then ``add_quant`` reading the residual), ``add_norm_quant`` (``fused_add_rms_norm`` writing a
    fresh activation and the residual in place, ``quant`` of the activation), ``read_residual``
    (an output reads the residual as it is then), ``write_input`` (``x += 0.5`` in place). Each
    layer's result (``0.5 * quant``) feeds the next. The residual is the graph input ``r``
    (``buffers="empty"``: result buffers ``empty_like``) or a clone of it (``buffers="clone"``:
    result buffers are clones of the layer's input too, overwritten whole)."""
    o = ops()

    def buffer(value: Tensor) -> Tensor:
        return value.clone() if buffers == "clone" else torch.empty_like(value)

    def program(x: Tensor, r: Tensor, w: Tensor) -> tuple[Tensor, ...]:
        residual = r.clone() if buffers == "clone" else r
        value, outputs = x, []
        for step in steps:
            if step == "read_residual":
                outputs.append(residual * 2.0)
            elif step == "write_input":
                x.add_(0.5)
            elif step == "add_norm_quant":
                h = value * 1.0
                o.fused_add_rms_norm(h, residual, w, EPS)
                result = buffer(h)
                o.quant(result, h, SCALE)
                value = result * 0.5
            else:
                normed = buffer(value)
                o.rms_norm(normed, value, w, EPS)
                result = buffer(value)
                if step == "norm_quant":
                    o.quant(result, normed, SCALE)
                else:
                    o.add_quant(result, normed, residual, SCALE)
                value = result * 0.5
        outputs.append(value)
        if residual is not r:
            outputs.append(residual * 1.0)
        return tuple(outputs)

    return program


def layer_cases(max_steps: int = 4) -> Any:
    """Return a strategy for post-grad cases of :func:`layer_program`: 1..``max_steps`` steps,
    ``auto_functionalized`` v1 or v2, result buffers ``empty`` or clones, write-backs at the end
    or early (:func:`write_backs_early`), ``x``/``r`` ``[T, H]`` and ``w`` ``[H]`` float32 (T in
    1..6, H in 4, 8, 16), values in [-2, 2)."""
    from hypothesis import strategies as st

    from pmverify import GraphCase

    @st.composite
    def cases(draw: Any) -> Any:
        steps = tuple(draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=max_steps)))
        version = draw(st.sampled_from((1, 2)))
        buffers = draw(st.sampled_from(("empty", "clone")))
        early = draw(st.booleans())
        t, h = draw(st.integers(1, 6)), draw(st.sampled_from((4, 8, 16)))
        shapes = [(t, h), (t, h), (h,)]
        gm = post_grad(layer_program(steps, buffers), [torch.empty(s) for s in shapes], 2, version)
        if early:
            write_backs_early(gm)
        seed = draw(st.integers(0, 2**16))
        generator = torch.Generator().manual_seed(seed)
        inputs = tuple(torch.rand(s, generator=generator) * 4 - 2 for s in shapes)
        return GraphCase(gm, [inputs])

    return cases()


def hoist(graph: torch.fx.Graph, careful: bool = True) -> int:
    """Move each ``auto_functionalized`` / ``_v2`` node up to right after the last node it takes
    (a functional node: it may go anywhere its inputs are computed), but not above a mutating node
    that writes a tensor it reads (compared through views; ``careful=False``: above it too, wrong:
    the node then reads the tensor before the write). Returns the number of nodes moved."""
    from torch._inductor.pattern_matcher import is_mutation_op

    from pmverify._fx import flat_nodes

    moved = 0
    for node in [n for n in graph.nodes if n.target in HOPS]:
        inputs = flat_nodes((node.args, node.kwargs))
        bases = {_base(n) for n in inputs}
        point = node.prev
        while point.op != "root" and point not in inputs:
            written = point.op == "call_function" and is_mutation_op(point) and point.args
            if careful and written and _base(point.args[0]) in bases:
                break
            point = point.prev
        if point.next is not node and point.op != "root":
            point.append(node)
            moved += 1
    return moved
