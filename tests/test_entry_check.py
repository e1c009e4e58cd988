"""check_entry: a graph entry checked alone on instances drawn from its pattern; its statuses
(lowering, undrawable, gated, never fired) and the levers it draws."""

from __future__ import annotations

import pytest
import torch
from hypothesis import Phase, settings
from hypothesis.errors import InvalidArgument
from torch._inductor import config
from torch._inductor.pattern_matcher import (
    Arg,
    CallFunction,
    GraphPatternEntry,
    KeywordArg,
    LoweringPatternEntry,
    PatternMatcherPass,
)

import pmverify
from pmverify._registry.entries import RecordedEntry
from pmverify._rewrites.entry_check import check_entry, enabling_patches

aten = torch.ops.aten

MM_MUL = CallFunction(aten.mul.Tensor, CallFunction(aten.mm.default, Arg(), KeywordArg("w")), KeywordArg("s"))


def _fold_scale(match, *args, **kwargs):
    """A correct handler: mm(x, w) * s -> mm(x, w * s) for a number s (a folding of the scale into
    the weight, as binary folding does)."""
    mul = match.output_node()
    mm = mul.args[0]
    graph = match.graph
    with graph.inserting_before(mm):
        scaled = graph.call_function(aten.mul.Tensor, (mm.args[1], kwargs["s"]))
        folded = graph.call_function(aten.mm.default, (mm.args[0], scaled))
    scaled.meta["val"] = mm.args[1].meta["val"] * kwargs["s"]
    folded.meta["val"] = mul.meta["val"]
    mul.replace_all_uses_with(folded)
    graph.erase_node(mul)
    graph.erase_node(mm)


def _scale_is_number(match):
    """A number scale, on a float32 weight: a bfloat16 or float16 weight times ``s`` is rounded to its
    dtype, less accurate than scaling the product (what pmverify reports; Inductor's binary folding
    folds a low-precision weight only where the result is cast to float32 after)."""
    return isinstance(match.kwargs["s"], (int, float)) and match.kwargs["w"].meta["val"].dtype == torch.float32


def _weight_is_frozen(match):
    """Accepts only a weight that is a constant (as freezing makes parameters) and a number scale."""
    return match.kwargs["w"].op == "get_attr" and _scale_is_number(match)


def _entry(extra_check=_scale_is_number, kind="graph", config_options=()):
    cls = LoweringPatternEntry if kind == "lowering" else GraphPatternEntry
    entry = cls(pattern=MM_MUL, extra_check=extra_check, handler=_fold_scale)
    return RecordedEntry(kind, entry, "test.pass", "test", "fold_scale", config=tuple(config_options))


def test_a_correct_handler_is_quiet_and_counted():
    result = check_entry(_entry(), max_examples=20, seed=0)
    assert isinstance(result, pmverify.EntryResult)
    assert result.examples >= 20 and 0 < result.rewritten_cases <= result.examples
    assert result.outcomes.get("matched", 0) + result.outcomes.get("matched, optional_arg", 0) >= 1
    assert result.levers is None


def test_an_extra_check_wanting_frozen_weights_is_searched_with_them():
    """The first search draws placeholders mostly; the gate names frozen parameters, which pmverify
    can draw, so the second search gives every tensor after the first as a constant and fires."""
    result = check_entry(_entry(_weight_is_frozen), max_examples=10, seed=1)
    assert result.rewritten_cases > 0


def test_a_config_gate_is_searched_with_the_option_set():
    def wants_flag(match):
        return bool(config.enable_linear_binary_folding) and _scale_is_number(match)

    assert not config.enable_linear_binary_folding
    result = check_entry(_entry(wants_flag), max_examples=10, seed=0)
    assert result.rewritten_cases > 0 and "enable_linear_binary_folding" in result.levers
    assert not config.enable_linear_binary_folding  # restored


def _drop_scale(match, *args, **kwargs):
    """A wrong handler: mm(x, w) * s -> mm(x, w), the scale dropped."""
    mul = match.output_node()
    mul.replace_all_uses_with(mul.args[0])
    match.graph.erase_node(mul)


def test_a_finding_under_a_config_lever_has_a_reproducer_that_sets_it(tmp_path):
    """The reproducer replays the options the search set: without the lever its pass never fires
    and the script exits 0 (binary folding's linear rows, which want
    config.enable_linear_binary_folding)."""

    def wants_flag(match):
        return bool(config.enable_linear_binary_folding) and _scale_is_number(match)

    entry = RecordedEntry(
        "graph",
        GraphPatternEntry(pattern=MM_MUL, extra_check=wants_flag, handler=_drop_scale),
        "test.pass",
        "test",
        "drop_scale",
    )
    no_shrinking = settings(phases=(Phase.explicit, Phase.generate))
    with pytest.raises(pmverify.PassVerificationError) as info:
        check_entry(entry, max_examples=30, seed=0, repro_dir=tmp_path, settings=no_shrinking)
    script = info.value.reproducer.read_text()
    assert "torch._inductor.config.enable_linear_binary_folding = True" in script
    assert not config.enable_linear_binary_folding  # restored


def test_never_fired_without_a_gate_is_unsatisfiable_not_a_finding():
    with pytest.raises(pmverify.RewriteUnsatisfiable, match="never fired") as info:
        check_entry(_entry(lambda match: False), max_examples=5, seed=0)
    assert "extra_check accepts" in info.value.condition


def test_a_pattern_calling_mkldnn_ops_is_not_drawn():
    pattern = CallFunction(torch.ops.aten.mkldnn_rnn_layer.default, *(Arg() for _ in range(16)))
    entry = RecordedEntry(
        "graph", GraphPatternEntry(pattern=pattern, extra_check=_scale_is_number, handler=_fold_scale), "p", "t", "rnn"
    )
    with pytest.raises(pmverify.RewriteUnsatisfiable, match="trusts its arguments"):
        check_entry(entry)


def test_check_entry_refuses_what_is_not_an_entry():
    with pytest.raises(InvalidArgument, match="entry="):
        check_entry(object())


def test_the_options_that_enable_a_pass_are_set():
    patches = enabling_patches(
        ("pattern_matcher", "freezing", "pre_grad_fusion_options['split_cat_to_slices_pass']", "not fallback_random")
    )
    assert patches["pattern_matcher"] is True and patches["freezing"] is True
    assert patches["fallback_random"] is False
    assert patches["pre_grad_fusion_options"]["split_cat_to_slices_pass"] == {}


def test_an_entry_of_a_pass_gated_on_its_options_runs_with_them():
    """split_cat's handlers read their pass's options from config.pre_grad_fusion_options: the
    entry's pass options are set while it is checked (a KeyError otherwise)."""
    seen = []

    def reads_options(match):
        seen.append(dict(config.pre_grad_fusion_options))
        return _scale_is_number(match)

    entry = _entry(reads_options, config_options=("pre_grad_fusion_options['my_pass']",))
    check_entry(entry, max_examples=3, seed=0)
    assert seen and all("my_pass" in options for options in seen)
    assert "my_pass" not in config.pre_grad_fusion_options


def test_the_pass_holding_the_entry_alone_is_cached():
    entry = _entry()
    assert entry.pattern_pass() is entry.pattern_pass()
    assert isinstance(entry.pattern_pass(), PatternMatcherPass)


def test_a_pattern_whose_drawn_calls_rarely_run_is_unsatisfiable_not_an_error():
    """aten._weight_int8pack_mm wants an int8 weight and per-channel scales of its rows: the drawn
    calls are rejected, which is pmverify's limit, said as such."""
    pattern = CallFunction(aten._weight_int8pack_mm.default, Arg(), Arg(), Arg())
    entry = RecordedEntry(
        "graph",
        GraphPatternEntry(pattern=pattern, extra_check=lambda m: True, handler=_fold_scale),
        "p",
        "t",
        "int8pack",
    )
    with pytest.raises(pmverify.RewriteUnsatisfiable, match="rejected too often"):
        check_entry(entry, max_examples=5, seed=0)


def test_dynamic_instances_hold_symbolic_sizes_and_a_correct_handler_stays_quiet():
    symbolic = []

    def saw(result):
        symbolic.append(bool(result.case.symbols))

    result = check_entry(_entry(), max_examples=20, seed=0, dynamic=True, on_result=saw)
    assert result.rewritten_cases > 0 and any(symbolic)
    with pytest.raises(InvalidArgument, match="dynamic='rows'"):
        check_entry(_entry(), max_examples=2, dynamic="rows")
