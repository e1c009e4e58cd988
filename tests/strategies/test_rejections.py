"""Every public strategy is valid by construction: under 1 % of its draws are rejected by a filter
or ``assume`` (in fact none; each module docstring states the figure)."""

from __future__ import annotations

import pytest
import torch
from _minimal import rejections

from pmverify.fusions.qk_norm.testing import qk_norm_cases, qk_norm_tp_cases
from pmverify.strategies import (
    GRAPH_DTYPES,
    dtypes,
    fx_graphs,
    like,
    planted,
    shapes,
    tensors,
    tp_cases,
    tp_sizes,
    with_mutating_custom_ops,
    with_mutations,
)


def scale_pattern(x, w):
    return torch.tanh(x) * w


def _planted():
    return planted(scale_pattern, like((torch.empty(4, 8), torch.empty(8)), vary={"tokens": [(0, 0)]}))


STRATEGIES = {
    "dtypes": (dtypes, 3),
    "shapes": (shapes, 50),
    "tensors": (lambda: tensors(torch.bfloat16, (4, 4)), 50),
    "tp_sizes": (tp_sizes, 4),
    "fx_graphs": (fx_graphs, 50),
    "fx_graphs(every dtype)": (lambda: fx_graphs(dtypes=GRAPH_DTYPES, max_nodes=12), 30),
    "tensors(allow_nan, allow_infinity)": (
        lambda: tensors(torch.float16, (4, 4), allow_nan=True, allow_infinity=True),
        50,
    ),
    "like": (lambda: like((torch.empty(4, 8), torch.empty(8)), vary="duck"), 50),
    "planted": (_planted, 30),
    "with_mutations": (lambda: with_mutations(_planted()), 20),
    "with_mutating_custom_ops": (lambda: with_mutating_custom_ops(_planted()), 20),
    "tp_cases": (lambda: tp_cases(_planted()), 20),
    "qk_norm_cases": (qk_norm_cases, 20),
    "qk_norm_tp_cases": (qk_norm_tp_cases, 20),
}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_no_draw_is_rejected(name):
    make, examples = STRATEGIES[name]
    rejected, valid = rejections(make(), examples)
    assert valid == examples and rejected / valid < 0.01, (rejected, valid)
