"""Eager argument validation for strategies and passes built on pmverify: each ``validate_*``
raises ``hypothesis.errors.InvalidArgument`` naming the argument and its value, as pmverify's own
strategies do (public names of :mod:`pmverify._validation`, where the code lives)."""

from ._validation import (
    FLOAT_DTYPES,
    short_repr,
    validate_all_reduce,
    validate_bool,
    validate_choices,
    validate_dtypes,
    validate_int,
    validate_optional_int,
    validate_order,
    validate_strategy,
)

__all__ = [
    "FLOAT_DTYPES",
    "short_repr",
    "validate_all_reduce",
    "validate_bool",
    "validate_choices",
    "validate_dtypes",
    "validate_int",
    "validate_optional_int",
    "validate_order",
    "validate_strategy",
]
