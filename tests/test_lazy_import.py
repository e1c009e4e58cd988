"""``import pmverify`` imports no torch until a public name needs it (PEP 562), and the package's
names are all there for ``dir()`` and ``from pmverify import *``."""

import subprocess
import sys


def test_import_pmverify_does_not_import_torch_until_a_name_needs_it():
    code = (
        "import sys, pmverify\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith(('torch', 'pmverify')))\n"
        "assert set(pmverify.__all__) <= set(dir(pmverify)) and pmverify.__version__\n"
        "assert not {'Any', 'TYPE_CHECKING', '_WHERE'} & set(dir(pmverify)), dir(pmverify)\n"
        "verify = pmverify.verify\n"
        "assert 'torch' in sys.modules and verify.__module__ == 'pmverify._engine.verify'\n"
        "assert pmverify.verify is verify and 'verify' in vars(pmverify)\n"
        "try:\n"
        "    pmverify.no_such_name\n"
        "except AttributeError as exc:\n"
        "    assert \"no attribute 'no_such_name'\" in str(exc)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
        "ns = {}\n"
        "exec('from pmverify import *', ns)\n"
        "assert set(pmverify.__all__) <= set(ns)\n"
        "print('ok')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]
