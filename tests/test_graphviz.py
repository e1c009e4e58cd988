"""DOT pictures of a rewrite: two clusters, marked nodes filled, an SVG when ``dot`` is there."""

from __future__ import annotations

import os
import re
import shutil
import stat

import pytest
import torch

from pmverify import GraphCase, check_case
from pmverify._findings.graphviz import INSERTED_FILL, MATCHED_FILL, render_dot, write_picture


def _exp_mul_to_fused(graph):
    for node in list(graph.nodes):
        if node.target is torch.ops.aten.mul.Tensor and node.args[0].target is torch.ops.aten.exp.default:
            exp = node.args[0]
            with graph.inserting_before(node):
                new = graph.call_function(torch.ops.aten.mul.Tensor, (graph.call_function(exp.target, exp.args), 2))
            node.replace_all_uses_with(new)
            graph.erase_node(node)
            graph.erase_node(exp)


def _pair():
    from torch._inductor.pattern_matcher import fwd_only

    x = torch.randn(4, 3)
    gm = fwd_only(lambda x: (x.sin().exp() * 2) + 1, [x])
    result = check_case(_exp_mul_to_fused, GraphCase(gm, [(x,)]), oracles=[])
    before = {n.name for n in result.pair.before.graph.nodes}
    after = {n.name for n in result.pair.after.graph.nodes}
    return result.pair, sorted(before - after), sorted(after - before)


def _balanced(text: str) -> bool:
    depth = 0
    for char in re.sub(r'"(\\.|[^"\\])*"', '""', text):  # braces inside quoted labels do not count
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def _statement(text: str, node_id: str) -> str:
    (line,) = [line for line in text.splitlines() if line.strip().startswith(f'"{node_id}" [')]
    return line


def test_dot_has_both_clusters_and_marks_the_rewrite():
    pair, matched, inserted = _pair()
    assert matched == ["exp", "mul"] and len(inserted) == 2
    text = render_dot(pair.before, pair.after, matched, inserted)
    assert text.startswith("digraph rewrite {") and _balanced(text)
    assert "subgraph cluster_before {" in text and "subgraph cluster_after {" in text
    for name in matched:
        assert f'fillcolor="{MATCHED_FILL}"' in _statement(text, f"before_{name}")
    for name in inserted:
        assert f'fillcolor="{INSERTED_FILL}"' in _statement(text, f"after_{name}")
    assert "filled" not in _statement(text, "before_sin") and "filled" not in _statement(text, "after_sin")
    assert r'label="exp\naten.exp.default"' in _statement(text, "before_exp")
    assert '"before_sin" -> "before_exp";' in text
    assert '"after_add" -> "after_output";' in text


def test_dot_without_after_graph_and_quoting():
    pair, matched, _ = _pair()
    text = render_dot(pair.before, None, matched, ["not_there"])
    assert "cluster_after" not in text and _balanced(text)
    gm = torch.fx.symbolic_trace(lambda x: x["a{b}"])  # a getitem on a string key with braces
    text = render_dot(gm, gm, [], [])
    assert _balanced(text) and 'label="getitem\\ngetitem"' in text


def test_write_picture_writes_dot_without_graphviz(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    paths = write_picture("digraph g {}\n", tmp_path / "case_0")
    assert paths == [tmp_path / "case_0.dot"]
    assert (tmp_path / "case_0.dot").read_text() == "digraph g {}\n"


def _fake_dot(directory, body: str) -> None:
    directory.mkdir()
    script = directory / "dot"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_write_picture_calls_dot_and_ignores_its_failures(tmp_path, monkeypatch):
    # A stand-in ``dot`` on PATH: ``dot -Tsvg -o OUT IN``.
    _fake_dot(tmp_path / "good", 'echo "<svg/>" > "$3"\n')
    monkeypatch.setenv("PATH", str(tmp_path / "good") + os.pathsep + os.environ["PATH"])
    assert write_picture("digraph g {}\n", tmp_path / "a") == [tmp_path / "a.dot", tmp_path / "a.svg"]
    _fake_dot(tmp_path / "bad", "exit 3\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bad") + os.pathsep + os.environ["PATH"])
    assert write_picture("digraph g {}\n", tmp_path / "b") == [tmp_path / "b.dot"]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not on PATH")
def test_real_dot_draws_an_svg(tmp_path):
    pair, matched, inserted = _pair()
    paths = write_picture(render_dot(pair.before, pair.after, matched, inserted), tmp_path / "rewrite")
    assert [p.suffix for p in paths] == [".dot", ".svg"]
    assert "<svg" in paths[1].read_text()
