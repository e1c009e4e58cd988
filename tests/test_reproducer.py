"""Reproducer scripts are valid Python whatever the violation text holds."""

import operator
import re

import pytest
import torch

from pmverify import GraphCase, Violation
from pmverify._findings.reproducer import pass_recipe, render
from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass


def _case():
    from torch._inductor.pattern_matcher import fwd_only

    x = torch.randn(2, 3)
    return GraphCase(fwd_only(lambda x: x.sin() * float("inf"), [x]), [(x,)])


def test_violation_text_with_newlines_braces_and_quotes_compiles():
    nasty = Violation("crash", 'the pass raised RuntimeError: bad {q_size}\n  """ \\ \' "second line"')
    source = render(_case(), QKNormFusionPass(QKNormConfig(8, 4)), [nasty])
    compile(source, "repro.py", "exec")
    assert "{q_size}" in source


def test_a_reproducer_imports_pmverify_public_names_only():
    source = render(_case(), QKNormFusionPass(QKNormConfig(8, 4)), [Violation("crash", "x")])
    imported = re.findall(r"^\s*(?:from|import) (pmverify\S*)", source, re.M)
    assert "pmverify" in imported and not [name for name in imported if "._" in name], imported
    assert "from pmverify import GraphCase, MutationSite, PlantedInstance, check_case" in source


def test_pass_recipes():
    config = QKNormConfig(8, 4)
    assert pass_recipe(QKNormFusionPass)[1] == "QKNormFusionPass"
    assert pass_recipe(QKNormFusionPass(config))[1].startswith("QKNormFusionPass(QKNormConfig(q_size=8")
    assert pass_recipe(lambda graph: None) is None
    from torch._inductor.pattern_matcher import PatternMatcherPass

    assert pass_recipe(PatternMatcherPass()) is None  # its patterns cannot be rebuilt from outside
    # an instance of a class built with no argument (README's recipe): nothing to lose rebuilding it
    # tests/_rms_passes.py is not importable by name from the working directory (the root): the
    # script loads it by name, else from its file
    import _rms_passes
    from _rms_passes import MyRMSNormPass

    assert pass_recipe(MyRMSNormPass()) == (
        [f"MyRMSNormPass = _pmverify_import('_rms_passes', {_rms_passes.__file__!r}).MyRMSNormPass"],
        "MyRMSNormPass()",
    )
    assert pass_recipe(QKNormFusionPass)[0] == ["from pmverify.fusions.qk_norm.fusion_pass import QKNormFusionPass"]


class _Scaled:
    def __init__(self, scale=2.0):
        self.scale = scale


def test_an_instance_built_with_arguments_is_not_rebuilt_without_them():
    assert pass_recipe(_Scaled(3.0)) is None


def test_a_hang_reproducer_stops_with_exit_1_after_the_timeout_and_a_crash_one_says_it_dies():
    hang = render(_case(), QKNormFusionPass, [], hang_s=10.0)
    assert "faulthandler.dump_traceback_later(10.0, exit=True)" in hang and "exits 1 when the pass still hangs" in hang
    assert "dies as the pass made its process die" in render(_case(), QKNormFusionPass, [], dies=True)
    compile(hang, "repro.py", "exec")


def test_a_reproducer_says_what_it_runs_before_running_it():
    script = render(_case(), QKNormFusionPass, [])
    before = script.index(
        'print(f"running pass {name} on case {CASE!r}, then the oracles", file=sys.stderr, flush=True)'
    )
    assert script.index("faulthandler.enable()") < before < script.index("result = check_case(")


@pytest.mark.slow  # end to end: runs in the slow step
def test_a_reproducer_of_a_pass_that_aborts_names_the_pass_and_the_case_first(tmp_path):
    import subprocess
    import sys

    from pmverify._findings.reproducer import write

    source = "import os\n\n\ndef PASS(graph):\n    os.abort()\n"
    path = write(_case(), QKNormFusionPass, [], tmp_path, pass_source=source, dies=True)
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode in (134, -6), run.stderr
    assert "running pass PASS on case GraphCase(" in run.stderr and "Fatal Python error: Aborted" in run.stderr


def test_unimportable_oracle_is_refused():
    with pytest.raises(ValueError, match="cannot be imported by a reproducer"):
        render(_case(), QKNormFusionPass, [], oracles=[lambda pair: []])
    assert "oracles=['semantics']" in render(_case(), QKNormFusionPass, [], oracles="semantics")


@pytest.mark.slow  # end to end: runs in the slow step
def test_reproducer_runs_from_elsewhere_and_exits_2_when_it_cannot_import(tmp_path, monkeypatch):
    """The folder the script was written from is on its path (the pass's module imports from any
    folder); a pass module that cannot be imported exits 2, not 1 (1 means "still wrong")."""
    import subprocess
    import sys

    from pmverify._findings.reproducer import write

    project = tmp_path / "project"
    project.mkdir()
    (project / "my_identity_pass.py").write_text("def identity(graph):\n    return None\n")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    import my_identity_pass

    path = write(_case(), my_identity_pass.identity, [], tmp_path / "repros", oracles=["semantics"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run([sys.executable, str(path)], cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    (project / "my_identity_pass.py").unlink()
    run = subprocess.run([sys.executable, str(path)], cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "cannot import" in run.stderr


def test_reproducer_exits_2_when_the_pass_cannot_be_built(tmp_path):
    import subprocess
    import sys

    from pmverify._findings.reproducer import write

    path = write(_case(), QKNormFusionPass, [], tmp_path, pass_source="PASS = None\nraise RuntimeError('no GPU')")
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "cannot build the pass: RuntimeError('no GPU')" in run.stderr


def test_reproducer_keeps_the_fused_ops_implementation(monkeypatch):
    """A finding made with the kernels behind the fused ops replays with them; and without a GPU the
    script turns Triton's interpreter on (the only way kernels run on CPU)."""
    monkeypatch.setenv("PMVERIFY_QK_NORM_IMPL", "triton")
    source = render(_case(), QKNormFusionPass(QKNormConfig(8, 4)), [Violation("semantics", "off")])
    assert "os.environ['PMVERIFY_QK_NORM_IMPL'] = 'triton'" in source
    assert 'os.environ["TRITON_INTERPRET"] = "1"' in source
    monkeypatch.delenv("PMVERIFY_QK_NORM_IMPL")
    assert "PMVERIFY_QK_NORM_IMPL" not in render(_case(), QKNormFusionPass(QKNormConfig(8, 4)), [])


def test_ops_that_import_torch_does_not_register_are_imported():
    """Inductor's training patterns hold ``prims.fma``, registered by torch._inductor.inductor_prims
    only: the script imports it (a fresh ``import torch`` has no torch.ops.prims.fma)."""
    import torch._inductor.inductor_prims  # noqa: F401 - registers prims.fma here

    graph = torch.fx.Graph()
    a, b, c = (graph.placeholder(name) for name in "abc")
    graph.output((graph.call_function(torch.ops.prims.fma.default, (a, b, c)),))
    x = torch.randn(3)
    source = render(GraphCase(torch.fx.GraphModule(torch.nn.Module(), graph), [(x, x, x)]), QKNormFusionPass, [])
    assert "import torch._inductor.inductor_prims" in source and "torch.ops.prims.fma.default" in source
    compile(source, "repro.py", "exec")


@pytest.mark.slow  # end to end: runs in the slow step
def test_a_symbolic_case_round_trips_and_its_finding_reproduces(tmp_path, monkeypatch):
    """The script of a symbolic case rebuilds its ``Sym`` placeholder, the size arithmetic
    (``2 * s0``) and ``symbols=`` / ``input_dims=``: the rebuilt case is symbolic, and a pass that
    bakes the hint into a view is found again, at the same sizes."""
    import subprocess
    import sys

    from _symbolic_cases import doubled_view_case

    from pmverify import check_case
    from pmverify._findings.reproducer import write

    case = doubled_view_case()
    assert case.dynamic
    project = tmp_path / "project"
    project.mkdir()
    (project / "baking_pass.py").write_text(
        "import torch\n\n\n"
        "def bake(graph):\n"
        "    for node in graph.find_nodes(op='call_function', target=torch.ops.aten.view.default):\n"
        "        sizes = [int(s.meta['val']) if isinstance(s, torch.fx.Node) else s for s in node.args[1]]\n"
        "        node.args = (node.args[0], sizes)\n"
    )
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    import baking_pass

    found = check_case(baking_pass.bake, case, oracles=["semantics", "structure"]).violations
    assert any(v.message.startswith("at s0=2: ") for v in found)
    path = write(case, baking_pass.bake, found, tmp_path / "repros", oracles=["semantics", "structure"])
    source = path.read_text()
    assert "operator.mul, (2, N['s0'])" in source and "symbols=(Symbol(name='s0', hint=11" in source
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr[-2000:]
    assert sorted(line for line in run.stdout.splitlines() if line.startswith("VIOLATION")) == sorted(
        f"VIOLATION {v}" for v in found
    )


def _frozen_case():
    """``mm(x, w) + b`` with ``w`` a bfloat16 frozen parameter (a ``get_attr`` node), as
    ``expr_cases(frozen=True)`` draws them."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    w = g.get_attr("_frozen_param0")
    g.output((g.call_function(torch.ops.aten.mm.default, (x, w)),))
    root = torch.nn.Module()
    root.register_buffer("_frozen_param0", torch.randn(4, 3, dtype=torch.bfloat16))
    x = torch.randn(2, 4, dtype=torch.bfloat16)
    return GraphCase(torch.fx.GraphModule(root, g), [(x,)])


def test_torch_functions_of_a_pre_grad_graph_round_trip(tmp_path):
    """Pre-grad graphs call ``torch.unbind`` / ``torch.stack``, builtins whose qualified name is
    ``_VariableFunctionsClass.unbind``, which ``torch`` does not export: the script calls them as
    ``torch.unbind`` (split_cat's reproducers exited 2 on the import)."""
    import runpy

    from pmverify._findings.reproducer import write

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    first = graph.call_function(operator.getitem, (graph.call_function(torch.unbind, (x,), {"dim": 0}), 0))
    graph.output((graph.call_function(torch.stack, ([first, first],), {"dim": 0}),))
    case = GraphCase(torch.fx.GraphModule(torch.nn.Module(), graph), [(torch.randn(2, 3),)])
    path = write(case, lambda graph: None, [], tmp_path, oracles=["semantics"])
    assert "torch.unbind" in path.read_text() and "_VariableFunctionsClass" not in path.read_text()
    rebuilt = runpy.run_path(str(path), run_name="not_main")["CASE"]
    assert torch.equal(rebuilt.gm(*rebuilt.inputs[0])[0], case.gm(*case.inputs[0])[0])


def test_a_case_with_frozen_parameters_round_trips(tmp_path):
    """A ``get_attr`` node is written with the constant it reads (saved as the inputs are)."""
    import runpy

    from pmverify._findings.reproducer import write

    case = _frozen_case()
    path = write(case, lambda graph: None, [], tmp_path, oracles=["semantics"])
    rebuilt = runpy.run_path(str(path), run_name="not_main")["CASE"]
    assert torch.equal(rebuilt.gm._frozen_param0, case.gm._frozen_param0)
    assert torch.equal(rebuilt.gm(*rebuilt.inputs[0])[0], case.gm(*case.inputs[0])[0])


def test_a_finding_on_a_graph_that_draws_reproduces(monkeypatch, capsys):
    """A dropout-style graph (``rand`` without a dtype, ``bernoulli``, ``native_dropout``) and a
    wrong pass keeping every draw, found on a graph with fake values: the script rebuilds it without them, replays the
    draws from the state the search ran from and exits 1 with the search's violation (it exited 0,
    calling the replay not comparable)."""
    from _random_graphs import drawing_graph

    from pmverify import check_case
    from pmverify._execution import propagate_fake

    case = GraphCase(drawing_graph(), [(torch.rand(4, 8),)])
    propagate_fake(case.gm, case.inputs[0])  # the search's graph has fake values, as a traced one does
    wrong = (
        "def PASS(graph):\n"
        "    for node in graph.find_nodes(op='call_function', target=torch.ops.aten.mul.Tensor):\n"
        "        node.target = torch.ops.aten.div.Tensor\n"
    )
    found = check_case(lambda graph: exec(wrong + "PASS(graph)", {"torch": torch, "graph": graph}), case).violations
    assert [v.oracle for v in found] == ["semantics"]
    source = render(case, None, found, pass_source=wrong)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # the script prepends its folders
    monkeypatch.setattr("faulthandler.enable", lambda *args, **kwargs: None)  # no file descriptor under capsys
    with pytest.raises(SystemExit) as info:
        exec(compile(source, "repro.py", "exec"), {"__name__": "__main__"})  # noqa: S102 - the script under test
    assert info.value.code == 1
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("VIOLATION")] == [
        f"VIOLATION {v}" for v in found
    ]
