"""The hand-written graph-handler faults (``register_graph_pattern`` entries): each found by
``check_entry`` with defaults on instances drawn from its own pattern, and on an explicit instance;
each correct twin quiet; their bank rows searched by ``check_entry``; ``record_entries``."""

from __future__ import annotations

import pytest
import torch
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify import _selfcheck, faults
from pmverify._rewrites.entry_check import check_entry
from pmverify.faults import BANK

aten = torch.ops.aten

#: fault -> (correct twin, the oracles that catch it)
TWINS = {
    faults.MmAddDropsAlpha: (faults.MmAddToAddmm, {"semantics"}),
    faults.TransposePairIgnoresDims: (faults.TransposePairElimination, {"structure", "semantics"}),
    faults.SiluFusionReusesSigmoid: (faults.SiluFusion, {"semantics"}),
}


def _entry(pass_cls):
    with pmverify.record_entries(kinds=("graph",)) as entries:
        pass_cls()
    (entry,) = entries
    return entry


def test_record_entries_records_a_users_graph_entry_named_by_its_handler():
    entry = _entry(faults.MmAddDropsAlpha)
    assert entry.kind == "graph" and entry.handler is faults.MmAddDropsAlpha.handler
    assert entry.label == "pmverify.faults.unbound_kwargs/fuse_mm_add_dropping_alpha"
    assert entry.pass_name == "mm_add_to_addmm" and entry.torch_pass == ("mm_add_to_addmm", None)
    assert repr(entry.pattern) == repr(faults.mm_add_pattern)
    with pmverify.record_entries(kinds=("replacement",)) as entries:
        faults.MmAddDropsAlpha()
    assert entries == []


@pytest.mark.parametrize("kinds", ["graph", ("graph", "rewrite")])
def test_record_entries_refuses_unknown_kinds(kinds):
    with pytest.raises(InvalidArgument, match="kinds="):
        with pmverify.record_entries(kinds=kinds):
            pass


@pytest.mark.parametrize("fault", list(TWINS), ids=lambda f: f.__name__)
def test_check_entry_finds_each_handler_fault_with_defaults(fault, finding_only):
    with finding_only(), pytest.raises(pmverify.PassVerificationError) as info:
        check_entry(_entry(fault))
    fired = {v.oracle for failure in info.value.failures for v in failure.result.violations}
    assert fired & TWINS[fault][1], fired


@pytest.mark.parametrize("fault", list(TWINS), ids=lambda f: f.__name__)
def test_each_correct_twin_is_quiet_with_defaults(fault):
    result = check_entry(_entry(TWINS[fault][0]))
    assert result.rewritten_cases >= 1


def _mm_add(alpha):
    def fn(a, b, inp):
        return aten.add.Tensor(aten.mm.default(a, b), inp, alpha=alpha)

    return fn, (torch.randn(3, 4), torch.randn(4, 5), torch.randn(5))


def _transposes(dims):
    def fn(x):
        return aten.transpose.int(aten.transpose.int(x, 0, 1), *dims)

    return fn, (torch.randn(2, 3, 4),)


def _silu_shared():
    def fn(x):
        sigmoid = aten.sigmoid.default(x)
        return aten.mul.Tensor(sigmoid, x), aten.neg.default(sigmoid)

    return fn, (torch.randn(4, 8),)


#: Past instances, explicit: (fault, instance, whether the fault breaks it).
EXAMPLES = [
    (faults.MmAddDropsAlpha, _mm_add(2.0), True),
    (faults.MmAddDropsAlpha, _mm_add(1), False),
    (faults.TransposePairIgnoresDims, _transposes((1, 2)), True),
    (faults.TransposePairIgnoresDims, _transposes((-2, -3)), False),
    (faults.SiluFusionReusesSigmoid, _silu_shared(), True),
]


@pytest.mark.parametrize("fault, instance, broken", EXAMPLES)
def test_check_entry_examples(fault, instance, broken):
    from torch.fx.experimental.proxy_tensor import make_fx

    fn, inputs = instance
    case = pmverify.GraphCase(gm=make_fx(fn)(*inputs), inputs=[inputs])
    fired = {v.oracle for v in pmverify.check_case(fault(), case).violations}
    assert bool(fired & TWINS[fault][1]) is broken, fired
    assert pmverify.check_case(TWINS[fault][0](), case).ok


@pytest.mark.parametrize("fault", list(TWINS), ids=lambda f: f.__name__)
def test_a_handler_faults_bank_row_is_searched_by_check_entry(fault):
    result = _selfcheck.run_fault(BANK[fault.__name__], max_examples=50, shrink=False)
    assert result.detected and result.family == f"check_entry({_entry(fault).label})"
    assert 1 <= result.examples <= result.cases <= 50 and set(result.oracles) & TWINS[fault][1]


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(TWINS), ids=lambda f: f.__name__)
def test_each_correct_twin_is_quiet_over_300_cases(fault):
    from hypothesis import settings

    result = check_entry(_entry(TWINS[fault][0]), max_examples=300, seed=0, settings=settings(database=None))
    assert result.examples == 300 and result.rewritten_cases >= 30
