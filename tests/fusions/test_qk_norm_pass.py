"""QKNormFusionPass: matches per dtype and form, config validation, uuid, compile ranges."""

import dataclasses

import pytest
import torch

from pmverify import check_case
from pmverify._case import GraphCase
from pmverify._engine.apply import apply_direct
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _vllm_form(config):
    sizes = [config.q_size, config.kv_size, config.kv_size]

    def norm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + config.eps) * w).to(config.dtype)

    def fn(x, q_weight, k_weight):
        q, k, v = x.tanh().split(sizes, dim=-1)
        return norm(q, q_weight), norm(k, k_weight), v

    return fn


def _hf_form(config):
    def norm(x, w):
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + config.eps)).to(config.dtype)

    def fn(xq, xk, q_weight, k_weight):
        return norm(xq.sin(), q_weight), norm(xk.sin(), k_weight)

    return fn


def _case(fn, inputs, config):
    from torch._inductor.pattern_matcher import fwd_only

    return GraphCase(fwd_only(fn, inputs), [tuple(inputs)], pass_config=config)


def _inputs_vllm(config, tokens=3, weight_dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(tokens, config.qkv_size, generator=g).to(config.dtype),
        (1 + 0.1 * torch.randn(config.q_size, generator=g)).to(weight_dtype),
        (1 + 0.1 * torch.randn(config.kv_size, generator=g)).to(weight_dtype),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight_dtype", ["fp32", "act"])
def test_vllm_form_matches_once_per_dtype(dtype, weight_dtype):
    config = QKNormConfig(q_size=16, kv_size=8, dtype=dtype)
    inputs = _inputs_vllm(config, weight_dtype=torch.float32 if weight_dtype == "fp32" else dtype)
    result = check_case(QKNormFusionPass(config), _case(_vllm_form(config), inputs, config))
    assert result.rewrite_count == 1 and result.ok, result.violations
    targets = {n.target for n in result.pair.after.graph.nodes}
    assert torch.ops.pmverify.qk_norm.default in targets


@pytest.mark.parametrize("dtype", DTYPES)
def test_hf_form_matches_q_and_k(dtype):
    config = QKNormConfig(q_size=16, kv_size=8, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    inputs = [
        torch.randn(2, 3, 16, generator=g).to(dtype),
        torch.randn(2, 3, 8, generator=g).to(dtype),
        (1 + 0.1 * torch.randn(16, generator=g)).to(dtype),
        (1 + 0.1 * torch.randn(8, generator=g)).to(dtype),
    ]
    result = check_case(QKNormFusionPass(config), _case(_hf_form(config), inputs, config))
    assert result.rewrite_count == 2 and result.ok, result.violations
    pair = apply_direct(QKNormFusionPass(config), _case(_hf_form(config), inputs, config))
    assert torch.equal(pair.before(*inputs)[0], pair.after(*inputs)[0])


@pytest.mark.parametrize(
    "change",
    [dict(eps=1e-5), dict(q_size=24, kv_size=4), dict(dtype=torch.float16), dict(max_tokens=2)],
    ids=["eps", "split_sizes", "dtype", "tokens"],
)
def test_no_match_when_config_differs(change):
    graph_config = QKNormConfig(q_size=16, kv_size=8, dtype=torch.bfloat16)
    pass_config = dataclasses.replace(graph_config, **change)
    case = _case(_vllm_form(graph_config), _inputs_vllm(graph_config), pass_config)
    assert check_case(QKNormFusionPass(pass_config), case).rewrite_count == 0


def test_no_match_on_broadcast_weight():
    config = QKNormConfig(q_size=16, kv_size=8, dtype=torch.bfloat16)
    inputs = _inputs_vllm(config)
    inputs[1] = inputs[1][:1].clone()
    assert check_case(QKNormFusionPass(config), _case(_vllm_form(config), inputs, config)).rewrite_count == 0


def test_no_match_with_extra_user_of_fp32_intermediate():
    config = QKNormConfig(q_size=16, kv_size=8, dtype=torch.bfloat16)
    base = _vllm_form(config)

    def fn(x, q_weight, k_weight):
        q_out, k_out, v = base(x, q_weight, k_weight)
        q_fp32 = x.tanh().split([16, 8, 8], dim=-1)[0].float()
        return q_out, k_out, v, q_fp32 * 2

    from torch._inductor.pattern_matcher import fwd_only

    inputs = _inputs_vllm(config)
    gm = fwd_only(fn, inputs)
    # make_fx does not CSE: merge the duplicate tanh/split/convert so the fp32 q has an extra user
    gm.graph.eliminate_dead_code()

    from torch.fx.passes.dialect.common.cse_pass import CSEPass

    gm = CSEPass()(gm).graph_module
    converts = [n for n in gm.graph.nodes if n.target == torch.ops.prims.convert_element_type.default]
    assert any(len(n.users) == 3 for n in converts)  # pow, mul and the extra user
    case = GraphCase(gm, [tuple(inputs)], pass_config=config)
    assert check_case(QKNormFusionPass(config), case).rewrite_count == 0


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="q_size=0"):
        QKNormConfig(q_size=0, kv_size=8)
    with pytest.raises(ValueError, match="tp_rank=2"):
        QKNormConfig(q_size=8, kv_size=8, tp_world=2, tp_rank=2)
    with pytest.raises(ValueError, match="dtype=torch.float64"):
        QKNormConfig(q_size=8, kv_size=8, dtype=torch.float64)
    with pytest.raises(ValueError, match="eps=-1"):
        QKNormConfig(q_size=8, kv_size=8, eps=-1)
    with pytest.raises(ValueError, match="eps=inf"):
        QKNormConfig(q_size=8, kv_size=8, eps=float("inf"))
    with pytest.raises(ValueError, match="tp_rank=True"):
        QKNormConfig(q_size=8, kv_size=8, tp_world=2, tp_rank=True)
    with pytest.raises(TypeError, match="QKNormConfig"):
        QKNormFusionPass({"q_size": 8})


FIELDS = dict(q_size=32, kv_size=4, eps=1e-5, dtype=torch.float16, max_tokens=64, tp_world=2, tp_rank=1)


@pytest.mark.parametrize("field", list(FIELDS))
def test_uuid_covers_every_config_field(field):
    base = QKNormConfig(q_size=16, kv_size=8, tp_world=2 if field == "tp_rank" else 1)
    changed = dataclasses.replace(base, **{field: FIELDS[field]})
    assert QKNormFusionPass(base).uuid() != QKNormFusionPass(changed).uuid()
    assert QKNormFusionPass(base).uuid() == QKNormFusionPass(QKNormConfig(**base.fields())).uuid()


def test_uuid_covers_subclass_source():
    from pmverify.faults import QKNormWrongRoundingOrder

    config = QKNormConfig(q_size=16, kv_size=8)
    assert QKNormFusionPass(config).uuid() != QKNormWrongRoundingOrder(config).uuid()


def test_is_applicable_for_range():
    pass_ = QKNormFusionPass(QKNormConfig(q_size=16, kv_size=8, max_tokens=256))

    @dataclasses.dataclass
    class Range:  # vLLM's compile range shape
        start: int
        end: int

    assert pass_.is_applicable_for_range(Range(1, 256))
    assert not pass_.is_applicable_for_range(Range(1, 257))
    assert pass_.is_applicable_for_range((1, 8)) and not pass_.is_applicable_for_range(1024)
    with pytest.raises(TypeError, match="compile_range"):
        pass_.is_applicable_for_range("big")


# ------------------------------------------- a graph input mutated before the norm (post-grad form)


def _mutated_qkv_case(config, copy_before):
    """The post-grad form of ``qkv.add_(1.0)`` then a QK norm, as torch.compile hands it to the
    pass: ``add = qkv + 1``, one split of ``add`` per consumer, and the write-back
    ``copy_(qkv, add)`` placed before the split feeding ``copy_before`` ("v": where Inductor puts
    it, "k": between the q and the k norm)."""
    sizes = [config.q_size, config.kv_size, config.kv_size]

    def norm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + config.eps) * w).to(config.dtype)

    def fn(qkv, q_weight, k_weight):
        add = qkv + 1.0
        q_out = norm(add.split(sizes, dim=-1)[0], q_weight)
        k_out = norm(add.split(sizes, dim=-1)[1], k_weight)
        return q_out, k_out, add.split(sizes, dim=-1)[2]

    from torch._inductor.pattern_matcher import fwd_only

    inputs = _inputs_vllm(config)
    gm = fwd_only(fn, inputs)
    qkv = next(iter(gm.graph.find_nodes(op="placeholder")))
    add = gm.graph.find_nodes(op="call_function", target=torch.ops.aten.add.Tensor)[0]  # qkv + 1
    splits = list(gm.graph.find_nodes(op="call_function", target=torch.ops.aten.split_with_sizes.default))
    assert len(splits) == 3
    with gm.graph.inserting_before(splits[{"k": 1, "v": 2}[copy_before]]):
        gm.graph.call_function(torch.ops.aten.copy_.default, (qkv, add))
    gm.recompile()
    return GraphCase(gm, [tuple(inputs)], form="inplace", pass_config=config)


def test_mutated_qkv_matches_q_and_k_before_the_write_back():
    # split3 spans the copy_ (Inductor discards it); the q/k-only form lies before it
    config = QKNormConfig(q_size=16, kv_size=8, dtype=torch.bfloat16)
    result = check_case(QKNormFusionPass(config), _mutated_qkv_case(config, "v"))
    assert result.rewrite_count == 1 and result.ok, result.violations
    order = [n.target for n in result.pair.after.graph.nodes]
    fused, copy = torch.ops.pmverify.qk_norm.default, torch.ops.aten.copy_.default
    split = torch.ops.aten.split_with_sizes.default
    assert order.index(fused) < order.index(copy) < order.index(split)  # v's split stays after the copy_
    assert order.count(split) == 1


def test_mutated_qkv_write_back_between_q_and_k_still_blocks():
    config = QKNormConfig(q_size=16, kv_size=8, dtype=torch.bfloat16)
    result = check_case(QKNormFusionPass(config), _mutated_qkv_case(config, "k"))
    assert result.rewrite_count == 0 and result.ok, result.violations
