"""Structure and expectations oracles, and check_case's handling of crashing passes."""

import operator

import pytest
import torch
from hypothesis import given, settings
from hypothesis.errors import InvalidArgument

from pmverify import GraphCase, PlantedInstance, check_case
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.strategies import with_mutating_custom_ops, with_mutations


def _case(planted_must_match=True, with_view=False):
    import torch.fx.traceback as fxt
    from torch._inductor.pattern_matcher import fwd_only

    def fn(x):
        y = x.sin()
        with fxt.annotate({"pmverify_instance": 0}):
            z = (y.view(12).exp() * 2).view(4, 3) if with_view else y.exp() * 2
        return z + 1

    x = torch.randn(4, 3)
    gm = fwd_only(fn, [x])
    names = tuple(n.name for n in gm.graph.nodes if n.meta.get("custom", {}).get("pmverify_instance") == 0)
    reason = None if planted_must_match else "eps"
    return GraphCase(gm, [(x,)], planted=(PlantedInstance("exp_mul", names, planted_must_match, reason),))


def _exp_mul_to_fused(graph):
    """A correct rewrite of exp(y) * 2 into y.exp().mul(2) through one new node pair."""
    for node in list(graph.nodes):
        if node.target is torch.ops.aten.mul.Tensor and node.args[0].target is torch.ops.aten.exp.default:
            exp = node.args[0]
            with graph.inserting_before(node):
                new = graph.call_function(
                    torch.ops.aten.mul.Tensor, (graph.call_function(torch.ops.aten.exp.default, exp.args), 2)
                )
            node.replace_all_uses_with(new)
            graph.erase_node(node)
            graph.erase_node(exp)


def test_correct_rewrite_passes_every_oracle():
    result = check_case(_exp_mul_to_fused, _case())
    assert result.ok, result.violations
    assert result.planted_matched == [True] and result.rewrite_count == 1


def test_pass_that_does_nothing_silently_never_matches():
    result = check_case(lambda graph: None, _case())
    assert [v.oracle for v in result.violations] == ["expectations"]
    assert "not rewritten" in result.violations[0].message


def test_match_on_near_miss_is_reported():
    result = check_case(_exp_mul_to_fused, _case(planted_must_match=False))
    assert [v.oracle for v in result.violations] == ["expectations"]
    assert "near miss (eps)" in result.violations[0].message


def test_dtype_change_is_a_structure_violation():
    def to_half(graph):
        (output,) = graph.find_nodes(op="output")
        value = output.args[0]
        with graph.inserting_before(output):
            cast = graph.call_function(torch.ops.prims.convert_element_type.default, (value, torch.float16))
        output.args = (cast,)

    result = check_case(to_half, _case(), oracles=["structure"])
    assert len(result.violations) == 1
    assert "torch.float32 before the pass, (4, 3) torch.float16 after" in result.violations[0].message


def test_a_cycle_fails_lint():
    """A node used before its definition that no sort can fix (a cycle) is a structure finding."""

    def cyclic(graph):
        ops = [n for n in graph.nodes if n.op == "call_function"]
        with graph.inserting_before(ops[0]):
            loop = graph.call_function(operator.add, (ops[-1], 1))
        ops[0].update_arg(0, loop)

    result = check_case(cyclic, _case(), oracles=["structure"])
    assert result.pair.resorted
    assert result.violations and "lint" in result.violations[0].message


def test_use_before_definition_is_sorted_but_reported():
    """Inductor runs ``stable_topological_sort`` after custom post-grad passes, so a node a hand-written
    pass inserts ahead of its input is moved and the graph lints; but a pass run before others hands
    them a graph that does not lint, so the structure oracle reports it."""

    def misplaced(graph):
        nodes = list(graph.nodes)
        first_op = next(n for n in nodes if n.op == "call_function")
        last_op = [n for n in nodes if n.op == "call_function"][-1]
        with graph.inserting_before(first_op):
            graph.call_function(operator.add, (last_op, 1))

    result = check_case(misplaced, _case(), oracles=["structure"])
    assert result.pair.resorted and result.pair.unsorted == [("add_1", "add")]
    assert [v.message for v in result.violations] == [
        "the pass inserted `add_1` before its input `add` is defined; Inductor's stable_topological_sort hides it "
        "after post_grad_custom_post_pass but a pass running before others (vLLM's pass manager, "
        "post_grad_custom_pre_pass) hands them a graph that does not lint"
    ]
    assert result.violations[0].nodes == ("add_1", "add")


def _multi_output_case_and_pass():
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    def search(a, b):
        s = a.sin()
        return s, (s * b).cos()

    def replace(a, b):
        s = a.sin() + 0.0
        return s, (s * b).cos()

    pass_ = PatternMatcherPass()
    register_replacement(search, replace, [torch.randn(4), torch.randn(4)], fwd_only, pass_)

    def fn(x):
        s = x.sin()
        return s, (s * (x * 2)).cos()

    x = torch.randn(4)
    return GraphCase(fwd_only(fn, [x]), [(x,)]), pass_


def test_pattern_matcher_multi_output_replacement_out_of_order_is_not_reported():
    """The pattern matcher puts a multi-output replacement before the match's first output, ahead
    of ``mul`` (an input defined later), and relies on the sort: not the pass's fault."""
    case, pass_ = _multi_output_case_and_pass()
    result = check_case(pass_, case, oracles=["structure", "semantics"])
    assert result.rewrite_count == 1 and result.pair.resorted and result.pair.unsorted == []
    assert result.ok, result.violations


def test_with_strict_order_the_pattern_entrys_disorder_is_reported():
    """vLLM's pass manager runs the next pass on the graph as the pass left it, before any sort."""
    case, pass_ = _multi_output_case_and_pass()
    result = check_case(pass_, case, oracles=["structure", "semantics"], strict_order=True)
    assert result.pair.strict_order and result.pair.unsorted == [("mul_tensor", "mul")]
    (violation,) = result.violations
    assert violation.oracle == "structure" and violation.nodes == ("mul_tensor", "mul")
    assert violation.message.startswith(
        "an Inductor pattern entry (ReplacementPatternEntry at sin.default) inserted `mul_tensor` before its input `mul` is defined"
    )
    assert "strict_order=True judges the graph as the pass left it" in violation.message


def test_use_of_an_erased_node_is_reported():
    def use_erased(graph):
        mul = next(n for n in graph.nodes if n.target is torch.ops.aten.mul.Tensor)
        with graph.inserting_before(mul):
            extra = graph.call_function(torch.ops.aten.neg.default, (mul.args[0],))
        mul.replace_input_with(mul.args[0], extra)
        extra.users.clear()  # what a pass that edits users by hand leaves behind
        graph.erase_node(extra)

    result = check_case(use_erased, _case(), oracles=["structure"])
    messages = [v.message for v in result.violations]
    assert messages[0].startswith("graph lint failed after the pass:")
    assert messages[1:] == ["the pass left `mul` using `neg_default`, which it erased"]


def _to_half_inside(graph):
    """Computes exp(y) * 2 in float16 and casts back, keeping the float32 meta exp and mul had."""
    mul = next(n for n in graph.nodes if n.target is torch.ops.aten.mul.Tensor)
    exp = mul.args[0]
    with graph.inserting_before(exp):
        half = graph.call_function(torch.ops.prims.convert_element_type.default, (exp.args[0], torch.float16))
    exp.replace_input_with(exp.args[0], half)
    with graph.inserting_after(mul):
        back = graph.call_function(torch.ops.prims.convert_element_type.default, (mul, torch.float32))
    mul.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)


def test_stale_meta_is_reported():
    result = check_case(_to_half_inside, _case(), oracles=["structure"])
    assert [v.message for v in result.violations] == [
        "`exp` carries meta['val'] (4, 3) torch.float32 left by the pass, but re-propagation gives "
        "(4, 3) torch.float16; stale meta misleads later passes",
        "`mul` carries meta['val'] (4, 3) torch.float32 left by the pass, but re-propagation gives "
        "(4, 3) torch.float16; stale meta misleads later passes",
    ]
    assert [v.nodes for v in result.violations] == [("exp",), ("mul",)]


def test_updated_meta_is_quiet():
    from pmverify._engine.apply import propagate_fake

    def to_half_and_update(graph):
        _to_half_inside(graph)
        propagate_fake(graph.owning_module, tuple(torch.randn(4, 3) for _ in graph.find_nodes(op="placeholder")))

    result = check_case(to_half_and_update, _case(), oracles=["structure"])
    assert result.ok, result.violations


def test_many_stale_nodes_are_summed_up():
    from pmverify.oracles.structure import MAX_STALE_REPORTED

    def stale_everywhere(graph):
        for node in graph.nodes:
            if node.op == "call_function":
                node.meta["val"] = torch.empty(1, dtype=torch.int8)

    result = check_case(stale_everywhere, _case(), oracles=["structure"])
    assert len(result.violations) == 4 <= MAX_STALE_REPORTED  # sin, exp, mul, add
    assert all("stale meta" in v.message for v in result.violations)


def test_output_strides_change_is_reported():
    def transposed_output(graph):
        (output,) = graph.find_nodes(op="output")
        (value,) = pytree_leaves(output.args[0])
        aten = torch.ops.aten
        with graph.inserting_before(output):
            t = graph.call_function(aten.t.default, (value,))
            copy = graph.call_function(aten.clone.default, (t,), {"memory_format": torch.contiguous_format})
            back = graph.call_function(aten.t.default, (copy,))
        output.replace_input_with(value, back)

    result = check_case(transposed_output, _case(), oracles=["structure", "semantics"])
    assert [v.message for v in result.violations] == [
        "output 0 ((4, 3) torch.float32) had strides (3, 1) before the pass, (1, 4) after"
    ]


def test_strides_of_size_one_dims_are_not_judged():
    def unsqueezed(x):
        return (x.sin() + 1).unsqueeze(1)

    from torch._inductor.pattern_matcher import fwd_only

    x = torch.randn(4, 3)
    case = GraphCase(fwd_only(unsqueezed, [x]), [(x,)])

    def restride(graph):
        (output,) = graph.find_nodes(op="output")
        (value,) = pytree_leaves(output.args[0])
        aten = torch.ops.aten
        with graph.inserting_before(output):  # (4, 1, 3) with strides (3, 1, 1) -> (3, 12, 1)
            strided = graph.call_function(aten.as_strided.default, (value, [4, 1, 3], [3, 12, 1]))
        output.replace_input_with(value, strided)

    result = check_case(restride, case, oracles=["structure", "semantics"])
    assert result.ok, result.violations


def pytree_leaves(value):
    import torch.utils._pytree as pytree

    return pytree.tree_leaves(value)


def test_raising_pass_is_a_crash_finding():
    def boom(graph):
        raise RuntimeError("pattern exploded\nsecond line")

    result = check_case(boom, _case())
    assert [v.oracle for v in result.violations] == ["crash"]
    message = result.violations[0].message
    assert "RuntimeError: pattern exploded\nsecond line" in message and "in boom" in message


def test_bad_arguments():
    with pytest.raises(InvalidArgument, match="mode='eager' is not supported"):
        check_case(lambda g: None, _case(), mode="eager")
    with pytest.raises(InvalidArgument, match="unknown oracle 'nope'"):
        check_case(lambda g: None, _case(), oracles=["nope"])
    with pytest.raises(InvalidArgument, match="is not a GraphCase"):
        check_case(lambda g: None, object())
    with pytest.raises(ValueError, match="tp_world=1"):
        GraphCase(_case().gm, [(), ()])
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match="one tuple of inputs per rank"):
        GraphCase(_case().gm, (x,))
    with pytest.raises(ValueError, match="inputs\\[0\\] holds 2 values; gm has 1 placeholders"):
        GraphCase(_case().gm, [(x, x)])
    with pytest.raises(ValueError, match="must be a torch.fx.GraphModule"):
        GraphCase(lambda x: x, [(x,)])


def test_view_nodes_a_rewrite_keeps_are_not_judged():
    # The rewrite replaces exp and mul and keeps the planted view nodes (as a QK-norm pass may keep
    # the slice that yields v): the instance counts as matched.
    result = check_case(_exp_mul_to_fused, _case(with_view=True))
    assert result.ok, result.violations
    assert result.planted_matched == [True]
    kept = {n.name for n in result.pair.after.graph.nodes} & set(result.case.planted[0].nodes)
    assert kept and all(n.startswith("view") for n in kept)


def _chain_case(*verdicts):
    """``x -> sin -> mul -> exp -> add -> mul_1``, with a planted instance per verdict: one
    instance ``sin, mul, exp, add`` (``a -> b -> c -> d``), or two, ``sin, mul`` then ``exp, add``."""
    import torch.fx.traceback as fxt
    from torch._inductor.pattern_matcher import fwd_only

    def fn(x):
        with fxt.annotate({"pmverify_instance": 0}):
            a = x.sin()
            b = a * 2
        with fxt.annotate({"pmverify_instance": len(verdicts) - 1}):
            c = b.exp()
            d = c + 1
        return d * 3

    x = torch.randn(4, 3)
    gm = fwd_only(fn, [x])
    planted = tuple(
        PlantedInstance(
            "chain",
            tuple(n.name for n in gm.graph.nodes if n.meta.get("custom", {}).get("pmverify_instance") == i),
            must_match,
            None if must_match else "eps",
        )
        for i, must_match in enumerate(verdicts)
    )
    return GraphCase(gm, [(x,)], planted=planted)


def _tail_replacement():
    """Inductor's register_replacement of ``exp(b) + 1`` (the tail ``c -> d`` of the chain, reading
    ``b``) by ``expm1(b) + 2``."""
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    def search(b):
        return b.exp() + 1

    def replace(b):
        return torch.special.expm1(b) + 2

    pass_ = PatternMatcherPass()
    register_replacement(search, replace, [torch.randn(4)], fwd_only, pass_)
    return pass_


def _tail_handler_leaving_matched_nodes_dead():
    """Inductor's register_graph_pattern of the same tail, whose handler redirects the users and
    leaves the matched ``exp`` and ``add`` dead in the graph, for Inductor's dead-code elimination."""
    from torch._inductor.pattern_matcher import CallFunction, KeywordArg, PatternMatcherPass, register_graph_pattern

    aten = torch.ops.aten
    pass_ = PatternMatcherPass()

    @register_graph_pattern(
        CallFunction(aten.add.Tensor, CallFunction(aten.exp.default, KeywordArg("b")), 1), pass_dict=pass_
    )
    def handler(match, b):
        output = match.output_node()
        with match.graph.inserting_before(output):
            fused = match.graph.call_function(aten.add.Tensor, (match.graph.call_function(aten.expm1.default, (b,)), 2))
        output.replace_all_uses_with(fused)

    return pass_


def _hand_tail_keeping_exp(graph):
    """A hand-written pass: ``add(exp, 1)`` becomes ``add(exp, 0.5) + 0.5``, keeping the matched
    ``exp`` (live) and leaving the matched ``add`` dead."""
    aten = torch.ops.aten
    add = next(n for n in graph.nodes if n.target is aten.add.Tensor and n.args[0].target is aten.exp.default)
    with graph.inserting_after(add):
        half = graph.call_function(aten.add.Tensor, (add.args[0], 0.5))
    with graph.inserting_after(half):
        fused = graph.call_function(aten.add.Tensor, (half, 0.5))
    add.replace_all_uses_with(fused, delete_user_cb=lambda user: user is not half)


def _hand_head(graph):
    """A hand-written pass covering the head ``a -> b`` of the chain: ``sin(x) * 2`` becomes
    ``sin(x) + sin(x)``; ``exp`` and ``add`` stay, now reading the inserted node."""
    aten = torch.ops.aten
    mul = next(n for n in graph.nodes if n.target is aten.mul.Tensor and n.args[0].target is aten.sin.default)
    with graph.inserting_after(mul):
        twice = graph.call_function(aten.add.Tensor, (mul.args[0], mul.args[0]))
    mul.replace_all_uses_with(twice)
    graph.erase_node(mul)


_PARTIAL_PASSES = {
    "register_replacement of the tail": _tail_replacement,
    "register_graph_pattern leaving matched nodes dead": _tail_handler_leaving_matched_nodes_dead,
    "hand-written, keeping a matched node": lambda: _hand_tail_keeping_exp,
    "hand-written, covering the head": lambda: _hand_head,
}


@pytest.mark.parametrize("make_pass", list(_PARTIAL_PASSES.values()), ids=list(_PARTIAL_PASSES))
def test_a_correct_pass_covering_part_of_the_instance_or_keeping_matched_nodes_is_quiet(make_pass):
    """Judged after dead-code elimination, by the instance's output: a pattern covering only part of
    the planted function, or a replacement leaving matched nodes behind (dead or still read), is a
    match. (Judged by the compute nodes left, all four were reported as never matching.)"""
    result = check_case(make_pass(), _chain_case(True))
    assert result.ok, result.violations
    assert result.planted_matched == [True]


@pytest.mark.parametrize("make_pass", list(_PARTIAL_PASSES.values()), ids=list(_PARTIAL_PASSES))
def test_such_a_pass_rewriting_part_of_a_near_miss_is_left_to_the_values(make_pass):
    """Its replacement starts from the near miss's own nodes and leaves none beside it: what makes
    the instance a near miss may lie outside that part (the semantics oracle judges the values)."""
    result = check_case(make_pass(), _chain_case(False))
    assert result.ok, result.violations
    assert result.planted_matched == [False]


def _whole_chain_replacement():
    """register_replacement of the whole chain ``(sin(x) * 2).exp() + 1``."""
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    pass_ = PatternMatcherPass()
    register_replacement(
        lambda x: (x.sin() * 2).exp() + 1,
        lambda x: torch.special.expm1(x.sin() * 2) + 2,
        [torch.randn(4)],
        fwd_only,
        pass_,
    )
    return pass_


def _whole_chain_handler_leaving_matched_nodes_dead():
    """register_graph_pattern of the whole chain, whose handler leaves the matched nodes dead."""
    from torch._inductor.pattern_matcher import CallFunction, KeywordArg, PatternMatcherPass, register_graph_pattern

    aten = torch.ops.aten
    pass_ = PatternMatcherPass()
    sin = CallFunction(aten.sin.default, KeywordArg("x"))
    chain = CallFunction(aten.add.Tensor, CallFunction(aten.exp.default, CallFunction(aten.mul.Tensor, sin, 2)), 1)

    @register_graph_pattern(chain, pass_dict=pass_)
    def handler(match, x):
        output, graph = match.output_node(), match.graph
        with graph.inserting_before(output):
            b = graph.call_function(aten.mul.Tensor, (graph.call_function(aten.sin.default, (x,)), 2))
            fused = graph.call_function(aten.add.Tensor, (graph.call_function(aten.expm1.default, (b,)), 2))
        output.replace_all_uses_with(fused)

    return pass_


@pytest.mark.parametrize("make_pass", [_whole_chain_replacement, _whole_chain_handler_leaving_matched_nodes_dead])
def test_a_whole_near_miss_its_own_pattern_entry_matches_is_a_note(make_pass):
    """The pass's own entry matches the near miss's nodes on the graph before the pass: its matcher
    decides, not the label (the semantics oracle judges the values); ``CaseResult.notes`` says so."""
    result = check_case(make_pass(), _chain_case(False))
    assert result.ok, result.violations
    assert result.planted_matched == [True] and "pattern entry" in result.notes[0]


def _hand_whole_chain(graph):
    """A hand-written rewrite of the whole chain ``(sin(x) * 2).exp() + 1`` into ``expm1(...) + 2``,
    leaving the matched nodes dead (the values are right)."""
    aten = torch.ops.aten
    add = next(n for n in graph.nodes if n.target is aten.add.Tensor and n.args[0].target is aten.exp.default)
    x = add.args[0].args[0].args[0].args[0]
    with graph.inserting_before(add):
        b = graph.call_function(aten.mul.Tensor, (graph.call_function(aten.sin.default, (x,)), 2))
        fused = graph.call_function(aten.add.Tensor, (graph.call_function(aten.expm1.default, (b,)), 2))
    add.replace_all_uses_with(fused)


def test_a_whole_declared_near_miss_rewritten_by_hand_is_caught():
    """(A whole rewrite leaving the matched nodes dead got away with it when judged by nodes left.)"""
    result = check_case(_hand_whole_chain, _chain_case(False))
    assert [v.oracle for v in result.violations] == ["expectations"]
    assert "near miss (eps) of chain was rewritten" in result.violations[0].message
    assert result.violations[0].nodes == ("add",) and result.planted_matched == [True]


def test_a_partial_rewrite_computing_an_extra_user_node_twice_is_a_note():
    """``exp`` is also read outside the instance (an extra_user near miss): a hand-written tail
    pass that rewrites ``exp(b) + 1`` anyway keeps ``exp`` for that user beside its replacement:
    duplicated work, not a wrong rewrite (the values are right), so a note, not a finding."""
    import torch.fx.traceback as fxt
    from torch._inductor.pattern_matcher import fwd_only

    def fn(x):
        with fxt.annotate({"pmverify_instance": 0}):
            c = (x.sin() * 2).exp()
            d = c + 1
        return d * 3, c

    x = torch.randn(4, 3)
    gm = fwd_only(fn, [x])
    names = tuple(n.name for n in gm.graph.nodes if n.meta.get("custom", {}).get("pmverify_instance") == 0)
    case = GraphCase(gm, [(x,)], planted=(PlantedInstance("chain", names, False, "extra_user"),))

    def tail_ignoring_users(graph):
        aten = torch.ops.aten
        add = next(n for n in graph.nodes if n.target is aten.add.Tensor)
        with graph.inserting_after(add):
            expm1 = graph.call_function(aten.expm1.default, (add.args[0].args[0],))
        with graph.inserting_after(expm1):
            fused = graph.call_function(aten.add.Tensor, (expm1, 2))
        add.replace_all_uses_with(fused)
        graph.erase_node(add)

    result = check_case(tail_ignoring_users, case)
    assert result.ok, result.violations
    assert result.planted_matched == [True] and "duplicated work" in result.notes[0]
    assert check_case(_hand_tail_keeping_exp, case).ok  # (its replacement reads exp: nothing computed twice)


def test_a_pass_that_silently_never_matches_is_still_caught():
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    never = PatternMatcherPass()  # registers cos(b) + 1: no instance of it in the chain
    register_replacement(lambda b: b.cos() + 1, lambda b: b.cos() + 1.0, [torch.randn(4)], fwd_only, never)
    result = check_case(never, _chain_case(True))
    assert [v.oracle for v in result.violations] == ["expectations"]
    assert result.violations[0].message.startswith("planted chain instance was not rewritten: 1 of its 1 output(s)")
    assert result.violations[0].nodes == ("add",) and result.planted_matched == [False]


def test_a_rewrite_upstream_of_a_near_miss_is_not_its_match():
    """The must-match head ``sin, mul`` is rewritten; the near miss ``exp, add`` after it now reads
    the inserted node, as its input, not in place of one of its own nodes: it was left alone."""
    result = check_case(_hand_head, _chain_case(True, False))
    assert result.ok, result.violations
    assert result.planted_matched == [True, False]


def test_unlinked_output_is_a_structure_violation():
    def unlink_output(graph):
        (output,) = graph.find_nodes(op="output")
        graph.erase_node(output)

    result = check_case(unlink_output, _case())
    assert any(v.oracle == "structure" and "0 output nodes" in v.message for v in result.violations)
    assert all(v.oracle != "crash" for v in result.violations)


def _shipped_pass_is_quiet(case):
    from pmverify.fusions.qk_norm import QKNormFusionPass

    result = check_case(QKNormFusionPass, case, oracles=["structure"])
    assert result.ok, result.violations


@settings(max_examples=5, deadline=None)
@given(qk_norm_cases())
def test_shipped_pass_is_structurally_quiet(case):
    _shipped_pass_is_quiet(case)


@settings(max_examples=5, deadline=None)
@given(with_mutations(qk_norm_cases(), min_mutations=1))
def test_shipped_pass_is_structurally_quiet_with_mutations(case):
    _shipped_pass_is_quiet(case)


@settings(max_examples=5, deadline=None)
@given(with_mutating_custom_ops(qk_norm_cases()))
def test_shipped_pass_is_structurally_quiet_with_mutating_custom_ops(case):
    _shipped_pass_is_quiet(case)
