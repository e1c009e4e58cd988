"""Standalone reproducers: a failing case written as a Python script.

The script rebuilds the exact graph (node by node, names kept, so the ground truth of planted
instances still applies; a symbolic case's ``Sym`` placeholders and size arithmetic included, with its
``symbols=`` and ``input_dims=``, so the rebuilt case is symbolic: ``check_case`` propagates its fake
values symbolically again, no fake value is written), loads the exact inputs (embedded, base64 of ``torch.save``), rebuilds the
pass, runs :func:`pmverify.check_case` and prints the violations. It exits 1 while the pass is
wrong, 0 once it is fixed, and 2 when it cannot check anything, in a fresh interpreter. In order: the
prelude (``verify(reproducer_prelude=)``, a fuzz target's, the pass's own), the imports (the
modules that registered the graph's custom ops, :func:`pmverify._findings.factory.op_origins`; the pass's),
the pass (or its factory), then the case: each step exits 2 when it fails (a module that does not
import, ``PASS`` to be edited in, a graph whose ops are missing), and so does ``check_case``
raising, so that 1 means only that the violation reproduces.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import inspect
import io
import math
import operator
import os
import pathlib
import textwrap
from collections.abc import Sequence
from typing import Any

import torch

from .._case import GraphCase
from .._fx import GRADIENT_OUTPUTS
from .factory import IMPORT_HELPER, PassFactory, import_code, op_origins

__all__ = ["render", "write", "write_picture", "pass_recipe", "rebuildable", "import_source", "default_repro_dir"]


def _version() -> str:
    """pmverify's installed version (read from its metadata: this module does not import the
    package root, which imports the engine that imports it)."""
    from importlib import metadata

    try:
        return metadata.version("pmverify")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def pass_prelude(pass_: Any) -> str:
    """The reproducer prelude ``pass_`` declares: what its ``reproducer_prelude()`` (a method, a
    static or class method of a pass class) returns, Python lines a script runs after ``import
    torch`` and before pmverify is imported (e.g. turning Triton's interpreter on); ``""`` when it
    declares none."""
    declared = getattr(pass_, "reproducer_prelude", None)
    if not callable(declared):
        return ""
    try:
        return str(declared())
    except TypeError:  # an instance method looked up on the class: the class declares no static prelude
        return ""


def default_repro_dir() -> pathlib.Path:
    """``$PMVERIFY_REPRO_DIR``, else ``.pmverify/reproducers`` under the working directory."""
    return pathlib.Path(os.environ.get("PMVERIFY_REPRO_DIR", ".pmverify/reproducers"))


def _by_name(module: str) -> bool:
    """Whether a script finds ``module`` by its name: a module of an installed package or of the
    standard library, or one under the working directory (the script puts it on its path)."""
    import sysconfig

    file = _module_file(module)
    if file is None:
        return True  # a built-in or namespace module
    base = os.path.join(os.getcwd(), *module.split("."))
    if file in (base + ".py", os.path.join(base, "__init__.py")):
        return True
    installed = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    return any(file.startswith(os.path.abspath(root) + os.sep) for root in installed)


def _module_file(module: str) -> str | None:
    import sys

    path = getattr(sys.modules.get(module), "__file__", None)
    return os.path.abspath(path) if path else None


def _import_of(obj: Any) -> tuple[str, str]:
    """(import line, expression) for a module-level class or function: ``from MODULE import NAME``
    where a script finds its module by name (:func:`_by_name`), else ``NAME = _pmverify_import(...)``
    (by name, else from its file: a test module, the ``__main__`` script)."""
    module, qualname = obj.__module__, obj.__qualname__
    if "<" in qualname:
        raise ValueError(f"{obj!r} is not importable from a module")
    top = qualname.split(".")[0]
    if module != "__main__" and _by_name(module):
        return f"from {module} import {top}", qualname
    file = _module_file(module)
    if file is None:
        raise ValueError(f"{obj!r} is not importable from a module")
    return f"{top} = {import_code(module, file, top)}", qualname


def _evaluable(expr: str, imports: Sequence[str]) -> bool:
    namespace: dict[str, Any] = {}
    try:
        exec("import os\nimport sys\nimport torch\n" + IMPORT_HELPER + "\n".join(imports), namespace)  # noqa: S102 - our own generated imports
        eval(expr, namespace)  # noqa: S307
    except Exception:  # noqa: BLE001
        return False
    return True


def _object_recipe(obj: Any) -> tuple[list[str], str] | None:
    """Imports and an expression rebuilding ``obj`` from its repr, when that works."""
    if obj is None:
        return [], "None"
    try:
        line, _ = _import_of(type(obj))
    except ValueError:
        return None
    expr = repr(obj)
    return ([line], expr) if _evaluable(expr, [line]) else None


def pass_recipe(pass_: Any) -> tuple[list[str], str] | None:
    """Imports and an expression that rebuild ``pass_`` in a fresh interpreter, or None.

    A class or a module-level function is imported; an instance with a ``config`` whose repr
    evaluates is rebuilt as ``type(pass_)(config)``; an instance of a class whose constructor
    takes no argument (nothing it was built with can be lost) as ``type(pass_)()``. Anything else
    (a ``PatternMatcherPass``, a closure, an object built with arguments) cannot be rebuilt from
    outside: None.
    """
    try:
        if isinstance(pass_, type) or inspect.isfunction(pass_):
            line, expr = _import_of(pass_)
            return [line], expr
        line, cls_expr = _import_of(type(pass_))
    except ValueError:
        return None
    config = getattr(pass_, "config", None)
    if config is not None:
        recipe = _object_recipe(config)
        if recipe is not None:
            return [line, *recipe[0]], f"{cls_expr}({recipe[1]})"
        return None
    try:
        takes = inspect.signature(type(pass_)).parameters
    except (TypeError, ValueError):
        return None
    return ([line], f"{cls_expr}()") if not takes else None


def rebuildable(pass_: Any) -> bool:
    """Whether a script rebuilds ``pass_`` by itself: a pass factory, or a pass with a
    :func:`pass_recipe`."""
    return isinstance(pass_, PassFactory) or pass_recipe(pass_) is not None


def import_source(spec: str) -> str:
    """``PASS = ...`` code importing the object ``MODULE:ATTRIBUTE`` names (the attribute may be
    dotted), for a pass given by name (``pmverify fuzz --target``): the script gets the very object."""
    module, _, attribute = spec.partition(":")
    top = attribute.split(".")[0]
    return f"from {module} import {top}\nPASS = {attribute}"


def _oracle_recipe(oracles: Sequence[Any] | None, imports: set[str]) -> str:
    """The ``oracles=`` argument of the script: names as they are, module-level functions imported."""
    if oracles is None:
        return "None"
    if isinstance(oracles, str):
        oracles = [oracles]
    items = []
    for oracle in oracles:
        if isinstance(oracle, str):
            items.append(repr(oracle))
            continue
        try:
            line, expr = _import_of(oracle)
        except (ValueError, AttributeError):
            where = getattr(oracle, "__module__", None)
            raise ValueError(
                f"oracle {oracle!r} cannot be imported by a reproducer (define it at module level of an "
                f"importable module{'; __main__, the script run, is not one' if where == '__main__' else ''})"
            ) from None
        imports.add(line)
        items.append(expr)
    return "[" + ", ".join(items) + "]"


#: Namespaces of ops that ``import torch`` alone does not register, with the module that does,
#: imported by a script that uses them: pmverify's own test ops; the prims Inductor's decompositions
#: and serialized patterns use (``prims.fma``, made in torch._inductor.inductor_prims at torch 2.13);
#: the quantize / dequantize ops of PT2E quantization.
_OP_MODULES = {
    "pmverify_testing": "import pmverify.strategies  # registers torch.ops.pmverify_testing",
    "prims": "import torch._inductor.inductor_prims  # registers Inductor's torch.ops.prims (fma...)",
    "quantized_decomposed": "import torch.ao.quantization.fx._decomposed  # registers torch.ops.quantized_decomposed",
}


def _overload(target: torch._ops.OpOverload, imports: set[str]) -> str:
    namespace, name = target._schema.name.split("::")
    if namespace in _OP_MODULES:
        imports.add(_OP_MODULES[namespace])
    elif namespace != "aten":
        for origin in op_origins(target._schema.name):  # a project's own op: the modules that defined it
            imports.add(f"{import_code(*origin)}  # registers torch.ops.{namespace}")
    return f"torch.ops.{namespace}.{name}.{target._overloadname}"


def _target(target: Any, imports: set[str]) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return _overload(target, imports)
    if isinstance(target, torch._ops.HigherOrderOperator):
        if target.name() in ("auto_functionalized", "auto_functionalized_v2"):
            return f"torch.ops.higher_order.{target.name()}"
        line, expr = _import_of(type(target))
        imports.add(line)
        return f"{expr}()"
    if target is operator.getitem:
        return "operator.getitem"
    if getattr(target, "__module__", None) == "_operator" and getattr(operator, target.__name__, None) is target:
        return f"operator.{target.__name__}"  # size arithmetic of a symbolic graph (``2 * s0``)
    name = getattr(target, "__name__", None)
    if isinstance(name, str) and getattr(torch, name, None) is target:
        # a pre-grad graph's torch function (``torch.unbind``: a builtin whose qualified name,
        # ``_VariableFunctionsClass.unbind``, torch does not export)
        return f"torch.{name}"
    line, expr = _import_of(target)
    imports.add(line)
    return expr


def _arg(value: Any, imports: set[str] | None = None) -> str:
    if isinstance(value, torch.fx.Node):
        return f"N[{value.name!r}]"
    if isinstance(value, torch._ops.OpOverload):  # auto_functionalized's op
        return _overload(value, set() if imports is None else imports)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_arg(v, imports) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_arg(v, imports)}" for k, v in value.items()) + "}"
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    raise ValueError(f"cannot write argument {value!r} of type {type(value).__name__} into a reproducer")


def _graph_source(gm: torch.fx.GraphModule, imports: set[str]) -> str:
    lines = ["def build_graph():", "    g = torch.fx.Graph()", "    N = {}"]
    for node in gm.graph.nodes:
        if node.op == "output":
            lines.append(f"    g.output({_arg(node.args[0])})")
            if GRADIENT_OUTPUTS in node.meta:  # a joint graph's gradients (see the structure oracle)
                lines.append(f"    g.output_node().meta[{GRADIENT_OUTPUTS!r}] = {tuple(node.meta[GRADIENT_OUTPUTS])!r}")
            continue
        target = repr(node.target) if node.op in ("placeholder", "get_attr") else _target(node.target, imports)
        lines.append(
            f"    N[{node.name!r}] = g.create_node({node.op!r}, {target}, {_arg(tuple(node.args), imports)}, "
            f"{_arg(dict(node.kwargs), imports)}, name={node.name!r})"
        )
    lines.append("    root = torch.nn.Module()")
    constants = {n.target: _attribute(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    if constants:  # frozen parameters: the graph's constants, saved as the inputs are
        lines += [
            "    CONSTANTS = torch.load(io.BytesIO(base64.b64decode(",
            _blob(constants),
            "    )), weights_only=True)",
        ]
        lines.append("    for name, value in CONSTANTS.items():")
        lines.append("        root.register_buffer(name, value)")
    lines.append("    return torch.fx.GraphModule(root, g)")
    return "\n".join(lines)


def _attribute(gm: torch.fx.GraphModule, target: str) -> Any:
    """The constant a ``get_attr`` node of ``gm`` reads (``target``: a plain attribute name)."""
    if "." in target:
        raise ValueError(f"cannot write get_attr {target!r} (a nested attribute) into a reproducer")
    return getattr(gm, target)


def _inputs_blob(inputs: Sequence[tuple[Any, ...]]) -> str:
    return _blob([list(rank) for rank in inputs])


def _blob(value: Any) -> str:
    """``value`` (tensors in lists and dicts) saved by ``torch.save``, as base64 string lines."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    text = base64.b64encode(buffer.getvalue()).decode()
    return "\n".join(f'    "{text[i : i + 96]}"' for i in range(0, len(text), 96))


def render(
    case: GraphCase,
    pass_: Any,
    violations: Sequence[Any] = (),
    *,
    oracles: Sequence[Any] | None = None,
    pass_source: str | None = None,
    mode: str = "direct",
    hang_s: float | None = None,
    dies: bool = False,
    strict_order: bool = False,
    others: Sequence[tuple[str, str]] = (),
    prelude: str | None = None,
) -> str:
    """Return the source of a standalone script reproducing ``violations`` of ``pass_`` on ``case``.

    ``pass_source``, when given, is Python code that defines ``PASS``; it replaces the recipe
    pmverify derives (see :func:`pass_recipe`). ``mode`` and ``strict_order`` are those of the
    script's ``check_case`` call. ``others``: ``(failure, reproducer path)`` of the search's other,
    less severe failures on cases of their own (``PassVerificationError.failures[1:]``),
    listed in the script's header and printed when it runs. For a case on which the pass hung
    (a ``pmverify fuzz`` timeout finding), ``hang_s`` is its per-case timeout: the script prints
    where the pass is and exits 1 when the case is still running after that many seconds. For a
    case on which the pass killed its process (``dies``), the script dies the same way while the
    pass is wrong, as its header says. ``prelude``: Python lines the script runs after ``import
    torch``, before pmverify is imported (a fuzz target's set-up); None: the pass's own
    (:func:`pass_prelude`). The script imports pmverify's public API only. Raises ``ValueError``
    when the graph holds an argument that cannot be written as Python.
    """
    imports: set[str] = set()
    graph = _graph_source(case.gm, imports)
    oracle_expr = _oracle_recipe(oracles, imports)
    pass_source = _pass_code(pass_, pass_source, imports)
    config_expr = _config_code(case, imports)
    prelude = pass_prelude(pass_) if prelude is None else prelude
    factory = isinstance(pass_, PassFactory) and "PASS_FACTORY" in pass_source
    return "\n".join(
        [
            *_header(violations, hang_s, dies, others),
            *_imports(case, prelude, pass_source, imports),
            *_pass_block(pass_source),
            "",
            "",
            graph,
            "",
            "",
            *_case_block(case, config_expr),
            "",
            "",
            *_main(oracle_expr, mode, factory, strict_order, hang_s, [str(v) for v in violations], others),
            "",
        ]
    )


def _pass_code(pass_: Any, pass_source: str | None, imports: set[str]) -> str:
    """The script's code defining ``PASS`` (or ``PASS_FACTORY``): ``pass_source`` when given, else
    the recipe pmverify derives (its imports added to ``imports``), else ``PASS = None`` to edit."""
    if pass_source is not None:
        return pass_source
    if isinstance(pass_, PassFactory):
        return (
            f"# the pass factory: called per case (and rank) as verify(pass_factory=...) called it\n"
            f"PASS_FACTORY = {import_code(pass_.module, pass_.file, pass_.qualname)}"
        )
    recipe = pass_recipe(pass_)
    if recipe is None:
        return (
            f"# pmverify could not rebuild this {type(pass_).__name__} from outside: replace None with\n"
            "# code building it (or give verify() pass_source='PASS = ...').\nPASS = None"
        )
    imports.update(recipe[0])
    return f"PASS = {recipe[1]}"


def _config_code(case: GraphCase, imports: set[str]) -> str:
    """The expression rebuilding ``case.pass_config`` (its imports added to ``imports``)."""
    config = _object_recipe(case.pass_config)
    if config is None and case.pass_config is not None:
        raise ValueError(f"pass_config={case.pass_config!r} cannot be rebuilt from its repr")
    imports.update(config[0])
    return config[1]


def _header(
    violations: Sequence[Any], hang_s: float | None, dies: bool, others: Sequence[tuple[str, str]]
) -> list[str]:
    """The script's comment header: the violations, who wrote it, what its exit status means."""
    if hang_s is not None:
        exits = [
            f"# exits 1 when the pass still hangs after {hang_s:g}s (printing where), 0 once fixed, 2 when it cannot run."
        ]
    elif dies:
        exits = [
            "# dies as the pass made its process die while the pass is wrong, exits 0 once fixed, 2 when it",
            "# cannot run.",
        ]
    else:
        exits = ["# prints the violations and exits 1 while the pass is wrong, 0 once fixed, 2 when it cannot run."]
    return [
        "# pmverify reproducer. Violations found when it was written:",
        *(f"#   {line}" for v in violations for line in str(v).splitlines()),
        f"# Written by pmverify {_version()} (torch {torch.__version__}) on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.",
        "# Run it as a script (the pass's module must import from here or from where it was written): it",
        *exits,
        *(
            [
                "# Other failures of the search, less severe, each on a case of its own:",
                *(f"#   {oracle}: {path}" for oracle, path in others),
            ]
            if others
            else []
        ),
    ]


def _imports(case: GraphCase, prelude: str, pass_source: str, imports: set[str]) -> list[str]:
    """The script's imports: the standard library, torch, the prelude, pmverify's public names the
    case needs, then (exit 2 when they fail) what the pass and the case's custom ops need."""
    public = ["GraphCase", "MutationSite", "PlantedInstance", *(["Symbol"] if case.symbols else []), "check_case"]
    return [
        "import base64",
        "import io",
        "import operator",
        "import os",
        "import sys",
        "",
        "# the pass's own module: from where this script runs, or from where verify() ran",
        f"sys.path[:0] = [os.getcwd(), {os.getcwd()!r}]",
        "",
        "import torch",
        "",
        *([prelude, ""] if prelude else []),
        f"from pmverify import {', '.join(public)}",
        *(["from torch.distributed.tensor import Replicate, Shard"] if case.placements is not None else []),
        "",
        *([IMPORT_HELPER, ""] if "_pmverify_import(" in pass_source + "".join(imports) else []),
        "# first what the pass and the case need (the modules that register the graph's custom ops):",
        "# exit 2 when that fails, as nothing is checked (1 means the violation reproduces)",
        "try:",
        *(f"    {line}" for line in sorted(imports)),
        "    pass",
        "except Exception as exc:",
        '    print(f"cannot import what the case and the pass need: {exc!r}", file=sys.stderr)',
        "    sys.exit(2)",
        "",
    ]


def _pass_block(pass_source: str) -> list[str]:
    """The script's ``PASS`` / ``PASS_FACTORY`` definition (exit 2 when it raises)."""
    return [
        "PASS = PASS_FACTORY = None",
        "try:",
        textwrap.indent(pass_source, "    "),
        "except Exception as exc:  # exit 2, as above",
        '    print(f"cannot build the pass: {exc!r}", file=sys.stderr)',
        "    sys.exit(2)",
    ]


def _case_block(case: GraphCase, config_expr: str) -> list[str]:
    """The script's ``CASE``: the graph built by ``build_graph()`` and the embedded inputs (exit 2
    when it cannot be rebuilt)."""
    return [
        "try:",
        "    INPUTS = torch.load(io.BytesIO(base64.b64decode(",
        textwrap.indent(_inputs_blob(case.inputs), "    "),
        "    )), weights_only=True)",
        "    CASE = GraphCase(",
        "        gm=build_graph(),",
        "        inputs=INPUTS,",
        f"        tp_world={case.tp_world!r},",
        f"        form={case.form!r},",
        f"        planted={case.planted!r},",
        f"        mutations={case.mutations!r},",
        f"        pass_config={config_expr},",
        f"        label={case.label!r},",
        *([f"        placements={case.placements!r},"] if case.placements is not None else []),
        *([f"        symbols={case.symbols!r},", f"        input_dims={case.input_dims!r},"] if case.symbols else []),
        *([f"        all_reduce=torch.ops.{case.all_reduce},"] if case.all_reduce is not None else []),
        "    )",
        "except Exception as exc:  # exit 2, as above",
        '    print(f"cannot rebuild the case: {exc!r}", file=sys.stderr)',
        "    sys.exit(2)",
    ]


def _main(
    oracle_expr: str,
    mode: str,
    factory: bool,
    strict_order: bool,
    hang_s: float | None,
    expected: list[str],
    others: Sequence[tuple[str, str]],
) -> list[str]:
    """The script's ``__main__``: run ``check_case`` (under a hang timer when ``hang_s``), print the
    graphs and violations, exit 1 while there are violations."""
    return [
        'if __name__ == "__main__":',
        "    if PASS is None and PASS_FACTORY is None:",
        '        print("edit PASS in this script: pmverify could not rebuild the pass", file=sys.stderr)',
        "        sys.exit(2)",
        "    import faulthandler",
        "",
        "    faulthandler.enable()  # a pass that kills the process: its Python stack on stderr",
        "    name = getattr(PASS if PASS is not None else PASS_FACTORY, '__name__', None) or type(PASS).__name__",
        '    print(f"running pass {name} on case {CASE!r}, then the oracles", file=sys.stderr, flush=True)',
        *(
            [
                f"    # the pass hung on this case in pmverify fuzz: the stacks and exit 1 after {hang_s:g}s",
                f"    print('if the pass still hangs: its stack, and exit 1 after {hang_s:g}s', file=sys.stderr, flush=True)",
                f"    faulthandler.dump_traceback_later({hang_s!r}, exit=True)",
            ]
            if hang_s is not None
            else []
        ),
        "    try:  # check_case never raises on a finding: what it raises is an error of the check (exit 2)",
        f"        result = check_case(PASS, CASE, oracles={oracle_expr}, mode={mode!r}"
        + (", pass_factory=PASS_FACTORY" if factory else "")
        + (", strict_order=True)" if strict_order else ")"),
        "    except Exception:",
        "        import traceback",
        "",
        "        traceback.print_exc()",
        '        print("pmverify could not check the case: nothing was checked", file=sys.stderr)',
        "        sys.exit(2)",
        *(["    faulthandler.cancel_dump_traceback_later()"] if hang_s is not None else []),
        '    print("graph before the pass:", result.pair.before.code, sep="\\n")',
        "    if result.pair.after is not None:",
        '        print("graph after the pass:", result.pair.after.code, sep="\\n")',
        "    for violation in result.violations:",
        '        print("VIOLATION", violation)',
        f"    expected = {expected!r}",
        '    print(f"{len(result.violations)} violation(s); {len(expected)} when this script was written")',
        *(
            [
                f"    others = {list(others)!r}",
                '    print("other failures of the search, less severe, on cases of their own:", file=sys.stderr)',
                "    for oracle, path in others:",
                '        print(f"  {oracle}: {path}", file=sys.stderr)',
            ]
            if others
            else []
        ),
        "    sys.exit(1 if result.violations else 0)",
    ]


def write(
    case: GraphCase,
    pass_: Any,
    violations: Sequence[Any],
    directory: str | os.PathLike[str] | None = None,
    *,
    oracles: Sequence[Any] | None = None,
    pass_source: str | None = None,
    mode: str = "direct",
    hang_s: float | None = None,
    dies: bool = False,
    strict_order: bool = False,
    others: Sequence[tuple[str, str]] = (),
    prelude: str | None = None,
) -> pathlib.Path:
    """Write the reproducer of :func:`render` under ``directory`` (default
    :func:`default_repro_dir`) and return its path; the file name carries the oracle and a hash."""
    source = render(
        case,
        pass_,
        violations,
        oracles=oracles,
        pass_source=pass_source,
        mode=mode,
        hang_s=hang_s,
        dies=dies,
        strict_order=strict_order,
        others=others,
        prelude=prelude,
    )
    directory = pathlib.Path(directory) if directory is not None else default_repro_dir()
    directory.mkdir(parents=True, exist_ok=True)
    oracle = getattr(violations[0], "oracle", "case") if violations else "case"
    digest = hashlib.sha1(source.split("\nimport base64", 1)[-1].encode()).hexdigest()[:10]
    path = directory / f"repro_{oracle}_{digest}.py"
    path.write_text(source)
    return path


def write_picture(pair: Any, reproducer: str | os.PathLike[str]) -> list[pathlib.Path]:
    """Write the before/after picture of ``pair`` (a ``RunPair``) next to ``reproducer``: the
    replaced nodes (erased by the pass or matched by an Inductor pattern entry) marked in the graph
    before, the nodes the pass inserted marked in the graph after. Always a Graphviz ``.dot`` file,
    and an ``.svg`` when Graphviz's ``dot`` is installed; returns the paths written. Raises
    ``OSError`` when the ``.dot`` file cannot be written."""
    from .graphviz import render_dot
    from .graphviz import write_picture as write_dot

    before = {node.name for node in pair.before.graph.nodes}
    after = {node.name for node in pair.after.graph.nodes} if pair.after is not None else set()
    matched = {name for name in before - after} | {name for record in pair.match_records for name in record.nodes}
    inserted = (after - before) | ({name for record in pair.match_records for name in record.replacement} & after)
    dot = render_dot(pair.before, pair.after, sorted(matched & before), sorted(inserted))
    return write_dot(dot, pathlib.Path(reproducer).with_suffix(""))
