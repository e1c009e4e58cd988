"""The fused ops: opcheck, agreement with the written-out math, clear errors on bad input."""

import pytest
import torch

from pmverify.fusions.qk_norm import ops  # noqa: F401

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _reference(x, w, eps, weight_after_cast):
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * normed.to(x.dtype) if weight_after_cast else (normed * w).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight_after_cast", [False, True])
def test_qk_norm_opcheck_and_values(dtype, weight_after_cast):
    torch.manual_seed(0)
    q_size, kv_size = 24, 8
    qkv = torch.randn(5, q_size + 2 * kv_size, dtype=dtype)
    q_w, k_w = torch.randn(q_size), torch.randn(kv_size, dtype=dtype)
    args = (qkv, q_w, k_w, q_size, kv_size, 1e-6, weight_after_cast)
    torch.library.opcheck(torch.ops.pmverify.qk_norm.default, args)
    q_out, k_out = torch.ops.pmverify.qk_norm(*args)
    assert torch.equal(q_out, _reference(qkv[:, :q_size], q_w, 1e-6, weight_after_cast))
    assert torch.equal(k_out, _reference(qkv[:, q_size : q_size + kv_size], k_w, 1e-6, weight_after_cast))
    expected_q_dtype = torch.promote_types(torch.float32, dtype) if weight_after_cast else dtype
    assert q_out.dtype == expected_q_dtype and k_out.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_opcheck_and_values(dtype):
    torch.manual_seed(1)
    x, w = torch.randn(2, 3, 16, dtype=dtype), torch.randn(16, dtype=dtype)
    torch.library.opcheck(torch.ops.pmverify.rms_norm.default, (x, w, 1e-5, True))
    assert torch.equal(torch.ops.pmverify.rms_norm(x, w, 1e-5, True), _reference(x, w, 1e-5, True))


def test_rounding_orders_differ_in_bf16():
    # The reason the pass keeps one op flag per order: they are not the same computation in bf16.
    torch.manual_seed(2)
    x, w = torch.randn(64, 32, dtype=torch.bfloat16), 1 + 0.1 * torch.randn(32, dtype=torch.bfloat16)
    a = torch.ops.pmverify.rms_norm(x, w, 1e-6, True)
    b = torch.ops.pmverify.rms_norm(x, w, 1e-6, False)
    assert not torch.equal(a, b)


GOOD = dict(
    qkv=torch.zeros(4, 16 + 2 * 8), q_weight=torch.ones(16), k_weight=torch.ones(8), q_size=16, kv_size=8, eps=1e-6
)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(qkv=torch.zeros(2, 4, 32)), "must be 2-D"),
        (dict(qkv=torch.zeros(32, 4).t()), "not contiguous"),
        (dict(qkv=torch.zeros(4, 33)), "expected q_size \\+ 2\\*kv_size = 32"),
        (dict(q_weight=torch.ones(15)), "q_weight has shape \\(15,\\); expected \\(16,\\)"),
        (dict(k_weight=torch.ones(8, dtype=torch.float64)), "k_weight has dtype torch.float64"),
        (dict(q_weight=torch.ones(16, dtype=torch.bfloat16)), "q_weight has dtype torch.bfloat16"),
        (dict(qkv=torch.zeros(4, 32, dtype=torch.int32)), "qkv has dtype torch.int32"),
        (dict(eps=0.0), "eps=0.0 must be positive"),
    ],
)
def test_qk_norm_refuses_bad_input(change, message):
    kwargs = {**GOOD, **change}
    with pytest.raises(ValueError, match=message):
        torch.ops.pmverify.qk_norm(**kwargs)


def test_rms_norm_refuses_bad_input():
    with pytest.raises(ValueError, match="weight has shape"):
        torch.ops.pmverify.rms_norm(torch.zeros(3, 8), torch.ones(4), 1e-6)
    with pytest.raises(ValueError, match="not contiguous"):
        torch.ops.pmverify.rms_norm(torch.zeros(8, 3).t(), torch.ones(8), 1e-6)
