"""Tests of pmverify.fusions.qk_norm.real_model: the QK-norm pass on a compiled tiny transformers MiniMax-M2."""

from __future__ import annotations

import sys

import pytest
import torch

from pmverify.fusions.qk_norm.real_model import TRANSFORMERS_MISSING, check_minimax_m2


@pytest.mark.slow
def test_minimax_m2_compiled_with_and_without_pass():
    # One compiled end-to-end check (~12-25 s on 2 cores): the q and k norm of both layers fuse, the
    # fused graph holds the ops, and the output stays within the tolerance.
    pytest.importorskip("transformers")
    result = check_minimax_m2(dtype=torch.bfloat16, tokens=8, seed=0)
    assert result.skipped is None
    assert result.matches == result.expected_matches == 4, result.detail
    assert result.fused_ops == 4, result.detail
    assert result.ok, result.detail
    # Bit-identical here (bf16 with cast emulation, measured on seeds 0-9); allow two ulps of the
    # output scale, not zero, so that a reduction order that differs on another CPU cannot fail it.
    assert result.max_abs_err <= 2 * torch.finfo(torch.bfloat16).eps * result.output_scale, result.detail


@pytest.mark.slow
def test_minimax_m2_compiled_with_a_dynamic_token_dim():
    # The token dim marked dynamic (~40-90 s on 2 cores): one post-grad graph with a symbolic token
    # count, in which the pass fuses the q and k norm of both layers; 8 and 13 tokens from it.
    pytest.importorskip("transformers")
    result = check_minimax_m2(dtype=torch.bfloat16, tokens=8, seed=0, dynamic=True)
    assert result.dynamic and result.sizes == (8, 13)
    assert result.graphs == result.symbolic_graphs == 1, result.detail
    assert result.matches == result.expected_matches == result.fused_ops == 4, result.detail
    assert result.ok, result.detail
    assert result.max_abs_err <= 2 * torch.finfo(torch.bfloat16).eps * result.output_scale, result.detail


def test_minimax_m2_skipped_without_transformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    result = check_minimax_m2()
    assert result.skipped == TRANSFORMERS_MISSING
    assert not result.ok
    assert result.matches == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tokens": 0}, "tokens=0"),
        ({"tokens": 2.5}, "tokens=2.5"),
        ({"dtype": torch.float64}, "dtype=torch.float64"),
        ({"dynamic": "yes"}, "dynamic='yes'"),
        ({"dynamic": True, "tokens": 1}, "tokens=1 must be an int of at least 2 with dynamic"),
    ],
)
def test_minimax_m2_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        check_minimax_m2(**kwargs)
