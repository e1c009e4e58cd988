"""Pictures of a rewrite: the graph before and after a pass, side by side, as Graphviz DOT.

The "before" cluster fills the matched nodes (those the pass replaced) in one colour, the "after"
cluster fills the inserted nodes (the replacement) in another, so a reproducer shows at a glance
where the pass rewrote and what it put there. Writing the DOT text needs nothing; an SVG is drawn
too when Graphviz's ``dot`` is on ``PATH``.
"""

from __future__ import annotations

import logging
import pathlib
import shutil
import subprocess
from collections.abc import Iterable

import torch

__all__ = ["render_dot", "write_picture", "MATCHED_FILL", "INSERTED_FILL"]

logger = logging.getLogger(__name__)

#: Fill of the matched (replaced) nodes in the "before" cluster.
MATCHED_FILL = "#f4b6b6"
#: Fill of the inserted (replacement) nodes in the "after" cluster.
INSERTED_FILL = "#b6e3b6"
#: Seconds ``dot`` may take to draw one picture.
DOT_TIMEOUT_S = 30.0
_MAX_TARGET = 40


def _quote(text: str) -> str:
    """A DOT double-quoted string (backslashes, quotes and newlines escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _short_target(node: torch.fx.Node) -> str:
    """``aten.mul.Tensor`` for an OpOverload, ``getitem`` for ``operator.getitem``; the op for
    placeholders and outputs; cut to a few dozen characters."""
    if node.op in ("placeholder", "output"):
        return node.op
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        text = str(target).removeprefix("torch.ops.")
    elif isinstance(target, torch._ops.HigherOrderOperator):
        text = target.name()
    elif callable(target):
        text = getattr(target, "__name__", repr(target))
    else:
        text = str(target)
    return text if len(text) <= _MAX_TARGET else text[: _MAX_TARGET - 3] + "..."


def _cluster(name: str, label: str, gm: torch.fx.GraphModule, marked: set[str], fill: str) -> list[str]:
    prefix = f"{name}_"
    lines = [f"  subgraph cluster_{name} {{", f"    label={_quote(label)};", "    color=gray60;"]
    for node in gm.graph.nodes:
        label = node.name + "\n" + _short_target(node)
        attrs = [f"label={_quote(label)}"]
        if node.op in ("placeholder", "output"):
            attrs.append("shape=ellipse")
        if node.name in marked:
            attrs += ["style=filled", f"fillcolor={_quote(fill)}"]
        lines.append(f"    {_quote(prefix + node.name)} [{', '.join(attrs)}];")
    for node in gm.graph.nodes:
        for arg in dict.fromkeys(node.all_input_nodes):
            lines.append(f"    {_quote(prefix + arg.name)} -> {_quote(prefix + node.name)};")
    lines.append("  }")
    return lines


def render_dot(
    before: torch.fx.GraphModule,
    after: torch.fx.GraphModule | None,
    matched: Iterable[str],
    inserted: Iterable[str],
) -> str:
    """Return Graphviz DOT text for the graph before a pass and after it, as two clusters
    (``cluster_before``, ``cluster_after``) of one ``digraph``.

    - ``before``, ``after``: the graph modules (``RunPair.before`` / ``.after``); ``after`` None
      (the pass raised) draws the "before" cluster only.
    - ``matched``: names of nodes in ``before`` the pass replaced (filled with :data:`MATCHED_FILL`).
    - ``inserted``: names of nodes in ``after`` the pass inserted (filled with :data:`INSERTED_FILL`).

    Nodes are labelled with their name and a short target (``aten.mul.Tensor``, ``getitem``);
    DOT node ids are ``before_<name>`` / ``after_<name>``. Names not in a graph are ignored.
    """
    matched, inserted = set(matched), set(inserted)
    lines = ["digraph rewrite {", "  rankdir=TB;", "  node [shape=box, fontname=monospace, fontsize=10];"]
    lines += _cluster("before", "before the pass", before, matched, MATCHED_FILL)
    if after is not None:
        lines += _cluster("after", "after the pass", after, inserted, INSERTED_FILL)
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_picture(dot_text: str, path_without_suffix: str | pathlib.Path) -> list[pathlib.Path]:
    """Write ``<path>.dot`` and, when Graphviz's ``dot`` is on ``PATH``, ``<path>.svg``; return the
    paths written. A ``dot`` that fails or takes over :data:`DOT_TIMEOUT_S` seconds leaves no SVG
    (logged at debug level). Raises ``OSError`` only when the ``.dot`` file cannot be written."""
    base = pathlib.Path(path_without_suffix)
    dot_path = base.with_name(base.name + ".dot")
    dot_path.write_text(dot_text, encoding="utf-8")
    written = [dot_path]
    executable = shutil.which("dot")
    if executable is None:
        return written
    svg_path = base.with_name(base.name + ".svg")
    try:
        subprocess.run(
            [executable, "-Tsvg", "-o", str(svg_path), str(dot_path)],
            check=True,
            capture_output=True,
            timeout=DOT_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.debug("dot could not draw %s: %r", dot_path, exc)
        return written
    if svg_path.exists():
        written.append(svg_path)
    return written
