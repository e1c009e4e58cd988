"""What ``verify`` discards: draws its strategy rejects are counted (``VerifySummary.discarded``,
the rejection rate a search prints), and a compiled case that ``torch.compile`` cannot compile even
without the pass is discarded as an invalid draw, not raised as pmverify's error, unless nearly
every case is such a case."""

import hypothesis
import pytest
import torch
from hypothesis import strategies as st

import pmverify
from pmverify._engine import verify as _verify
from pmverify._engine.apply import UncompilableCase

_X = torch.randn(4, 3)


def _identity(graph):
    pass


def _case(k):
    from torch._inductor.pattern_matcher import fwd_only

    return pmverify.GraphCase(fwd_only(lambda x: x.sin() * k, [_X]), [(_X,)], label=f"k={k}")


_CASES = {k: _case(k) for k in range(1, 9)}
ONE_PHASE = hypothesis.settings(database=None, phases=[hypothesis.Phase.generate], derandomize=True)


def test_draws_the_strategy_rejects_are_counted_and_described():
    # even k only: the odd draws are rejected (st.nothing marks the test case invalid)
    cases = st.integers(1, 8).flatmap(lambda k: st.just(_CASES[k]) if k % 2 == 0 else st.nothing())
    summary = pmverify.verify(_identity, cases, max_examples=6, allow_no_rewrites=True, settings=ONE_PHASE)
    assert summary.discarded > 0
    assert f"cases ({summary.discarded} draws discarded)" in summary.describe()
    assert (summary + summary).discarded == 2 * summary.discarded
    clean = pmverify.verify(_identity, st.just(_CASES[2]), max_examples=2, allow_no_rewrites=True)
    assert clean.discarded == 0 and "discarded" not in clean.describe()


def _uncompilable_when(odd_only):
    real = _verify.check_case

    def check_case(pass_, case, **options):
        k = int(case.label.split("=")[1])
        if not odd_only or k % 2:
            raise UncompilableCase(f"torch.compile of the case without the pass failed (k={k}); the compiled mode ...")
        return real(pass_, case, **{**options, "mode": "direct"})

    return check_case


def test_a_case_torch_compile_cannot_compile_without_the_pass_is_discarded(monkeypatch):
    monkeypatch.setattr(_verify, "check_case", _uncompilable_when(odd_only=True))
    cases = st.sampled_from(sorted(_CASES)).map(_CASES.__getitem__)
    summary = pmverify.verify(
        _identity, cases, mode="compiled", max_examples=6, allow_no_rewrites=True, settings=ONE_PHASE
    )
    assert summary.cases >= 1 and summary.discarded > 0


def test_when_no_case_compiles_without_the_pass_the_first_error_is_raised(monkeypatch):
    monkeypatch.setattr(_verify, "check_case", _uncompilable_when(odd_only=False))
    cases = st.sampled_from(sorted(_CASES)).map(_CASES.__getitem__)
    with pytest.raises(
        UncompilableCase,
        match=r"^3 of the cases drawn did not compile even without the pass, and too few others were drawn; the first: torch.compile",
    ):
        pmverify.verify(_identity, cases, mode="compiled", max_examples=3, allow_no_rewrites=True)
