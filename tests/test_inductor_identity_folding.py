"""Inductor's own identity folding as a target, unmodified from the installed torch: post_grad's
``remove_noop_ops`` (same-dtype casts, ``pow(x, 1)``, same-shape views, clones...) and joint_graph's
``constant_fold_uniform_value`` (which folds uniform constants into ``full`` and then calls
``remove_no_ops``: ``x + zeros``, ``x * ones``...), on ``fx_graphs`` of the ops they fold, with the
identity constants ``fx_graphs`` draws (``x * 1.0`` of an int ``x``, a cast to ``x``'s dtype, a view
to ``x``'s shape). Both check the result's dtype and shape before folding: every oracle must stay
quiet. The default run searches a few cases; ``-m slow`` 300 at each level."""

from __future__ import annotations

import pytest

import pmverify
from pmverify.strategies import fx_graphs

PASS_SOURCE = """
from torch._guards import detect_fake_mode
from torch._inductor.fx_passes.joint_graph import constant_fold_uniform_value
from torch._inductor.fx_passes.post_grad import remove_noop_ops
from torch._inductor.virtualized import V


def PASS(graph):
    fake_mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes])
    with V.set_fake_mode(fake_mode):
        constant_fold_uniform_value(graph.owning_module)
        remove_noop_ops(graph)
"""

#: What the two passes fold, and readers of the results (``full`` / ``ones_like``: uniform
#: constants that ``constant_fold_uniform_value`` finds, read by ``add`` / ``mul`` / ``div``).
OPS = (
    "mul_scalar",
    "add_scalar",
    "sub_scalar",
    "div_scalar",
    "pow",
    "convert_element_type",
    "to_copy",
    "view",
    "aten_reshape",
    "expand",
    "clone",
    "full",
    "ones_like",
    "zeros_like",
    "add",
    "sub",
    "mul",
    "neg",
)


def _identity_folding():
    namespace: dict = {}
    exec(PASS_SOURCE, namespace)  # noqa: S102 - the reproducer's own definition, run as it will be
    return namespace["PASS"]


def _search(level: str, max_examples: int, tmp_path) -> pmverify.VerifySummary:
    cases = fx_graphs(ops=OPS, min_nodes=4, max_nodes=10, level=level)
    summary = pmverify.verify(
        _identity_folding(), cases, max_examples=max_examples, seed=0, repro_dir=tmp_path, pass_source=PASS_SOURCE
    )
    assert summary.cases >= max_examples and summary.failing_cases == 0, summary.describe()
    return summary


@pytest.mark.parametrize("level", ["post_grad", "pre_grad"])
def test_inductor_identity_folding_is_quiet(level, tmp_path):
    _search(level, 15, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["post_grad", "pre_grad"])
def test_inductor_identity_folding_is_quiet_on_300_cases(level, tmp_path):
    _search(level, 300, tmp_path)
