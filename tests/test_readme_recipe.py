"""README's "Testing your own pass" recipe, run as written (its import of the user's pass module
pointed at tests/_rms_passes.py): no finding on a correct pass that registers eps through
scalar_workaround, a semantics finding with a reproducer on one whose replacement hard-codes eps."""

import pathlib
import re

import pytest

import pmverify

README = pathlib.Path(__file__).parents[1] / "README.md"


def _recipe() -> dict:
    section = README.read_text().split("## Testing your own pass", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "from my_project.passes import" in code
    code = code.replace("from my_project.passes import", "from _rms_passes import")
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)
    return namespace


def test_the_recipe_passes_a_correct_pass(finding_only):
    recipe = _recipe()
    with finding_only():
        recipe["test_my_pass"]()


def test_the_recipe_finds_a_hard_coded_eps(finding_only, tmp_path, monkeypatch):
    from _rms_passes import HardCodedEpsPass

    monkeypatch.setenv("PMVERIFY_REPRO_DIR", str(tmp_path))
    recipe = _recipe()
    recipe["MyRMSNormPass"] = HardCodedEpsPass
    with finding_only(), pytest.raises(pmverify.PassVerificationError) as raised:
        recipe["test_my_pass"]()
    assert {v.oracle for v in raised.value.violations} == {"semantics"}
    assert raised.value.reproducer is not None and raised.value.reproducer.is_file()
    assert "PASS = HardCodedEpsPass()" in raised.value.reproducer.read_text()  # it runs as written


def _dynamic_recipe() -> dict:
    section = README.read_text().split("## Dynamic shapes", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace("from my_project.passes import", "from _rms_passes import")
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)
    return namespace


@pytest.mark.slow  # 15 symbolic cases at four sizes each: ~40 s on 2 cores
def test_the_dynamic_recipe_passes_a_correct_pass_on_symbolic_cases(finding_only):
    recipe = _dynamic_recipe()
    case = recipe["dynamic_cases"].example()
    assert case.symbols and case.symbols[0].name == "s0"
    with finding_only():
        recipe["test_my_pass_on_symbolic_token_counts"]()
