"""Passes that break the process or the graph, and a case strategy for them: what the fuzzing job's
crash isolation is tested on (tests/test_fuzz_job.py names them as ``_crashing_passes:NAME``).

Each misbehaves only on graphs of at least ``MIN_NODES`` nodes, so that shrinking or a replay has
something to find and a small graph passes."""

from __future__ import annotations

import ctypes
import os
import pathlib
import time

import torch

from pmverify.strategies import fx_graphs

MIN_NODES = 1
#: An environment variable naming a file that :func:`hangs` creates as it starts to hang, so that a
#: test can wait for the hang (a file event) instead of sleeping for it.
HANGING_FILE_ENV = "PMVERIFY_TEST_HANGING_FILE"


def _big_enough(graph: torch.fx.Graph) -> bool:
    return sum(node.op == "call_function" for node in graph.nodes) >= MIN_NODES


def segfault(graph: torch.fx.Graph) -> None:
    """Reads address 0: the process dies of SIGSEGV."""
    if _big_enough(graph):
        ctypes.string_at(0)


def exits(graph: torch.fx.Graph) -> None:
    """Calls ``os._exit(3)``, as a C library's ``exit()`` would: no exception, no cleanup."""
    if _big_enough(graph):
        os._exit(3)


def hangs(graph: torch.fx.Graph) -> None:
    """Sleeps for an hour (after creating the file ``$PMVERIFY_TEST_HANGING_FILE`` names, if set)."""
    if _big_enough(graph):
        if os.environ.get(HANGING_FILE_ENV):
            pathlib.Path(os.environ[HANGING_FILE_ENV]).touch()
        time.sleep(3600)


def malformed_graph(graph: torch.fx.Graph) -> None:
    """Makes a node read a placeholder of another graph: the graph no longer lints."""
    node = next((n for n in graph.nodes if n.op == "call_function"), None)
    if node is not None and node.args:
        ghost = torch.fx.Graph().placeholder("ghost")
        node.args = (ghost, *node.args[1:])


def raises(graph: torch.fx.Graph) -> None:
    """Raises ``RuntimeError`` (an ordinary crash: the worker survives it)."""
    if _big_enough(graph):
        raise RuntimeError("raises() cannot handle this graph")


def identity(graph: torch.fx.Graph) -> None:
    """A correct pass: changes nothing."""


CASES = fx_graphs(max_nodes=4)
