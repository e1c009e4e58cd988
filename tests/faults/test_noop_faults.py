"""NoOpScatterUnpacksFiveArguments: right on the five-argument ``slice_scatter``, a crash on the
four- and six-argument forms torch.compile also writes, caught on its bank family at the default
level; the correct no-op elimination (arguments read by schema) removes scatters in every form."""

from __future__ import annotations

import pytest
import torch

from pmverify import PassVerificationError, check_case, verify
from pmverify._case import GraphCase
from pmverify.faults import BANK, NoOpScatterUnpacksFiveArguments
from pmverify.faults.noop import HandNoOpElimination, NoOpConfig
from pmverify.strategies._ops_core import INT64_MAX

aten = torch.ops.aten


def _scatter_case(*tail) -> GraphCase:
    """``slice_scatter(x, y, *tail)`` of a [4, 3] input, ``y`` of the slice's shape, and a ``neg``
    that reads it."""
    x, y = torch.arange(12.0).reshape(4, 3), -torch.arange(12.0).reshape(4, 3)
    dim, start, end, step = (list(tail) + [0, None, None, 1][len(tail) :])[:4]
    y = y[start : None if end is None else min(end, 4) : step].contiguous()
    graph = torch.fx.Graph()
    nx, ny = graph.placeholder("x0"), graph.placeholder("x1")
    scatter = graph.call_function(aten.slice_scatter.default, (nx, ny, *tail))
    graph.output((graph.call_function(aten.neg.default, (scatter,)),))
    from pmverify._engine.apply import propagate_fake

    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    propagate_fake(gm, (x, y))
    return GraphCase(gm=gm, inputs=[(x, y)], tp_world=1, form="functional", label="slice_scatter")


#: The forms torch.compile writes: ``x[0:].copy_(y)`` (five arguments, a no-op scatter),
#: ``torch.slice_scatter(x, y, 0, 1)`` (four), ``x[::2].copy_(y)`` (six).
FORMS = {"five": (0, 0, INT64_MAX), "four": (0, 1), "six": (0, 0, INT64_MAX, 2)}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_correct_pass_reads_every_form(form):
    pass_ = HandNoOpElimination()
    result = check_case(pass_, _scatter_case(*FORMS[form]))
    assert result.ok, result.violations
    assert pass_.matched_count == (form == "five")  # only x[0:] covers the whole input


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_fault_crashes_on_the_four_and_six_argument_forms(form):
    pass_ = NoOpScatterUnpacksFiveArguments()
    result = check_case(pass_, _scatter_case(*FORMS[form]))
    if form == "five":
        assert result.ok and pass_.matched_count == 1, result.violations
    else:
        assert [v.oracle for v in result.violations] == ["crash"]
        assert "not enough values" in result.violations[0].message or "too many" in result.violations[0].message


def test_bank_row():
    row = BANK["NoOpScatterUnpacksFiveArguments"]
    assert row.oracles == ("crash",)
    ((name, _),) = row.families()
    assert name == "fx_graphs"


def test_caught_on_its_family(tmp_path, finding_only):
    """The peephole recipe's graphs at the default level hold 4- and 6-argument scatters."""
    ((_, cases),) = BANK["NoOpScatterUnpacksFiveArguments"].families()
    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(NoOpScatterUnpacksFiveArguments, cases, seed=0, repro_dir=tmp_path)
    assert {v.oracle for v in info.value.violations} == {"crash"}


def test_scatters_off_leaves_them():
    pass_ = HandNoOpElimination(NoOpConfig(scatters=False))
    assert check_case(pass_, _scatter_case(*FORMS["five"])).ok and pass_.matched_count == 0
