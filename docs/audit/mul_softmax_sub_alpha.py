"""Inductor's joint-graph ``mul_softmax_pattern`` drops the ``alpha`` of the max subtraction (torch 2.13).

``mul_softmax_pattern`` / ``div_softmax_pattern`` (torch/_inductor/fx_passes/joint_graph.py) match
``(inp * other) - amax(inp * other, dim, keepdim)`` and their handler rewrites it as
``(inp - amax(inp, dim, keepdim)) * other`` (a softmax numerics trick). The pattern's ``sub`` holds
no keyword argument and Inductor's matcher compares only those a pattern node holds, so
``torch.sub(y, y.amax(...), alpha=2.0)`` matches too; the handler rebuilds the subtraction without
``alpha``. Found by ``pmverify audit --kinds graph`` (check_entry's near miss: an optional argument
the pattern does not bind).

Standalone: needs only torch. Prints the largest difference between eager and ``torch.compile``
and exits 1 while they disagree (the bug), 0 once they agree (also with
``torch._inductor.config.pattern_matcher = False``).
"""

import sys

import torch


def scores(x):
    y = x * 2.0
    return torch.sub(y, y.amax(dim=-1, keepdim=True), alpha=2.0)


def main() -> int:
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    with torch.no_grad():
        eager = scores(x)
        compiled = torch.compile(scores, backend="inductor", fullgraph=True)(x)
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
