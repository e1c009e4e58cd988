"""What a user of pmverify needs is public: the shipped fusion and the fault bank, users like any
pass project, import no private module of pmverify (the import-linter ``forbidden`` contract
checks it too), and the names they use have public homes."""

import ast
import pathlib

import pytest

import pmverify

ROOT = pathlib.Path(pmverify.__file__).parent


def _imported_modules(path: pathlib.Path) -> list[tuple[int, str]]:
    """``(line, absolute module)`` of every import in ``path``, relative ones resolved."""
    package = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


@pytest.mark.parametrize("user", ["fusions", "faults"])
def test_the_fusion_and_the_bank_import_no_private_module_of_pmverify(user):
    private = []
    for path in sorted((ROOT / user).rglob("*.py")):
        for line, module in _imported_modules(path):
            parts = module.split(".")
            if parts[0] != "pmverify" or len(parts) < 2 or parts[1] == user:
                continue
            if any(part.startswith("_") and not part.startswith("__") for part in parts[1:]):
                private.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert not private, "\n".join(private)


@pytest.mark.parametrize(
    "module, names",
    [
        ("pmverify", ["run_pass", "FuzzTarget", "EndCheck", "GraphCase", "PlantedInstance", "symbolize"]),
        ("pmverify.targets", ["FuzzTarget", "EndCheck", "jsonable"]),
        ("pmverify.symbolic", ["symbolize", "SymbolizeError", "HINTS", "MIN_SIZE", "MAX_SIZE"]),
        ("pmverify.validation", ["validate_int", "validate_order", "validate_strategy", "short_repr"]),
        ("pmverify.strategies", ["Shown", "expr_cases"]),
    ],
)
def test_public_homes_hold_what_users_need(module, names):
    import importlib

    public = importlib.import_module(module)
    for name in names:
        assert name in public.__all__ and getattr(public, name) is not None, name


def test_public_names_are_the_engine_s_own_objects():
    from pmverify import _job, _validation
    from pmverify._engine import apply as _apply
    from pmverify._job import report, targets
    from pmverify._shapes import symbolic as _symbolic

    assert pmverify.run_pass is _apply.run_pass
    assert pmverify.FuzzTarget is targets.FuzzTarget and _job.TargetError is pmverify.errors.TargetError
    assert pmverify.symbolic.symbolize is _symbolic.symbolize is pmverify.symbolize
    assert pmverify.validation.validate_int is _validation.validate_int
    assert report.jsonable is pmverify.targets.jsonable
    assert pmverify.targets.jsonable({"x": float("nan"), "b": b"\x01"}) == {"x": None, "b": "01"}


def test_fx_graphs_default_dtypes_are_named_for_what_they_are():
    import torch

    from pmverify import strategies

    assert strategies.GRAPH_DTYPES_WITHOUT_FLOAT64 == tuple(d for d in strategies.GRAPH_DTYPES if d != torch.float64)
    assert strategies.DEFAULT_GRAPH_DTYPES is strategies.GRAPH_DTYPES_WITHOUT_FLOAT64  # the old name
    assert "DEFAULT_GRAPH_DTYPES" not in strategies.__all__
