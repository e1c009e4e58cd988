"""Light stand-ins for the audit's worker process (no torch: they start in a blink), for the job's
own tests: each answers ``("check", source, module, name, seed)`` as the rewrite's name says."""

import faulthandler
import os
import signal
import sys
import time

OK, FINDING, ERROR = "ok", "finding", "error"  # (pmverify._audit.check's: importing it imports torch)


def _log_to(path):
    """Output to ``path``, and the Python stacks there on SIGUSR1, as the real worker does."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def serve(conn, sources, options):
    """``ok*``: ok; ``finding*``: a semantics finding; ``exits*``: ``os._exit(3)``; ``hangs*``:
    sleeps for an hour; ``raises*``: an error outcome; ``slow*``: ok after 1.5 s. A source named
    ``cannot-start`` makes it exit before it is ready."""
    if options.get("log"):
        _log_to(options["log"])
    if "cannot-start" in sources:
        print("this worker cannot start", flush=True)
        os._exit(4)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request[0] != "check":
            return
        _, _, module, name, seed = request
        print(f"checking {module}/{name}", flush=True)
        if name.startswith("exits"):
            os._exit(3)
        if name.startswith("hangs"):
            time.sleep(3600)
        if name.startswith("slow"):
            time.sleep(1.5)
        outcome = {"status": OK, "reason": f"seed {seed}", "violations": [], "reproducer": None}
        if name.startswith("finding"):
            outcome = {
                "status": FINDING,
                "kind": "violation",
                "check": "check_rewrite",
                "reason": "semantics: output 0 off",
                "violations": [{"oracle": "semantics", "message": "output 0: 3 of 4 elements off"}],
                "reproducer": "/tmp/repro.py",
            }
        if name.startswith("raises"):
            outcome = {
                "status": ERROR,
                "reason": "check_rewrite raised ValueError: no",
                "violations": [],
                "reproducer": None,
            }
        conn.send(("result", outcome))
