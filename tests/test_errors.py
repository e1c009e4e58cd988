"""``pmverify.errors`` holds every exception and warning class a user sees, torch-free, and the
old import paths name the same classes."""

import subprocess
import sys

import pytest

import pmverify
import pmverify.errors as errors

#: name -> the modules it was importable from before ``pmverify.errors`` (they still work)
OLD_PATHS = {
    "VacuousSearch": ["pmverify._findings.summary", "pmverify"],
    "RewriteNeverMatched": ["pmverify._findings.summary", "pmverify"],
    "RewriteUnsatisfiable": ["pmverify._findings.summary", "pmverify"],
    "RewriteNotComparable": ["pmverify._findings.summary", "pmverify"],
    "AllCasesVoid": ["pmverify._findings.summary", "pmverify"],
    "PmverifyWarning": ["pmverify._findings.summary", "pmverify"],
    "UnfusedWarning": ["pmverify._findings.summary", "pmverify"],
    "PmverifyInternalError": ["pmverify.oracles", "pmverify.oracles._violation", "pmverify"],
    "PassVerificationError": ["pmverify._engine.verify", "pmverify"],
    "SymbolizeError": ["pmverify._shapes.symbolic"],
    "UncompilableCase": ["pmverify._engine.apply"],
    "TargetError": ["pmverify._job.targets", "pmverify._job"],
    "SourceError": ["pmverify._audit.sources"],
    "SPMDError": ["pmverify.distributed"],
    "SPMDTimeoutError": ["pmverify.distributed"],
    "InternalMoved": ["pmverify._compat"],
    "InvalidArgument": ["hypothesis.errors"],
    "DeviceUnavailable": ["pmverify.device", "pmverify"],
}


@pytest.mark.parametrize("name", sorted(OLD_PATHS))
def test_every_error_is_in_pmverify_errors_and_at_its_old_path(name):
    import importlib

    cls = getattr(errors, name)
    assert isinstance(cls, type) and issubclass(cls, (Exception, Warning))
    for module in OLD_PATHS[name]:
        assert getattr(importlib.import_module(module), name) is cls, module


def test_pmverify_errors_lists_each_exception_of_the_public_api():
    assert set(errors.__all__) == set(OLD_PATHS)
    public = {name for name in pmverify.__all__ if isinstance(getattr(pmverify, name), type)}
    raised = {name for name in public if issubclass(getattr(pmverify, name), (Exception, Warning))}
    assert raised <= set(errors.__all__), raised - set(errors.__all__)


def test_dir_of_pmverify_errors_is_its_public_names():
    assert {name for name in dir(errors) if not name.startswith("__")} == set(errors.__all__)


def test_import_pmverify_errors_does_not_import_torch():
    code = "import sys, pmverify.errors as e\nassert e.VacuousSearch and 'torch' not in sys.modules\nprint('ok')"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]
