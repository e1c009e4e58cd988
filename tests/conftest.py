"""Hypothesis profiles: ``ci`` (default: few examples) and ``nightly``; torch trips deadlines at
random, so every profile sets ``deadline=None``. Pick one with ``HYPOTHESIS_PROFILE``."""

import os

import pytest
from hypothesis import HealthCheck, settings

# The kernel tests run pmverify's Triton kernels on CPU tensors, in Triton's interpreter, which must
# be on before triton is first imported (torch._inductor imports it); on a GPU machine too, where the
# compiled kernels are checked by benchmarks/qk_norm_gpu.py (and their compilation, for sm_90, by
# tests/fusions/test_qk_norm_kernel_compile.py). Set another value only with a GPU.
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
