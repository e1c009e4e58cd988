"""ReinplaceReadsWhatItWrites: right where its bug cannot show, caught by the aliasing oracle (and
semantics, for the order-dependent ops) on the family its bank row declares."""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings

from pmverify import PassVerificationError, verify
from pmverify.faults import BANK, ReinplaceReadsWhatItWrites
from pmverify.fusions.qk_norm import QKNormConfig
from pmverify.fusions.qk_norm.testing import qk_norm_cases


def test_without_mutating_custom_ops_it_is_the_shipped_pass():
    config = QKNormConfig(q_size=8, kv_size=4, eps=1e-6, dtype=torch.bfloat16, max_tokens=4)
    verify(ReinplaceReadsWhatItWrites, qk_norm_cases(config), max_examples=3, seed=0)


def test_bank_row():
    row = BANK["ReinplaceReadsWhatItWrites"]
    assert row.oracles == ("aliasing", "semantics")
    assert [name for name, _ in row.families()] == ["with_mutating_custom_ops"]


@pytest.mark.slow
def test_caught_on_its_family(tmp_path, finding_only):
    """About one case in 16 of the family has ``y = x.clone(); op(x, out=y)`` with ``x`` read by
    nothing after the op (measured: 6 in 100), the shape the fault reinplaces."""
    ((_, cases),) = BANK["ReinplaceReadsWhatItWrites"].families()
    results = []
    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(ReinplaceReadsWhatItWrites, cases, seed=0, repro_dir=tmp_path, on_result=results.append)
    assert len(results) <= settings.default.max_examples + 1
    assert "aliasing" in {v.oracle for v in info.value.violations}
    assert info.value.result.pair.pass_.reinplaced >= 1
