"""The audit's worker process: records the sources once, then audits the rewrites the job sends it,
one at a time, so that a rewrite that kills its process or hangs takes only the worker with it.

Requests, from the job: ``("check", source, module, name, seed)``; ``("stop",)``. Messages, to
the job: ``("ready", pid)`` once the sources are recorded, or ``("failed", text)``; ``("result",
outcome)`` per request (:func:`.check.check_one`'s outcome).
"""

from __future__ import annotations

import os
from typing import Any

from .check import ERROR, check_one, error_text

__all__ = ["serve"]


def _start(sources: list[str], options: dict[str, Any]) -> dict[str, list[Any]]:
    from .._compat import set_max_shrinking_seconds
    from .sources import record_source

    set_max_shrinking_seconds(options["shrink_s"])  # fuzz's workers bound it too
    return {spec: record_source(spec) for spec in sources}


def _check(recorded: dict[str, list[Any]], request: tuple, options: dict[str, Any]) -> dict[str, Any]:
    from .._settings import profile_settings
    from .._verify import fresh_settings
    from .sources import locate

    spec, module, name, seed = request
    print(f"pmverify audit: {module}/{name} (seed {seed})", flush=True)  # where the log's rewrites start
    try:
        rewrite, pass_source = locate(spec, recorded[spec], module, name)
        # pmverify's ci profile (deadline None, its health checks) with no example database: a
        # rewrite's outcome depends on its seed only
        settings = fresh_settings(profile_settings("ci"))
        return check_one(
            rewrite,
            pass_source,
            max_examples=options["max_examples"],
            seed=seed,
            repro_dir=options["repro_dir"],
            settings=settings,
        )
    except Exception as exc:  # noqa: BLE001 - check_one catches what checking raises; this is the rest
        return {"status": ERROR, "reason": f"the worker raised {error_text(exc)}", "violations": [], "reproducer": None}


def serve(conn: Any, sources: list[str], options: dict[str, Any]) -> None:
    """The worker process's main. ``options``: ``log`` (a file for its output, or None),
    ``max_examples``, ``repro_dir``, ``shrink_s`` (Hypothesis' shrinking time limit)."""
    from .._job.worker import _die_with_parent, _log_to, _quiet_tqdm

    if options.get("log"):
        _log_to(options["log"])
    _die_with_parent()
    _quiet_tqdm()
    try:
        recorded = _start(sources, options)
    except BaseException as exc:  # noqa: BLE001 - the job reports why the worker could not start
        conn.send(("failed", error_text(exc)))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request[0] != "check":
            return
        conn.send(("result", _check(recorded, request[1:], options)))
