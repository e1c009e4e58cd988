"""Inductor's post-grad ``pointless_cumsum_replacement`` drops the ``dtype=`` of the cumsum (torch 2.13).

``post_grad.py`` matches ``cumsum(full(shape, fill_value), dim)`` and replaces it by an ``iota``
times ``fill_value``. The pattern's ``cumsum`` holds no ``dtype`` and Inductor's matcher compares
only the keyword arguments a pattern node holds, so ``full(...).cumsum(dim, dtype=torch.float64)``
matches too, and the replacement keeps the ``full``'s float32: the compiled result is float32 where
eager's is float64. Found by ``pmverify audit --kinds graph`` (check_entry's near miss: an optional
argument the pattern does not bind).

Standalone: needs only torch. Exits 1 while eager and ``torch.compile`` disagree on the dtype,
0 once they agree (also with ``torch._inductor.config.pattern_matcher = False``).
"""

import sys

import torch


def positions(x):
    ones = torch.full((4, 8), 1.0)
    return x + ones.cumsum(1, dtype=torch.float64)


def main() -> int:
    x = torch.randn(4, 8)
    with torch.no_grad():
        eager = positions(x)
        compiled = torch.compile(positions, backend="inductor", fullgraph=True)(x)
    print(f"torch {torch.__version__}: eager {eager.dtype}, compiled {compiled.dtype}")
    return 1 if eager.dtype != compiled.dtype else 0


if __name__ == "__main__":
    sys.exit(main())
