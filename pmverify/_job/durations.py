"""Durations as people write them on a command line: ``90``, ``90s``, ``30m``, ``8h``, ``1h30m``,
``1d``."""

from __future__ import annotations

import math
import re

__all__ = ["parse_duration", "format_duration"]

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([dhms])")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: a number (seconds), or numbers each followed by a unit ``d``, ``h``,
    ``m`` or ``s``, largest first (``1h30m``, ``2.5h``, ``45s``). Raises ``ValueError`` for
    anything else, or for a duration that is not positive and finite."""
    spec = text.strip().lower()
    try:
        seconds = float(spec)
    except ValueError:
        body = spec.removeprefix("-")  # -5s is a duration, refused below for its sign
        parts = _PART.findall(body)
        units = [unit for _, unit in parts]
        if not parts or "".join(n + u for n, u in parts) != body or units != sorted(set(units), key="dhms".index):
            raise ValueError(f"{text!r} is not a duration (e.g. 90s, 30m, 8h, 1h30m, 1d)") from None
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts) * (-1 if body != spec else 1)
    if not (0 < seconds and math.isfinite(seconds)):
        raise ValueError(f"{text!r} must be a positive, finite duration")
    return seconds


def format_duration(seconds: float) -> str:
    """``8h``, ``1h30m``, ``90s``: the shortest exact form, seconds rounded to 0.1."""
    if seconds >= 60 and float(seconds).is_integer():
        whole = int(seconds)
        out = ""
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
            if whole >= size:
                out += f"{whole // size}{unit}"
                whole %= size
        return out
    return f"{seconds:g}s"
