"""The audit's worker process: records the sources once (every kind of entry), then audits the entries
the job sends it, one at a time, so that an entry that kills its process or hangs takes only the
worker with it.

Requests, from the job (:mod:`pmverify._job.protocol`): :class:`CheckRequest`, :class:`Stop`.
Messages, to the job: :class:`Ready` once the sources are recorded, or :class:`Failed`;
:class:`RewriteChecked` per request (:func:`.check.check_one`'s outcome).
"""

from __future__ import annotations

import os
from typing import Any

from .._job.protocol import CheckRequest, Failed, Ready, RewriteChecked
from .._job.workers import die_with_parent, log_to, quiet_tqdm, serve_requests, use_threads
from .check import AUDIT_SHRINK_CALLS, ERROR, check_one, error_text

__all__ = ["serve"]


def _start(sources: list[str], options: dict[str, Any]) -> dict[str, list[Any]]:
    from .sources import record_source

    return {spec: record_source(spec) for spec in sources}


def _check(recorded: dict[str, list[Any]], request: CheckRequest, options: dict[str, Any]) -> dict[str, Any]:
    from .._engine.verify import fresh_settings
    from .._settings import profile_settings
    from .sources import locate

    spec, module, name, seed = request.source, request.module, request.name, request.seed
    print(f"pmverify audit: {module}/{name} (seed {seed})", flush=True)  # where the log's entries start
    try:
        entry, pass_source = locate(spec, recorded[spec], module, name, request.kind)
        # pmverify's ci profile (deadline None, its health checks) with no example database: a
        # rewrite's outcome depends on its seed only
        settings = fresh_settings(profile_settings("ci"))
        return check_one(
            entry,
            pass_source,
            max_examples=options["max_examples"],
            seed=seed,
            repro_dir=options["repro_dir"],
            settings=settings,
            reproducer_prelude=options.get("reproducer_prelude"),
            shrink_calls=options.get("shrink_calls", AUDIT_SHRINK_CALLS),
            wall_limit_s=options.get("shrink_s"),  # shrinking is bounded in calls; this in seconds, a net
            device=options.get("device"),
        )
    except Exception as exc:  # noqa: BLE001 - check_one catches what checking raises; this is the rest
        return {"status": ERROR, "reason": f"the worker raised {error_text(exc)}", "violations": [], "reproducer": None}


def serve(conn: Any, sources: list[str], options: dict[str, Any]) -> None:
    """The worker process's main. ``options``: ``log`` (a file for its output, or None),
    ``max_examples``, ``repro_dir``, ``shrink_calls`` (default :data:`.check.AUDIT_SHRINK_CALLS`),
    ``shrink_s`` (the real time after which a rewrite's checks
    have their shrinking cut: :func:`.check.check_one`'s ``wall_limit_s``), ``device`` (where the
    entries are checked, :func:`.check.check_one`'s; None: CPU), ``threads`` (torch's
    intra-op threads: :func:`pmverify._job.workers.use_threads`)."""
    if options.get("log"):
        log_to(options["log"])
    die_with_parent()
    quiet_tqdm()
    use_threads(options.get("threads"))
    try:
        recorded = _start(sources, options)
    except BaseException as exc:  # noqa: BLE001 - the job reports why the worker could not start
        conn.send(Failed(error_text(exc)))
        return
    conn.send(Ready(os.getpid()))
    serve_requests(conn, CheckRequest, lambda request: RewriteChecked(_check(recorded, request, options)))
