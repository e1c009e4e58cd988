"""``planted``: validity, ground truth checked against Inductor's own pattern matcher, shrinking,
coverage of near misses and layouts, and argument validation."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from _minimal import minimal, rejections
from _mutation_checks import first
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import pmverify
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.patterns import rewrites
from pmverify.strategies import NEAR_MISS_KINDS, fx_graphs, like, planted

# ------------------------------------------------------------------------------------ patterns


def rms_pattern(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(x.dtype)


def split_pattern(x):
    a, b = torch.split(x, [4, 4], dim=-1)
    return torch.cat([torch.tanh(a) * 2.0, torch.sigmoid(b)], dim=-1)


def two_output_pattern(x, y):
    s = x + y
    return torch.relu(s), s * 0.5


RMS_EXAMPLE = (torch.empty(4, 8, dtype=torch.bfloat16), torch.empty(8, dtype=torch.bfloat16))
RMS_INPUTS = like(RMS_EXAMPLE, vary={"tokens": [(0, 0)], "hidden": [(0, 1), (1, 0)]})
SPLIT_INPUTS = like((torch.empty(4, 8),), vary={"tokens": [(0, 0)]})
TWO_INPUTS = like((torch.empty(4, 8), torch.empty(4, 8)), vary={"tokens": [(0, 0), (1, 0)]})
PATTERNS = {
    "rms": (rms_pattern, RMS_INPUTS, RMS_EXAMPLE),
    "split": (split_pattern, SPLIT_INPUTS, (torch.empty(4, 8),)),
    "two_output": (two_output_pattern, TWO_INPUTS, (torch.empty(4, 8), torch.empty(4, 8))),
}


@functools.cache
def inductor_pass(name: str):
    """A ``PatternMatcherPass`` with the pattern registered as ``register_replacement`` does it;
    the replacement is the pattern itself (new nodes, same values)."""
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    pattern, _, example = PATTERNS[name]
    matcher = PatternMatcherPass(pass_name=f"test_{name}")
    register_replacement(pattern, pattern, list(example), fwd_only, matcher)
    return matcher


def cases(name: str, **kwargs):
    pattern, inputs, _ = PATTERNS[name]
    return planted(pattern, inputs, **kwargs)


# ------------------------------------------------------------------------------------ validity


def _check_valid(case: pmverify.GraphCase) -> None:
    case.gm.graph.lint()
    outputs = case.gm(*[x.clone() for x in case.inputs[0]])
    assert all(bool(t.isfinite().all()) for t in outputs if t.is_floating_point())
    FakeTensorProp(case.gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*case.inputs[0])
    names = {node.name: node for node in case.gm.graph.nodes}
    for instance in case.planted:
        assert instance.nodes, instance
        assert all(names[n].op == "call_function" for n in instance.nodes)
        assert (instance.must_match is True) == (instance.reason is None)


@pytest.mark.parametrize("name", sorted(PATTERNS))
@given(data=st.data())
def test_cases_are_valid(name, data):
    _check_valid(data.draw(cases(name, max_instances=2)))


def _rewritten(result) -> int:
    """Instances the pass rewrote: every must-match one (``result.ok``) and any dead one it took."""
    return sum(
        matched
        for p, matched in zip(result.case.planted, result.planted_matched, strict=True)
        if p.must_match is not False
    )


def _wrong(result) -> list:
    """The violations of a pass registered with ``register_replacement``, less those of Inductor's own
    matcher: it ignores keyword arguments its pattern does not hold, so it rewrites an
    ``"optional_arg"`` near miss (``alpha=0.5``, ``dtype=``) and its replacement drops the argument,
    a true semantics (or output dtype) finding that these tests of the ground truth set aside."""
    dropped = any(p.reason == "optional_arg" and p.must_match is None for p in result.case.planted)
    return [v for v in result.violations if not (dropped and v.oracle in ("semantics", "structure"))]


@pytest.mark.parametrize("name", sorted(PATTERNS))
@given(data=st.data())
def test_ground_truth_agrees_with_inductor(name, data):
    """Inductor's matcher, with the pattern registered by ``register_replacement``, rewrites
    exactly the must-match instances and no must-not-match one, wherever they are spliced."""
    case = data.draw(cases(name, max_instances=3))
    result = pmverify.check_case(inductor_pass(name), case)
    assert not _wrong(result), result.violations
    assert result.rewrite_count == _rewritten(result)


@pytest.mark.parametrize("rewrite", ["rms_norm", "qk_norm", "qk_norm_split3"])
@given(data=st.data())
def test_shipped_pass_on_its_own_patterns(rewrite, data):
    config = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16)
    found = {r.name: r for r in rewrites(config)}[rewrite]
    inputs = like(found.example_inputs, vary={"tokens": [(0, 0)]})
    case = data.draw(planted(found.search_fn, inputs, pass_config=config, name=rewrite, max_instances=2))
    # The shipped pass less its other rewrites: planted's ground truth is that of one pattern, and
    # qk_norm_split_qk rightly fuses a split3 near miss whose only change is v's split sizes.
    only = type("Only" + rewrite, (QKNormFusionPass,), {"rewrites": classmethod(lambda cls, config: [found])})
    result = pmverify.check_case(only, case)
    assert not _wrong(result), result.violations
    assert result.rewrite_count == _rewritten(result)


def test_no_draw_is_rejected():
    """Valid by construction: no filter or ``assume`` (the module docstring states 0 %)."""
    rejected, valid = rejections(cases("two_output", max_instances=2), 50)
    assert valid == 50 and rejected / valid < 0.01, (rejected, valid)


# ------------------------------------------------------------------------------------ shrinking


def test_minimal_case_is_one_instance_in_no_context():
    case = minimal(cases("rms"), lambda c: len(c.planted) >= 1)
    (instance,) = case.planted
    assert instance.must_match and instance.reason is None
    ops = [n for n in case.gm.graph.nodes if n.op == "call_function"]
    assert [n.name for n in ops] == list(instance.nodes)  # no context, producer or consumer
    assert len(case.inputs[0]) == 2 and case.inputs[0][0].shape[0] == 1


def test_minimal_near_miss_is_the_first_kind():
    case = minimal(cases("rms"), lambda c: any(p.reason is not None for p in c.planted))
    assert [p.reason for p in case.planted] == ["constant"]


# ------------------------------------------------------------------------------------ coverage


def _seen(strategy, describe, examples: int = 100) -> set:
    """What ``describe`` finds over ``examples`` draws (derandomized: coverage must not flake)."""
    seen: set = set()

    @settings(max_examples=examples, database=None, derandomize=True)
    @given(strategy)
    def collect(case):
        seen.update(describe(case))

    collect()
    return seen


#: A pattern that has near misses of each kind: rms_pattern, but for split sizes and values (two_output's
#: x and y are biases).
_KIND_PATTERNS = {"split_sizes": "split", "values": "two_output"}


@pytest.mark.parametrize("kind", NEAR_MISS_KINDS)
def test_every_near_miss_kind_is_drawn(kind):
    """Each kind alone (derandomized draws of all kinds at once cluster: some never show)."""
    strategy = cases(_KIND_PATTERNS.get(kind, "rms"), near_misses=[kind], context=st.nothing(), min_instances=1)
    assert kind in _seen(strategy, lambda case: {p.reason for p in case.planted}, examples=10)


@pytest.mark.parametrize("kind", ["optional_arg", "reduction_dim", "constant"])
def test_near_miss_makes_every_instance_that_kind_and_each_records_the_kinds_it_had(kind):
    """``near_miss=``: no plain instance, none of another kind (rms has candidates of each of these);
    every instance says which kinds it had candidates of, whichever it was made."""
    strategy = cases("rms", near_misses=["constant", "optional_arg", "reduction_dim"], near_miss=kind, min_instances=1)
    seen = _seen(strategy, lambda case: {(p.reason, p.applicable_near_misses) for p in case.planted}, examples=5)
    assert {reason for reason, _ in seen} == {kind}
    assert {applicable for _, applicable in seen} == {("constant", "optional_arg", "reduction_dim")}


@pytest.mark.parametrize("near_miss", ["dim", "nope", 1])
def test_a_near_miss_not_among_those_drawn_is_invalid(near_miss):
    with pytest.raises(InvalidArgument, match=rf"near_miss={near_miss!r} is not one of the kinds drawn"):
        cases("rms", near_misses=["constant"], near_miss=near_miss).example()


def _layout(case: pmverify.GraphCase) -> set[str]:
    """What the layout of a case exercises: interleaved instances, late inputs, consumers."""
    order = {node.name: i for i, node in enumerate(case.gm.graph.nodes)}
    seen = set()
    for instance in case.planted:
        first, last = order[instance.nodes[0]], order[instance.nodes[-1]]
        if last - first + 1 > len(instance.nodes):
            seen.add("interleaved")
    for node in case.gm.graph.nodes:
        if node.target is torch.ops.aten.clone.default and node.args[0].op == "placeholder":
            seen.add("late clone")
        if node.target is torch.ops.aten.view.default and node.args[0].op == "placeholder":
            seen.add("late view")
        if node.target is torch.ops.aten.neg.default:
            seen.add("consumer")
    return seen


def test_layouts_are_drawn():
    assert _seen(cases("two_output", context=fx_graphs(max_nodes=4)), _layout) >= {
        "interleaved",
        "late clone",
        "late view",
        "consumer",
    }


def test_context_instances_are_kept_and_renamed():
    inner = cases("split", min_instances=1, max_instances=1, near_misses=False)
    outer = planted(rms_pattern, RMS_INPUTS, context=inner, min_instances=1, max_instances=1, near_misses=False)
    seen = []

    @settings(max_examples=10, database=None)
    @given(outer)
    def check(case):
        _check_valid(case)
        patterns = [p.pattern for p in case.planted]
        assert patterns in (["rms"], ["split", "rms"])  # the context is optional with an instance
        if "split" in patterns:
            seen.append(case)
            assert pmverify.check_case(inductor_pass("split"), case).planted_matched == [True, False]

    check()
    assert seen


# ------------------------------------------------------------------------------------ findings


def test_a_pass_matching_near_misses_with_its_own_pattern_is_quiet():
    """A matcher registered without the eps literal (eps as a wildcard, its replacement using the eps
    it matched) also rewrites the eps near misses planted() derives from the planted function: its
    own pattern entry matches them, so each is a note, not a finding (issue 28)."""
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    def any_eps(x, w, eps):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w).to(x.dtype)

    sloppy = PatternMatcherPass(pass_name="sloppy_eps")
    example = [*RMS_EXAMPLE, 1e-6]
    register_replacement(any_eps, any_eps, example, fwd_only, sloppy, scalar_workaround={"eps": 1e-6})
    summary = pmverify.verify(sloppy, cases("rms", near_misses=["constant"], min_instances=1), seed=0)
    assert any(o.startswith("near miss (constant), rewritten: either is right") for o in summary.planted_counts), (
        summary
    )


def test_a_rewritten_near_miss_finding_says_what_changed_and_what_to_do():
    from pmverify.oracles.expectations import _near_miss_message

    instance = pmverify.PlantedInstance(
        "rms", ("add",), False, "constant", "aten.add.Tensor's other (argument 1): 1e-06 -> 0.5"
    )
    message = _near_miss_message(instance)
    assert "aten.add.Tensor's other (argument 1): 1e-06 -> 0.5" in message, message
    assert "scalar_workaround" in message and "planted(recorded)" in message


# ------------------------------------------------------------------------------------ argument near misses


def bias_softmax_pattern(x, bias):
    return torch.softmax(x + bias, dim=-1) * 2.0


BIAS_SOFTMAX_EXAMPLE = (torch.empty(4, 8), torch.empty(4, 8))
BIAS_SOFTMAX_INPUTS = like(BIAS_SOFTMAX_EXAMPLE, vary={"tokens": [(0, 0), (1, 0)]})


@functools.cache
def bias_softmax_pass():
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    matcher = PatternMatcherPass(pass_name="test_bias_softmax")
    register_replacement(bias_softmax_pattern, bias_softmax_pattern, list(BIAS_SOFTMAX_EXAMPLE), fwd_only, matcher)
    return matcher


@pytest.mark.parametrize(
    ("kind", "must_match"), [("optional_arg", None), ("overload", False), ("reduction_dim", False), ("values", None)]
)
def test_argument_near_misses_agree_with_inductor(kind, must_match):
    """Each near miss in what the trace does not pin is drawn, and Inductor's matcher (the pattern
    registered with register_replacement, apart from the matcher planted asks) rewrites exactly
    those planted says it may: keyword arguments it ignores (alpha=, dtype=) and other input values
    (must_match=None), never another overload or reduction dim (False)."""
    strategy = planted(
        bias_softmax_pattern,
        BIAS_SOFTMAX_INPUTS,
        context=st.nothing(),
        min_instances=1,
        max_instances=1,
        near_misses=[kind],
    )
    seen = set()

    @settings(max_examples=8, database=None, deadline=None, derandomize=True)
    @given(strategy)
    def check(case):
        (instance,) = case.planted
        seen.add((instance.reason, instance.must_match))
        result = pmverify.check_case(bias_softmax_pass(), case)
        assert result.planted_matched == [instance.must_match is not False], (instance, result.violations)
        assert instance.reason == "optional_arg" or not result.violations, (instance, result.violations)

    check()
    assert (kind, must_match) in seen


def test_examples_inductor_rewrites_an_alpha_its_pattern_omits():
    """Regression (issue 15): Inductor's matcher ignores keyword arguments its pattern does not
    hold, so ``x + y`` registered with ``register_replacement`` also rewrites ``add(x, y,
    alpha=0.5)``, and the replacement drops alpha (as torch.compile's own attention fusion does
    with ``torch.add(scores, mask, alpha=...)``): planted says either is right and the semantics
    oracle reports the dropped argument."""
    strategy = planted(
        two_output_pattern, TWO_INPUTS, context=st.nothing(), min_instances=1, near_misses=["optional_arg"]
    )
    case = minimal(strategy, lambda c: c.planted[0].reason == "optional_arg")
    (instance,) = case.planted
    assert (
        instance.must_match is None
        and instance.detail == "aten.add.Tensor's alpha (keyword): omitted (default 1) -> 0.5"
    )
    (add,) = case.gm.graph.find_nodes(op="call_function", target=torch.ops.aten.add.Tensor)
    assert add.kwargs == {"alpha": 0.5}
    case.inputs[0] = tuple(torch.ones_like(x) for x in case.inputs[0])
    result = pmverify.check_case(inductor_pass("two_output"), case)
    assert result.planted_matched == [True] and {v.oracle for v in result.violations} == {"semantics"}


class AddmmSumPass:
    """A hand-written pass as vLLM-style passes are written: it finds ``(addmm(b, x, w) + r).sum(-1)``
    by target, arity and the dims the pattern pins, and rebuilds it from the positional arguments,
    dropping any alpha=/beta=/dtype= the calls carry; ``strict`` refuses calls with keyword
    arguments instead (the pattern holds none), which makes it correct."""

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.matched_count = 0

    def uuid(self) -> str:
        return f"AddmmSumPass(strict={self.strict})"

    def __call__(self, graph: torch.fx.Graph) -> None:
        aten = torch.ops.aten
        self.matched_count = 0
        for node in list(graph.nodes):
            if node.target is not aten.sum.dim_IntList or len(node.args) != 2 or list(node.args[1]) != [-1]:
                continue
            add = node.args[0]
            if add.target is not aten.add.Tensor or len(add.args) != 2 or len(add.users) != 1:
                continue
            addmm, r = add.args
            if not isinstance(addmm, torch.fx.Node) or addmm.target is not aten.addmm.default or len(addmm.users) != 1:
                continue
            if len(addmm.args) != 3 or (self.strict and (node.kwargs or add.kwargs or addmm.kwargs)):
                continue
            with graph.inserting_before(node):
                fused = graph.call_function(aten.addmm.default, addmm.args)
                total = graph.call_function(
                    aten.sum.dim_IntList, (graph.call_function(aten.add.Tensor, (fused, r)), [-1])
                )
            node.replace_all_uses_with(total)
            for old in (node, add, addmm):
                graph.erase_node(old)
            self.matched_count += 1


def addmm_sum_pattern(b, x, w, r):
    return (torch.addmm(b, x, w) + r).sum(-1)


ADDMM_SUM_INPUTS = like(
    (torch.empty(8), torch.empty(4, 6), torch.empty(6, 8), torch.empty(4, 8)), vary={"tokens": [(1, 0), (3, 0)]}
)


def test_a_hand_written_pass_dropping_arguments_is_caught(finding_only):
    """planted draws calls with alpha=/beta=/dtype= the pattern omits (the optional_arg near miss,
    one of the defaults), which Inductor's matcher would rewrite too: a pass that drops them is a
    semantics (or output dtype) finding; the same pass refusing them is quiet. That one kind alone,
    so that the finding does not hang on how often the draws of one process pick it."""
    strategy = planted(addmm_sum_pattern, ADDMM_SUM_INPUTS, near_misses=("optional_arg",))
    with finding_only(), pytest.raises(pmverify.PassVerificationError) as raised:
        pmverify.verify(AddmmSumPass(), strategy, max_examples=80, seed=0)
    assert {v.oracle for v in raised.value.violations} <= {"semantics", "structure"}
    assert any(p.reason == "optional_arg" for p in raised.value.result.case.planted)
    with finding_only():
        pmverify.verify(AddmmSumPass(strict=True), strategy, max_examples=25, seed=0)


# ------------------------------------------------------------------------------------ arguments


def _pattern(x):
    return x + 1


ARGS = {"pattern": _pattern, "inputs": SPLIT_INPUTS}
BAD = [
    ({"pattern": 3}, "pattern=3"),
    ({"inputs": (torch.ones(2),)}, "inputs="),
    ({"context": "graphs"}, "context='graphs'"),
    ({"min_instances": -1}, "min_instances=-1"),
    ({"max_instances": 1.5}, "max_instances=1.5"),
    ({"min_instances": 3, "max_instances": 2}, "min_instances=3 is larger than max_instances=2"),
    ({"near_misses": ["eps"]}, "near_misses=\\['eps'\\]"),
    ({"near_misses": "constant"}, "near_misses='constant'"),
    ({"trace_fn": 1}, "trace_fn=1"),
    ({"name": 7}, "name=7"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_bad_arguments(kwargs, message):
    args = {**ARGS, **kwargs}
    with pytest.raises(InvalidArgument, match=message):
        planted(args.pop("pattern"), args.pop("inputs"), **args)


def test_untraceable_pattern_is_reported_when_drawing():
    def broken(x):
        raise RuntimeError("boom")

    with pytest.raises(InvalidArgument, match="does not trace"):
        find(planted(broken, SPLIT_INPUTS, min_instances=1), lambda c: True, settings=settings(database=None))


def test_no_op_pattern_is_reported_when_drawing():
    with pytest.raises(InvalidArgument, match="without ops"):
        find(planted(lambda x: x, SPLIT_INPUTS, min_instances=1), lambda c: True, settings=settings(database=None))


def test_examples_replacement_ahead_of_a_late_input():
    """Regression: Inductor inserts a multi-output replacement before the match's first output
    (v's getitem, right after the split), ahead of a weight computed late; direct mode sorts the
    graph afterwards as post_grad does, so the shipped pass is correct there, and the run records
    that the pass left the graph unsorted."""
    from torch._inductor.pattern_matcher import fwd_only

    config = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16)
    found = {r.name: r for r in rewrites(config)}["qk_norm"]
    inputs = tuple(torch.rand_like(x, dtype=torch.float32).to(x.dtype) for x in found.example_inputs)
    gm = fwd_only(found.search_fn, inputs)
    q_weight = list(gm.graph.find_nodes(op="placeholder"))[1]
    (first_use,) = q_weight.users
    with gm.graph.inserting_before(first_use):
        late = gm.graph.call_function(torch.ops.aten.clone.default, (q_weight,))
    first_use.replace_input_with(q_weight, late)
    gm.recompile()
    names = tuple(n.name for n in gm.graph.nodes if n.op == "call_function" and n is not late)
    case = pmverify.GraphCase(
        gm, [inputs], planted=(pmverify.PlantedInstance("qk_norm", names, True),), pass_config=config
    )
    result = pmverify.check_case(QKNormFusionPass, case)
    assert result.pair.resorted
    assert result.ok and result.rewrite_count == 1, result.violations


def test_examples_another_dtype_may_match():
    """Regression: ``register_replacement`` re-traces its search function on the matched inputs,
    so the pattern traced on float16 inputs is matched by a pass registered with bfloat16 example
    inputs; the "dtype" kind is therefore ``must_match=None``, not a near miss."""
    from pmverify._fx import trace
    from pmverify.strategies._near_miss import variants
    from pmverify.strategies._traced import Traced

    args = (torch.rand(2, 8).to(torch.bfloat16), torch.ones(8, dtype=torch.bfloat16))
    base = Traced(trace(rms_pattern, args), args)
    variant = variants(rms_pattern, base, "dtype", None, lambda n: 0)
    assert variant.must_match is None and variant.reason == "dtype"
    assert {a.dtype for a in variant.args} == {torch.float32}  # the first other float dtype
    case = pmverify.GraphCase(
        variant.gm,
        [variant.args],
        planted=(
            pmverify.PlantedInstance(
                "rms", tuple(n.name for n in variant.gm.graph.nodes if n.op == "call_function"), None, "dtype"
            ),
        ),
    )
    assert pmverify.check_case(inductor_pass("rms"), case).ok


# ------------------------------------------------------------------------------------ regressions
# (found by a new user trying to break the strategies)


def matmul_pattern(x, w):
    return torch.relu(x @ w)


def test_examples_a_trace_of_another_structure_may_match():
    """At a contracted size of 1, ``fwd_only`` traces ``x @ w`` as a broadcasting mul: a pass that
    registered the pattern at size 8 cannot match it, so the ground truth says either is right."""
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    example = (torch.empty(4, 8), torch.empty(8, 6))
    matcher = PatternMatcherPass(pass_name="test_matmul")
    register_replacement(matmul_pattern, matmul_pattern, list(example), fwd_only, matcher)
    strategy = planted(matmul_pattern, like(example, vary={"k": [(0, 1), (1, 0)]}), near_misses=False)
    case = minimal(strategy, lambda c: any(p.reason == "trace_differs" for p in c.planted))
    assert case.inputs[0][0].shape[1] == 1
    assert pmverify.check_case(matcher, case).ok

    @settings(max_examples=20, database=None)
    @given(strategy)
    def agrees(case):
        assert pmverify.check_case(matcher, case).ok

    agrees()


def test_examples_bool_outputs_get_a_bool_consumer():
    strategy = planted(lambda x: x > 0.5, like((torch.empty(4, 8),)), min_instances=1, near_misses=False)
    case = minimal(strategy, lambda c: any(n.target is torch.ops.aten.logical_not.default for n in c.gm.graph.nodes))
    _check_valid(case)


def mm_add_pattern(x, w, b):
    return x @ w + b


def test_examples_a_matcher_registered_on_another_structure_does_not_judge():
    """Without example inputs, the matcher planted asks is registered on the first drawn inputs; at
    a contracted size of 1 ``x @ w`` traces as a broadcasting mul, and that matcher cannot match an
    instance traced with ``mm``: a near miss of it is either-is-right, not a near miss it "leaves"."""
    small = (torch.rand(4, 1), torch.rand(1, 6), torch.rand(6))
    big = (torch.rand(4, 8), torch.rand(8, 6), torch.rand(6))
    strategy = planted(
        mm_add_pattern,
        st.sampled_from([small, big]),
        context=st.nothing(),
        min_instances=1,
        max_instances=1,
        near_misses=["optional_arg"],
    )

    def near_miss_at(k):
        return lambda c: c.planted[0].reason == "optional_arg" and c.inputs[0][0].numel() == 4 * k

    assert minimal(strategy, near_miss_at(1)).planted[0].must_match is None  # registered on it: matched
    assert minimal(strategy, near_miss_at(8)).planted[0].must_match is None  # another structure


def test_examples_in_place_patterns_are_refused():
    def in_place(x):
        return x.clone().add_(1)

    with pytest.raises(InvalidArgument, match="traces to in-place ops"):
        find(planted(in_place, SPLIT_INPUTS, min_instances=1), lambda c: True, settings=settings(database=None))


def test_examples_inputs_drawing_something_else():
    with pytest.raises(InvalidArgument, match="inputs drew tensor"):
        find(
            planted(_pattern, st.just(torch.ones(2)), min_instances=1), lambda c: True, settings=settings(database=None)
        )


# ------------------------------------------------------------------------------------ recorded rewrites


@functools.cache
def recorded_qk_norm(config: QKNormConfig) -> dict:
    """The shipped pass's rewrites for ``config`` as ``record_patterns`` records them, by name
    (registered afresh: the pass caches its own registration per config)."""
    from pmverify._registry.record import record_patterns
    from pmverify.fusions.qk_norm.fusion_pass import _pattern_pass

    with record_patterns() as recorded:
        _pattern_pass.__wrapped__(QKNormFusionPass, config)
    return {r.name.removesuffix("_pattern"): r for r in recorded}


QK_CONFIG = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16)


@pytest.mark.parametrize("rewrite", ["rms_norm", "qk_norm", "qk_norm_split3"])
@settings(deadline=None, max_examples=10)
@given(data=st.data())
def test_recorded_rewrite_cases(rewrite, data):
    """planted(recorded): pattern, trace_fn, example inputs and name from the recording; the shipped
    pass and the rewrite's own one-rewrite matcher both agree with the ground truth."""
    recorded = recorded_qk_norm(QK_CONFIG)[rewrite]
    case = data.draw(planted(recorded, pass_config=QK_CONFIG, max_instances=2))
    _check_valid(case)
    assert {p.pattern for p in case.planted} <= {rewrite}
    result = pmverify.check_case(QKNormFusionPass, case)
    # The shipped pass has other rewrites: a split3 near miss that only changes v's split sizes is
    # still q and k norms its q/k-only rewrite may fuse, rightly; the one-rewrite matcher may not.
    may_fuse_qk = {i for i, p in enumerate(case.planted) if rewrite == "qk_norm_split3" and p.reason == "split_sizes"}
    wrong = [v for v in _wrong(result) if v.oracle != "expectations" or not may_fuse_qk]
    assert not wrong, result.violations
    if not may_fuse_qk:
        assert result.rewrite_count == _rewritten(result)
    assert not _wrong(pmverify.check_case(recorded.pattern_pass(), case))


def _tokens(case: pmverify.GraphCase) -> int:
    x = case.inputs[0][0]  # the instance's x, possibly flat (a "view" producer)
    return x.numel() // QK_CONFIG.q_size


def test_recorded_ground_truth_respects_extra_check():
    """max_tokens=2: the rewrite's extra_check rejects 3 or more tokens; such an instance must not
    match (reason "extra_check"), where a plain function's ground truth wrongly says it must."""
    config = dataclasses.replace(QK_CONFIG, max_tokens=2)
    recorded = recorded_qk_norm(config)["rms_norm"]
    # no broadcast forms: _tokens reads x's size (the extra_check refuses a broadcast x[1, 1] too)
    inputs = like(recorded.search_args, vary={"tokens": [(0, 0)]}, max_side=4, broadcast=False)
    kwargs = {"pass_config": config, "context": st.nothing(), "min_instances": 1, "max_instances": 1}
    seen = set()

    @settings(max_examples=20, database=None, deadline=None)
    @given(planted(recorded, inputs, near_misses=False, **kwargs))
    def check(case):
        (instance,) = case.planted
        expected = (True, None) if _tokens(case) <= 2 else (False, "extra_check")
        assert (instance.must_match, instance.reason) == expected
        seen.add(expected)
        result = pmverify.check_case(QKNormFusionPass, case)
        assert result.ok and result.planted_matched == [expected[0]], result.violations

    check()
    assert seen == {(True, None), (False, "extra_check")}
    plain = minimal(planted(recorded.search_fn, inputs, near_misses=False, **kwargs), lambda c: _tokens(c) > 2)
    assert plain.planted[0].must_match is True
    assert "was not rewritten" in str(pmverify.check_case(QKNormFusionPass, plain).violations)


def test_recorded_scalar_workaround_makes_constant_near_misses_optional():
    """eps given through scalar_workaround is a wildcard: Inductor's matcher rewrites an instance
    with another eps, so that near miss is must_match=None; another constant stays a near miss."""
    from torch._inductor import pattern_matcher as pm

    from pmverify._registry.record import record_patterns

    def any_eps(x, w, eps):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w).to(x.dtype)

    sloppy = pm.PatternMatcherPass(pass_name="recorded_sloppy_eps")
    with record_patterns() as recorded:
        pm.register_replacement(
            any_eps, any_eps, list(RMS_EXAMPLE), pm.fwd_only, sloppy, scalar_workaround={"eps": 1e-6}
        )
    strategy = planted(recorded[0], near_misses=["constant"], context=st.nothing(), min_instances=1)
    for outcome in ((None, "constant"), (False, "constant")):  # the first case of each (deterministic)
        case = first(strategy, lambda c, outcome=outcome: outcome in {(p.must_match, p.reason) for p in c.planted})
        assert pmverify.check_case(sloppy, case).ok


def any_eps_pattern(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w * 0.5).to(x.dtype)


@pytest.mark.parametrize("with_eps", [False, True], ids=["example_inputs", "every_argument"])
def test_scalar_workaround_of_a_plain_pattern(with_eps):
    """planted(pattern, inputs, scalar_workaround=...) knows the pass's wildcard: a constant near
    miss of eps is either-is-right (judged by Inductor's matcher for the pattern), one of another
    constant (the 0.5) stays a near miss; eps is drawn around its example value, whether
    inputs draw it (replaced) or not (register_replacement's example_inputs)."""
    from torch._inductor import pattern_matcher as pm

    wildcard = pm.PatternMatcherPass(pass_name="plain_wildcard_eps")
    pm.register_replacement(
        any_eps_pattern, any_eps_pattern, list(RMS_EXAMPLE), pm.fwd_only, wildcard, scalar_workaround={"eps": 1e-6}
    )
    inputs = like((*RMS_EXAMPLE, 1e-6) if with_eps else RMS_EXAMPLE, vary={"tokens": [(0, 0)]})
    strategy = planted(
        any_eps_pattern,
        inputs,
        near_misses=["constant"],
        context=st.nothing(),
        min_instances=1,
        scalar_workaround={"eps": 1e-6},
    )
    seen, eps = set(), set()

    @settings(max_examples=30, database=None, deadline=None, derandomize=True)
    @given(strategy)
    def check(case):
        seen.update((p.must_match, p.reason, "aten.add.Tensor" in (p.detail or "")) for p in case.planted)
        eps.update(n.args[1] for n in case.gm.graph.find_nodes(op="call_function", target=torch.ops.aten.add.Tensor))
        assert pmverify.check_case(wildcard, case).ok  # no false alarm on the correct pass

    check()
    assert {(None, "constant", True), (False, "constant", False), (True, None, False)} <= seen
    assert (False, "constant", True) not in seen
    assert len(eps) > 2 and 1e-6 in eps
    assert minimal(strategy, lambda c: True).planted[0].must_match is True


def test_scalar_workaround_of_a_plain_pattern_finds_a_hard_coded_eps(finding_only):
    """A replacement that ignores its eps argument is wrong at every other eps: found with the
    default arguments once the pass's scalar_workaround is given."""
    from torch._inductor import pattern_matcher as pm

    def hard_coded(x, w, eps):
        return any_eps_pattern(x, w, 1e-6)

    example = (torch.empty(4, 8), torch.empty(8))
    wrong = pm.PatternMatcherPass(pass_name="plain_hard_coded_eps")
    pm.register_replacement(
        any_eps_pattern, hard_coded, list(example), pm.fwd_only, wrong, scalar_workaround={"eps": 1e-6}
    )
    inputs = like(example, vary={"tokens": [(0, 0)]})
    with finding_only(), pytest.raises(pmverify.PassVerificationError, match="semantics"):
        pmverify.verify(wrong, planted(any_eps_pattern, inputs, scalar_workaround={"eps": 1e-6}), seed=0)


WILDCARD_BAD = [
    ({"scalar_workaround": {"epsilon": 1e-6}}, "names 'epsilon', not an argument of pattern"),
    ({"scalar_workaround": {"eps": "small"}}, r"scalar_workaround\['eps'\]='small' must be a finite int or float"),
    ({"scalar_workaround": {"eps": True}}, "must be a finite int or float"),
    ({"scalar_workaround": {"eps": float("inf")}}, "must be a finite int or float"),
    ({"scalar_workaround": {"eps": float("nan")}}, "must be a finite int or float"),
    (
        {"scalar_workaround": {"x": 0.5}, "example_inputs": (*RMS_EXAMPLE, 1e-6)},
        "scalar_workaround names 'x', but example_inputs\\[0\\] is the tensor",
    ),
    ({"exclusive_arg_names": ("x", "x")}, "names an argument twice"),
    ({"scalar_workaround": [("eps", 1e-6)]}, "must be a mapping"),
    ({"scalar_workaround": {"eps": 0.5, "w": 0.5}}, "gives two arguments the same value"),
    ({"exclusive_arg_names": "x"}, "exclusive_arg_names='x' must be a sequence"),
    ({"exclusive_arg_names": ("x", "y")}, "names 'y', not an argument"),
    ({"example_inputs": (torch.empty(4, 8),)}, "holds 1 values; pattern=any_eps_pattern takes 3 arguments"),
    ({"scalar_workaround": None, "example_inputs": (torch.empty(4, 8),) * 2}, "holds 2 values; .* takes 3 arg"),
]


@pytest.mark.parametrize(("kwargs", "message"), WILDCARD_BAD)
def test_bad_wildcard_arguments(kwargs, message):
    kwargs = {"scalar_workaround": {"eps": 1e-6}, **kwargs}
    with pytest.raises(InvalidArgument, match=message):
        planted(any_eps_pattern, RMS_INPUTS, **kwargs)


def test_inputs_of_another_length_than_the_pattern_takes_are_an_error():
    short = like((torch.empty(4, 8),))
    with pytest.raises(InvalidArgument, match="example_inputs=.* holds 1 values; pattern=any_eps_pattern takes 3"):
        planted(any_eps_pattern, short, min_instances=1, scalar_workaround={"eps": 1e-6})
    strategy = planted(any_eps_pattern, short.map(tuple), min_instances=1, scalar_workaround={"eps": 1e-6})
    with pytest.raises(InvalidArgument, match="inputs drew 1 values; the pattern takes 3 arguments"):
        minimal(strategy)


def rms_eps_pattern(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _small_eps(match) -> bool:
    return match.kwargs["eps"] <= 0.1


def _eps(case: pmverify.GraphCase) -> float:
    """The eps literal of the case's one instance."""
    (add,) = case.gm.graph.find_nodes(op="call_function", target=torch.ops.aten.add.Tensor)
    return add.args[1]


def test_recorded_scalar_workaround_varies_by_default():
    """planted(recorded) draws a scalar_workaround argument at other values than its example
    (Inductor matches any); the ground truth follows Inductor's matcher there: must match where the
    extra_check accepts the value, must not where it rejects it."""
    from torch._inductor import pattern_matcher as pm

    from pmverify._registry.record import record_patterns

    eps_pass = pm.PatternMatcherPass(pass_name="recorded_eps")
    with record_patterns() as recorded:
        pm.register_replacement(
            rms_eps_pattern,
            rms_eps_pattern,
            [torch.empty(4, 16), torch.empty(16)],
            pm.fwd_only,
            eps_pass,
            extra_check=_small_eps,
            scalar_workaround={"eps": 1e-6},
        )
    strategy = planted(recorded[0], near_misses=False, context=st.nothing(), min_instances=1, max_instances=1)
    seen = set()

    @settings(max_examples=25, database=None, deadline=None, derandomize=True)
    @given(strategy)
    def check(case):
        (instance,) = case.planted
        eps = _eps(case)
        expected = (True, None) if eps <= 0.1 else (False, "extra_check")
        assert (instance.must_match, instance.reason) == expected, eps
        seen.add((eps, *expected))
        result = pmverify.check_case(eps_pass, case)  # Inductor's matcher, as registered
        assert result.ok and result.planted_matched == [expected[0]], result.violations

    check()
    assert len({eps for eps, *_ in seen}) > 1 and 1e-6 in {eps for eps, *_ in seen}
    assert any(eps != 1e-6 and must for eps, must, _ in seen)  # another eps, still a must-match
    assert any(not must for _, must, _ in seen)
    assert minimal(strategy, lambda c: True).planted[0].must_match is True
    assert _eps(minimal(strategy, lambda c: True)) == 1e-6  # shrinks to the example value


def capped_pattern(x, p):
    if not 0 <= p <= 1:
        raise ValueError(f"p={p} is not a probability")
    return x * p + x


def test_recorded_scalar_workaround_values_that_do_not_trace_fall_back():
    """A drawn scalar_workaround value the search function refuses (p above 1) is put back to the
    example value, not raised; the caller's own inputs draw it too (their value is replaced)."""
    from torch._inductor import pattern_matcher as pm

    from pmverify._registry.record import record_patterns

    with record_patterns(register=False) as recorded:
        pm.register_replacement(
            capped_pattern, capped_pattern, [torch.empty(4, 8)], pm.fwd_only, [], scalar_workaround={"p": 0.25}
        )
    strategy = planted(recorded[0], near_misses=False, context=st.nothing(), min_instances=1, max_instances=1)

    def ps(case):
        (mul,) = case.gm.graph.find_nodes(op="call_function", target=torch.ops.aten.mul.Tensor)
        return {mul.args[1]}

    seen = _seen(strategy, ps, examples=30)
    assert len(seen) > 2 and 0.25 in seen and all(0 <= p <= 1 for p in seen)
    given = planted(recorded[0], st.just((torch.ones(4, 8), 2.0)), context=st.nothing(), min_instances=1)
    assert ps(minimal(given, lambda c: True)) == {0.25}


def test_no_context():
    strategy = planted(rms_pattern, RMS_INPUTS, context=st.nothing(), min_instances=1, max_instances=2)
    assert not _seen(strategy, lambda c: {"context" in c.label}, examples=20) - {False}


RECORDED_BAD = [
    ({"trace_fn": print}, "trace_fn=.* is given by the recorded rewrite"),
    ({"example_inputs": RMS_EXAMPLE}, "example_inputs=.* is given by the recorded rewrite"),
    ({"scalar_workaround": {"x": 1.0}}, "scalar_workaround=.* is given by the recorded rewrite"),
    ({"exclusive_arg_names": ("x",)}, "exclusive_arg_names=.* is given by the recorded rewrite"),
    ({"inputs": (torch.ones(2),)}, "inputs="),
]


@pytest.mark.parametrize(("kwargs", "message"), RECORDED_BAD)
def test_bad_arguments_with_a_recorded_rewrite(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        planted(recorded_qk_norm(QK_CONFIG)["rms_norm"], **kwargs)


def test_bad_arguments_inputs_missing_or_no_context_for_no_instance():
    with pytest.raises(InvalidArgument, match="inputs=None"):
        planted(_pattern)
    with pytest.raises(InvalidArgument, match="min_instances=0 must be at least 1 with context=nothing"):
        planted(_pattern, SPLIT_INPUTS, context=st.nothing())


def test_a_constant_near_miss_moves_an_epsilon_far_enough_to_show():
    # an epsilon doubled (1e-6 -> 2e-6) next to a variance of order 1 changes nothing a tolerance
    # sees: a pass rewriting that near miss with its own epsilon would pass semantics
    from pmverify.strategies._near_miss import moved_constant

    assert moved_constant(1e-6) == 0.5 and moved_constant(-1e-5) == -0.5
    assert moved_constant(0.0) == 1.0
    assert moved_constant(0.125) == 0.25 and moved_constant(0.01) == 0.02  # multipliers doubled
