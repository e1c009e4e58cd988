"""Structure and expectations oracles, and check_case's handling of crashing passes."""

import operator

import pytest
import torch

from pmverify import GraphCase, PlantedInstance, check_case


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
    assert result.matched == [True] and result.matches == 1


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


def test_use_before_definition_is_sorted_as_inductor_does():
    """Inductor runs ``stable_topological_sort`` after custom post-grad passes, so a node inserted
    ahead of its input (as the pattern matcher does for multi-output replacements) is moved."""

    def misplaced(graph):
        nodes = list(graph.nodes)
        first_op = next(n for n in nodes if n.op == "call_function")
        last_op = [n for n in nodes if n.op == "call_function"][-1]
        with graph.inserting_before(first_op):
            graph.call_function(operator.add, (last_op, 1))

    result = check_case(misplaced, _case(), oracles=["structure"])
    assert result.pair.resorted and not result.violations


def test_raising_pass_is_a_crash_finding():
    def boom(graph):
        raise RuntimeError("pattern exploded\nsecond line")

    result = check_case(boom, _case())
    assert [v.oracle for v in result.violations] == ["crash"]
    message = result.violations[0].message
    assert "RuntimeError: pattern exploded\nsecond line" in message and "in boom" in message


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode='compiled'"):
        check_case(lambda g: None, _case(), mode="compiled")
    with pytest.raises(ValueError, match="unknown oracle 'nope'"):
        check_case(lambda g: None, _case(), oracles=["nope"])
    with pytest.raises(TypeError, match="is not a GraphCase"):
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
    assert result.matched == [True]
    kept = {n.name for n in result.pair.after.graph.nodes} & set(result.case.planted[0].nodes)
    assert kept and all(n.startswith("view") for n in kept)


def test_unlinked_output_is_a_structure_violation():
    def unlink_output(graph):
        (output,) = graph.find_nodes(op="output")
        graph.erase_node(output)

    result = check_case(unlink_output, _case())
    assert any(v.oracle == "structure" and "0 output nodes" in v.message for v in result.violations)
    assert all(v.oracle != "crash" for v in result.violations)
