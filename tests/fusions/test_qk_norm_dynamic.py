"""The QK-norm fusion on symbolic token counts: the fused ops' fake impls keep the symbol and add
no guard; should_fuse decides a SymInt without guarding; is_applicable_for_range with vLLM's
``Range(start, end)`` shape, the rewrite holding at every size of a range it applies to."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

from pmverify._engine.apply import apply_direct
from pmverify._shapes.symbolic import symbolize
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass
from pmverify.fusions.qk_norm.patterns import should_fuse
from pmverify.fusions.qk_norm.testing.cases import build_case, make_layer
from pmverify.oracles import semantics


@dataclasses.dataclass(frozen=True)
class Range:
    """vLLM's compile range (``vllm.config.utils.Range``): token counts ``start..end``, ``end`` included."""

    start: int
    end: int


def _symbolic_tokens(hint: int = 11, low: int = 2, high: int = 64) -> tuple[ShapeEnv, FakeTensorMode, torch.SymInt]:
    shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env)
    sym = shape_env.create_symbol(hint, ConstantSource("s0"), dynamic_dim=DimDynamic.DYNAMIC)
    shape_env.constrain_symbol_range(sym, compiler_min=low, compiler_max=high)
    return shape_env, mode, shape_env.create_symintnode(sym, hint=hint)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fake_impls_keep_the_symbolic_token_count(dtype):
    shape_env, mode, s0 = _symbolic_tokens()
    with mode:
        qkv = torch.empty(s0, 16, dtype=dtype)
        q_weight, k_weight = torch.empty(8, dtype=torch.float32), torch.empty(4, dtype=dtype)
        x = torch.empty(2, s0, 8, dtype=dtype)
        guards = len(shape_env.guards)
        outs = [
            *torch.ops.pmverify.qk_norm(qkv, q_weight, k_weight, 8, 4, 1e-6, False),
            *torch.ops.pmverify.qk_norm_tp(qkv, q_weight, k_weight, 8, 4, 1e-6, 2, "0", False),
            torch.ops.pmverify.rms_norm(x, q_weight, 1e-6, True),
        ]
    shapes = [tuple(out.shape) for out in outs]
    assert [len(shape) for shape in shapes] == [2, 2, 2, 2, 3]
    rows = [shape[0] for shape in shapes[:4]] + [shapes[4][1]]
    assert all(isinstance(n, torch.SymInt) and n.node.expr == s0.node.expr for n in rows), shapes
    assert [shape[-1] for shape in shapes] == [8, 4, 8, 4, 8]
    assert outs[0].dtype == dtype and outs[4].dtype == torch.promote_types(dtype, torch.float32)
    assert len(shape_env.guards) == guards, [g.expr for g in shape_env.guards[guards:]]


def test_should_fuse_decides_a_symbolic_count_without_a_guard():
    config = QKNormConfig(8, 4, max_tokens=8)  # the hint, 11, is over max_tokens
    shape_env, _, s0 = _symbolic_tokens()
    assert should_fuse(config, s0)  # not known to exceed: the range is is_applicable_for_range's
    assert not shape_env.guards  # no Eq(s0, 11), no s0 <= 8
    big_env, _, big = _symbolic_tokens(hint=20, low=9, high=64)
    assert not should_fuse(config, big) and not big_env.guards  # known to exceed over its whole range
    assert should_fuse(config, 8) and not should_fuse(config, 9)


_CONFIG = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16, max_tokens=13)
_RANGES = [Range(2, 13), Range(9, 13), Range(11, 11), Range(2, 5), Range(12, 14), Range(14, 64), Range(2, 64)]


@pytest.mark.parametrize("form", ["qk_norm", "qk_norm_split3", "rms_norm"])
def test_rewrite_holds_at_every_size_of_an_applicable_range(form):
    """The pass says it applies to exactly the ranges ending within max_tokens, and its rewrite of
    the symbolic graph (made once, as vLLM compiles one graph per range) is exact at every size of
    each of them."""
    case = symbolize(build_case(_CONFIG, [make_layer(_CONFIG, form, tokens=11)], seed=5))
    assert (case.symbols[0].min, case.symbols[0].max) == (2, 64)
    pass_ = QKNormFusionPass(_CONFIG)
    applicable = [r for r in _RANGES if pass_.is_applicable_for_range(r)]
    assert applicable == [Range(2, 13), Range(9, 13), Range(11, 11), Range(2, 5)]
    pair = apply_direct(QKNormFusionPass, case)
    assert pair.error is None and pair.matched_count == case.expected_matches and pair.pass_guards == ()
    for size in sorted({n for r in applicable for n in range(r.start, r.end + 1)}):
        assert semantics.check(pair.at({"s0": size})) == [], size
