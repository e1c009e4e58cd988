"""Hypothesis strategies for graphs with planted pattern instances."""

from ._qk_norm import qk_norm_cases

__all__ = ["qk_norm_cases"]
