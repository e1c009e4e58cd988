"""Light stand-ins for the audit's worker process (no torch once ``import pmverify`` is lazy: they
start in a blink), for the job's own tests: each answers a ``CheckRequest`` as the rewrite's name
says."""

import os
import time

from pmverify._job.protocol import CheckRequest, Ready, RewriteChecked
from pmverify._job.workers import log_to, serve_requests

OK, FINDING, ERROR = "ok", "finding", "error"  # (pmverify._audit.check's: importing it imports torch)


def _outcome(request):
    name, seed = request.name, request.seed
    print(f"checking {request.module}/{name}", flush=True)
    if name.startswith("exits"):
        os._exit(3)
    if name.startswith("hangs"):
        time.sleep(3600)  # a hang, which the job must time out and kill
    if name.startswith("slow"):
        time.sleep(1.5)
    if name.startswith("finding"):
        return {
            "status": FINDING,
            "kind": "violation",
            "check": "check_rewrite",
            "reason": "semantics: output 0 off",
            "violations": [{"oracle": "semantics", "message": "output 0: 3 of 4 elements off"}],
            "reproducer": "/tmp/repro.py",
            "cases": {"checked": 40, "rewritten": 2, "void": 0, "rejected": 1},
        }
    if name.startswith("raises"):
        return {"status": ERROR, "reason": "check_rewrite raised ValueError: no", "violations": [], "reproducer": None}
    cases = {"checked": 15, "rewritten": 6, "void": 1, "rejected": 0}
    return {"status": OK, "reason": f"seed {seed}", "violations": [], "reproducer": None, "cases": cases}


def serve(conn, sources, options):
    """``ok*``: ok; ``finding*``: a semantics finding; ``exits*``: ``os._exit(3)``; ``hangs*``:
    sleeps for an hour; ``raises*``: an error outcome; ``slow*``: ok after 1.5 s. A source named
    ``cannot-start`` makes it exit before it is ready."""
    if options.get("log"):
        log_to(options["log"])
    if "cannot-start" in sources:
        print("this worker cannot start", flush=True)
        os._exit(4)
    conn.send(Ready(os.getpid()))
    serve_requests(conn, CheckRequest, lambda request: RewriteChecked(_answer(request, options)))


def _answer(request, options):
    """The outcome, saying which kind of entry the request asked for (``request_kind``), the
    torch threads the job gave the worker (``worker_threads``) and its device (``worker_device``)."""
    return {
        **_outcome(request),
        "request_kind": request.kind,
        "worker_threads": options.get("threads"),
        "worker_device": options.get("device"),
    }
