"""BlindDefunctionalization: a defunctionalization of a project's own mutable ops that rewrites in
place though a later node reads the old operand, caught on its bank family; the same pass with its
check of later readers (Defunctionalization) is quiet there and rewrites."""

from __future__ import annotations

import pytest
from hypothesis import Phase, find, settings

import pmverify
from pmverify import PassVerificationError, verify
from pmverify.faults import BANK, BlindDefunctionalization
from pmverify.faults.defunctionalize import DefuncConfig, Defunctionalization, defunc_cases


def first(strategy, condition):
    return find(strategy, condition, settings=settings(database=None, phases=[Phase.generate], max_examples=200))


def _old_value_read(case):
    return "old read" in case.label


def test_bank_row():
    row = BANK["BlindDefunctionalization"]
    assert row.oracles == ("semantics", "mutation_barriers")
    assert [name for name, _ in row.families()] == ["with_mutating_custom_ops(ops=defunc_ops)"]


@pytest.mark.parametrize("version", [1, 2])
def test_old_value_read_after_the_call(version):
    """Among the first cases with a reader of a written tensor's old value, one the blind rewrite
    changes what it reads in; the checked pass is quiet on it."""

    def caught(case):
        if not (_old_value_read(case) and f"@v{version}" in case.label):
            return False
        blind = pmverify.check_case(BlindDefunctionalization(DefuncConfig()), case)
        return bool({v.oracle for v in blind.violations} & {"semantics", "mutation_barriers"})

    case = first(defunc_cases(), caught)
    assert pmverify.check_case(Defunctionalization(DefuncConfig()), case).ok


def test_caught_on_its_family(tmp_path, finding_only):
    ((_, cases),) = BANK["BlindDefunctionalization"].families()
    with finding_only(), pytest.raises(PassVerificationError) as info:
        verify(BlindDefunctionalization, cases, seed=0, repro_dir=tmp_path)
    assert {v.oracle for v in info.value.violations} & {"semantics", "mutation_barriers"}


def test_checked_pass_rewrites_and_is_quiet():
    ((_, cases),) = BANK["BlindDefunctionalization"].families()
    counts = []
    verify(Defunctionalization, cases, seed=0, on_result=lambda r: counts.append(r.pair.pass_.matched_count))
    assert sum(counts) >= len(counts) // 2


@pytest.mark.slow
def test_checked_pass_is_quiet_over_300_cases():
    ((_, cases),) = BANK["BlindDefunctionalization"].families()
    counts = []
    verify(
        Defunctionalization,
        cases,
        seed=1,
        max_examples=300,
        on_result=lambda r: counts.append(r.pair.pass_.matched_count),
    )
    assert len(counts) >= 300 and sum(counts) >= 150
