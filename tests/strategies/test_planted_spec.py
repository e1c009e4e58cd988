"""planted's canonical spec: one frozen PlantSpec per call, in one form whatever the spelling of the
arguments (as hypothesis-jsonschema's canonicalish), and the strategy modules stay small."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from hypothesis import strategies as st

from pmverify.strategies import NEAR_MISS_KINDS, like
from pmverify.strategies._planted_spec import PlantSpec, canonical_spec

EXAMPLE = (torch.empty(4, 8), torch.empty(8))


def rms_pattern(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _spec(pattern=rms_pattern, inputs=None, **kwargs):
    arguments = {
        "context": None,
        "min_instances": 0,
        "max_instances": 3,
        "near_misses": True,
        "near_miss": None,
        "trace_fn": None,
        "example_inputs": None,
        "pass_config": None,
        "name": None,
        "scalar_workaround": {"eps": 1e-6},
        "exclusive_arg_names": (),
        "dynamic": False,
    }
    return canonical_spec(pattern, like(EXAMPLE) if inputs is None else inputs, **{**arguments, **kwargs})


def test_the_spec_is_frozen_and_canonical():
    spec = _spec(near_misses=["dim", "constant", "dim"], name="my rms!", dynamic="tokens")
    assert isinstance(spec, PlantSpec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]
    assert spec.kinds == ("constant", "dim")  # NEAR_MISS_KINDS order, repeats dropped
    assert spec.name == "my_rms"  # an identifier
    assert spec.dynamic == ("tokens",)
    assert spec.scalar_examples == {2: 1e-6}  # by argument position
    assert spec.example_inputs is not None and len(spec.example_inputs) == 3  # like's, the scalar put in
    assert spec.wildcards is not None and spec.wildcards.given and spec.rewrite is None


def test_default_and_absent_context_and_kinds():
    assert _spec().kinds == NEAR_MISS_KINDS and _spec().context is not None  # fx_graphs()
    assert _spec(near_misses=False).kinds == ()
    assert _spec(context=st.nothing(), min_instances=1).context is None
    assert _spec(name=None).name == "rms"  # the function's name without _pattern


def test_a_recorded_rewrite_is_unpacked():
    from torch._inductor import pattern_matcher as pm

    from pmverify._registry.record import record_patterns

    with record_patterns(register=False) as rewrites:
        pm.register_replacement(
            rms_pattern,
            rms_pattern,
            [torch.empty(8, 16), torch.empty(16)],
            pm.fwd_only,
            [],
            scalar_workaround={"eps": 1.0},
        )
    spec = canonical_spec(
        rewrites[0],
        None,
        **{
            "context": None,
            "min_instances": 1,
            "max_instances": 1,
            "near_misses": True,
            "near_miss": None,
            "trace_fn": None,
            "example_inputs": None,
            "pass_config": None,
            "name": None,
            "scalar_workaround": None,
            "exclusive_arg_names": (),
            "dynamic": False,
        },
    )
    assert spec.pattern is rms_pattern and spec.trace_fn is pm.fwd_only
    assert spec.rewrite is rewrites[0] and spec.wildcards is None
    assert spec.scalar_examples == {2: 1.0}
    assert spec.name == "rms"  # no pattern_name: the search function's, as for a plain pattern


def test_strategy_modules_stay_small():
    """Issue 32: no module over ~600 lines (STYLE.md 13); the strategies package holds to 600."""
    package = Path(__file__).parents[2] / "pmverify" / "strategies"
    sizes = {path.name: len(path.read_text().splitlines()) for path in package.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 600} == {}
