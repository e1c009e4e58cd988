"""A pass module that imports ``register_replacement`` by name at import time (as many passes do),
for tests/test_record.py: ``record_patterns`` must see its calls too."""

from __future__ import annotations

import torch
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

EXAMPLE_INPUTS = (torch.empty(4, 8), torch.empty(8))


def scale_tanh_pattern(x, w):
    return torch.tanh(x * w) * 2.0


def scale_tanh_replacement(x, w):
    return 2.0 * torch.tanh(x * w)


def wide_enough(match) -> bool:
    """Only rows of at least 8 elements."""
    return match.kwargs["x"].meta["val"].shape[-1] >= 8


def build() -> PatternMatcherPass:
    """Register the rewrite into a new pass and return the pass."""
    patterns = PatternMatcherPass(pass_name="from_import_pass")
    register_replacement(
        scale_tanh_pattern, scale_tanh_replacement, list(EXAMPLE_INPUTS), fwd_only, patterns, extra_check=wide_enough
    )
    return patterns
