"""Passes built from a config (vLLM's ``Pass(vllm_config)``): ``verify(pass_factory=...)``, fuzz
targets naming a factory, reproducers that rebuild the pass from it and import the modules that
registered the graph's custom ops, and ``reproducer_prelude=``."""

import pathlib
import subprocess
import sys

import pytest
import torch
from _factory_passes import (
    MulFoldPass,
    make_mul_fold_pass,
    mul_case,
    mul_fold_pass_for,
    source_only_uuid_pass_for,
)
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import pmverify
from pmverify import GraphCase, PassVerificationError, check_case, verify
from pmverify._findings.reproducer import render


def _run(path, cwd):
    """Run a reproducer in a fresh interpreter from ``cwd`` (not the folder it was written from)."""
    return subprocess.run([sys.executable, str(path)], cwd=cwd, capture_output=True, text=True, timeout=300)


def _user_op_case():
    import _registered_ops  # noqa: F401 - registers torch.ops.pmverify_user

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    tripled = graph.call_function(torch.ops.pmverify_user.triple.default, (x,))
    halved = graph.call_function(torch.ops.pmverify_user.halve.default, (tripled,))
    graph.output((graph.call_function(torch.ops.pmverify_user_lib.quarter.default, (halved,)),))
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), graph), [(torch.linspace(-2.0, 2.0, 4),)])


def test_a_reproducer_rebuilds_the_pass_from_its_factory(tmp_path):
    """vLLM-style: a pass built from a config object with no Python repr and a ``uuid()``; the
    factory lives in a test module, which the script cannot import by name: it loads its file."""
    with pytest.raises(PassVerificationError) as info:
        verify(pass_factory=make_mul_fold_pass, cases=st.just(mul_case()), max_examples=1, repro_dir=tmp_path)
    error = info.value
    assert "MulFoldPass broke" in str(error) and "edit PASS" not in str(error)
    assert "PASS_FACTORY = _pmverify_import('_factory_passes'" in error.reproducer.read_text()
    run = _run(error.reproducer, tmp_path)
    assert run.returncode == 1, run.stderr[-2000:]
    assert (
        "VIOLATION semantics: output 0" in run.stdout and "1 violation(s); 1 when this script was written" in run.stdout
    )


def test_a_reproducer_imports_the_module_that_registered_the_graphs_custom_ops(tmp_path):
    """The graph holds ops of ``tests/_registered_ops.py`` (a ``Library.define``, a
    ``torch.library.custom_op``, one defined through another module's library as vLLM does): the
    script imports that module before it builds the graph."""
    from _factory_passes import triple_to_double

    with pytest.raises(PassVerificationError) as info:
        verify(triple_to_double, st.just(_user_op_case()), max_examples=1, repro_dir=tmp_path)
    source = info.value.reproducer.read_text()
    assert source.index("# registers torch.ops.pmverify_user") < source.index("def build_graph")
    run = _run(info.value.reproducer, tmp_path)
    assert run.returncode == 1, run.stderr[-2000:]
    assert "VIOLATION semantics: output 0" in run.stdout


def test_where_torch_library_recorded_a_custom_op():
    import _registered_ops
    import _user_op_library

    from pmverify._findings.factory import op_origins

    assert op_origins("pmverify_user::triple") == [("_registered_ops", _registered_ops.__file__)]  # Library.define
    assert op_origins("pmverify_user::halve") == [
        ("_registered_ops", _registered_ops.__file__)
    ]  # torch.library.custom_op
    # vLLM's direct_register_custom_op: the module of its fake function, and the library's
    assert op_origins("pmverify_user_lib::quarter") == [
        ("_registered_ops", _registered_ops.__file__),
        ("_user_op_library", _user_op_library.__file__),
    ]
    assert op_origins("aten::add") == []


def test_a_factory_is_called_like_a_class():
    """With the case's ``pass_config`` when it takes an argument and the case carries one, else
    with none; per case, a fresh pass."""
    taking = check_case(pass_factory=mul_fold_pass_for, case=mul_case(3.0, pass_config={"scale": 3.0}))
    assert taking.pair.pass_.scale == 3.0 and not taking.violations
    plain = check_case(pass_factory=make_mul_fold_pass, case=mul_case(2.0, pass_config={"scale": 3.0}))
    assert isinstance(plain.pair.pass_, MulFoldPass) and plain.pair.pass_.scale == 2.0 and not plain.violations


def test_the_cache_key_oracle_builds_other_configs_with_the_factory():
    """The pass's class does not take the case's config (``MulFoldPass({"scale": 3.0})`` raises):
    the oracle builds the variants with the factory, and finds the uuid that ignores the scale."""
    case = mul_case(3.0, pass_config={"scale": 3.0})
    found = check_case(pass_factory=source_only_uuid_pass_for, case=case, oracles=["cache_key"])
    assert [v.oracle for v in found.violations] == ["cache_key"] and "scale (3.0 vs 6.0)" in found.violations[0].message
    assert not found.internal_errors
    assert not check_case(pass_factory=mul_fold_pass_for, case=case, oracles=["cache_key"]).violations


def _local_factory():
    def build():
        return make_mul_fold_pass()

    return build


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pass_factory": lambda: make_mul_fold_pass()}, "pass_factory=.*cannot be imported by its module path"),
        ({"pass_factory": _local_factory()}, "pass_factory=.*cannot be imported by its module path"),
        ({"pass_factory": MulFoldPass}, "pass_factory=.*is a class"),
        ({"pass_factory": 3}, "pass_factory=3 is not callable"),
        ({"pass_": make_mul_fold_pass(), "pass_factory": make_mul_fold_pass}, "give exactly one"),
        ({"pass_factory": make_mul_fold_pass, "reproducer_prelude": 3}, "reproducer_prelude=3 must be a str"),
    ],
)
def test_bad_pass_factory_arguments(kwargs, message):
    """(Neither a pass nor a factory is a ``TypeError``, as any other non-pass: tests/test_verify.py.)"""
    with pytest.raises(InvalidArgument, match=message):
        verify(cases=st.just(mul_case()), **kwargs)
    if "reproducer_prelude" not in kwargs:
        with pytest.raises(InvalidArgument, match=message):
            check_case(case=mul_case(), **kwargs)


def test_the_prelude_runs_first_then_the_imports_then_the_pass_then_the_graph():
    """Exit 1 means only that the violation reproduces: what the case and the pass need is imported
    and built before the graph, each step exiting 2 when it fails."""
    from _factory_passes import triple_to_double

    source = render(_user_op_case(), triple_to_double, [], prelude="os.environ['MY_FLAG'] = '1'")
    steps = [
        "os.environ['MY_FLAG']",
        "# registers torch.ops.pmverify_user",
        "PASS = triple_to_double",
        "CASE = GraphCase(",
    ]
    assert [source.index(step) for step in steps] == sorted(source.index(step) for step in steps)
    assert 'print(f"cannot rebuild the case: {exc!r}", file=sys.stderr)' in source
    assert "pmverify could not check the case: nothing was checked" in source  # check_case raising: exit 2
    compile(source, "repro.py", "exec")
    from pmverify._findings.factory import PassFactory

    factory = PassFactory(make_mul_fold_pass, "_factory_passes", "make_mul_fold_pass", None)
    assert "pass_factory=PASS_FACTORY" in render(mul_case(), factory, [])


def test_fuzz_target_naming_a_pass_factory():
    from pmverify._findings.factory import PassFactory
    from pmverify._job.targets import FuzzTarget, TargetError, load

    target = load("_factory_passes:make_mul_fold_pass", "_factory_passes:mul_cases")
    assert isinstance(target.pass_, PassFactory) and target.pass_.fn is make_mul_fold_pass
    assert [name for name, _ in target.families] == ["_factory_passes:mul_cases"]
    with pytest.raises(TargetError, match="built float: neither a FuzzTarget nor a pass"):
        load("math:tau.__float__", "_factory_passes:mul_cases")
    with pytest.raises(ValueError, match="pass_factory=.*cannot be imported"):
        FuzzTarget(pass_factory=lambda: None, families=[("mul", st.just(mul_case()))])
    with pytest.raises(ValueError, match="give exactly one"):
        FuzzTarget(families=[("mul", st.just(mul_case()))])
    assert pmverify.FuzzTarget(pass_factory=mul_fold_pass_for, families=[("mul", st.just(mul_case()))]).pass_ is None


@pytest.mark.slow  # end to end: a script's own factory, and a graph the script cannot rebuild
def test_a_factory_defined_in_the_main_script_is_loaded_from_its_file(tmp_path):
    script = tmp_path / "my_check.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
        "from hypothesis import strategies as st\n"
        "import pmverify\n"
        "from _factory_passes import MulFoldPass, VllmLikeConfig, ModelConfig, mul_case\n\n"
        "def make():\n"
        "    return MulFoldPass(VllmLikeConfig(ModelConfig(scale=5.0)))\n\n"
        "if __name__ == '__main__':\n"
        "    try:\n"
        f"        pmverify.verify(pass_factory=make, cases=st.just(mul_case()), max_examples=1, repro_dir={str(tmp_path)!r})\n"
        "    except pmverify.PassVerificationError as error:\n"
        "        print('REPRO', error.reproducer)\n"
    )
    made = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    repro = next(line.split(" ", 1)[1] for line in made.stdout.splitlines() if line.startswith("REPRO"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = _run(repro, elsewhere)
    assert run.returncode == 1 and "VIOLATION semantics" in run.stdout, run.stderr[-2000:]
    source = pathlib.Path(repro).read_text()
    pathlib.Path(repro).write_text(source.replace("        gm=build_graph(),", "        gm=build_graph(missing),"))
    run = _run(repro, elsewhere)
    assert run.returncode == 2 and "cannot rebuild the case: NameError" in run.stderr


@pytest.mark.slow  # end to end: a fuzz job (its worker rebuilds the pass from the factory) and its reproducer
def test_pmverify_fuzz_with_a_pass_factory_target(tmp_path):
    import json
    import os

    here = pathlib.Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])}
    report = tmp_path / "r.json"
    argv = ["fuzz", "--target", "_factory_passes:make_mul_fold_pass", "--cases", "_factory_passes:mul_cases"]
    argv += ["--max-examples", "6", "--no-real-model", "--progress", "plain", "--report", str(report)]
    argv += ["--db", str(tmp_path / "db"), "--repro-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "pmverify", *argv], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (run,) = json.loads(report.read_text())["targets"]
    (finding,) = run["findings"]
    assert finding["violations"][0]["oracle"] == "semantics" and not run["errors"]
    run = _run(finding["reproducer"], tmp_path)
    assert run.returncode == 1 and "VIOLATION semantics" in run.stdout, run.stderr[-2000:]


def test_a_reproducer_imports_a_module_of_a_package_from_its_file(tmp_path, monkeypatch):
    """A pass in a package that is not on ``sys.path`` (``tests/_vllm_style/graph_passes.py``, with
    relative imports) is imported from the folder holding the package, not loaded alone."""
    import sys

    from pmverify._findings.factory import IMPORT_HELPER

    package = tmp_path / "pmv_pkg_t29"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "other.py").write_text("VALUE = 29\n")
    (package / "passes.py").write_text("from .other import VALUE\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    namespace = {"sys": sys, "os": __import__("os")}
    exec(IMPORT_HELPER, namespace)
    try:
        module = namespace["_pmverify_import"]("pmv_pkg_t29.passes", str(package / "passes.py"))
        assert module.VALUE == 29
    finally:
        for name in [n for n in sys.modules if n.startswith("pmv_pkg_t29")]:
            del sys.modules[name]
