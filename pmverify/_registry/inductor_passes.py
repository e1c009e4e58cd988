"""Inductor's pattern passes as Python names them, and the names of their entries.

- :func:`bound_passes`: every ``PatternMatcherPass`` bound at module level in ``torch._inductor.fx_passes``
  (an attribute, or an element of a module-level list or dict), each under one name: the binding of
  the module that defines it (``split_cat.PRE_GRAD_PATTERNS['normalization_pass']``, not
  ``pre_grad``'s import of it), a plain attribute before a list element (``joint_graph.patterns``,
  not ``joint_graph.pass_patterns[0]``).
- :func:`pass_config`: the ``torch._inductor.config`` options that enable a pass, read at torch 2.13
  from where ``joint_graph_passes``, ``post_grad_passes``, ``pre_grad_passes`` and
  ``freezing_passes`` apply it.
- :func:`held_entries`: the entries a set of passes holds, each once (an entry registered under
  several targets, or into several passes, is one entry: the first pass naming it holds it).
- :func:`entry_labels`: ``(module, name)`` of graph and lowering entries, unique within the module.

Why by module-level binding: a pass made inside a function (``post_grad.decompose_map_to_while_loop``
makes one per call) is not part of Inductor's pattern table.
"""

from __future__ import annotations

import collections
import functools
import importlib
import pkgutil
import re
import sys
from typing import Any

__all__ = [
    "PASSES",
    "bound_passes",
    "entry_key",
    "entry_labels",
    "handler_name",
    "held_entries",
    "import_pass_modules",
    "kind_of",
    "pass_config",
    "root_ops",
]

PASSES = "torch._inductor.fx_passes"

#: The options that enable each pass, by the pass's name up to its index (read at torch 2.13). A
#: ``name[...]`` key stands for every element; ``"not fallback_random"``: enabled while it is False.
_CONFIG = {
    "joint_graph.early_patterns": ("pattern_matcher",),
    "joint_graph.patterns": ("pattern_matcher",),
    "joint_graph.pass_patterns[...]": ("pattern_matcher",),
    "replace_random.patterns": ("not fallback_random",),
    "post_grad.pass_patterns[...]": ("pattern_matcher",),
    "b2b_gemm.B2B_GEMM_PASS": ("pattern_matcher", "b2b_gemm_pass"),
    "reduced_atomic_contention.partitioned_scatter_patterns": ("pattern_matcher", "partitioned_scatter_enabled"),
    "pre_grad.efficient_conv_bn_eval_pass": ("pattern_matcher",),
    "pre_grad.apply_gumbel_max_trick_pass": ("pattern_matcher",),
    "freezing_patterns.pass_patterns[...]": ("freezing",),
    "freezing_patterns.binary_folding_pass": ("freezing",),
    "micro_pipeline_tp.patterns": ("_micro_pipeline_tp",),
}
#: Passes whose elements are enabled one by one by a dict option of the same key.
_BY_OPTION = {
    "split_cat.PRE_GRAD_PATTERNS": "pre_grad_fusion_options",
    "split_cat.POST_GRAD_PATTERNS": "post_grad_fusion_options",
}
_INDEX = re.compile(r"\[[^\]]*\]$")


def import_pass_modules() -> None:
    """Import every module of ``torch._inductor.fx_passes`` (not its sub-packages), so that each
    registers what it registers at import time; one that cannot be imported here (mkldnn_fusion
    on a build without mkldnn) is left out."""
    package = importlib.import_module(PASSES)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.ispkg and f"{PASSES}.{info.name}" not in sys.modules:
            try:
                importlib.import_module(f"{PASSES}.{info.name}")
            except ImportError:
                continue


@functools.cache
def _defines(module_name: str, attribute: str) -> bool:
    """Whether the source of ``module_name`` assigns ``attribute`` at module level."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path:
        return False
    try:
        with open(path, encoding="utf-8") as source:
            text = source.read()
    except OSError:
        return False
    return re.search(rf"^{re.escape(attribute)}\s*(:[^=\n]*)?=(?!=)", text, re.MULTILINE) is not None


def bound_passes() -> list[tuple[str, Any]]:
    """``(name, pass)`` of every ``PatternMatcherPass`` bound at module level in Inductor's
    ``fx_passes`` modules as loaded now, each pass once, in the order of the modules' names and then
    of their bindings."""
    from .._compat import PatternMatcherPass

    found: dict[int, list[tuple[tuple[bool, bool, int], str, Any]]] = {}
    names = sorted(name for name in sys.modules if name.startswith(PASSES + "."))
    order = 0
    for module_name in names:
        module = sys.modules[module_name]
        if module is None:
            continue
        short = module_name.removeprefix(PASSES + ".")
        for attribute, value in list(vars(module).items()):
            if attribute.startswith("__"):
                continue
            if issubclass(type(value), PatternMatcherPass):
                bindings = [(f"{short}.{attribute}", value, False)]
            elif type(value) in (list, tuple):
                bindings = [
                    (f"{short}.{attribute}[{i}]", x, True)
                    for i, x in enumerate(value)
                    if issubclass(type(x), PatternMatcherPass)
                ]
            elif type(value) is dict:
                bindings = [
                    (f"{short}.{attribute}[{key!r}]", x, True)
                    for key, x in value.items()
                    if issubclass(type(x), PatternMatcherPass)
                ]
            else:
                continue
            defined = _defines(module_name, attribute)
            for name, p, in_container in bindings:
                order += 1
                found.setdefault(id(p), []).append(((not defined, in_container, order), name, p))
    chosen = [min(bindings, key=lambda b: b[0]) for bindings in found.values()]
    return [(name, p) for _, name, p in sorted(chosen, key=lambda b: b[0][2])]


def pass_config(pass_name: str) -> tuple[str, ...]:
    """The config options that enable the pass named ``pass_name`` (:func:`bound_passes`), e.g.
    ``("pattern_matcher", "pre_grad_fusion_options['normalization_pass']")``; ``("freezing",)``;
    ``("not fallback_random",)`` for one enabled while an option is False. Raises ``LookupError``
    for a pass it does not know (a pass of another torch: the table is read at 2.13)."""
    base = _INDEX.sub("", pass_name)
    if base in _BY_OPTION:
        return ("pattern_matcher", f"{_BY_OPTION[base]}{pass_name[len(base) :]}")
    config = _CONFIG.get(pass_name) or _CONFIG.get(f"{base}[...]" if base != pass_name else "")
    if config is None:
        raise LookupError(f"no config is known to enable Inductor's pattern pass {pass_name} (read at torch 2.13)")
    return config


def held_entries(passes: list[tuple[str, Any]]) -> list[tuple[str, Any, Any]]:
    """``(pass name, pass, entry)`` of every entry the ``passes`` hold, each entry once (by
    identity), in the passes' order and then in the order of their targets."""
    seen: set[int] = set()
    rows = []
    for name, p in passes:
        for entries in list(p.patterns.values()):
            for entry in entries:
                if id(entry) not in seen:
                    seen.add(id(entry))
                    rows.append((name, p, entry))
    return rows


def kind_of(entry: Any) -> str:
    """``"replacement"``, ``"graph"`` or ``"lowering"`` (:data:`pmverify._registry.entries.KINDS`)."""
    from .._compat import GraphPatternEntry, LoweringPatternEntry, ReplacementPatternEntry

    if isinstance(entry, GraphPatternEntry):
        return "graph"
    if isinstance(entry, LoweringPatternEntry):
        return "lowering"
    if isinstance(entry, ReplacementPatternEntry):
        return "replacement"
    raise TypeError(f"{type(entry).__name__} is not one of Inductor's pattern entries")


def _unwrapped(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def entry_key(entry: Any) -> tuple[Any, ...]:
    """What tells two registrations of one entry apart from two entries: its type, its handler's
    code (or the handler), its pattern's repr; the same in every process and every
    initialisation."""
    handler = _unwrapped(getattr(entry, "handler", None))
    return (type(entry).__name__, getattr(handler, "__code__", handler), repr(entry.pattern))


def handler_name(entry: Any) -> tuple[str, str]:
    """``(module, name)`` of an entry's handler: its module (Inductor's pass modules by their last
    part, as :attr:`pmverify.RecordedRewrite.module` names them) and its qualified name without
    ``<locals>`` (``("mkldnn_fusion", "_register_unary_fusion_lowering.fn")``)."""
    handler = _unwrapped(entry.handler)
    module = getattr(handler, "__module__", None) or type(handler).__module__
    name = getattr(handler, "__qualname__", None) or type(handler).__qualname__
    return module.removeprefix(PASSES + "."), name.replace(".<locals>", "")


def _op_name(fn: Any) -> str:
    if isinstance(fn, str):  # CallMethod's method name
        return f"Tensor.{fn}"
    text = str(fn) if hasattr(fn, "_schema") or hasattr(fn, "_qualified_op_name") else ""
    text = text or getattr(fn, "__name__", None) or type(fn).__name__
    return text.removeprefix("aten.")


def root_ops(pattern: Any) -> str:
    """The targets of a pattern's root node (its first output's, for a multi-output pattern),
    ``/``-joined, ``aten.`` left out, an overload packet for its overloads, a method as
    ``Tensor.name``: ``"add.Tensor/sub.Tensor"``, ``"Tensor.split"``; ``"?"`` when it has none."""
    outputs = getattr(pattern, "outputs", None)
    if outputs:
        pattern = outputs[0]
    fns = list(getattr(pattern, "fns", None) or ())
    packets = {id(fn) for fn in fns}
    # an op given as its overload packet stands for all its overloads, which Inductor lists after it
    named = [fn for fn in fns if id(getattr(fn, "overloadpacket", None)) not in packets]
    return "/".join(_op_name(fn) for fn in named) if named else "?"


def entry_labels(entries: list[Any], taken: set[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """``(module, name)`` of each graph or lowering entry (:func:`handler_name`), so that each
    pair names one entry and none is in ``taken`` (the labels of the replacements): a name one
    entry of its module has is kept; a name several share (a handler registered for several
    patterns) gets its pattern's root ops, ``folded_op[add.Tensor]``, and where those are shared
    too, a number in recording order among those that share them, ``folded_op[add.Tensor]#2``. A
    label depends only on the entries of its handler."""
    taken = taken or set()
    names = [handler_name(entry) for entry in entries]
    by_name = collections.Counter(names)
    flavours = [
        root_ops(entry.pattern) if by_name[label] > 1 or label in taken else ""
        for entry, label in zip(entries, names, strict=True)
    ]
    keys = [(module, name, flavour) for (module, name), flavour in zip(names, flavours, strict=True)]
    by_flavour = collections.Counter(keys)
    seen: collections.Counter[tuple[str, str, str]] = collections.Counter()
    labels = []
    for key in keys:
        module, name, flavour = key
        seen[key] += 1
        text = f"{name}[{flavour}]" if flavour else name
        labels.append((module, f"{text}#{seen[key]}" if by_flavour[key] > 1 else text))
    return labels
