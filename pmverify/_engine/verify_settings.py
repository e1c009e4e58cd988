"""What a :func:`~pmverify._engine.verify.verify` search runs under: its Hypothesis settings, the
example-database key its failures are saved under, and the seeds and settings of the searches
that ``pmverify fuzz``, ``selfcheck`` and ``audit`` run in batches."""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
from typing import Any

import hypothesis
from hypothesis import Phase
from hypothesis.strategies import SearchStrategy

from .._compat import keyed
from .._findings.factory import PassFactory
from .._settings import SUPPRESSED_HEALTH_CHECKS

__all__ = ["batch_seed", "database_key", "fresh_settings", "pass_identity", "search_settings"]


def pass_identity(pass_: Any) -> str:
    """What tells passes apart in the example database: a class or function by its import path; an
    object by its class and its ``config``, else its ``uuid()`` (Inductor's ``CustomGraphPass``),
    else its ``pass_name`` (a ``PatternMatcherPass``)."""
    if isinstance(pass_, PassFactory):
        return f"factory {pass_.module}.{pass_.qualname}"
    if isinstance(pass_, type) or inspect.isfunction(pass_) or inspect.ismethod(pass_):
        return f"{pass_.__module__}.{pass_.__qualname__}"
    if isinstance(pass_, functools.partial):
        return f"partial({pass_identity(pass_.func)}, *{pass_.args!r}, **{pass_.keywords!r})"
    cls = type(pass_)
    ident = f"{cls.__module__}.{cls.__qualname__}"
    config = getattr(pass_, "config", None)
    if config is not None:
        return f"{ident}({config!r})"
    uuid = getattr(pass_, "uuid", None)
    if callable(uuid):
        try:
            return f"{ident}[uuid={uuid()!r}]"
        except Exception:  # noqa: BLE001 - a uuid() that fails leaves the class and name to go by
            pass
    name = getattr(pass_, "pass_name", None)
    return ident if name is None else f"{ident}[{name!r}]"


def database_key(
    pass_: Any, cases: SearchStrategy, mode: str = "direct", strict_order: bool = False, device: Any = None
) -> bytes:
    """The example-database key under which :func:`verify` saves the failures of ``pass_`` on
    ``cases`` in ``mode``: a digest of the pass's class (and config) and the strategy's repr, so
    that every search of the same pass on the same strategy (a test, ``pmverify fuzz``, another
    machine sharing the database) replays the same failures first. Seeds do not enter it.

    ``strict_order`` gets keys of its own: a strict search's failures may hold only a disorder the
    default forgives (a default search replaying them would pass them and delete them from the
    database), and a default search's failures are the strict search's to find on its own. So does
    a ``device`` other than CPU (``verify(device="cuda")``), for the same reason: a failure only a
    GPU shows would be deleted by a CPU machine replaying it."""
    key = f"pmverify.verify:{pass_identity(pass_)}:{cases!r}" + ("" if mode == "direct" else f":{mode}")
    key += ":strict_order" if strict_order else ""
    key += f":device={device}" if device is not None and str(device) != "cpu" else ""
    key = re.sub(r" at 0x[0-9a-fA-F]+", "", key)  # default reprs hold addresses that change every run
    return hashlib.sha256(key.encode()).digest()


def batch_seed(seed: int, index: int) -> int:
    """The seed of batch ``index`` (an int >= 0) of a run seeded ``seed``: ``seed * 100_003 + index``,
    so that a run is reproducible batch by batch. The one formula of ``pmverify fuzz``,
    ``pmverify selfcheck`` (:func:`verify_in_rotation`) and ``pmverify audit`` (whose ``index`` is a
    checksum of the rewrite's name)."""
    return seed * 100_003 + index


def fresh_settings(parent: hypothesis.settings | None = None, *, shrink: bool = True) -> hypothesis.settings:
    """``parent`` (default ``hypothesis.settings.default``) less its example database (nothing read
    or saved: counts do not depend on earlier runs), its explain phase (it re-runs the shrunk case
    many times) and, unless ``shrink``, its shrink phase: settings for :func:`verify` to search
    afresh with. Nothing global is changed."""
    parent = hypothesis.settings.default if parent is None else parent
    dropped = {Phase.explain} if shrink else {Phase.explain, Phase.shrink}
    phases = [phase for phase in parent.phases if phase not in dropped]
    return hypothesis.settings(parent, database=None, phases=phases)


def search_settings(
    settings: hypothesis.settings | None,
    max_examples: int | None,
    pass_: Any,
    cases: SearchStrategy,
    mode: str,
    strict_order: bool,
    device: Any = None,
) -> hypothesis.settings:
    """The settings :func:`~pmverify._engine.verify.verify` searches under: ``settings`` (default
    ``hypothesis.settings.default``) as a parent, no deadline, pmverify's suppressed health checks
    added, ``max_examples`` when given, and its example database keyed by :func:`database_key`."""
    parent = hypothesis.settings.default if settings is None else settings
    return hypothesis.settings(
        parent,
        deadline=None,
        suppress_health_check=list(dict.fromkeys([*parent.suppress_health_check, *SUPPRESSED_HEALTH_CHECKS])),
        max_examples=parent.max_examples if max_examples is None else max_examples,
        # Hypothesis derives a test's key from its source; the failures are kept under pmverify's own
        database=keyed(parent.database, database_key(pass_, cases, mode, strict_order, device)),
    )
