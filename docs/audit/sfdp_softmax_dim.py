"""Inductor's pre-serialized attention patterns ignore the softmax dim (torch 2.13, CPU and CUDA).

The ``_sfdp_pattern_*`` rewrites of torch/_inductor/fx_passes/fuse_attention.py are registered
from pre-serialized patterns (torch/_inductor/fx_passes/serialized_patterns/), which hold
softmax's ``dim`` (in the decomposed ``amax`` / ``sum`` of the softmax) as ``Ignored()``, and no
re-trace checks it; so attention that normalises over the *query* dim (-2) is replaced by
``scaled_dot_product_attention``, which normalises over the key dim (-1). Found by
``pmverify audit`` (near misses ``reduction_dim`` and ``dim``) on most serialized ``_sfdp`` patterns
(docs/audit/README.md lists where one run shrank to it); the graph below takes the
route of ``_sfdp_pattern_1`` (``softmax(q @ k.T / scale) @ v``).

Standalone: needs only torch. Prints the largest difference between eager and ``torch.compile``
and exits 1 while they disagree (the bug), 0 once they agree.
"""

import sys

import torch


def attention(query, key, value):
    scores = query @ key.transpose(-2, -1) / 4.0
    return torch.softmax(scores, dim=-2) @ value


def main() -> int:
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 4, 8, 16) for _ in range(3))
    with torch.no_grad():
        eager = attention(query, key, value)
        compiled = torch.compile(attention, backend="inductor", fullgraph=True)(query, key, value)
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
