"""pmverify's Hypothesis settings: its profiles (``ci``, ``dev``, ``nightly``) as settings objects,
the example database a ``--db`` / ``--pmverify-db`` names, and ``$PMVERIFY_SEED``. Hypothesis and the
standard library only (no torch, no pytest): the pytest plugin, the command line and the jobs share it.

Nothing here loads a profile except :func:`load_profile`, which only the pytest plugin calls (a test
session's profile is global by Hypothesis' design); the tool itself composes settings objects
(:func:`profile_settings`, ``pmverify.verify(settings=...)``) and leaves ``settings.default`` alone.
"""

from __future__ import annotations

import os
import urllib.parse

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from ._io import make_folder

__all__ = [
    "PROFILES",
    "SUPPRESSED_HEALTH_CHECKS",
    "env_seed",
    "example_database",
    "load_profile",
    "profile_name",
    "profile_settings",
    "redacted",
]

#: pmverify's Hypothesis profiles, by short name; registered as ``pmverify-<name>``.
PROFILES = ("ci", "dev", "nightly")
_MAX_EXAMPLES = {"ci": 15, "dev": 50, "nightly": 2000}
#: ``pmverify audit``'s default ``--max-examples`` (cases of check_rewrite per rewrite; the planted
#: check runs half as many), measured with ``benchmarks/audit_depth.py`` on the constant faults (issue
#: 30; 10 audit seeds each, torch 2.13 CPU, runs that found it / runs):
#:
#:     depth                         3      5     10     25
#:     gelu_tanh 0.0447 (float32)   9/10  10/10  10/10  10/10
#:     RMSNormHardCodedEps (bank)   8/10   8/10  10/10  10/10
#:
#: 10 is the first depth at which both are found every time, twice the depth where RMS is missed in
#: one audit of five; 25 gives a margin of five (a fault five times rarer to draw is still found about 9 times in 10)
#: for about 2.5 times the seconds of the rewrites that run all their cases (ok, not comparable:
#: about a quarter of the audit's time at 10; findings spend theirs shrinking): Inductor's whole
#: audit about 40 minutes instead of 30 with ``--jobs 2`` on 2 shared cores. The same constant
#: registered for bfloat16 only is found at no depth (0/3 at 200): it is below a bfloat16 ulp, and
#: the matcher does not fire it on float32 instances. The other knobs stay: the per-rewrite timeout (5 min) is
#: about three times the slowest ok rewrite's time at 25 (42 s at 10, ``_sfdp_pattern_26_training``), and
#: the shrink limit (a quarter of it) bounds what findings cost.
AUDIT_MAX_EXAMPLES = 25
#: The health checks every pmverify search suppresses: torch is slow, graphs are big.
SUPPRESSED_HEALTH_CHECKS = (HealthCheck.too_slow, HealthCheck.data_too_large)


def profile_name(name: str) -> str:
    """The Hypothesis name of pmverify's profile ``name`` (``"ci"`` → ``"pmverify-ci"``); raises
    ``ValueError`` for a name not in :data:`PROFILES`."""
    if name not in PROFILES:
        raise ValueError(f"profile={name!r} is not one of PROFILES={PROFILES}")
    return f"pmverify-{name}"


def _register_profiles() -> None:
    # From Hypothesis' "default" profile, not the active one: on CI Hypothesis loads its own "ci"
    # profile, whose derandomize=True and database=None must not leak into these.
    base = settings.get_profile("default")
    for name in PROFILES:
        settings.register_profile(
            profile_name(name),
            base,
            max_examples=_MAX_EXAMPLES[name],
            deadline=None,  # torch trips deadlines at random
            suppress_health_check=SUPPRESSED_HEALTH_CHECKS,
            print_blob=name == "ci",
        )


_register_profiles()


def _checked_database(database: ExampleDatabase | None) -> None:
    if database is not None and not isinstance(database, ExampleDatabase):
        raise TypeError(f"database={database!r} must be a hypothesis.database.ExampleDatabase")


def profile_settings(name: str, *, database: ExampleDatabase | None = None) -> settings:
    """pmverify's profile ``name`` (one of :data:`PROFILES`) as a ``hypothesis.settings`` object, to
    pass to ``pmverify.verify(settings=...)`` or use as a parent; nothing is loaded.

    - ``database``: its example database (see :func:`example_database`); default Hypothesis' own
      (``.hypothesis/examples``).

    Raises ``ValueError`` for an unknown ``name``, ``TypeError`` for a ``database`` that is not an
    ``ExampleDatabase``. Example: ``profile_settings("nightly", database=example_database("redis://ci:6379"))``.
    """
    profile = settings.get_profile(profile_name(name))
    _checked_database(database)
    return profile if database is None else settings(profile, database=database)


def load_profile(name: str, *, database: ExampleDatabase | None = None) -> str:
    """Load pmverify's Hypothesis profile ``name`` (one of :data:`PROFILES`) as Hypothesis' active
    profile and return the Hypothesis name of the profile loaded: what the pytest plugin does for
    ``--pmverify-profile``. The tool itself never calls it (see :func:`profile_settings`).

    - ``database``: an example database for it (see :func:`example_database`); default Hypothesis'
      own (``.hypothesis/examples``). Given, a profile ``pmverify-<name>-with-db`` is registered
      from ``pmverify-<name>`` and loaded.

    Raises ``ValueError`` for an unknown ``name``, ``TypeError`` for a ``database`` that is not an
    ``ExampleDatabase``. Example: ``load_profile("nightly", database=example_database("redis://ci:6379"))``.
    """
    loaded = profile_name(name)
    if database is not None:
        _checked_database(database)
        settings.register_profile(f"{loaded}-with-db", settings.get_profile(loaded), database=database)
        loaded = f"{loaded}-with-db"
    settings.load_profile(loaded)
    return loaded


def redacted(spec: str) -> str:
    """``spec`` fit to print: a ``redis://user:password@host`` URL's password, and a
    ``?password=`` query value, replaced by ``***``."""
    if "://" not in spec:
        return spec
    url = urllib.parse.urlsplit(spec)
    if url.password is not None:
        url = url._replace(netloc=url.netloc.replace(f":{url.password}@", ":***@", 1))
    if url.query:
        query = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
        hidden = [(key, "***" if key.lower() == "password" else value) for key, value in query]
        url = url._replace(query=urllib.parse.urlencode(hidden, safe="*"))
    return urllib.parse.urlunsplit(url)


def env_seed() -> int | None:
    """``$PMVERIFY_SEED`` as an int (the seed of ``pmverify.verify(seed=None)``), None when it is
    unset or empty; raises ``ValueError`` (``"PMVERIFY_SEED='abc' is not an int ..."``) for anything
    else. Read by ``verify``, and checked when pytest and the ``pmverify`` command start."""
    text = os.environ.get("PMVERIFY_SEED", "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"PMVERIFY_SEED={text!r} is not an int (the seed of pmverify.verify(seed=None))") from None


def env_shrink_budget() -> float | None:
    """``$PMVERIFY_SHRINK_BUDGET`` as seconds (a positive number: what ``pmverify.verify`` bounds its
    shrinking by at most, whatever its ``shrink_budget_s``), None when it is unset or empty; raises
    ``ValueError`` for anything else. The pytest plugin's ``--pmverify-shrink-budget`` sets it."""
    text = os.environ.get("PMVERIFY_SHRINK_BUDGET", "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(
            f"PMVERIFY_SHRINK_BUDGET={text!r} is not a positive number of seconds (verify's shrink budget)"
        )
    return seconds


def example_database(spec: str) -> ExampleDatabase:
    """The Hypothesis example database ``spec`` names: a directory (``DirectoryBasedExampleDatabase``)
    or ``redis://HOST:PORT[/N]`` (``RedisExampleDatabase``, after a ping: 2 s to connect, 5 s a
    command). Raises ``ValueError`` with a one-line message (naming no option) for an empty spec,
    a path that is a file or under one, another URL scheme, a bad Redis URL, redis-py not installed, or a Redis
    server that cannot be reached."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"the example database {spec!r} is empty: give a directory or redis://HOST:PORT[/N]")
    if "://" not in spec:
        if os.path.exists(spec) and not os.path.isdir(spec):
            raise ValueError(f"the example database {spec!r} is a file, not a directory")
        try:  # refused now: Hypothesis would fail to save into it silently
            make_folder(spec)
        except (OSError, ValueError) as exc:
            raise ValueError(f"the example database {spec!r} cannot be made a folder: {exc}") from None
        return DirectoryBasedExampleDatabase(spec)
    url = urllib.parse.urlsplit(spec)
    if url.scheme != "redis":
        raise ValueError(
            f"unsupported example database scheme {url.scheme!r}: give a directory or redis://HOST:PORT[/N]"
        )
    try:
        where = f"{url.hostname}:{url.port or 6379}"
    except ValueError as exc:  # a port that is not a number
        raise ValueError(f"bad Redis URL: {exc}") from None
    if not url.hostname or url.path.strip("/") and not url.path.strip("/").isdigit():
        raise ValueError(f"bad Redis URL: give redis://HOST:PORT[/N], N a database number (got host {url.hostname!r})")
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise ValueError("redis-py is not installed: pip install 'pmverify[redis]'") from None
    client = redis.Redis.from_url(spec, socket_connect_timeout=2, socket_timeout=5)
    try:
        client.ping()
    except (redis.exceptions.RedisError, OSError) as exc:
        client.close()
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"cannot reach Redis at {where}: {reason}") from None
    return RedisExampleDatabase(client)
