"""A process the pass kills still names the case it died in (pmverify._findings.fatal): the frame that runs
each case is named after it, for faulthandler's stack; ``$PMVERIFY_ANNOUNCE=1`` writes it first."""

import faulthandler
import subprocess
import sys
import textwrap

import pytest

from pmverify._findings.fatal import announce, call_named, case_label, fatal_stacks


class _Case:
    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def test_the_stack_of_a_call_names_the_case(tmp_path):
    label = case_label(17, _Case("GraphCase(fx_graphs: 3 ops)"), 5)
    assert label == "pmverify: checking case 17 (seed 5): GraphCase(fx_graphs: 3 ops)"
    with open(tmp_path / "stack", "w+") as out:
        assert call_named(label, lambda x, *, y: faulthandler.dump_traceback(out) or x + y, 1, y=2) == 3
        out.seek(0)
        assert f"in {label}" in out.read()


def test_a_long_case_is_cut():
    label = case_label(1, _Case("x" * 1000), None)
    assert label.startswith("pmverify: checking case 1: xxx") and label.endswith("...") and len(label) < 300


def test_announce_writes_the_case_only_when_asked(capsys, monkeypatch):
    monkeypatch.delenv("PMVERIFY_ANNOUNCE", raising=False)
    announce("pmverify: checking case 1: c")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("PMVERIFY_ANNOUNCE", "1")
    announce("pmverify: checking case 1: c")
    assert capsys.readouterr().err == "pmverify: checking case 1: c\n"


def test_fatal_stacks_leaves_faulthandler_as_it_found_it():
    was = faulthandler.is_enabled()
    with fatal_stacks():
        assert faulthandler.is_enabled() or sys.stderr.__class__.__name__ != "TextIOWrapper"
    assert faulthandler.is_enabled() == was


@pytest.mark.slow  # a pytest in a subprocess: torch's import, about 10 s
def test_a_pass_that_aborts_under_pytest_leaves_the_case_named(tmp_path):
    (tmp_path / "test_aborts.py").write_text(
        textwrap.dedent(
            """
            import os

            import pmverify
            from pmverify.strategies import fx_graphs


            def aborts(graph):
                os.abort()


            def test_aborts():
                pmverify.verify(aborts, fx_graphs(max_nodes=2), max_examples=3)
            """
        )
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_aborts.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode in (134, -6), run.stderr[-2000:]
    named = [line for line in run.stderr.splitlines() if " in pmverify: checking case 1" in line]
    assert named and "GraphCase(fx_graphs: 1 ops" in named[0], run.stderr[:1500]
