"""IdentityFoldingIgnoresPromotion: a peephole folding ``x * 1``, ``x + 0``... whatever the result's
dtype (``x * 1.0`` of an int ``x`` is float32), caught by the README recipe (``fx_graphs`` of the ops
it folds + ``verify``) within the default profile's examples; its correct twin, which folds only
where the result has ``x``'s dtype, shape and strides (as Inductor's ``remove_no_ops`` /
``remove_noop_ops`` do), stays quiet."""

from __future__ import annotations

import pytest
import torch

from pmverify import PassVerificationError, check_case, verify
from pmverify._case import GraphCase
from pmverify._engine.apply import propagate_fake
from pmverify.faults import BANK, IdentityFoldingIgnoresPromotion
from pmverify.faults.identities import HandIdentityFolding, IdentityConfig
from pmverify.strategies import fx_graphs

aten, prims = torch.ops.aten, torch.ops.prims

#: What a user's peephole test draws, as README's recipe says: the ops it folds and a reader.
PEEPHOLE_OPS = ["mul_scalar", "add_scalar", "sub_scalar", "div_scalar", "pow", "convert_element_type", "neg"]


def _case(x: torch.Tensor, target, *args) -> GraphCase:
    """``neg(target(x0, *args))`` of one input."""
    graph = torch.fx.Graph()
    x0 = graph.placeholder("x0")
    node = graph.call_function(target, (x0, *args))
    graph.output((graph.call_function(aten.neg.default, (node,)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    propagate_fake(gm, (x,))
    return GraphCase(gm=gm, inputs=[(x,)], tp_world=1, form="functional", label="identity")


INT = torch.arange(6, dtype=torch.int64).reshape(2, 3)
FLOAT = torch.linspace(-1, 1, 6).reshape(2, 3)
#: (name, input, target, args, whether the correct pass folds it)
EXAMPLES = [
    ("int * 1.0", INT, aten.mul.Tensor, (1.0,), False),
    ("int + 0.0", INT, aten.add.Tensor, (0.0,), False),
    ("int - 0.0", INT, aten.sub.Scalar, (0.0,), False),
    ("int / 1", INT, aten.div.Tensor, (1,), False),
    ("int ** 1.0", INT, aten.pow.Tensor_Scalar, (1.0,), False),
    ("int * 1", INT, aten.mul.Tensor, (1,), True),
    ("float * 1", FLOAT, aten.mul.Tensor, (1,), True),
    ("float / 1.0", FLOAT, aten.div.Tensor, (1.0,), True),
    ("float cast to float32", FLOAT, prims.convert_element_type.default, (torch.float32,), True),
    ("int view to its shape", INT, aten.view.default, ([2, 3],), True),
    ("int expand to its shape", INT, aten.expand.default, ([2, -1],), True),
    ("float * 2", FLOAT, aten.mul.Tensor, (2.0,), False),
    ("float rsub 0", FLOAT, aten.rsub.Scalar, (0,), False),
]


@pytest.mark.parametrize(("name", "x", "target", "args", "folds"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_the_correct_pass_folds_only_where_the_dtype_stays(name, x, target, args, folds):
    pass_ = HandIdentityFolding()
    result = check_case(pass_, _case(x, target, *args))
    assert result.ok, result.violations
    assert pass_.matched_count == folds


@pytest.mark.parametrize(("name", "x", "target", "args", "folds"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_the_fault_folds_promoting_identities(name, x, target, args, folds):
    pass_ = IdentityFoldingIgnoresPromotion()
    result = check_case(pass_, _case(x, target, *args))
    if name.startswith("int") and not folds:
        assert {v.oracle for v in result.violations} >= {"structure"}, result.violations
    else:
        assert result.ok, result.violations


def test_config_turns_folds_off():
    pass_ = HandIdentityFolding(IdentityConfig(arithmetic=False))
    assert check_case(pass_, _case(FLOAT, aten.mul.Tensor, 1)).ok and pass_.matched_count == 0
    with pytest.raises(TypeError):
        HandIdentityFolding(object())


def test_bank_row():
    row = BANK["IdentityFoldingIgnoresPromotion"]
    assert row.oracles == ("structure", "semantics")
    ((name, _),) = row.families()
    assert name == "fx_graphs"


def test_caught_by_the_readme_recipe(tmp_path, finding_only):
    """``fx_graphs`` of the ops the peephole folds, under the default profile (15 cases)."""
    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(IdentityFoldingIgnoresPromotion(), fx_graphs(ops=PEEPHOLE_OPS, min_nodes=4), repro_dir=tmp_path)
    assert {v.oracle for v in info.value.violations} & {"structure", "semantics"}


def test_the_correct_twin_is_quiet(tmp_path):
    summary = verify(HandIdentityFolding(), fx_graphs(ops=PEEPHOLE_OPS, min_nodes=4), repro_dir=tmp_path)
    assert summary.rewritten_cases > 0, summary.describe()


@pytest.mark.slow
def test_the_correct_twin_is_quiet_on_300_cases_of_its_family(tmp_path):
    ((_, cases),) = BANK["IdentityFoldingIgnoresPromotion"].families()
    summary = verify(HandIdentityFolding, cases, max_examples=300, seed=0, repro_dir=tmp_path)
    assert summary.cases >= 300 and summary.rewritten_cases > 100, summary.describe()
