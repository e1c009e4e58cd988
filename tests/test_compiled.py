"""The compiled mode: a pass installed as Inductor's post_grad_custom_post_pass, compared with the
same torch.compile without it. Each compile costs seconds here (the first of a session ~20 s), so
there are few tests, each on one small case."""

from __future__ import annotations

import pytest
import torch
from hypothesis.errors import InvalidArgument
from torch.fx.experimental.proxy_tensor import make_fx

import pmverify
from pmverify import GraphCase, PassVerificationError, check_case, verify
from pmverify._engine.compiled import CompiledRun
from pmverify.faults import QKNormWrongRoundingOrder
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.fusions.qk_norm.testing.cases import build_case, make_layer

CONFIG = QKNormConfig(q_size=16, kv_size=8, eps=1e-6, dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def case():
    # bf16 weights (the activation dtype): the fault's other rounding order keeps the output dtype,
    # so only the semantics oracle can see it
    return build_case(CONFIG, [make_layer(CONFIG, "qk_norm", tokens=8, weight_in_act_dtype=True)], seed=1)


def _compile_config():
    """What check_case patches for its compiles; must be as before once it returns."""
    import torch._dynamo
    import torch._functorch.config
    import torch._inductor.config as inductor_config

    names = ["post_grad_custom_post_pass", "pre_grad_custom_pass", "fx_graph_cache", "emulate_precision_casts"]
    snapshot = {name: getattr(inductor_config, name) for name in names}
    snapshot["autograd_cache"] = torch._functorch.config.enable_autograd_cache
    snapshot["suppress_errors"] = torch._dynamo.config.suppress_errors
    snapshot["pgo"] = torch._dynamo.config.automatic_dynamic_local_pgo
    snapshot["grad"] = torch.is_grad_enabled()
    return snapshot


@pytest.mark.slow  # end to end: runs in the slow step
def test_shipped_pass_compiled(case):
    config = _compile_config()
    result = check_case(QKNormFusionPass, case, mode="compiled")
    assert result.ok, result.violations
    pair = result.pair
    assert pair.mode == "compiled" and isinstance(pair.compiled, CompiledRun)
    assert pair.matched_count == 1 and result.planted_matched == [True]
    assert len(pair.match_records) == 1 and pair.match_records[0].entry.startswith("ReplacementPatternEntry")
    assert pair.compiled.graphs == 1 and pair.compiled.aligned
    fused = torch.ops.pmverify.qk_norm.default
    assert not any(n.target is fused for n in pair.before.graph.nodes)
    assert any(n.target is fused for n in pair.after.graph.nodes)
    names = [n.name for n in case.gm.graph.find_nodes(op="placeholder")]
    assert [n.name for n in pair.after.graph.find_nodes(op="placeholder")] == names
    assert len(pair.compiled.before) == len(pair.compiled.after) == 1
    assert set(pair.compiled.timings_s) >= {"compile_without_pass", "compile_with_pass"}
    assert _compile_config() == config  # the pass is uninstalled, the caches as they were


def test_pattern_matcher_pass_given_directly(case):
    # The same case compiled again, with another pass object: a compile reused from the previous
    # test (dynamo's cache, the FX graph cache) would not run the pass, and match nothing.
    result = check_case(QKNormFusionPass(CONFIG).patterns, case, mode="compiled")
    assert result.ok, result.violations
    assert result.pair.matched_count == 1 and result.pair.compiled.graphs == 1


def test_wrong_rounding_order_is_caught_by_semantics(case):
    result = check_case(QKNormWrongRoundingOrder, case, mode="compiled")
    assert result.violations and {v.oracle for v in result.violations} == {"semantics"}, result.violations
    assert "ulp of torch.bfloat16" in result.violations[0].message
    assert result.pair.matched_count == 1


def _f(a, b, c, d):
    x = c * 2
    a.add_(1)
    return x + a, b, x, x


def test_inputs_reordered_dropped_and_mutated_line_up():
    # dynamo lifts c before a, drops d, returns b and the duplicate x outside the graph; the
    # captured graphs get the case's placeholders back, and mutated inputs' final values count.
    ranks = [
        tuple(torch.randn(3, 3, generator=torch.Generator().manual_seed(r * 4 + i)) for i in range(4)) for r in (0, 1)
    ]
    case = GraphCase(make_fx(_f)(*ranks[0]), ranks, tp_world=2, form="inplace")

    def add_two(graph):  # a wrong pass: the in-place add_(1) becomes add(2)
        for node in graph.nodes:
            if node.target is torch.ops.aten.add.Tensor and node.args[1] == 1:
                node.args = (node.args[0], 2)

    result = check_case(add_two, case, mode="compiled")
    assert result.pair.compiled.aligned
    names = [n.name for n in case.gm.graph.find_nodes(op="placeholder")]
    assert [n.name for n in result.pair.before.graph.find_nodes(op="placeholder")] == names
    assert {v.oracle for v in result.violations} == {"semantics"}, result.violations
    messages = " ".join(v.message for v in result.violations)
    assert "rank 0 output 0" in messages and "rank 1 output 0" in messages
    assert f"rank 1 input {names[0]} (final value)" in messages
    assert "output 2" not in messages and "output 1" not in messages


def test_raising_pass_is_a_crash_and_the_reproducer_carries_the_mode(case, tmp_path, finding_only):
    config = _compile_config()
    calls = []

    def raising(graph):
        calls.append(len(graph.nodes))
        raise RuntimeError("boom from the pass")

    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(raising, qk_norm_cases(CONFIG), mode="compiled", max_examples=1, repro_dir=tmp_path)
    error = info.value
    assert [v.oracle for v in error.violations] == ["crash"]
    assert "RuntimeError: boom from the pass" in error.violations[0].message
    assert error.result.pair.after is None and "boom from the pass" in error.result.pair.error
    assert len(calls) == 2  # the case and Hypothesis' replay of it; never in the compiles without the pass
    assert "mode='compiled')" in error.reproducer.read_text()
    assert _compile_config() == config
    # the failed compile poisons nothing: the next compiled check runs the pass and passes
    assert check_case(QKNormFusionPass, case, mode="compiled").ok


def test_verify_compiled():
    results = []
    verify(QKNormFusionPass, qk_norm_cases(CONFIG), mode="compiled", max_examples=2, on_result=results.append)
    assert len(results) == 2 and all(r.pair.mode == "compiled" for r in results)


def test_unknown_mode():
    with pytest.raises(InvalidArgument, match="mode='eager' is not supported"):
        verify(QKNormFusionPass, qk_norm_cases(CONFIG), mode="eager")
    case = build_case(CONFIG, [make_layer(CONFIG, "qk_norm")])
    with pytest.raises(InvalidArgument, match="mode='eager' is not supported"):
        pmverify.check_case(QKNormFusionPass, case, mode="eager")


def _counted(count, *expectations):
    """A compiled-mode RunPair stand-in: the expectations oracle reads only these fields."""
    from types import SimpleNamespace

    from pmverify import PlantedInstance

    planted = tuple(PlantedInstance("qk_norm", ("n",), must, reason) for must, reason in expectations)
    case = SimpleNamespace(planted=planted, expected_matches=sum(must is True for must, _ in expectations))
    node = SimpleNamespace(name="n", target="t", args=(), kwargs={})
    before = SimpleNamespace(graph=SimpleNamespace(nodes=[node]))
    after = SimpleNamespace(graph=SimpleNamespace(nodes=[]))  # before != after: a hand rewrite
    return SimpleNamespace(
        mode="compiled", matched_count=count, match_records=[], case=case, before=before, after=after
    )


@pytest.mark.parametrize(
    "count, expectations, found",
    [
        (1, [(True, None)], None),
        (0, [(True, None)], "silently never matches under torch.compile"),
        (2, [(True, None), (None, "unused")], None),
        (2, [(True, None), (False, "eps")], "at most 1 planted instance(s) may match"),
        (2, [(True, None), (False, "mutation_inside")], None),  # functionalization lifts the barrier
        (None, [(True, None)], None),  # a hand rewrite reporting no count is not judged
    ],
)
def test_expectations_judge_the_count_in_compiled_mode(count, expectations, found):
    from pmverify.oracles import expectations as oracle

    violations = oracle.check(_counted(count, *expectations))
    if found is None:
        assert violations == []
    else:
        assert len(violations) == 1 and found in violations[0].message


def test_must_match_instances_of_inplace_cases_may_match_under_compile():
    """Functionalization can put the copy_ back into a mutated input among a pattern's nodes."""
    from pmverify.oracles import expectations as oracle

    pair = _counted(0, (True, None))
    pair.case.form = "inplace"
    assert oracle.check(pair) == []
    pair = _counted(2, (True, None))
    pair.case.form = "inplace"
    assert "at most 1 planted instance(s) may match (0 must, 1 may)" in oracle.check(pair)[0].message


def test_a_pass_without_a_count_is_judged_by_what_it_did(case):
    """Identity (no count, graph unchanged) counts 0 rewrites; a PatternMatcherPass wrapped in a
    plain function (no count) counts the matches recorded through Inductor's entries."""
    identity = check_case(lambda graph: None, case, mode="compiled")
    assert [v.oracle for v in identity.violations] == ["expectations"] and identity.rewrite_count == 0
    patterns = QKNormFusionPass(CONFIG).patterns
    wrapped = check_case(lambda graph: patterns.apply(graph) and None, case, mode="compiled")
    assert wrapped.ok, wrapped.violations
    assert wrapped.pair.matched_count is None and wrapped.rewrite_count == 1 and wrapped.planted_matched == [True]


def test_matched_instances_in_compiled_mode_are_guessed_from_the_count():
    from pmverify._execution import matched_instances

    pair = _counted(2, (False, "eps"), (True, None), (None, "unused"))
    assert matched_instances(pair) == [False, True, True]
    assert matched_instances(_counted(None, (True, None))) == [False]


def _mutated_qkv(qkv, q_weight, k_weight):
    qkv.add_(1.0)
    q, k, v = qkv.split([16, 8, 8], -1)

    def norm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + CONFIG.eps) * w).to(CONFIG.dtype)

    return norm(q, q_weight), norm(k, k_weight), v


def test_mutated_qkv_input_matches_under_compile():
    # Functionalization writes qkv back with copy_(qkv, add) between the k norm and the split that
    # yields v: the split3 form spans it (Inductor discards that match), the q/k-only form does not.
    from pmverify import PlantedInstance

    g = torch.Generator().manual_seed(0)
    args = (
        torch.randn(3, 32, generator=g).to(CONFIG.dtype),
        1 + 0.1 * torch.randn(16, generator=g),
        1 + 0.1 * torch.randn(8, generator=g),
    )
    gm = make_fx(_mutated_qkv)(*[a.clone() for a in args])
    nodes = tuple(n.name for n in gm.graph.nodes if n.op == "call_function" and "add_" not in n.name)
    case = GraphCase(gm, [args], form="inplace", planted=(PlantedInstance("qk_norm", nodes, True),))
    result = check_case(QKNormFusionPass(CONFIG), case, mode="compiled")
    assert result.ok, result.violations
    assert result.pair.matched_count == 1
    before = [n.target for n in result.pair.before.graph.nodes]
    split, copy = torch.ops.aten.split_with_sizes.default, torch.ops.aten.copy_.default
    assert before.count(split) == 3 and before.index(copy) < len(before) - 1 - before[::-1].index(split)
    after = [n.target for n in result.pair.after.graph.nodes]
    assert torch.ops.pmverify.qk_norm.default in after and copy in after


@pytest.mark.slow
def test_strict_order_reads_the_graph_the_pass_left_before_inductor_sorts_it():
    """An Inductor pattern entry's multi-output replacement goes before its input: forgiven by
    default (Inductor sorts right after the pass), a structure finding with strict_order=True."""
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    pass_ = PatternMatcherPass()
    register_replacement(
        lambda a, b: (a.sin(), (a.sin() * b).cos()),
        lambda a, b: (a.sin() + 0.0, ((a.sin() + 0.0) * b).cos()),
        [torch.randn(4), torch.randn(4)],
        fwd_only,
        pass_,
    )
    x = torch.randn(4)
    case = GraphCase(fwd_only(lambda x: (x.sin(), (x.sin() * (x * 2)).cos()), [x]), [(x,)])
    strict = check_case(pass_, case, mode="compiled", oracles=["structure", "semantics"], strict_order=True)
    assert strict.rewrite_count == 1 and strict.pair.unsorted
    assert [v.oracle for v in strict.violations] == ["structure"]
    assert "an Inductor pattern entry (ReplacementPatternEntry at" in strict.violations[0].message
    default = check_case(pass_, case, mode="compiled", oracles=["structure", "semantics"])
    assert default.rewrite_count == 1 and default.pair.unsorted == [] and default.ok, default.violations


def _symbolic_case():
    """view(x, [22, 2, 2]) of an (11, 8) input, symbolized: ``view(x, [2*s0, 2, 2])``, s0 in [2, 64]."""
    from _symbolic_cases import doubled_view_case

    return doubled_view_case()


def _bake_hint(graph):
    """Reads the symbolic size of each reshape (a view, post-grad) as an int: the compile guards
    ``Eq(2*s0, 22)`` and the graph holds the hint."""
    for node in graph.find_nodes(op="call_function", target=torch.ops.aten.reshape.default):
        sizes = [int(s.meta["val"]) if isinstance(s, torch.fx.Node) else s for s in node.args[1]]
        node.args = (node.args[0], sizes)


def _swap_mul(graph):
    """A correct rewrite: ``mul(a, b)`` -> ``mul(b, a)``."""
    for node in graph.find_nodes(op="call_function", target=torch.ops.aten.mul.Tensor):
        node.args = (node.args[1], node.args[0])


def test_a_symbolic_case_compiles_dynamic_and_a_recompile_does_not_hide_a_baked_hint():
    """dynamic=True with the symbolic dims marked: the pass sees one graph of symbolic sizes, the
    compiled functions serve every size point without recompiling, and a pass that bakes the hint
    (guarding the compile to it) is found at the other sizes, where the compile with it recompiles."""
    case = _symbolic_case()
    result = check_case(_swap_mul, case, mode="compiled", oracles=["semantics", "structure"])
    assert result.ok, result.violations
    run = result.pair.compiled
    assert (run.graphs, run.symbolic_graphs, run.aligned, run.pass_guards) == (1, 1, True, ())
    assert [n.name for n in result.pair.after.graph.find_nodes(op="placeholder")] == ["s0", "x", "w"]
    sized = result.pair.at({"s0": 2}).compiled
    assert [tuple(out.shape) for out in sized.after[0][0]] == [(4, 2)]
    assert result.pair.compiled.graphs == 1  # no recompile at s0=2 (semantics ran there already)
    found = check_case(_bake_hint, case, mode="compiled", oracles=["semantics"]).violations
    assert [v.message.split(":")[0] for v in found] == ["at s0=2", "at s0=64"], found
    assert "torch.compile recompiles there (guards the pass added: Eq(" in found[0].message
