"""A user's pass and fuzz target, for tests of ``pmverify fuzz --target`` with a user target: the
pass fails a case (raises) when pmverify set up anything of the shipped QK-norm fusion in the
process that runs it."""

from __future__ import annotations

import os
import sys

import torch

from pmverify import EndCheck, FuzzTarget
from pmverify.strategies import fx_graphs

#: What a user target must not find in its worker: the shipped fusion's modules and environment.
QK_NORM_SET_UP = ("TRITON_INTERPRET", "PMVERIFY_QK_NORM_IMPL")

CASES = fx_graphs(max_nodes=4)


def shipped_set_up() -> list[str]:
    """The shipped fusion's modules imported and its environment variables set in this process."""
    modules = [name for name in ("pmverify.fusions", "pmverify.faults") if name in sys.modules]
    return modules + [name for name in QK_NORM_SET_UP if name in os.environ]


def untouched(graph: torch.fx.Graph) -> None:
    """A pass that rewrites nothing and raises when the QK-norm fusion was set up here."""
    found = shipped_set_up()
    if found:
        raise RuntimeError(f"a user target's worker has the QK-norm fusion set up: {found}")


def _set_up() -> None:
    os.environ["PMVERIFY_TEST_USER_SET_UP"] = "1"


def needs_set_up(graph: torch.fx.Graph) -> None:
    """:func:`untouched`, and raises unless the target's own set-up ran in this process."""
    untouched(graph)
    if os.environ.get("PMVERIFY_TEST_USER_SET_UP") != "1":
        raise RuntimeError("the target's set_up did not run in its worker")


def target() -> FuzzTarget:
    """A user's fuzz target: its own family and set-up."""
    return FuzzTarget(needs_set_up, [("tiny_graphs", CASES)], set_up=_set_up)


def _check(pass_: object) -> dict:
    return {
        "ok": True,
        "checked": getattr(pass_, "__name__", "?"),
        "set_up": os.environ.get("PMVERIFY_TEST_USER_SET_UP"),
    }


def checked() -> FuzzTarget:
    """A user's fuzz target with an extra check of its own, run at the end of the job."""
    return FuzzTarget(
        needs_set_up,
        [("tiny_graphs", CASES)],
        set_up=_set_up,
        end_check=EndCheck("tiny_check", "a check of the user's own", _check),
    )
