"""The mutation-barrier oracle judges a read by the version of its storage it sees: a correct
reinplacing (a functional op and its write-back ``copy_`` replaced by one in-place op) is quiet, one
that writes before another reader of the old value is caught."""

from __future__ import annotations

import pytest
import torch

from pmverify import GraphCase, check_case

aten = torch.ops.aten


def _case():
    """``a = x + 1; y = x * 2; x.copy_(a); return y``: a functional add written back at the end."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.add.Tensor, (x, 1.0))
    y = g.call_function(aten.mul.Tensor, (x, 2.0))
    g.call_function(aten.copy_.default, (x, a))
    g.output((y,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    return GraphCase(gm, [(torch.randn(5),)], form="inplace")


def _reinplace(at_copy: bool):
    """Replace the ``add`` and its ``copy_`` by ``x.add_(1)`` placed at the ``copy_`` (correct) or at
    the ``add`` (before ``mul`` reads the old ``x``: wrong)."""

    def pass_(graph):
        add = next(n for n in graph.nodes if n.target is aten.add.Tensor)
        copy = next(n for n in graph.nodes if n.target is aten.copy_.default)
        with graph.inserting_before(copy if at_copy else add):
            graph.call_function(aten.add_.Tensor, add.args)
        graph.erase_node(copy)
        graph.erase_node(add)

    return pass_


def test_a_correct_reinplacing_is_quiet():
    result = check_case(_reinplace(True), _case(), oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations


def test_a_reinplacing_that_writes_before_a_reader_of_the_old_value_is_caught():
    result = check_case(_reinplace(False), _case(), oracles=["mutation_barriers"])
    messages = [v.message for v in result.violations]
    assert messages and all(v.oracle == "mutation_barriers" for v in result.violations)
    assert any("the kept node `mul" in m and "standing for copy_" in m for m in messages), messages


def test_a_write_back_moved_after_the_last_reader_is_quiet():
    """The ``copy_`` moved up to just after ``mul`` (the last reader of the old ``x``)."""

    def move_copy(graph):
        mul = next(n for n in graph.nodes if n.target is aten.mul.Tensor)
        copy = next(n for n in graph.nodes if n.target is aten.copy_.default)
        mul.append(copy)

    result = check_case(move_copy, _case(), oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations


def _v2_out_case():
    """``b = full([6], 1); s = b.sum(); roll_into(x, out=b[2:3])`` as functionalization gives it
    (``auto_functionalized_v2``, the base ``b`` passed only as the op's ``out``), returning ``s`` and
    the new ``b`` through a no-op ``convert_element_type`` (as ``remove_noop_ops`` finds it)."""
    import operator

    from pmverify.strategies._custom_ops import register

    register()
    g = torch.fx.Graph()
    x = g.placeholder("x")
    b = g.call_function(aten.full.default, ([6], 1.0), {"dtype": torch.float32})
    s = g.call_function(aten.sum.default, (b,))
    node = g.call_function(
        torch.ops.higher_order.auto_functionalized_v2,
        (torch.ops.pmverify_testing.roll_into.default,),
        {
            "x": x,
            "_out_base_index": 0,
            "_out_slice_dim": 0,
            "_out_slice_start": 2,
            "_out_slice_end": 3,
            "_all_bases": [b],
        },
    )
    new_b = g.call_function(operator.getitem, (node, 1))
    g.output((s, g.call_function(torch.ops.prims.convert_element_type.default, (new_b, torch.float32))))
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(1),)])


def _reinplace_v2(before_sum: bool):
    """The ``auto_functionalized_v2`` node replaced by ``roll_into(x, out=b[2:3])`` writing ``b`` in
    place, at the node (correct, as ``remove_noop_ops`` and ``reinplace_inplaceable_ops`` do) or
    before the ``sum`` still reading the old ``b`` (wrong)."""

    def pass_(graph):
        node = next(n for n in graph.nodes if n.target is torch.ops.higher_order.auto_functionalized_v2)
        (base,) = node.kwargs["_all_bases"]
        (element,) = node.users
        (convert,) = element.users
        at = next(n for n in graph.nodes if n.target is aten.sum.default) if before_sum else node
        with graph.inserting_before(at):
            view = graph.call_function(aten.slice.Tensor, (base, 0, 2, 3))
            graph.call_function(torch.ops.pmverify_testing.roll_into.default, (node.kwargs["x"], view))
        convert.replace_all_uses_with(base)
        graph.erase_node(convert)
        graph.erase_node(element)
        graph.erase_node(node)

    return pass_


def test_a_reinplaced_v2_node_writing_its_out_base_is_quiet_and_a_misplaced_one_caught():
    """The base an ``auto_functionalized_v2`` node passes only as ``out`` is not read by the node, as
    ``auto_functionalized``'s ``out=`` keyword is not (a correct reinplacing drew a finding)."""
    result = check_case(_reinplace_v2(False), _v2_out_case(), oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations
    result = check_case(_reinplace_v2(True), _v2_out_case(), oracles=["mutation_barriers"])
    assert any("`sum" in v.message for v in result.violations), result.violations


def _scatter_case():
    """``n = -x; s = n.sum(); y = select_scatter(n, v, 0, 0)``, returning ``s`` and ``y``: a
    functional scatter into a value nothing reads after it."""
    g = torch.fx.Graph()
    x, v = g.placeholder("x"), g.placeholder("v")
    n = g.call_function(aten.neg.default, (x,))
    s = g.call_function(aten.sum.default, (n,))
    y = g.call_function(aten.select_scatter.default, (n, v, 0, 0))
    g.output((s, y))
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(3, 4), torch.randn(4))])


def _reinplace_scatter(before_sum: bool):
    """``select_scatter`` replaced by ``n[0].copy_(v)``, as ``reinplace_inplaceable_ops`` does, at
    its place (correct) or before the ``sum`` reading the old ``n`` (wrong)."""

    def pass_(graph):
        scatter = next(n for n in graph.nodes if n.target is aten.select_scatter.default)
        base, src, dim, index = scatter.args
        at = next(n for n in graph.nodes if n.target is aten.sum.default) if before_sum else scatter
        with graph.inserting_before(at):
            view = graph.call_function(aten.select.int, (base, dim, index))
            graph.call_function(aten.copy_.default, (view, src))
        scatter.replace_all_uses_with(base)
        graph.erase_node(scatter)

    return pass_


def test_a_reinplaced_view_scatter_is_quiet_and_one_before_a_reader_of_the_old_value_caught():
    result = check_case(_reinplace_scatter(False), _scatter_case(), oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations
    result = check_case(_reinplace_scatter(True), _scatter_case(), oracles=["mutation_barriers"])
    assert any("`sum" in v.message for v in result.violations), result.violations


def _out_case(read_too: bool):
    """``y = v.clone(); v.mul_(2); torch.tanh(x, out=y)``, returning ``y`` (and ``y.sum()`` taken
    before the ``tanh``, when ``read_too``): the clone's value is overwritten whole unless read."""
    g = torch.fx.Graph()
    x, v = g.placeholder("x"), g.placeholder("v")
    y = g.call_function(aten.clone.default, (v,))
    returned = [y]
    if read_too:
        returned.append(g.call_function(aten.sum.default, (y,)))
    g.call_function(aten.mul_.Tensor, (v, 2.0))
    g.call_function(aten.tanh.out, (x,), {"out": y})
    g.output(tuple(returned))
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(4), torch.randn(4))], form="inplace")


def _clone_after_the_write(graph):
    clone = next(n for n in graph.nodes if n.target is aten.clone.default)
    next(n for n in graph.nodes if n.target is aten.mul_.Tensor).append(clone)


def test_a_read_whose_value_is_overwritten_whole_may_move_across_a_write():
    result = check_case(_clone_after_the_write, _out_case(False), oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations
    result = check_case(_clone_after_the_write, _out_case(True), oracles=["mutation_barriers"])
    assert any("kept node `clone_default`" in v.message for v in result.violations), result.violations


def _in_place_value(read_early: bool):
    """The ``add`` of :func:`_case` computed in place into a clone of ``x`` (``c = x.clone();
    c.add_(1)``), still copied back, with ``mul`` re-created to read ``c``: after the ``add_``
    (correct: it reads the value the ``copy_`` writes back) or before it (wrong)."""

    def pass_(graph):
        add = next(n for n in graph.nodes if n.target is aten.add.Tensor)
        mul = next(n for n in graph.nodes if n.target is aten.mul.Tensor)
        with graph.inserting_before(add):
            c = graph.call_function(aten.clone.default, (add.args[0],))
            if read_early:
                new_mul = graph.call_function(aten.mul.Tensor, (c, 2.0))
            graph.call_function(aten.add_.Tensor, (c, *add.args[1:]))
            if not read_early:
                new_mul = graph.call_function(aten.mul.Tensor, (c, 2.0))
        add.replace_all_uses_with(c)
        graph.erase_node(add)
        mul.replace_all_uses_with(new_mul)
        graph.erase_node(mul)

    return pass_


def _case_reading_the_new_value():
    """``a = x + 1; y = a * 2; x.copy_(a); return y``: ``y`` reads ``x``'s value after the copy."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.add.Tensor, (x, 1.0))
    y = g.call_function(aten.mul.Tensor, (a, 2.0))
    g.call_function(aten.copy_.default, (x, a))
    g.output((y,))
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(5),)], form="inplace")


def test_a_value_copied_back_may_be_computed_in_place_before_the_copy():
    result = check_case(
        _in_place_value(False), _case_reading_the_new_value(), oracles=["mutation_barriers", "semantics"]
    )
    assert result.ok, result.violations
    result = check_case(_in_place_value(True), _case_reading_the_new_value(), oracles=["mutation_barriers"])
    assert [v.oracle for v in result.violations] == ["mutation_barriers"], result.violations


def test_a_write_back_left_as_a_copy_of_the_input_into_itself_is_quiet():
    """Reinplacing leaves ``x.copy_(view(x))`` of a write-back it made redundant: it reads and
    writes nothing that matters (mutation_barriers), and reads only what it writes, in the same
    order (aliasing: full overlap)."""

    def pass_(graph):
        add = next(n for n in graph.nodes if n.target is aten.add.Tensor)
        copy = next(n for n in graph.nodes if n.target is aten.copy_.default)
        x = copy.args[0]
        with graph.inserting_before(copy):
            graph.call_function(aten.add_.Tensor, add.args)
            same = graph.call_function(aten.view.default, (graph.call_function(aten.view.default, (x, [-1])), [5]))
        copy.args = (x, same)
        graph.erase_node(add)

    result = check_case(pass_, _case(), oracles=["mutation_barriers", "aliasing", "semantics"])
    assert result.ok, result.violations


def test_an_in_place_op_stands_for_the_functional_node_of_its_kind():
    """``n = -x; s = slice_scatter(n, v); add_into(n, y)`` functionalized, then reinplaced as
    Inductor does: ``add_into`` writes ``n`` in place after the re-created scatter read it. The write
    stands for the ``auto_functionalized`` node of ``add_into``, not for the scatter before it."""
    import operator

    from pmverify.strategies._custom_ops import register

    register()
    g = torch.fx.Graph()
    x, v, y = g.placeholder("x"), g.placeholder("v"), g.placeholder("y")
    n = g.call_function(aten.neg.default, (x,))
    s = g.call_function(aten.slice_scatter.default, (n, v, 0, 0, 1))
    node = g.call_function(
        torch.ops.higher_order.auto_functionalized, (torch.ops.pmverify_testing.add_into.default,), {"x": n, "y": y}
    )
    out, new_n = (g.call_function(operator.getitem, (node, i)) for i in (0, 1))
    g.output((g.call_function(aten.neg.default, (s,)), out, new_n))
    case = GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(3), torch.randn(1), torch.randn(3))])

    def pass_(graph):
        hop = next(n for n in graph.nodes if n.target is torch.ops.higher_order.auto_functionalized)
        scatter = next(n for n in graph.nodes if n.target is aten.slice_scatter.default)
        out, new_n = sorted(hop.users, key=lambda n: n.args[1])
        with graph.inserting_before(hop):
            again = graph.call_function(aten.slice_scatter.default, scatter.args)
            op = graph.call_function(torch.ops.pmverify_testing.add_into.default, (hop.kwargs["x"], hop.kwargs["y"]))
        scatter.replace_all_uses_with(again)
        out.replace_all_uses_with(op)
        new_n.replace_all_uses_with(hop.kwargs["x"])
        for dead in (out, new_n, hop, scatter):
            graph.erase_node(dead)

    result = check_case(pass_, case, oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations


#: The copies ``remove_noop_ops`` drops for their source: a clone, a cast to the same dtype.
_COPIES = {
    "clone": lambda g, s: g.call_function(aten.clone.default, (s,)),
    "same-dtype cast": lambda g, s: g.call_function(torch.ops.prims.convert_element_type.default, (s, torch.float32)),
}


def _clone_case(reader_after: bool, copy: str = "clone"):
    """``s = -x; c = s.clone(); add_into(c, y)`` functionalized (or ``c`` a cast of ``s`` to its own
    dtype), returning the new ``c`` and ``s * 2`` taken before the op or after it."""
    import operator

    from pmverify.strategies._custom_ops import register

    register()
    g = torch.fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    s = g.call_function(aten.neg.default, (x,))
    c = _COPIES[copy](g, s)
    if not reader_after:
        m = g.call_function(aten.mul.Tensor, (s, 2.0))
    node = g.call_function(
        torch.ops.higher_order.auto_functionalized, (torch.ops.pmverify_testing.add_into.default,), {"x": c, "y": y}
    )
    new_c = g.call_function(operator.getitem, (node, 1))
    if reader_after:
        m = g.call_function(aten.mul.Tensor, (s, 2.0))
    g.output((new_c, m))
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [(torch.randn(3), torch.randn(3))])


def _drop_the_clone_and_reinplace(graph):
    """What ``remove_noop_ops`` and ``reinplace_inplaceable_ops`` do: the clone replaced by its
    source, the op then called in place on it."""
    copies = (aten.clone.default, torch.ops.prims.convert_element_type.default)
    clone = next(n for n in graph.nodes if n.target in copies)
    hop = next(n for n in graph.nodes if n.target is torch.ops.higher_order.auto_functionalized)
    source = clone.args[0]
    with graph.inserting_before(hop):
        graph.call_function(torch.ops.pmverify_testing.add_into.default, (source, hop.kwargs["y"]))
    (element,) = hop.users
    element.replace_all_uses_with(source)
    for dead in (element, hop, clone):
        graph.erase_node(dead)


@pytest.mark.parametrize("copy", sorted(_COPIES))
def test_a_dropped_clone_whose_source_nothing_reads_later_is_quiet_and_one_read_later_caught(copy):
    # the same-dtype cast: found by the 300-case run of Inductor's reinplacing chain, once fx_graphs drew such casts
    case = _clone_case(False, copy)
    result = check_case(_drop_the_clone_and_reinplace, case, oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations
    result = check_case(_drop_the_clone_and_reinplace, _clone_case(True, copy), oracles=["mutation_barriers"])
    assert any("kept node `mul_tensor`" in v.message for v in result.violations), result.violations


def _dropped_scatter_case():
    """``y = -w; a = slice_scatter(x, y, 0, 0)`` (``y`` of ``x``'s shape: ``a`` is ``y``) and ``b =
    slice_scatter(y, v, 0, 0, 1)``, both returned: functional scatters, one a no-op."""
    g = torch.fx.Graph()
    x, w, v = g.placeholder("x"), g.placeholder("w"), g.placeholder("v")
    y = g.call_function(aten.neg.default, (w,))
    a = g.call_function(aten.slice_scatter.default, (x, y, 0, 0, None))
    b = g.call_function(aten.slice_scatter.default, (y, v, 0, 0, 1))
    g.output((a, b))
    inputs = [(torch.randn(3, 4), torch.randn(3, 4), torch.randn(1, 4))]
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), inputs)


def _drop_scatter(reinplace_the_other: bool):
    """``a`` replaced by ``y`` (``remove_noop_ops``); with ``reinplace_the_other``, ``b`` also
    reinplaced as ``y[0:1].copy_(v)`` at its place: the output's ``a`` (now ``y``) then reads the
    written ``y`` (wrong)."""

    def pass_(graph):
        a, b = (n for n in graph.nodes if n.target is aten.slice_scatter.default)
        a.replace_all_uses_with(a.args[1])
        graph.erase_node(a)
        if reinplace_the_other:
            base, src, dim, start, end = b.args
            with graph.inserting_before(b):
                view = graph.call_function(aten.slice.Tensor, (base, dim, start, end))
                graph.call_function(aten.copy_.default, (view, src))
            b.replace_all_uses_with(base)
            graph.erase_node(b)

    return pass_


def test_a_dropped_or_kept_functional_scatter_writes_nothing_and_a_misplaced_reinplacing_is_caught():
    """A functional scatter counts as a write only where the pass reinplaced it: vLLM's no-op
    elimination dropping ``a`` for ``y`` and keeping ``b`` (a scatter into ``y``) is quiet."""
    result = check_case(_drop_scatter(False), _dropped_scatter_case(), oracles=["mutation_barriers", "semantics"])
    assert result.ok, result.violations
    result = check_case(_drop_scatter(True), _dropped_scatter_case(), oracles=["mutation_barriers"])
    assert any("read of `neg" in v.message and "standing for slice_scatter" in v.message for v in result.violations), (
        result.violations
    )


def _scatter_over_case(rows: int):
    """``a = x + 1; s = select_scatter(a, y, 0, 0); x.copy_(a); return s`` with ``x`` of ``rows``
    rows: with one row the scatter replaces the whole of ``a`` and reads none of it."""
    g = torch.fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    a = g.call_function(aten.add.Tensor, (x, 1.0))
    s = g.call_function(aten.select_scatter.default, (a, y, 0, 0))
    g.call_function(aten.copy_.default, (x, a))
    g.output((s,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    return GraphCase(gm, [(torch.randn(rows, 3), torch.randn(3))], form="inplace")


def _reinplace_under_the_scatter(scatter_first: bool):
    """``x.add_(1)`` at the ``add`` (Inductor's reinplacing), the scatter reading ``x`` after it, or
    before it (a stale ``x`` where the scatter keeps rows of it)."""

    def pass_(graph):
        add = next(n for n in graph.nodes if n.target is aten.add.Tensor)
        scatter = next(n for n in graph.nodes if n.target is aten.select_scatter.default)
        copy = next(n for n in graph.nodes if n.target is aten.copy_.default)
        x = add.args[0]
        with graph.inserting_before(add):
            if scatter_first:
                new_scatter = graph.call_function(aten.select_scatter.default, (x, *scatter.args[1:]))
                graph.call_function(aten.add_.Tensor, add.args)
            else:
                graph.call_function(aten.add_.Tensor, add.args)
                new_scatter = graph.call_function(aten.select_scatter.default, (x, *scatter.args[1:]))
        scatter.replace_all_uses_with(new_scatter)
        for node in (copy, scatter, add):
            graph.erase_node(node)

    return pass_


def test_a_scatter_replacing_its_whole_input_reads_none_of_it():
    """Inductor's reinplacing chain turned ``select_scatter(af[1], y, 0, 0)`` of a one-row tensor into
    ``select_scatter(x, y, 0, 0)`` after ``x``'s in-place op: the read of ``x`` is dead on both sides
    (it was reported moved across the write). Where the scatter keeps a row, reading ``x`` before the
    write is still caught."""
    for scatter_first in (False, True):
        result = check_case(
            _reinplace_under_the_scatter(scatter_first), _scatter_over_case(1), oracles=["mutation_barriers"]
        )
        assert not result.violations, result.violations
    assert (
        check_case(_reinplace_under_the_scatter(False), _scatter_over_case(2), oracles=["mutation_barriers"]).violations
        == []
    )
    caught = check_case(_reinplace_under_the_scatter(True), _scatter_over_case(2), oracles=["mutation_barriers"])
    assert [v.oracle for v in caught.violations] == ["mutation_barriers"], caught.violations


def _sliced_reader_case(end: int):
    """``s = x[0:end]; a = x + 1; n = neg(s); x.copy_(a); return n``."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    s = g.call_function(aten.slice.Tensor, (x, 0, 0, end))
    a = g.call_function(aten.add.Tensor, (x, 1.0))
    n = g.call_function(aten.neg.default, (s,))
    g.call_function(aten.copy_.default, (x, a))
    g.output((n,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    return GraphCase(gm, [(torch.randn(3, 2),)], form="inplace")


def test_a_read_of_no_element_sees_no_write():
    """Reinplacing the add where it stands puts its write before ``neg`` reads ``x[0:end]``: with
    ``end=0`` (a zero-length slice, as post-grad graphs may hold) nothing is read, so nothing moved;
    with ``end=1`` the kept reader sees the new value, caught."""
    quiet = check_case(_reinplace(at_copy=False), _sliced_reader_case(0), oracles=["mutation_barriers"])
    assert not quiet.violations, quiet.violations
    caught = check_case(_reinplace(at_copy=False), _sliced_reader_case(1), oracles=["mutation_barriers"])
    assert [v.oracle for v in caught.violations] == ["mutation_barriers"], caught.violations


def test_the_fake_values_lent_to_the_case_graph_are_taken_back():
    """The oracle reads the graph before the pass with the fake values the direct mode propagated
    (lent to the case's own nodes for the check, not copied): they are there while it reads, gone
    after it, also when it raises; a value the case's node had of its own stays."""
    from pmverify._engine.apply import apply_direct
    from pmverify.oracles import mutation_barriers

    case = _case()
    x = next(iter(case.gm.graph.nodes))
    own = torch.empty(5)
    x.meta["val"] = own
    pair = apply_direct(_reinplace(False), case)
    assert pair.before is case.gm and pair.before_propagation is not None
    seen = {}
    with pytest.raises(KeyError), mutation_barriers._valued(pair) as graph:
        assert graph is case.gm.graph
        seen = {n.name: n.meta.get("val") for n in graph.nodes}
        raise KeyError
    assert seen, seen
    assert isinstance(seen.pop("output"), tuple) and seen.pop("x") is own
    assert seen and all(isinstance(v, torch.Tensor) for v in seen.values()), seen
    assert [n.name for n in case.gm.graph.nodes if "val" in n.meta] == ["x"] and x.meta["val"] is own
    assert mutation_barriers.check(pair)  # caught, and the case's graph is left as it was
    assert [n.name for n in case.gm.graph.nodes if "val" in n.meta] == ["x"]


@torch.library.custom_op("pmverify_test_barriers::add_mul", mutates_args=())
def _add_mul(x: torch.Tensor, r: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    total = x + r
    return total.clone(), total * scale


@_add_mul.register_fake
def _add_mul_fake(x, r, scale):
    return torch.empty_like(x), torch.empty_like(x)


def _two_sums_one_written_back(*, read_total_late: bool = False):
    """``a = x + r; m = a * 2; b = y + w; n = b * 3; y.copy_(a); return m, n, a, -y``: instance A's
    sum is written back into the input instance B reads (a write ``with_mutations`` draws)."""
    g = torch.fx.Graph()
    x, r, y, w = (g.placeholder(name) for name in ("x", "r", "y", "w"))
    a = g.call_function(aten.add.Tensor, (x, r))
    m = g.call_function(aten.mul.Tensor, (a, 2.0))
    b = g.call_function(aten.add.Tensor, (y, w))
    n = g.call_function(aten.mul.Tensor, (b, 3.0))
    g.call_function(aten.copy_.default, (y, a))
    late = g.call_function(aten.mul.Tensor, (a, 5.0)) if read_total_late else a
    g.output((m, n, late, g.call_function(aten.neg.default, (y,))))
    inputs = [tuple(torch.randn(4, 3) for _ in range(4))]
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), inputs, form="inplace")


def _fuse_sums(graph, *, second_after_copy: bool = False):
    """Each ``add`` + ``mul`` by ``add_mul`` (one node computing both from the add's inputs); the
    ``copy_`` of the first sum now copies the fused node's first element. ``second_after_copy``:
    the second fused node goes after the ``copy_`` (reading ``y`` after the write: wrong)."""
    import operator

    for i, add in enumerate([n for n in graph.nodes if n.target is aten.add.Tensor]):
        mul = next(u for u in add.users if u.target is aten.mul.Tensor)
        where = mul
        if second_after_copy and i == 1:
            where = next(n for n in graph.nodes if n.target is aten.copy_.default).next
        with graph.inserting_before(where):
            fused = graph.call_function(torch.ops.pmverify_test_barriers.add_mul.default, (*add.args, mul.args[1]))
            total, scaled = (graph.call_function(operator.getitem, (fused, i)) for i in (0, 1))
        mul.replace_all_uses_with(scaled)
        graph.erase_node(mul)
        add.replace_all_uses_with(total)
        graph.erase_node(add)


def test_a_fused_node_computing_a_written_back_value_itself_reads_no_later_version():
    """A replaced node's read of a value a replaced node computed, which a kept ``copy_`` writes
    back into another input, is an edge inside the match: the fused node computes the value from
    the sum's inputs and need not read that input after the write (a false finding on a vLLM-style
    fused add + RMSNorm drawn with a write-back of one instance's residual into the next's). A
    kept node reading the value (the late ``mul``) still reads it as before."""
    for late in (False, True):
        result = check_case(_fuse_sums, _two_sums_one_written_back(read_total_late=late))
        assert result.violations == [] and result.rewritten, result.violations
    moved = check_case(
        lambda graph: _fuse_sums(graph, second_after_copy=True),
        _two_sums_one_written_back(),
        oracles=["mutation_barriers"],
    )
    assert [v.oracle for v in moved.violations] == ["mutation_barriers"], moved.violations
