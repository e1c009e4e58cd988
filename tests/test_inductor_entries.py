"""``record_inductor(kinds=)``: every entry of Inductor's pattern passes (replacement, graph, lowering),
each with its pass, its config and a name unique within its module; ``inductor_entry``; the naming
helpers of :mod:`pmverify._registry.inductor_passes`. One recording per module (the lookups' own)."""

import collections
import types

import pytest
import torch
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify._registry.entries import KINDS
from pmverify._registry.inductor_passes import entry_labels, pass_config, root_ops


@pytest.fixture(scope="module")
def entries():
    from pmverify._rewrites.inductor_rewrites import _recorded

    return list(_recorded().values())  # what inductor_entry / inductor_rewrite look up: recorded once a process


def test_every_kind_is_recorded_kind_by_kind_each_named_once(entries):
    kinds = [entry.kind for entry in entries]
    assert set(kinds) == set(KINDS)
    assert kinds == sorted(kinds, key=KINDS.index)  # kind by kind, in KINDS' order
    labels = [(entry.module, entry.name) for entry in entries]
    assert len(set(labels)) == len(labels)
    assert len({id(entry.entry) for entry in entries if entry.entry is not None}) == sum(
        entry.entry is not None for entry in entries
    )  # an entry registered under several targets is one entry


def test_each_entry_names_its_pass_and_the_config_that_enables_it(entries):
    from torch._inductor.pattern_matcher import GraphPatternEntry, LoweringPatternEntry, ReplacementPatternEntry

    types_ = {"replacement": ReplacementPatternEntry, "graph": GraphPatternEntry, "lowering": LoweringPatternEntry}
    for entry in entries:
        assert entry.config and "?" not in entry.config, entry
        if entry.entry is not None:
            assert type(entry.entry) is types_[entry.kind]
    by_label = {entry.label: entry for entry in entries}
    # registered at import time (joint_graph's, split_cat's pre-grad passes, post_grad's lowerings)
    view = by_label["joint_graph/pointless_view"]
    assert (view.kind, view.pass_name, view.config) == ("graph", "joint_graph.early_patterns", ("pattern_matcher",))
    assert view.torch_pass == (None, "joint_graph_passes")
    split = by_label["split_cat/normalize_split_default[split]"]
    assert split.pass_name == "split_cat.PRE_GRAD_PATTERNS['normalization_pass']"  # not pre_grad's import of it
    assert split.config == ("pattern_matcher", "pre_grad_fusion_options['normalization_pass']")
    assert split.torch_pass == ("normalization_pass", None)
    assert by_label["split_cat/normalize_split_default[Tensor.split]"].entry is not split.entry
    assert by_label["joint_graph/pointless_convert"].pass_name == "joint_graph.patterns"  # not pass_patterns[0]
    assert by_label["b2b_gemm/b2b_gemm_handler"].config == ("pattern_matcher", "b2b_gemm_pass")
    assert by_label["replace_random/replace_randint"].config == ("not fallback_random",)
    lowering = by_label["post_grad/cat_splitwithsizes_replace"]
    assert (lowering.kind, lowering.pass_name) == ("lowering", "post_grad.pass_patterns[2]")
    # registered by the lazy initialisers: freezing's binary folding, one handler for 20 patterns
    folding = [e for e in entries if e.module == "binary_folding"]
    assert {e.pass_name for e in folding} == {"freezing_patterns.binary_folding_pass"}
    assert all(e.name.startswith("binary_folding_init.folded_op[") for e in folding)
    assert {e.config for e in folding} == {("freezing",)}
    if torch.__version__.startswith("2.13."):
        assert len(folding) == 20


def test_replacements_keep_their_rewrite_and_names(entries):
    replacements = [entry for entry in entries if entry.kind == "replacement"]
    for entry in replacements:
        assert (entry.module, entry.duplicate) == (entry.rewrite.module, entry.rewrite.duplicate)
        assert (entry.entry is None) == entry.duplicate
        if entry.entry is not None:
            assert entry.pattern is entry.rewrite.result  # the entry holding the pattern it registered
    sdpa = pmverify.inductor_entry("fuse_attention", "_sfdp_pattern_1_inference")
    assert sdpa.rewrite is pmverify.inductor_rewrite("fuse_attention", "_sfdp_pattern_1_inference")
    assert sdpa.pass_name == "joint_graph.patterns" and sdpa.config == ("pattern_matcher",)


def test_inductor_entry_looks_an_entry_up_and_names_close_ones():
    view = pmverify.inductor_entry("joint_graph", "pointless_view")
    assert view is pmverify.inductor_entry("joint_graph", "pointless_view")
    assert view.handler.__name__ == "pointless_view"
    isolated = view.pattern_pass()
    assert [e for entries in isolated.patterns.values() for e in entries] == [view.entry]
    with pytest.raises(LookupError, match="pointless_view"):
        pmverify.inductor_entry("joint_graph", "pointless_veiw")
    with pytest.raises(LookupError, match="joint_graph"):
        pmverify.inductor_entry("joint_graf", "pointless_view")
    with pytest.raises(LookupError, match="not one of .* fuse_attention"):
        pmverify.inductor_rewrite("joint_graph", "pointless_view")  # a graph entry, not a rewrite


@pytest.mark.parametrize("kinds", [("graph", "scheduler"), "graph", ()])
def test_bad_kinds_are_refused(kinds):
    with pytest.raises(InvalidArgument, match="kinds"):
        pmverify.record_inductor(kinds=kinds)


@pytest.mark.parametrize(
    ("pass_name", "config"),
    [
        ("post_grad.pass_patterns[1]", ("pattern_matcher",)),
        ("freezing_patterns.pass_patterns[4]", ("freezing",)),
        (
            "split_cat.POST_GRAD_PATTERNS['decompose_mm_pass']",
            ("pattern_matcher", "post_grad_fusion_options['decompose_mm_pass']"),
        ),
        ("reduced_atomic_contention.partitioned_scatter_patterns", ("pattern_matcher", "partitioned_scatter_enabled")),
    ],
)
def test_pass_config_examples(pass_name, config):
    assert pass_config(pass_name) == config


def test_a_pass_of_unknown_config_is_refused():
    with pytest.raises(LookupError, match="mystery.patterns"):
        pass_config("mystery.patterns")
    with pytest.raises(LookupError):
        pass_config("joint_graph.patterns[0]")  # an index of what is no list


def _pattern(*fns):
    return types.SimpleNamespace(fns=list(fns))


def _handler_a(match):
    pass


def _handler_b(match):
    pass


def test_root_ops_name_the_root_targets_shortly():
    aten = torch.ops.aten
    assert root_ops(_pattern(aten.add.Tensor, aten.sub.Tensor)) == "add.Tensor/sub.Tensor"
    packet = aten.div
    assert root_ops(_pattern(packet, *(getattr(packet, o) for o in packet.overloads()))) == "div"
    assert root_ops(_pattern("split")) == "Tensor.split"
    assert root_ops(types.SimpleNamespace(outputs=[_pattern(torch.split)])) == "split"
    assert root_ops(types.SimpleNamespace()) == "?"


def test_entry_labels_add_root_ops_then_numbers_only_where_shared():
    aten = torch.ops.aten

    def entry(handler, fn):
        return types.SimpleNamespace(handler=handler, pattern=_pattern(fn))

    entries = [
        entry(_handler_a, aten.add.Tensor),
        entry(_handler_b, aten.add.Tensor),
        entry(_handler_b, aten.mul.Tensor),
        entry(_handler_b, aten.add.Tensor),
    ]
    module = __name__.rsplit(".", 1)[-1]
    assert entry_labels(entries) == [
        (module, "_handler_a"),
        (module, "_handler_b[add.Tensor]#1"),
        (module, "_handler_b[mul.Tensor]"),
        (module, "_handler_b[add.Tensor]#2"),
    ]
    # a label a replacement has is given the root ops, so that a pair names one entry of any kind
    assert entry_labels(entries[:1], taken={(module, "_handler_a")}) == [(module, "_handler_a[add.Tensor]")]
    # a label depends only on the entries of its handler
    assert entry_labels(entries[1:]) == entry_labels(entries)[1:]


def test_counts_at_torch_2_13(entries):
    if not torch.__version__.startswith("2.13."):
        pytest.skip("the figures were read at torch 2.13")
    kinds = collections.Counter(entry.kind for entry in entries)
    assert kinds == {"replacement": 149, "graph": 273, "lowering": 128}
    assert sum(entry.duplicate for entry in entries) == 19
    modules = collections.Counter(entry.module for entry in entries if entry.kind == "graph")
    assert modules["quantization"] == 175 and modules["split_cat"] == 37 and modules["joint_graph"] == 13
