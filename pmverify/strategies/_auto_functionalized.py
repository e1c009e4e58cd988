"""``with_mutating_custom_ops``: mutating custom ops in a case, in the functional form Inductor's
post-grad passes see: ``auto_functionalized`` (v1) or ``auto_functionalized_v2`` nodes with
``getitem`` users, and a ``copy_`` into each mutated graph input.

Each call is traced on its own, as a small snippet, by ``make_fx`` under a ``FunctionalTensorMode``
(the Python functionalization AOTAutograd runs; ``torch._inductor.config.enable_auto_functionalized_v2``
picks v1 or v2 there), dead code eliminated, and its nodes spliced into the case's graph before the
drawn position: v2 nodes carry ``_<arg>_base_index``, ``_all_bases`` and the view metadata of a view
arg (``_<arg>_slice_dim``... or ``_<arg>_size`` / ``_stride`` / ``_storage_offset``); v1 nodes take
the view itself and write it back with ``slice_scatter`` / ``select_scatter``. The result tuple is
the op's outputs then the new values of the mutated bases. Later readers of a mutated tensor that
are not planted-instance nodes are rewired to its new value; a mutated graph input gets
``aten.copy_.default(input, new value)``, at the end of the graph (where AOTAutograd puts it) or
right after the op; results nobody reads are returned, so every mutation is observable.

Planted instances are never rewired; an instance becomes ``must_match=False,
reason="mutation_inside"`` only when a node inside its span is a mutation for Inductor's
``is_mutation_op``: of the nodes added here only ``copy_`` is (``auto_functionalized`` is excluded by
type, ``auto_functionalized_v2`` has no ``out`` kwarg: a mutated arg named ``out`` becomes
``_out_base_index``; in v1 ``out=`` stays a kwarg but the type check returns first).

Every choice is drawn from what applies at the drawn position: the rejection rate is 0%.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._case import GraphCase, MutationSite
from .._compat import from_functional, functionalize_key_excluded
from .._execution import runs_on
from .._shapes.symbolic import static_source
from .._validation import validate_choices, validate_strategy
from ._custom_ops import CUSTOM_OPS, CustomOpSpec, op
from ._device import finished, on_cpu, validated
from ._drawn import validate_drawn_case
from ._dynamic import Dynamic, resymbolize, validate_dynamic
from ._mutations import Editor, _view_node, apply_view, meta_val
from ._public import Shown, public_call
from ._user_op_calls import add_user_op
from ._user_ops import UserOp, describe_examples, validate_ops

__all__ = ["with_mutating_custom_ops", "VERSIONS", "WRITE_BACKS"]

#: auto_functionalized versions: 1 (``auto_functionalized``) and 2 (``auto_functionalized_v2``).
VERSIONS = (1, 2)
#: Where ``with_mutating_custom_ops`` may copy a mutated graph input back (``write_backs=``).
WRITE_BACKS = ("anywhere", "end")
_MAX_OPS = 2
_SCALES = (0.5, -1.0, 2.0)
_SPECS = {spec.name: spec for spec in CUSTOM_OPS}

_Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]


@dataclasses.dataclass(frozen=True)
class _Call:
    """One traced call: the op, the version, the layout of each snippet input (the mutated bases,
    then the read-only operands), the view taken of the first base, the scalar args."""

    op: str
    version: int
    bases: tuple[_Layout, ...]
    operands: tuple[_Layout, ...]
    view: tuple[Any, ...] | None
    scalars: tuple[float, ...]


def _layout(value: torch.Tensor) -> _Layout:
    return tuple(value.shape), tuple(value.stride()), value.dtype


def _functionalized(program: Any, n_bases: int) -> Any:
    """``program`` run under a fresh ``FunctionalTensorMode``, returning its outputs then the new
    values of its first ``n_bases`` inputs (what AOTAutograd does for mutated inputs)."""
    from .._compat import FunctionalTensor, FunctionalTensorMode

    def run(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with functionalize_key_excluded(), FunctionalTensorMode():
            wrapped = [FunctionalTensor.to_functional(t) for t in tensors]
            out = program(*wrapped)
            results = ([] if out is None else [out]) + wrapped[:n_bases]
            unwrapped = []
            for result in results:
                unwrapped.append(from_functional(result))
        return tuple(unwrapped)

    return run


@functools.lru_cache(maxsize=256)
def _snippet(call: _Call) -> torch.fx.GraphModule:
    """The functional graph of ``call``: placeholders = bases then operands; output = op outputs
    then new bases. Cached: splicing only reads it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    spec = _SPECS[call.op]
    overload = op(call.op)
    n_bases = len(call.bases)

    def program(*tensors: torch.Tensor) -> Any:
        mutated = list(tensors[:n_bases])
        if call.view is not None:
            mutated[0] = apply_view(mutated[0], call.view)
        by_name = dict(zip(spec.mutated, mutated, strict=True))
        by_name.update(zip(spec.operands, tensors[n_bases:], strict=True))
        by_name.update(zip(spec.scalars, call.scalars, strict=True))
        return overload(*(by_name[name] for name in spec.args))

    examples = [torch.empty_strided(shape, stride, dtype=dtype) for shape, stride, dtype in call.bases + call.operands]
    with torch._inductor.config.patch(enable_auto_functionalized_v2=call.version == 2):
        gm = make_fx(_functionalized(program, n_bases), tracing_mode="fake")(*examples)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def _splice(editor: Editor, slot: torch.fx.Node, snippet: torch.fx.GraphModule, actual: Sequence[torch.fx.Node]):
    """Copy the nodes of ``snippet`` (a traced call) before ``slot``, its placeholders bound to
    ``actual``; return (the new nodes, the nodes standing for the snippet's outputs)."""
    env: dict[torch.fx.Node, torch.fx.Node] = dict(zip(snippet.graph.find_nodes(op="placeholder"), actual, strict=True))
    added = []
    with editor.graph.inserting_before(slot):
        for node in snippet.graph.nodes:
            if node.op == "call_function":
                env[node] = editor.graph.node_copy(node, lambda arg: env[arg])
                added.append(node)
    (output,) = snippet.graph.find_nodes(op="output")
    return [env[n] for n in added], [env[n] for n in output.args[0]]


def _rewire(editor: Editor, base: torch.fx.Node, new: torch.fx.Node, slot: torch.fx.Node, added: set) -> None:
    """Readers of ``base`` at or after ``slot`` read ``new`` instead, except planted-instance nodes
    (their structure is ground truth) and the nodes just added."""
    order = editor.order()
    for user in list(base.users):
        if user not in editor.instance_nodes and user not in added and order[user] >= order[slot]:
            user.replace_input_with(base, new)


def _return(editor: Editor, nodes: Sequence[torch.fx.Node]) -> None:
    output = editor.graph.output_node()
    result = output.args[0]
    if isinstance(result, (tuple, list)):
        output.args = (type(result)([*result, *nodes]),)
    else:
        output.args = ((result, *nodes),)


def _squared(kind: str, view: tuple[Any, ...] | None, target: torch.Tensor) -> tuple[str, Any, torch.Tensor] | None:
    """A 2-d ``target`` (a whole tensor) made square by slicing its longer dim; None when it is not
    2-d or is already a view."""
    if target.dim() != 2 or view is not None:
        return None
    rows, cols = target.shape
    square = ("slice", 0 if rows > cols else 1, 0, min(rows, cols))
    return "view", square, apply_view(target, square)


def _cloned_operand(editor: Editor, slot: torch.fx.Node, base: torch.fx.Node, view: Any) -> tuple[Any, Any]:
    """``(x, clone(x))`` inserted before ``slot``: ``x`` is ``base`` seen through ``view``."""
    with editor.graph.inserting_before(slot):
        x = base if view is None else _view_node(editor.graph, base, view)
        if view is not None:
            x.meta["val"] = apply_view(meta_val(base), view)
        clone = editor.graph.call_function(torch.ops.aten.clone.default, (x,))
    clone.meta["val"] = meta_val(x).clone()
    return x, clone


def _any_op_on(dtype: torch.dtype) -> bool:
    """Whether an op of :data:`CUSTOM_OPS` taking any shape runs on ``dtype``."""
    return any(runs_on(op(s.name), dtype) for s in CUSTOM_OPS if s.shapes == "any")


def _add_custom_op(draw: Any, editor: Editor, versions: tuple[int, ...], copies: list, early_ok: bool) -> None:
    placement, index, slot = editor.draw_slot(draw)
    kind, base, view, target = editor.draw_target(draw, slot, read_later=False, instance=index, accepts=_any_op_on)
    squared = _squared(kind, view, target)
    choices = [s for s in CUSTOM_OPS if s.takes(tuple(target.shape)) or (s.shapes == "square" and squared)]
    choices = [s for s in choices if runs_on(op(s.name), target.dtype)]  # float8: the ops that only copy
    spec: CustomOpSpec = draw(st.sampled_from(choices))
    if not spec.takes(tuple(target.shape)):
        kind, view, target = squared
    version = draw(st.sampled_from(versions))
    # `y = x.clone(); op(x, out=y)`: the op writes a clone of the very tensor it reads, which a
    # reinplacing pass may not turn into `op(x, out=x)`.
    cloned = None
    if spec.mutated == ("out",) and spec.operands == ("x",) and draw(st.booleans()):
        # x is, first, a buffer nothing reads after the op: a reinplacing pass may then drop the clone.
        later = set(editor.buffers_at(slot, read_later=True))
        dead = [
            b
            for b in editor.buffers_at(slot, read_later=False)
            if b not in later and spec.takes(tuple(meta_val(b).shape)) and runs_on(op(spec.name), meta_val(b).dtype)
        ]
        choice = draw(st.sampled_from([*dead, None]))
        if choice is not None:
            base, view = choice, None
        cloned, base = _cloned_operand(editor, slot, base, view)
        kind, view, target = "clone", None, meta_val(base)
    shape, dtype = tuple(target.shape), target.dtype
    bases = [base]
    for _ in spec.mutated[1:]:  # further mutated args: same shape and dtype, whole tensors
        choices = [None, *editor.same_like(slot, target, set(bases))]
        other = draw(st.sampled_from(choices))
        bases.append(editor.new_input("act", shape, dtype) if other is None else other)
    operands = [] if cloned is None else [cloned]
    for _ in spec.operands[len(operands) :]:
        choices = [None, *editor.same_like(slot, target, set(bases))]
        other = draw(st.sampled_from(choices))
        operands.append(editor.new_input("act", shape, dtype) if other is None else other)
    scalars = tuple(draw(st.sampled_from(_SCALES)) for _ in spec.scalars)
    layouts = tuple(_layout(meta_val(node)) for node in bases)
    call = _Call(spec.name, version, layouts, tuple(_layout(meta_val(n)) for n in operands), view, scalars)

    added, results = _splice(editor, slot, _snippet(call), bases + operands)
    hop = next(n for n in added if isinstance(n.target, torch._ops.HigherOrderOperator))
    outputs, new_bases = results[: len(results) - len(bases)], results[len(results) - len(bases) :]
    added_set = set(added)
    # An early copy_ (right after the op) is only drawn where no view of the input is read later:
    # AOTAutograd puts copy_ last, so no view read after it exists in real post-grad graphs.
    early = (
        early_ok
        and any(b.op == "placeholder" for b in bases)
        and not any(editor.views_read_from(b, slot) for b in bases if b.op == "placeholder")
        and draw(st.booleans())
    )
    returned = list(outputs)
    for old, new in zip(bases, new_bases, strict=True):
        editor.mutated.add(old)
        editor.mutations.append(MutationSite(hop.name, f"{hop.target.name()}({spec.name})", old.name))
        _rewire(editor, old, new, slot, added_set)
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
    _return(editor, [n for n in returned if not n.users])
    where = f"{kind if view is None else view[0] + ' of ' + base.op}"
    if cloned is not None:
        where = f"out=clone(x) of {cloned.op}"
    editor.tags.append(f"{spec.name}@v{version}:{placement}({where}{', early copy_' if early else ''})")


@st.composite
def _functional_cases(
    draw: Any,
    cases: st.SearchStrategy,
    versions: tuple[int, ...],
    dynamic: Dynamic | None,
    write_backs: str,
    user_ops: tuple[UserOp, ...] | None = None,
    device: torch.device | None = None,
) -> GraphCase:
    case = draw(cases)
    validate_drawn_case("cases", case)
    case, drawn_on = on_cpu(case)
    if case.form != "functional":
        raise InvalidArgument(
            f"cases drew a case of form={case.form!r}; with_mutating_custom_ops takes functional cases "
            "(compose as with_mutations(with_mutating_custom_ops(...)))"
        )
    editor = Editor(static_source(case), draw(st.integers(0, 2**32 - 1)))
    # AOTAutograd never returns a view of an input it copies into: such an output would see the
    # copy_ at the end of the graph, which a correct rewrite of the view (e.g. into a copy) need not.
    editor.protected = editor.aliased_inputs()
    copies: list[tuple[torch.fx.Node, torch.fx.Node]] = []
    early_ok = write_backs == "anywhere"
    add = _add_custom_op if user_ops is None else functools.partial(add_user_op, uops=user_ops)
    add(draw, editor, versions=versions, copies=copies, early_ok=early_ok)
    count = 1
    while count < _MAX_OPS and draw(st.booleans()):
        add(draw, editor, versions=versions, copies=copies, early_ok=early_ok)
        count += 1
    order = editor.order()
    with editor.graph.inserting_before(editor.graph.output_node()):
        for old, new in sorted(copies, key=lambda pair: order[pair[0]]):  # in input order, as AOTAutograd
            node = editor.graph.create_node("call_function", torch.ops.aten.copy_.default, (old, new), name="copy_")
            editor.mutations.append(MutationSite(node.name, "aten.copy_.default", old.name))
    return finished(resymbolize(draw, editor.finish(case.form), case, dynamic), device, drawn_on)


def with_mutating_custom_ops(
    cases: st.SearchStrategy[GraphCase],
    *,
    ops: Sequence[Any] | None = None,
    examples: Mapping[Any, Sequence[Any]] | None = None,
    versions: Sequence[int] = VERSIONS,
    dynamic: bool | str | Sequence[str] | None = None,
    write_backs: str = "anywhere",
    device: str | torch.device | None = None,
) -> st.SearchStrategy[GraphCase]:
    """Return a strategy for cases drawn from ``cases`` with 1..2 mutating custom ops inserted in
    the functional form of Inductor's post-grad graphs (``auto_functionalized`` /
    ``auto_functionalized_v2`` nodes, ``getitem`` users, a ``copy_`` into each mutated input).

    The ops are those of :mod:`pmverify.strategies._custom_ops` (``pmverify_testing::add_into``:
    one mutated arg and a tensor output; ``scale_shift`` / ``mix3``: two / three mutated args and
    no output; ``tanh_out``: a mutated arg named ``out``; ``reverse_into`` / ``roll_into`` /
    ``cummean_into`` / ``transpose_into``: ``out`` written row by row while ``x`` is still read, so
    that ``op(x, out=x)`` computes other values; ``transpose_into`` on square 2-d tensors only, a
    2-d target being sliced square). For the ops of one mutated ``out`` and one operand ``x``, half
    the calls are ``y = x.clone(); op(x, out=y)`` (``out`` a ``clone`` of the very ``x`` the op reads;
    ``x`` a buffer no node reads after the op where there is one, the shape where a reinplacing pass
    may drop the clone, else the drawn target). The first mutated arg is a graph input, a
    buffer (a node outside every planted instance computing a fresh floating tensor) or a view of
    either (``slice``, ``select``, ``view(-1)``; views of instance inputs first); further mutated
    args and read-only operands have its shape and dtype and are new inputs (values in [-2, 2), the
    same on every rank: ``Replicate()`` in a tensor-parallel case's ``placements``) or other inputs
    and buffers. Each op goes before, inside (strictly between the first
    and last node) or after a planted instance; a mutated input is copied back at the end of the
    graph or right after the op (``write_backs``). Readers of a mutated tensor after the op read its new value,
    except planted-instance nodes, which are never changed. Every case runs eagerly, lints and
    re-propagates under FakeTensorProp; ``form`` stays the drawn case's.

    Ground truth: ``case.mutations`` gains a :class:`~pmverify.MutationSite` per mutated base of
    each ``auto_functionalized`` node (``target`` like ``"auto_functionalized_v2(mix3)"``) and per
    ``copy_``; a must-match instance with an Inductor mutation op (only a ``copy_`` here) inside its
    span becomes ``must_match=False, reason="mutation_inside"``. Shrinks toward one v1 (or the first
    of ``versions``) ``add_into`` of a graph input before the first instance, copied at the end.

    - ``cases``: a strategy of :class:`~pmverify.GraphCase` in the functional form, e.g.
      :func:`~pmverify.fusions.qk_norm.testing.qk_norm_cases`.
    - ``ops``: None (default: the ops above), or a non-empty list of a project's own mutable ops
      (``OpOverload``s such as ``torch.ops._C.rms_norm.default``) whose calls are drawn instead,
      from their schemas: see "A project's own mutable ops" in docs/vllm.md (empty / empty_like
      buffers where the op only writes an arg, clones, chunks of a fused tensor written back,
      optional args, a reader of a written tensor's old value after the call). A call is drawn only
      where the op's fake kernel accepts it and its eager kernel runs it to finite values.
    - ``examples``: only with ``ops``; ``{op: [call, ...]}``, each call a tuple of the op's
      arguments in schema order or a dict by name: the shapes, dtypes and scalars drawn (renamed to
      the case's values); without an op's examples its tensor args take the drawn target's layout.
    - ``versions``: the auto_functionalized versions to draw from, a non-empty subset of (1, 2),
      first preferred when shrinking; default both.
    - ``dynamic``: symbolic sizes, as :func:`~pmverify.strategies.with_mutations` takes it:
      ``None`` (default) follows the drawn case (a symbolic case is extended in its concrete form
      and symbolized again with its symbols: the ``auto_functionalized`` nodes, their view
      arguments and the ``copy_`` nodes then hold ``SymInt`` sizes), ``False`` static, ``True``
      every hint an input size holds, ``"tokens"`` 11 only.
    - ``write_backs``: where a mutated graph input is copied back: ``"anywhere"`` (default: at the
      end of the graph or right after the op) or ``"end"`` (only in the graph's epilogue, in input
      order, as AOTAutograd writes post-grad graphs: the form Inductor's own post-grad passes, such
      as ``reinplace_inplaceable_ops``, rely on).
    - ``device``: the device of the cases (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a
      ``torch.device``; default None: the device ``cases`` drew on). The ops are drawn and run on
      CPU (a case drawn elsewhere is copied to CPU first; ``ops`` need CPU kernels), then the case
      is moved whole (:func:`pmverify.device.on_device`).

    Raises ``hypothesis.errors.InvalidArgument`` for a ``cases`` that is not a strategy,
    ``versions`` that is not a non-empty sequence of 1 and 2, a ``dynamic`` that is not None, a
    bool, ``"tokens"`` or a non-empty list of it, or a ``write_backs`` other than ``"anywhere"`` and
    ``"end"``, ``ops`` that is not a non-empty list of mutable, auto-functionalizable
    ``OpOverload``s with fake kernels, bad ``examples`` (not a dict of ops of ``ops`` to non-empty
    lists of calls that bind to the schema and that the op's kernels accept), ``examples``
    without ``ops``, or a ``device`` that is not a CPU or CUDA device; at draw time, when no call of any op of ``ops`` is accepted for the drawn
    value (give examples).

    Example::

        @given(with_mutating_custom_ops(qk_norm_cases(), versions=[2]))
        def test_pass_on_post_grad_graphs(case):
            result = pmverify.check_case(QKNormFusionPass, case)
            assert result.ok and result.rewrite_count == case.expected_matches, result.violations
    """
    validate_strategy("cases", cases)
    if isinstance(versions, (Sequence, set, frozenset)) and not isinstance(versions, (str, bytes)):
        for version in versions:
            if not isinstance(version, int) or isinstance(version, bool):
                raise InvalidArgument(f"versions={versions!r} holds {version!r}, not one of {VERSIONS}")
    given = versions
    versions = validate_choices("versions", versions, VERSIONS)
    canonical = validate_dynamic("dynamic", dynamic, follow=True)
    if write_backs not in WRITE_BACKS:
        raise InvalidArgument(f"write_backs={write_backs!r} must be one of {WRITE_BACKS}")
    if ops is None and examples is not None:
        raise InvalidArgument(f"examples={examples!r} is given without ops")
    user_ops = None if ops is None else validate_ops(ops, examples)
    target = validated(device)
    return public_call(
        with_mutating_custom_ops,
        _functional_cases(cases, tuple(versions), canonical, write_backs, user_ops, target),
        cases,
        **({} if ops is None else {"ops": ops}),
        **({} if examples is None else {"examples": Shown(describe_examples(user_ops))}),
        versions=given,
        dynamic=dynamic,
        write_backs=write_backs,
        device=device,
    )
