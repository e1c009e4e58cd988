"""Validation of what a caller's strategy drew: ``cases=`` arguments must draw ``GraphCase`` values."""

from __future__ import annotations

from typing import Any

from hypothesis.errors import InvalidArgument

from .._case import GraphCase
from .._validation import short_repr

__all__ = ["validate_drawn_case"]


def validate_drawn_case(name: str, value: Any, *, form: str | None = None) -> None:
    """A value drawn from the ``name`` strategy must be a ``GraphCase`` (of ``form`` when given);
    raises ``hypothesis.errors.InvalidArgument`` naming ``name`` otherwise."""
    if not isinstance(value, GraphCase):
        raise InvalidArgument(f"{name} drew {short_repr(value)}; it must draw pmverify.GraphCase values")
    if form is not None and value.form != form:
        raise InvalidArgument(f"{name} drew a case of form={value.form!r}; it must draw {form} cases")
