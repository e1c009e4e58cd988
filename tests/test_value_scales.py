"""Value scales find what unit-scale values hide: a replacement that hard-codes eps 1e-5 for a 1e-6
pattern differs from it only on rows whose mean square is near or below 1e-5, which ``tensors()``
(through ``like`` and ``planted`` with default arguments) draws; the same pass with the right eps
stays quiet. With the hidden size fixed at 16, values in [-2, 2] alone (before issue 15) never
showed the bug in 100 cases."""

import pytest
import torch
from _rms_passes import LiteralEpsRMSNormPass, NearbyEpsRMSNormPass, literal_eps_pattern

import pmverify
from pmverify.strategies import like, planted

EXAMPLE = (torch.empty(8, 16), torch.empty(16))
VARY = {
    "tokens and hidden": {"tokens": [(0, 0)], "hidden": [(0, -1), (1, 0)]},
    "tokens only": {"tokens": [(0, 0)]},
}


def _cases(vary):
    return planted(literal_eps_pattern, like(EXAMPLE, vary=VARY[vary]), min_instances=1)


@pytest.mark.parametrize("vary", sorted(VARY))
def test_a_replacement_hard_coding_a_nearby_eps_is_found(vary, finding_only, tmp_path):
    with finding_only(), pytest.raises(pmverify.PassVerificationError) as info:
        pmverify.verify(NearbyEpsRMSNormPass(), _cases(vary), max_examples=60, seed=0, repro_dir=tmp_path)
    assert any(v.oracle == "semantics" for v in info.value.violations), info.value.violations


def test_the_right_eps_stays_quiet(tmp_path):
    pmverify.verify(LiteralEpsRMSNormPass(), _cases("tokens and hidden"), max_examples=15, seed=0, repro_dir=tmp_path)
