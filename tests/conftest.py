"""Hypothesis profiles: ``ci`` (default: few examples) and ``nightly``; torch trips deadlines at
random, so every profile sets ``deadline=None``. Pick one with ``HYPOTHESIS_PROFILE``."""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Without a GPU, Triton kernels run only in Triton's interpreter, which must be on before the first
# kernel is decorated (pmverify imports its kernels on first use).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

settings.register_profile(
    "ci", max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile("dev", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "nightly",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def finding_only():
    """A context manager running ``verify`` without shrinking and without the example database:
    tests that need a finding within the profile's examples, not the smallest case (shrinking
    re-traces patterns hundreds of times), and that a database entry from an earlier run must not
    let pass without searching."""
    from pmverify._verify import fresh_search

    return lambda: fresh_search(shrink=False)
