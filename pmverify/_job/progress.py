"""The fuzzing job's progress: a live rich display on a terminal, plain periodic lines otherwise
(a CI log, a file, a pipe)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["Display", "make_display"]


class Display:
    """Plain lines: every event as it happens, and a status line every ``every_s`` seconds."""

    def __init__(self, out: TextIO, every_s: float = 30.0) -> None:
        self.out = out
        self.every_s = every_s
        self._last = time.monotonic()

    def line(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def status(self, status: dict[str, Any], *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.every_s:
            self._last = now
            self.line(status_line(status))

    def close(self) -> None:
        pass


def _counts(counts: dict[str, int], sep: str = ", ") -> str:
    return sep.join(f"{counts[name]} {name}" for name in ("cases", "matches", "findings", "restarts"))


def status_line(status: dict[str, Any]) -> str:
    """Each busy target with its own counts (``starting`` for a worker starting or restarting),
    then the job's totals: ``[  61.0s/8h] qk_norm (with_mutations): 1234 cases, 56 matches,
    0 findings, 3 restarts | all targets: 1234 cases, 56 matches, 0 findings, 3 restarts
    (80 cases/min)``. ``status``: ``elapsed_s``, ``budget``, ``busy`` (a dict per busy target:
    ``name``, ``doing`` and its counts) and ``total`` (``cases``, ``matches``, ``findings``,
    ``restarts``)."""
    elapsed = status["elapsed_s"]
    total = status["total"]
    rate = 60 * total["cases"] / max(elapsed, 1e-9)
    busy = "".join(f"{target['name']} ({target['doing']}): {_counts(target)} | " for target in status["busy"])
    return f"[{elapsed:7.1f}s/{status['budget']}] {busy}all targets: {_counts(total)} ({rate:.0f} cases/min)"


class _RichDisplay(Display):
    """A rich progress bar over the budget, with the counts, and events printed above it."""

    def __init__(self, out: TextIO, budget_s: float) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        super().__init__(out)
        self.console = Console(file=out)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("/"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[counts]}"),
            console=self.console,
            transient=False,
        )
        self.task = self.progress.add_task("starting", total=budget_s, counts="")
        self.progress.start()

    def line(self, text: str) -> None:
        self.progress.console.print(text, markup=False, highlight=False)

    def status(self, status: dict[str, Any], *, force: bool = False) -> None:
        from rich.markup import escape

        total = status["total"]
        rate = 60 * total["cases"] / max(status["elapsed_s"], 1e-9)
        busy = "; ".join(
            f"{target['name']} ({target['doing']}): {target['cases']} cases, {target['findings']} findings"
            for target in status["busy"]
        )
        self.progress.update(
            self.task,
            completed=min(status["elapsed_s"], status["budget_s"]),
            description=escape(busy or "waiting"),  # family names hold [...]
            counts=f"all targets: {_counts(total, ' · ')} · {rate:.0f}/min",
        )

    def close(self) -> None:
        self.progress.stop()


def make_display(mode: str, out: TextIO | None, budget_s: float) -> Display:
    """``mode``: ``"rich"``, ``"plain"``, or ``"auto"`` (rich when ``out`` is a terminal)."""
    out = out if out is not None else sys.stdout
    if mode == "rich" or (mode == "auto" and out.isatty()):
        return _RichDisplay(out, budget_s)
    # about twenty lines a run, at least 5 s and at most 30 s apart
    return Display(out, every_s=min(30.0, max(5.0, budget_s / 20)))
