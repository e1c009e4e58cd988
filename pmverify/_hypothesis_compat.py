"""Hypothesis internals pmverify's searches rely on where no public route exists, read at
Hypothesis 6.170.17 (:data:`READ_AT`); each falls back to doing nothing when it is gone."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["READ_AT", "no_local_constants"]

READ_AT = "6.170.17"


@contextlib.contextmanager
def no_local_constants() -> Iterator[None]:
    """Within the block, Hypothesis draws none of the constants it collects from the source of the
    "local" modules loaded so far (``hypothesis.internal.conjecture.providers._get_local_constants``:
    about 5 % of its numbers, from every module in ``sys.modules`` outside site-packages and the
    standard library, gathered anew whenever ``sys.modules`` grows). Those make a seeded search draw
    differently depending on what the process imported before it (a test alone or in the suite; an
    audit worker's first rewrite or its tenth), where pmverify's searches must depend on their seed
    only. Hypothesis' global constants (0, 1, inf, the float boundaries...) are still drawn. Nothing
    changes when the internal is not there (another Hypothesis version)."""
    try:
        from hypothesis.internal.conjecture import providers

        original, cache, empty = providers._get_local_constants, providers.CONSTANTS_CACHE.cache, providers.Constants()
    except (ImportError, AttributeError):
        yield
        return
    providers._get_local_constants = lambda: empty
    cache.clear()  # the permitted constants of each choice type, local ones included
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.clear()
