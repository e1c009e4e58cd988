"""mutation_barriers on ``auto_functionalized`` nodes (issue 28): an ``auto_functionalized`` node
writes the arguments its op's schema marks mutable only in the tuple it returns, so correct passes
of vLLM's shapes are quiet: fusing two of them into one fused node writing the same buffers (a norm
and a quant; a pattern ending in a node that only reads the residual), the defunctionalization
of ``FixFunctionalizationPass`` (each node replaced by its op called in place on the buffers, over
``empty`` and ``clone`` buffers, a chain of ``fused_add_rms_norm`` on a residual graph input), and
both in turn. Their wrong twins are caught: a fused node placed after a write to a tensor it reads,
a defunctionalization before a later reader of the old value. The ops and graphs are in
``tests/_fused_norm_ops.py``."""

from __future__ import annotations

import functools

import pytest
import torch
from _fused_norm_ops import (
    EPS,
    HOPS,
    SCALE,
    defunctionalize,
    fuse,
    hoist,
    layer_cases,
    layer_program,
    ops,
    post_grad,
    reinplace,
    write_backs_early,
)

import pmverify
from pmverify import GraphCase, check_case

ORACLES = ["mutation_barriers", "semantics", "functionalization", "aliasing"]


def _fuse_then_defunctionalize(graph):
    fuse(graph)
    defunctionalize(graph)


PASSES = {
    "fusion": fuse,
    "defunctionalization": defunctionalize,
    "fusion then defunctionalization": _fuse_then_defunctionalize,
}


def _case(program, shapes, mutated, version, early=False):
    gm = post_grad(program, [torch.empty(s) for s in shapes], mutated, version)
    if early:
        write_backs_early(gm)
    generator = torch.Generator().manual_seed(0)
    return GraphCase(gm, [tuple(torch.rand(s, generator=generator) * 4 - 2 for s in shapes)])


def _hops(graph):
    return [n for n in graph.nodes if n.target in HOPS]


def _residual_read_by_the_last_node(x, r, w):
    """``rms_norm`` into a buffer, ``add_quant`` of it reading the graph input ``r``, which an
    output reads before and another after the pattern and the program then writes in place."""
    o = ops()
    before = r * 3.0
    normed = torch.empty_like(x)
    o.rms_norm(normed, x, w, EPS)
    result = torch.empty_like(x)
    o.add_quant(result, normed, r, SCALE)
    after = r + 1.0
    r.mul_(2.0)
    return result * 1.0, before, after


def _residual_chain(x, r, w):
    """Two ``fused_add_rms_norm`` on the graph input ``r`` (a chain: the second writes the first's
    element), each activation quantized into a buffer, ``r`` read between them."""
    o = ops()
    h = x * 2.0
    o.fused_add_rms_norm(h, r, w, EPS)
    first = torch.empty_like(x)
    o.quant(first, h, SCALE)
    y = first * 0.5 + r
    o.fused_add_rms_norm(y, r, w, EPS)
    second = torch.empty_like(x)
    o.quant(second, y, SCALE)
    return (second * 1.0,)


SHAPES = [(4, 8), (4, 8), (8,)]
PROGRAMS = {  # (x, r, w) -> outputs; x and r written back when the program writes them
    "residual read by the pattern's last node": _residual_read_by_the_last_node,
    "a chain of fused_add_rms_norm on the residual": _residual_chain,
    "norm and quant into empty buffers": layer_program(("norm_quant", "norm_add_quant", "add_norm_quant"), "empty"),
    "norm and quant into clone buffers": layer_program(("norm_quant", "add_norm_quant", "read_residual"), "clone"),
}


@pytest.mark.parametrize(("version", "early"), [(1, False), (2, True)], ids=["v1 write-backs last", "v2 early"])
@pytest.mark.parametrize("program", list(PROGRAMS))
@pytest.mark.parametrize("name", list(PASSES))
def test_a_correct_pass_over_auto_functionalized_nodes_is_quiet(name, program, version, early):
    case = _case(PROGRAMS[program], SHAPES, 2, version, early)
    result = check_case(PASSES[name], case, oracles=ORACLES)
    assert result.rewritten, "the pass rewrote nothing"
    assert result.ok, result.violations


def _written_between_case(version):
    """``rms_norm(x)`` into a buffer, then ``x += 1`` written back at once (an early ``copy_``),
    then ``add_quant`` of the norm: the fused node must read the old ``x``."""

    def program(x, r, w):
        o = ops()
        normed = torch.empty_like(x)
        o.rms_norm(normed, x, w, EPS)
        x.add_(1.0)
        result = torch.empty_like(x)
        o.add_quant(result, normed, r, SCALE)
        return (result * 1.0,)

    return _case(program, SHAPES, 2, version, early=True)


@pytest.mark.parametrize("version", [1, 2])
def test_a_fused_node_placed_after_a_write_to_a_tensor_it_reads_is_caught(version):
    careful = check_case(fuse, _written_between_case(version), oracles=ORACLES)
    assert careful.ok and len(_hops(careful.pair.after.graph)) == 2, careful.violations  # declined
    result = check_case(functools.partial(fuse, careful=False), _written_between_case(version), oracles=ORACLES)
    assert len(_hops(result.pair.after.graph)) == 1
    messages = [v.message for v in result.violations if v.oracle == "mutation_barriers"]
    assert any("the read of `arg0_1` across copy_" in m for m in messages), result.violations


def _old_value_read_later_case(version, residual):
    """``fused_add_rms_norm(h, r)`` with the old value of ``h`` (or of the graph input ``r``,
    ``residual``) read by a node the test moves after the ``auto_functionalized`` node: the functional
    graph is right, defunctionalizing it makes that node read the new value."""

    def program(x, r, w):
        o = ops()
        h = x * 2.0
        old = (r if residual else h).sum()
        o.fused_add_rms_norm(h, r, w, EPS)
        result = torch.empty_like(x)
        o.quant(result, h, SCALE)
        return result * 1.0, old

    case = _case(program, SHAPES, 2, version)
    graph = case.gm.graph
    (hop,) = [n for n in _hops(graph) if n.args[0]._opname == "fused_add_rms_norm"]
    (read,) = graph.find_nodes(op="call_function", target=torch.ops.aten.sum.default)
    hop.append(read)
    case.gm.recompile()
    return case


@pytest.mark.parametrize("residual", [False, True], ids=["activation", "residual"])
@pytest.mark.parametrize("version", [1, 2])
def test_a_defunctionalization_before_a_reader_of_the_old_value_is_caught(version, residual):
    result = check_case(defunctionalize, _old_value_read_later_case(version, residual), oracles=ORACLES)
    messages = [v.message for v in result.violations if v.oracle == "mutation_barriers"]
    assert any("the kept node `sum_1`" in m and "fused_add_rms_norm" in m for m in messages), result.violations


@pytest.mark.parametrize("name", list(PASSES))
def test_a_correct_pass_is_quiet_on_layer_cases(name, tmp_path):
    summary = pmverify.verify(PASSES[name], layer_cases(max_steps=3), seed=0, repro_dir=tmp_path)
    assert summary.rewritten_cases > 0, summary.describe()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PASSES))
def test_a_correct_pass_is_quiet_on_layer_cases_over_300_cases(name, tmp_path):
    summary = pmverify.verify(PASSES[name], layer_cases(), max_examples=300, seed=1, repro_dir=tmp_path)
    assert summary.rewritten_cases > 100, summary.describe()


def _hoist_then_rewrite(graph):
    """Each ``auto_functionalized`` node hoisted (:func:`hoist`), then ``HoistedWriteBackRMSNorm``
    (write-backs hoisted, RMS norms rewritten)."""
    from pmverify.faults.scalars import RMSNormEpsConfig
    from pmverify.faults.stale_regions import HoistedWriteBackRMSNorm

    hoist(graph)
    HoistedWriteBackRMSNorm(RMSNormEpsConfig())(graph)


#: Correct passes on ``with_mutating_custom_ops`` cases (planted RMS norms, v1 and v2, write-backs
#: anywhere): the safe defunctionalization of any op, and a hoist plus rewrite.
CUSTOM_OP_PASSES = {"reinplacing": reinplace, "hoist plus rewrite": _hoist_then_rewrite}
#: every oracle for the rewrite; the reinplacing leaves the planted norms alone (no expectations)
CUSTOM_OP_ORACLES = {"reinplacing": [*ORACLES, "structure"], "hoist plus rewrite": None}


@pytest.mark.parametrize("name", list(CUSTOM_OP_PASSES))
def test_a_correct_pass_is_quiet_on_mutating_custom_op_cases(name, tmp_path):
    from pmverify.faults.stale_regions import hoisted_rms_norm_cases

    cases = hoisted_rms_norm_cases(min_instances=1, max_instances=2)
    oracles = CUSTOM_OP_ORACLES[name]
    summary = pmverify.verify(CUSTOM_OP_PASSES[name], cases, seed=0, oracles=oracles, repro_dir=tmp_path)
    assert summary.rewritten_cases > 0, summary.describe()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CUSTOM_OP_PASSES))
def test_a_correct_pass_is_quiet_on_mutating_custom_op_cases_over_300_cases(name, tmp_path):
    from pmverify.faults.stale_regions import hoisted_rms_norm_cases

    cases = hoisted_rms_norm_cases(min_instances=1, max_instances=2)
    oracles = CUSTOM_OP_ORACLES[name]
    summary = pmverify.verify(
        CUSTOM_OP_PASSES[name], cases, max_examples=300, seed=1, oracles=oracles, repro_dir=tmp_path
    )
    assert summary.rewritten_cases > 100, summary.describe()


@pytest.mark.parametrize("version", [1, 2])
def test_a_hoist_above_a_write_to_a_tensor_the_node_reads_is_caught(version):
    """``x += 1`` written back at once, then ``rms_norm(x)`` into a buffer, the node reading the
    graph input ``x`` after the ``copy_`` (not the ``add`` that functionalization hands it: the
    same value): hoisting the node above the ``copy_`` makes it read the old ``x``."""

    def program(x, r, w):
        normed = torch.empty_like(r)
        x.add_(1.0)
        ops().rms_norm(normed, x, w, EPS)
        return (normed * 1.0,)

    case = _case(program, SHAPES, 2, version, early=True)
    (node,) = _hops(case.gm.graph)
    x = next(iter(case.gm.graph.find_nodes(op="placeholder")))
    node.replace_input_with(next(n for n in node.all_input_nodes if n.target is torch.ops.aten.add.Tensor), x)
    case.gm.recompile()
    assert check_case(hoist, case, oracles=ORACLES).ok
    result = check_case(functools.partial(hoist, careful=False), case, oracles=ORACLES)
    messages = [v.message for v in result.violations if v.oracle == "mutation_barriers"]
    assert any("`arg0_1`" in m and "copy_" in m for m in messages), result.violations


def test_a_reinplacing_before_a_reader_through_unsafe_view_is_caught():
    """``m = a @ b; v = _unsafe_view(m); add_into(m, y)`` functionalized, ``v`` returned: ``v``
    is a view of ``m`` that its schema does not declare, so calling ``add_into`` in place on ``m``
    changes what ``v`` reads (the semantics oracle sees it; mutation_barriers must too)."""
    import operator

    from pmverify.strategies._custom_ops import op

    g = torch.fx.Graph()
    a, b, y = g.placeholder("a"), g.placeholder("b"), g.placeholder("y")
    m = g.call_function(torch.ops.aten.mm.default, (a, b))
    v = g.call_function(torch.ops.aten._unsafe_view.default, (m, [2, 1, 3]))
    node = g.call_function(torch.ops.higher_order.auto_functionalized, (op("add_into"),), {"x": m, "y": y})
    g.output((v, g.call_function(operator.getitem, (node, 1))))
    inputs = (torch.randn(2, 4), torch.randn(4, 3), torch.randn(2, 3))
    case = GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [inputs])

    def blind(graph):  # defunctionalize without looking at views
        hop = next(n for n in graph.nodes if n.target is torch.ops.higher_order.auto_functionalized)
        with graph.inserting_before(hop):
            graph.call_function(op("add_into"), (), dict(hop.kwargs))
        (element,) = hop.users
        element.replace_all_uses_with(hop.kwargs["x"])
        graph.erase_node(element)
        graph.erase_node(hop)

    result = check_case(blind, case, oracles=["mutation_barriers", "semantics"])
    assert {v.oracle for v in result.violations} == {"mutation_barriers", "semantics"}, result.violations
    assert any("`mm_default` by the kept node `output`" in v.message for v in result.violations), result.violations
    assert check_case(reinplace, case, oracles=["mutation_barriers", "semantics"]).ok  # declines


def _blind_defunctionalization(graph, wrong: str = ""):
    """vLLM's v1 ``FixFunctionalizationPass`` on ``fused_add_rms_norm`` whatever its arguments are
    (views included): each node replaced by the op called in place at its place. ``wrong``:
    ``"hoist"`` moves the first reader of the old ``qkv`` after the first call (it now reads the
    written slice); ``"slice"`` makes the first call write another slice than the one its scatter
    puts back."""
    from _fused_norm_ops import _call_in_place

    qkv = next(iter(graph.find_nodes(op="placeholder")))
    for node in [n for n in graph.nodes if n.target in HOPS]:
        residual = node.kwargs["residual"]
        _call_in_place(graph, node)
        if wrong == "slice" and residual.args[0] is qkv:
            _, dim, start, end = residual.args
            residual.args = (qkv, dim, start - 1, end - 1)
            wrong = ""
        if wrong == "hoist":
            call = next(n for n in graph.nodes if n.target is ops().fused_add_rms_norm.default)
            reader = next(n for n in qkv.users if n.target is torch.ops.aten.mul.Tensor)
            call.append(reader)
            wrong = ""


def _slice_residual_program(offset: int, width: int, steps: int, read_old: bool):
    """``fused_add_rms_norm(x, qkv[:, offset:offset + H], w)`` ``steps`` times on a graph input
    ``qkv`` ``[T, width]`` (vLLM's residual a slice of a graph input), ``qkv * 3`` read before
    when ``read_old``; returns ``x``, ``qkv`` and what it read."""

    def program(qkv, x, w):
        o = ops()
        old = [qkv * 3.0] if read_old else []
        for _ in range(steps):
            o.fused_add_rms_norm(x, qkv[:, offset : offset + x.shape[1]], w, EPS)
        return (x * 1.0, qkv * 1.0, *old)

    return program


def _slice_residual_case(t=3, h=4, offset=2, width=8, steps=1, read_old=True, seed=0):
    shapes = [(t, width), (t, h), (h,)]
    return _case(_slice_residual_program(offset, width, steps, read_old), shapes, 2, 1)


@pytest.mark.parametrize("steps", [1, 2])
def test_a_blind_defunctionalization_of_a_slice_of_a_graph_input_is_quiet_and_its_wrong_twins_caught(steps):
    """The scatter putting the new slice back reads ``qkv`` after the in-place write, but that write
    lies in the slice the scatter replaces; the final ``copy_`` of the whole ``qkv`` overwrites it."""
    case = _slice_residual_case(steps=steps)
    result = check_case(_blind_defunctionalization, case, oracles=ORACLES)
    assert result.rewritten and result.ok, result.violations
    for wrong in ("hoist", "slice"):
        result = check_case(functools.partial(_blind_defunctionalization, wrong=wrong), case, oracles=ORACLES)
        messages = [v.message for v in result.violations if v.oracle == "mutation_barriers"]
        assert any("`arg0_1`" in m and "fused_add_rms_norm" in m for m in messages), (wrong, result.violations)


def _slice_residual_cases():
    from hypothesis import strategies as st

    @st.composite
    def cases(draw):
        t, h = draw(st.integers(1, 5)), draw(st.sampled_from((4, 8)))
        offset = draw(st.integers(0, 6))
        width = offset + h + draw(st.integers(0, 4))
        steps, read_old = draw(st.integers(1, 3)), draw(st.booleans())
        return _slice_residual_case(t, h, offset, width, steps, read_old)

    return cases()


@pytest.mark.slow
def test_a_blind_defunctionalization_of_a_slice_of_a_graph_input_is_quiet_over_300_cases(tmp_path):
    summary = pmverify.verify(
        _blind_defunctionalization, _slice_residual_cases(), max_examples=300, seed=1, repro_dir=tmp_path
    )
    assert summary.rewritten_cases > 30, summary.describe()


def _two_slices_program(qkv, w):
    """``fused_add_rms_norm(qkv[:, :4], qkv[:, 4:8], w)`` on a graph input ``qkv`` ``[T, 12]``, read
    (``* 3``) before: both mutated arguments views of one tensor, written back by a chain of two
    ``slice_scatter`` and one ``copy_`` (the v1 form of vLLM's rotary embedding of q and k of a
    fused qkv)."""
    old = qkv * 3.0
    ops().fused_add_rms_norm(qkv[:, :4], qkv[:, 4:8], w, EPS)
    return (qkv * 1.0, old)


@pytest.mark.parametrize("valued", [True, False])
@pytest.mark.parametrize("wrong", ["", "hoist", "slice"])
def test_a_defunctionalization_of_two_views_of_one_tensor_scattered_back_is_quiet_and_its_wrong_twins_caught(
    wrong, valued
):
    """The in-place call writes both views; the kept scatters read ``qkv`` after it, but only in the
    elements their chain replaces, and read the views for the elements they put back, which stand
    for the node's: quiet. Caught: the reader of the old ``qkv`` moved after the call, a call
    writing another slice than the one its scatter puts back. ``valued``: the case's graph carries
    fake values (make_fx's), else none (a drawn case's)."""
    case = _case(_two_slices_program, [(3, 12), (4,)], 1, 1)
    if not valued:
        for node in case.gm.graph.nodes:
            node.meta.pop("val", None)
    assert sum(n.target is torch.ops.aten.slice_scatter.default for n in case.gm.graph.nodes) == 2
    result = check_case(functools.partial(_blind_defunctionalization, wrong=wrong), case, oracles=ORACLES)
    assert result.rewritten
    if wrong:
        assert any(v.oracle == "mutation_barriers" for v in result.violations), result.violations
    else:
        assert result.ok, result.violations
