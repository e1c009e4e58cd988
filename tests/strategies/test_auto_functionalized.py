"""with_mutating_custom_ops and the pmverify_testing ops: drawn cases run, lint and re-propagate
and hold auto_functionalized nodes as post-grad graphs do; planted instances stay intact; the
ground truth agrees with is_mutation_op and the shipped pass; every feature is drawn; the minimal
case; registration is idempotent; reproducers rebuild the graphs; bad arguments."""

from __future__ import annotations

import importlib.util
import operator
import re
import sys

import pytest
import torch
from _minimal import minimal
from _mutation_checks import base_cases, check_ground_truth, check_runs, first, placements_of
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch._inductor.pattern_matcher import is_mutation_op

import pmverify
from pmverify._findings import reproducer as _reproducer
from pmverify.fusions.qk_norm import QKNormFusionPass
from pmverify.fusions.qk_norm.testing import qk_norm_cases
from pmverify.strategies import _custom_ops
from pmverify.strategies._auto_functionalized import _Call, _snippet, with_mutating_custom_ops
from pmverify.strategies._custom_ops import CUSTOM_OPS

aten = torch.ops.aten
V1 = torch.ops.higher_order.auto_functionalized
V2 = torch.ops.higher_order.auto_functionalized_v2
_SCATTERS = (aten.slice_scatter.default, aten.select_scatter.default, aten.as_strided_scatter.default)


def _nodes(case, target):
    return [node for node in case.gm.graph.nodes if node.target is target]


def _hops(case):
    return _nodes(case, V1) + _nodes(case, V2)


def _check_functional(case, original=None):
    """Runs, ground truth holds, and the graph has the post-grad form: each auto_functionalized
    node has only live getitem users indexing its tuple with the element's shape; v2 nodes name a
    base per mutated arg; each mutated input gets one copy_; only copy_ is a mutation op."""
    check_runs(case)
    check_ground_truth(case)
    assert case.mutations and _hops(case)
    for hop in _hops(case):
        assert not is_mutation_op(hop)
        elements = hop.meta["val"]
        assert hop.users and all(user.target is operator.getitem for user in hop.users)
        indices = [user.args[1] for user in hop.users]
        assert len(set(indices)) == len(indices)
        for user in hop.users:
            assert user.users, "no dead getitem (post-grad graphs are dead-code eliminated)"
            assert not is_mutation_op(user)
            assert user.meta["val"].shape == elements[user.args[1]].shape
        schema = hop.args[0]._schema
        mutated = [arg.name for arg in schema.arguments if arg.alias_info is not None and arg.alias_info.is_write]
        if hop.target is V2:
            assert all(f"_{name}_base_index" in hop.kwargs for name in mutated)
            assert len(hop.kwargs["_all_bases"]) == len(mutated)
        else:
            assert all(name in hop.kwargs for name in mutated)
    copies = _nodes(case, aten.copy_.default)
    assert all(is_mutation_op(node) and node.args[0].op == "placeholder" for node in copies)
    written = [node.args[0].name for node in copies]
    assert len(written) == len(set(written)), "one copy_ per mutated input"
    hop_sites = [site for site in case.mutations if site.target.startswith("auto_functionalized")]
    placeholders = {node.name for node in case.gm.graph.find_nodes(op="placeholder")}
    assert {s.mutated for s in hop_sites if s.mutated in placeholders} == set(written)
    if original is not None:  # planted instances are never rewired
        before = {node.name: node for node in original.gm.graph.nodes}
        after = {node.name: node for node in case.gm.graph.nodes}
        for instance in original.planted:
            for name in instance.nodes:
                old, new = before[name], after[name]
                assert new.target is old.target
                names = torch.fx.node.map_arg((old.args, old.kwargs), lambda n: n.name)
                assert torch.fx.node.map_arg((new.args, new.kwargs), lambda n: n.name) == names, name


@given(st.data())
def test_drawn_cases_are_valid(data):
    case = data.draw(qk_norm_cases(), label="case")
    extended = data.draw(with_mutating_custom_ops(st.just(case)), label="with custom ops")
    _check_functional(extended, case)
    assert extended.form == "functional" and 1 <= len(_hops(extended)) <= 2
    assert [p.nodes for p in extended.planted] == [p.nodes for p in case.planted]


def _op_of(hop):
    return hop.args[0]._schema.name.split("::")[1]


def _early_copy(case):
    nodes = list(case.gm.graph.nodes)
    return any(
        node.target is aten.copy_.default
        and any(later.op != "output" and later.target is not aten.copy_.default for later in nodes[i + 1 :])
        for i, node in enumerate(nodes)
    )


def _trailing_copy(case):
    nodes = list(case.gm.graph.nodes)
    return nodes[-2].target is aten.copy_.default


def _cloned_out(case):
    """An op writing ``out = clone(x)`` of the very ``x`` it reads (``y = x.clone(); op(x, out=y)``)."""
    for hop in _hops(case):
        if hop.target is V1:
            out = hop.kwargs.get("out")
        elif "_out_base_index" in hop.kwargs:
            out = hop.kwargs["_all_bases"][hop.kwargs["_out_base_index"]]
        else:
            continue
        if out is not None and out.target is aten.clone.default and out.args[0] is hop.kwargs.get("x"):
            return True
    return False


def _swappable(case):
    for hop in _nodes(case, V2):
        vals = [(tuple(u.meta["val"].shape), u.meta["val"].dtype) for u in hop.users]
        if len(vals) != len(set(vals)):
            return True
    return False


_BOTH, _V1, _V2 = (1, 2), (1,), (2,)
#: feature -> (versions drawn, condition); one version where the feature needs it, so that the
#: first drawn case with it comes early.
_FEATURES = {
    "v1 node": (_BOTH, lambda c: _nodes(c, V1)),
    "v2 node": (_BOTH, lambda c: _nodes(c, V2)),
    **{f"op {spec.name}": (_BOTH, lambda c, n=spec.name: any(_op_of(h) == n for h in _hops(c))) for spec in CUSTOM_OPS},
    "v1 out= kwarg": (_V1, lambda c: any("out" in h.kwargs for h in _nodes(c, V1))),
    "v2 _out_base_index": (_V2, lambda c: any("_out_base_index" in h.kwargs for h in _nodes(c, V2))),
    "v2 slice view": (_V2, lambda c: any(k.endswith("_slice_dim") for h in _nodes(c, V2) for k in h.kwargs)),
    "v2 as_strided view": (_V2, lambda c: any(k.endswith("_storage_offset") for h in _nodes(c, V2) for k in h.kwargs)),
    "v1 view scattered back": (_V1, lambda c: any(n.target in _SCATTERS for n in c.gm.graph.nodes)),
    "trailing copy_": (_BOTH, _trailing_copy),
    "early copy_": (_BOTH, _early_copy),
    "buffer mutated": (
        _BOTH,
        lambda c: any(n.name == s.mutated and n.op == "call_function" for s in c.mutations for n in c.gm.graph.nodes),
    ),
    **{
        f"{p} an instance": (_BOTH, lambda c, p=p: p in placements_of(c, [h.name for h in _hops(c)]))
        for p in ("before", "inside", "after")
    },
    "copy_ inside an instance: mutation_inside": (
        _BOTH,
        lambda c: any(p.reason == "mutation_inside" for p in c.planted),
    ),
    "v2 elements of one shape (swappable)": (_V2, _swappable),
    "out=clone(x) of the x the op reads": (_BOTH, _cloned_out),
}


@pytest.mark.parametrize("feature", sorted(_FEATURES))
def test_each_feature_is_drawn(feature):
    versions, condition = _FEATURES[feature]
    _check_functional(first(with_mutating_custom_ops(base_cases(), versions=versions), condition))


@settings(max_examples=10)
@given(with_mutating_custom_ops(base_cases(), write_backs="end"))
def test_write_backs_at_the_end_only_when_asked(case):
    """AOTAutograd's form: every ``copy_`` into an input in the graph's epilogue, in input order."""
    nodes = [n for n in case.gm.graph.nodes if n.op != "output"]
    copies = [i for i, n in enumerate(nodes) if n.target is aten.copy_.default]
    assert not _early_copy(case) and copies == list(range(len(nodes) - len(copies), len(nodes)))
    order = {n: i for i, n in enumerate(case.gm.graph.find_nodes(op="placeholder"))}
    assert [order[nodes[i].args[0]] for i in copies] == sorted(order[nodes[i].args[0]] for i in copies)
    assert "write_backs='end'" in repr(with_mutating_custom_ops(base_cases(), write_backs="end"))


@given(with_mutating_custom_ops(qk_norm_cases(max_instances=3)))
def test_shipped_pass_meets_the_ground_truth(case):
    result = pmverify.check_case(QKNormFusionPass, case)
    assert result.ok, result.violations
    assert result.rewrite_count == case.expected_matches


def test_minimal_case_is_one_v1_op_on_an_input_copied_at_the_end():
    case = minimal(with_mutating_custom_ops(qk_norm_cases()))
    (hop,) = _hops(case)
    assert hop.target is V1 and _op_of(hop) == CUSTOM_OPS[0].name
    (copy,) = _nodes(case, aten.copy_.default)
    assert copy.args[0].op == "placeholder" and _trailing_copy(case)
    assert placements_of(case, [hop.name]) == {"before"}
    assert minimal(with_mutating_custom_ops(qk_norm_cases(), versions=[2, 1])).gm.graph.find_nodes(
        op="call_function", target=V2
    )


@pytest.mark.parametrize("version", [1, 2])
def test_is_mutation_op_on_each_inserted_node_kind(version):
    """What Inductor's pattern matcher calls a mutation, on the exact nodes functionalization makes:
    the auto_functionalized node is not one, even with a mutated arg named ``out`` (v1 keeps the
    ``out=`` kwarg but is excluded by type; v2 turns it into ``_out_base_index``)."""
    layout = ((3, 4), (4, 1), torch.float32)
    view = ((3, 2), (2, 1), torch.float32)  # the operand x has the shape of the sliced out
    snippet = _snippet(_Call("tanh_out", version, (layout,), (view,), ("slice", 1, 0, 2), ()))
    kinds = {}
    for node in snippet.graph.nodes:
        if node.op == "call_function":
            kinds.setdefault(str(node.target), set()).add(is_mutation_op(node))
    hop = next(n for n in snippet.graph.nodes if n.target in (V1, V2))
    assert ("out" in hop.kwargs) == (version == 1) and ("_out_base_index" in hop.kwargs) == (version == 2)
    assert kinds.pop(str(hop.target)) == {False}
    assert all(marks == {False} for marks in kinds.values()), kinds  # getitem, slice, slice_scatter
    assert is_mutation_op(snippet.graph.create_node("call_function", aten.copy_.default, (hop, hop)))


def test_ops_compute_what_they_document():
    x, y, c = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 0.5]), torch.tensor([3.0, 1.0])
    a = x.clone()
    torch.testing.assert_close(torch.ops.pmverify_testing.add_into(a, y), torch.tanh(x + y))
    torch.testing.assert_close(a, x + y)
    a, b = x.clone(), y.clone()
    assert torch.ops.pmverify_testing.scale_shift(a, b, 2.0) is None
    torch.testing.assert_close((a, b), (x * 2 + 0.5, y + 2))
    a, b, cc = x.clone(), y.clone(), c.clone()
    torch.ops.pmverify_testing.mix3(a, b, cc)
    torch.testing.assert_close((a, b, cc), (x + y, y - c, torch.tanh(x)))
    out = torch.empty(2)
    torch.ops.pmverify_testing.tanh_out(x, out=out)
    torch.testing.assert_close(out, torch.tanh(x))
    with pytest.raises(ValueError, match="every tensor must be"):
        torch.ops.pmverify_testing.add_into(x.clone(), torch.ones(3))


_ORDER_DEPENDENT = {
    "reverse_into": lambda x: x.flip(0),
    "roll_into": lambda x: x.roll(1, 0),
    "cummean_into": lambda x: x.cumsum(0) / torch.arange(1, x.shape[0] + 1).view(-1, *[1] * (x.dim() - 1)),
    "transpose_into": lambda x: x.t(),
}


@pytest.mark.parametrize("name", sorted(_ORDER_DEPENDENT))
def test_order_dependent_ops_compute_what_they_document_and_otherwise_in_place(name):
    """Into a fresh ``out`` the documented values; on aliased arguments ``op(x, out=x)`` others (a row
    read after it was written), still in [-2, 2]; ``torch.library.opcheck`` passes (schema, fake,
    autograd registration, AOT dispatch)."""
    spec = next(s for s in CUSTOM_OPS if s.name == name)
    assert spec.order_dependent and spec.mutated == ("out",)
    x = torch.rand(4, 4, generator=torch.Generator().manual_seed(0)) * 4 - 2
    out = torch.empty_like(x)
    getattr(torch.ops.pmverify_testing, name)(x, out)
    torch.testing.assert_close(out, _ORDER_DEPENDENT[name](x))
    aliased = x.clone()
    getattr(torch.ops.pmverify_testing, name)(aliased, aliased)
    assert not torch.allclose(aliased, out) and aliased.abs().max() <= 2
    torch.library.opcheck(_custom_ops.op(name), (x, torch.empty_like(x)))
    if spec.shapes == "square":
        assert spec.takes((3, 3)) and not spec.takes((3, 4)) and not spec.takes((3,))
        with pytest.raises(ValueError, match="square 2-d"):
            getattr(torch.ops.pmverify_testing, name)(torch.ones(2, 3), torch.ones(2, 3))
    else:
        assert spec.takes((3,)) and spec.takes((2, 3, 4)) and not spec.takes(())


def test_registration_is_idempotent(monkeypatch):
    _custom_ops.register()
    _custom_ops.register()
    importlib.import_module("pmverify.strategies._custom_ops")
    # Another module registering the same ops (a copy of this one, run under another name).
    spec = importlib.util.spec_from_file_location("pmverify_custom_ops_copy", _custom_ops.__file__)
    copy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, copy)
    spec.loader.exec_module(copy)
    copy.register()
    assert copy.op("mix3") is _custom_ops.op("mix3") is torch.ops.pmverify_testing.mix3.default
    a = torch.zeros(2)
    torch.ops.pmverify_testing.add_into(a, torch.ones(2))
    assert a.tolist() == [1.0, 1.0]


def test_reproducer_rebuilds_auto_functionalized_graphs():
    case = first(with_mutating_custom_ops(qk_norm_cases()), lambda c: _nodes(c, V1) and _nodes(c, V2))
    source = _reproducer.render(case, QKNormFusionPass(case.pass_config))
    assert "import pmverify.strategies  # registers torch.ops.pmverify_testing" in source
    assert not re.search(r"^\s*(from|import) pmverify\S*\._", source, re.M)  # pmverify's public names only
    namespace = {"__name__": "reproducer"}
    exec(compile(source, "reproducer", "exec"), namespace)  # noqa: S102 - our own generated script
    assert namespace["CASE"].gm.code == case.gm.code
    check_runs(namespace["CASE"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cases": None}, "cases=None"),
        ({"cases": qk_norm_cases}, "cases="),
        ({"versions": ()}, r"versions=\(\) is empty"),
        ({"versions": (3,)}, "versions=.3,. holds 3"),
        ({"versions": (1, 3)}, "holds 3"),
        ({"versions": 2}, "versions=2 must be a sequence"),
        ({"versions": "12"}, "versions='12' must be a sequence"),
        ({"versions": (True,)}, "holds True"),
        ({"versions": (1.0,)}, "holds 1.0"),
        ({"versions": None}, "versions=None"),
        ({"write_backs": "early"}, "write_backs='early' must be one of"),
        ({"write_backs": None}, "write_backs=None must be one of"),
    ],
)
def test_bad_arguments(kwargs, message):
    args = {"cases": qk_norm_cases(), **kwargs}
    cases = args.pop("cases")
    with pytest.raises(InvalidArgument, match=message):
        with_mutating_custom_ops(cases, **args)


# Regressions found by a new user trying to break the strategies.


def _view_to_copy(graph):
    """A correct rewrite of a view into a copy: fine in a functional (post-grad) graph."""
    for node in list(graph.nodes):
        if node.target is torch.ops.aten.permute.default:
            with graph.inserting_after(node):
                copy = graph.call_function(torch.ops.aten.clone.default, (node,))
            node.replace_all_uses_with(copy, delete_user_cb=lambda user, copy=copy: user is not copy)


def test_examples_no_output_aliases_an_input_written_later():
    """AOTAutograd never returns a view of an input it copies into, nor reads such a view after an
    early copy_; a pass that turns the view into a copy is correct and must not be flagged."""
    from pmverify.strategies import like, planted

    strategy = with_mutating_custom_ops(
        planted(lambda x: x.t(), like((torch.empty(4, 6),)), min_instances=1, max_instances=1, near_misses=False)
    )

    @settings(max_examples=60, database=None)
    @given(strategy)
    def check(case):
        result = pmverify.check_case(_view_to_copy, case, oracles=["semantics", "structure"])
        assert result.ok, result.violations

    check()


def test_examples_drawn_values_are_checked():
    with pytest.raises(InvalidArgument, match="cases drew 1"):
        minimal(with_mutating_custom_ops(st.just(1)))
