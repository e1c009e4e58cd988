"""The suite runs under pmverify's own pytest plugin (``pytest_pmverify.py``): its ``ci`` profile by
default (``pmverify_profile`` in pyproject.toml: 15 examples a test, seed 0 pinned per test), another
with ``--pmverify-profile dev|nightly`` or ``PMVERIFY_PROFILE`` (``HYPOTHESIS_PROFILE`` still works)."""

import contextlib
import os

import pytest

# The kernel tests run pmverify's Triton kernels on CPU tensors, in Triton's interpreter, which must
# be on before triton is first imported (torch._inductor imports it); on a GPU machine too, where the
# compiled kernels are checked by benchmarks/qk_norm_gpu.py (and their compilation, for sm_90, by
# tests/fusions/test_qk_norm_kernel_compile.py). Set another value only with a GPU.
os.environ.setdefault("TRITON_INTERPRET", "1")

# This suite's older name for $PMVERIFY_PROFILE, which the plugin reads when it configures pytest.
if os.environ.get("HYPOTHESIS_PROFILE"):
    os.environ.setdefault("PMVERIFY_PROFILE", os.environ["HYPOTHESIS_PROFILE"])


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("pmverify"):
        raise pytest.UsageError(
            "pmverify's pytest plugin is not registered (its pytest11 entry point): reinstall, "
            "pip install --no-deps -e ., and do not disable it with -p no:pmverify"
        )


@pytest.fixture
def finding_only():
    """A context manager running ``verify`` without shrinking and without the example database:
    tests that need a finding within the profile's examples, not the smallest case (shrinking
    re-traces patterns hundreds of times), and that a database entry from an earlier run must not
    let pass without searching. (pmverify itself takes settings objects, ``verify(settings=
    fresh_settings(...))``; these tests call it as a user would, under the active profile.)"""
    from hypothesis import settings

    from pmverify._engine.verify import fresh_settings

    @contextlib.contextmanager
    def fresh():
        previous = settings.default
        settings.register_profile("pmverify-test-finding-only", fresh_settings(previous, shrink=False))
        settings.load_profile("pmverify-test-finding-only")
        try:
            yield
        finally:
            settings.register_profile("pmverify-test-restored", previous)
            settings.load_profile("pmverify-test-restored")

    return fresh
