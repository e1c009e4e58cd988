"""Inductor's post-grad ``normalize_split_default_aten`` breaks a split whose size does not divide the dim (torch 2.13).

``split_cat.py``'s ``normalization_aten_pass`` (on with
``torch._inductor.config.post_grad_fusion_options["normalization_aten_pass"]``) rewrites
``aten.split.Tensor(x, split_size, dim)`` as ``aten.split_with_sizes(x, [split_size] * pieces,
dim)``, forgetting that the last piece is shorter when ``split_size`` does not divide the dim:
``x.split(2)`` of 3 rows becomes ``split_with_sizes(x, [2, 2])``, and the compiled program fails.
Found by ``pmverify audit --kinds graph`` (a split size drawn by the schema's type).

Standalone: needs only torch. Exits 1 while ``torch.compile`` with the pass on fails or disagrees
with eager (the bug), 0 once they agree (and with ``PASS_OFF=1``, the pass off).
"""

import os
import sys

import torch
import torch._inductor.config


def pieces(x):
    first, second = x.split(2)
    return first.sum() + second.sum() * 2


def main() -> int:
    if not os.environ.get("PASS_OFF"):
        torch._inductor.config.post_grad_fusion_options = {"normalization_aten_pass": {}}
    x = torch.randn(3, 4)
    eager = pieces(x)
    try:
        compiled = torch.compile(pieces, backend="inductor", fullgraph=True)(x)
    except Exception as exc:  # noqa: BLE001 - the bug shows as a failed compile
        print(f"torch {torch.__version__}: torch.compile failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        return 1
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
