"""record_patterns(): captures register_replacement calls however a pass imports it, still registers
them, restores everything on exit (also on an exception), nests; RecordedRewrite's repr, its
search_args and its one-rewrite pass."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from torch._inductor import pattern_matcher as pm

from pmverify._registry.record import (
    RecordedRewrite,
    _recording_register_replacement,
    original_register_replacement,
    record_patterns,
)
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.fusion_pass import _pattern_pass
from pmverify.fusions.qk_norm.patterns import rewrites

ORIGINAL = pm.register_replacement


def _patched() -> list[str]:
    """Modules still holding record_patterns' stand-in for register_replacement."""
    return [
        name
        for name, module in list(sys.modules.items())
        if getattr(module, "__dict__", {}).get("register_replacement") is _recording_register_replacement
    ]


@pytest.fixture(autouse=True)
def _restored():
    yield
    assert pm.register_replacement is ORIGINAL
    assert not _patched()


def test_records_the_shipped_pass_rewrites():
    # A config no other test builds: QKNormFusionPass registers once per (class, config), lazily.
    config = QKNormConfig(q_size=8, kv_size=4, eps=3.25e-6, dtype=torch.bfloat16)
    with record_patterns() as recorded:
        fusion = QKNormFusionPass(config)
        assert recorded == []  # lazy: nothing registered at construction
        patterns = fusion.patterns
    assert [r.name for r in recorded] == [
        "qk_norm_pattern",
        "qk_norm_split3_pattern",
        "qk_norm_split_qk_pattern",
        "rms_norm_pattern",
    ]
    expected = {r.search_fn.__name__: r for r in rewrites(config)}
    for record in recorded:
        assert isinstance(record, RecordedRewrite)
        assert record.trace_fn is pm.fwd_only
        assert record.pass_dicts is patterns
        assert record.result  # registered: the pass works
        assert record.has_extra_check
        assert record.extra_check.__name__ == ("rms_check" if record.name == "rms_norm_pattern" else "qkv_check")
        shapes = [(tuple(t.shape), t.dtype) for t in record.example_inputs]
        assert shapes == [(tuple(t.shape), t.dtype) for t in expected[record.name].example_inputs]
        assert record.search_args == record.example_inputs
    assert len(patterns.patterns) > 0
    text = repr(recorded[0])
    assert text.startswith("RecordedRewrite(rewrites.<locals>.qk_norm_pattern -> rewrites.<locals>.qk_norm_replacement")
    assert "tensor[4, 16]:bfloat16" in text and "extra_check=rewrites.<locals>.qkv_check" in text
    assert "tensor(" not in text  # shapes, never values


def test_a_pass_registered_before_the_block_records_nothing():
    config = QKNormConfig(q_size=8, kv_size=4, eps=3.5e-6, dtype=torch.bfloat16)
    assert QKNormFusionPass(config).patterns is not None
    with record_patterns() as recorded:
        assert QKNormFusionPass(config).patterns is not None
    assert recorded == []
    with record_patterns() as recorded:
        _pattern_pass.__wrapped__(QKNormFusionPass, config)  # the uncached registration
    assert len(recorded) == 4


def test_records_a_module_that_imported_register_replacement_by_name():
    import _from_import_pass

    assert _from_import_pass.register_replacement is ORIGINAL
    with record_patterns() as recorded:
        assert _from_import_pass.register_replacement is not ORIGINAL
        patterns = _from_import_pass.build()
    assert _from_import_pass.register_replacement is ORIGINAL
    (record,) = recorded
    assert record.search_fn is _from_import_pass.scale_tanh_pattern
    assert record.replace_fn is _from_import_pass.scale_tanh_replacement
    assert record.extra_check is _from_import_pass.wide_enough
    assert record.pass_dicts is patterns and record.name == "scale_tanh_pattern"
    assert record.scalar_workaround is None and record.exclusive_arg_names == ()
    assert len(patterns.patterns) == 1


def test_a_module_imported_inside_the_block_is_restored():
    sys.modules.pop("_from_import_pass", None)
    try:
        with record_patterns() as recorded:
            module = importlib.import_module("_from_import_pass")
            module.build()
        assert len(recorded) == 1
        assert module.register_replacement is ORIGINAL
    finally:
        sys.modules.pop("_from_import_pass", None)


def test_restored_on_an_exception():
    import _from_import_pass

    with pytest.raises(RuntimeError, match="boom"), record_patterns():
        assert pm.register_replacement is not ORIGINAL
        raise RuntimeError("boom")
    assert pm.register_replacement is ORIGINAL
    assert _from_import_pass.register_replacement is ORIGINAL


def test_nested_blocks():
    import _from_import_pass

    with record_patterns() as outer:
        _from_import_pass.build()
        with record_patterns(register=False) as inner:
            unregistered = _from_import_pass.build()
        assert pm.register_replacement is not ORIGINAL  # the outer block is still active
        _from_import_pass.build()
    assert len(inner) == 1 and len(outer) == 3
    assert inner[0] is outer[1]
    assert inner[0].result is None and not unregistered.patterns  # recorded only
    assert outer[0].result and outer[2].result


def test_record_without_registering():
    import _from_import_pass

    with record_patterns(register=False) as recorded:
        patterns = _from_import_pass.build()
    assert len(recorded) == 1 and not patterns.patterns


def test_register_must_be_a_bool():
    with pytest.raises(TypeError, match="register=1"), record_patterns(register=1):
        pass


def test_pattern_pass_holds_the_rewrite_alone():
    import _from_import_pass

    with record_patterns() as recorded:
        _from_import_pass.build()
        alone = recorded[0].pattern_pass()  # registered through the original: not recorded
        assert original_register_replacement() is ORIGINAL
    assert len(recorded) == 1
    assert alone is recorded[0].pattern_pass() and alone is not recorded[0].pass_dicts
    assert sum(len(entries) for entries in alone.patterns.values()) == 1

    def graph(width):
        gm = pm.fwd_only(_from_import_pass.scale_tanh_pattern, [torch.ones(2, width), torch.ones(width)])
        from pmverify._engine.apply import propagate_fake

        propagate_fake(gm, (torch.ones(2, width), torch.ones(width)))
        return gm

    assert alone.apply(graph(8).graph) == 1
    assert alone.apply(graph(4).graph) == 0  # extra_check rejects rows under 8 elements


def test_search_args_put_scalar_workaround_values_in_place():
    def with_eps(x, eps, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    x, w = torch.empty(2, 4), torch.empty(4)
    patterns = pm.PatternMatcherPass(pass_name="test_search_args")
    with record_patterns() as recorded:
        # fuse_attention style: the workaround values appended to the example inputs
        pm.register_replacement(
            with_eps, with_eps, [x, w, 1e-6], pm.fwd_only, patterns, scalar_workaround={"eps": 1e-6}
        )
    (record,) = recorded
    assert record.search_args == (x, 1e-6, w)
    assert "scalar_workaround={'eps': 1e-06}" in repr(record)
