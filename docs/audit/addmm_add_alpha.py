"""Inductor's post-grad ``addmm`` handler drops the ``alpha`` of ``bias + alpha * (a @ b)`` (torch 2.13, CPU).

``post_grad.py`` registers ``addmm`` on ``add(inp, mm(a, b))`` and ``add(mm(a, b), inp)`` and
rewrites them as ``addmm(inp, a, b)``. The pattern's ``add`` holds no keyword argument and
Inductor's matcher compares only those a pattern node holds, so ``torch.add(bias, a @ b,
alpha=2.0)`` matches too; the handler's replacement adds the product once. Found by
``pmverify audit --kinds graph`` (check_entry's near miss: an optional argument the pattern does
not bind).

Standalone: needs only torch. Prints the largest difference between eager and ``torch.compile``
and exits 1 while they disagree (the bug), 0 once they agree (also with
``torch._inductor.config.pattern_matcher = False``).
"""

import sys

import torch


def linear(a, b, bias):
    return torch.add(bias, a @ b, alpha=2.0)


def main() -> int:
    torch.manual_seed(0)
    a, b, bias = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
    with torch.no_grad():
        eager = linear(a, b, bias)
        compiled = torch.compile(linear, backend="inductor", fullgraph=True)(a, b, bias)
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
