"""Inductor's post-grad ``decompose_addmm`` (opt-in ``decompose_mm_pass``) drops ``addmm``'s
``beta`` and ``alpha`` (torch 2.13).

``decompose_mem_bound_mm.py`` matches ``addmm(inp, mat1, mat2)`` (its pattern binds three
arguments and no ``beta`` / ``alpha``) and, for memory-bound shapes, replaces it by
``sum(mat1[:, :, None] * mat2[None], -2) + inp``: ``torch.addmm(inp, x, w, beta=2.0, alpha=0.5)``
comes back as ``x @ w + inp``. Found by ``pmverify audit --kinds graph`` (check_entry's first cases
set every optional argument the pattern does not bind) on the post-grad graph directly.

NOT CONFIRMED under ``torch.compile`` here: on CPU the pass takes one-row ``addmm``s, which Inductor's
CPU decompositions rewrite before the post-grad passes (the program below agrees on CPU); its CUDA
condition is at least 10240 rows and at most 32 columns, which needs a GPU. Exits 2 without CUDA;
with it, 1 while ``torch.compile`` with the pass on disagrees with eager, 0 once they agree (and
with ``PASS_OFF=1``, the pass off).
"""

import os
import sys

import torch
import torch._inductor.config


def scaled_bias(inp, x, w):
    return torch.addmm(inp, x, w, beta=2.0, alpha=0.5)


def main() -> int:
    if not os.environ.get("PASS_OFF"):
        torch._inductor.config.post_grad_fusion_options = {"decompose_mm_pass": {}}
    if not torch.cuda.is_available():
        print("needs a CUDA device: on CPU the one-row addmm is decomposed before the pass sees it")
        return 2
    inp, x, w = (torch.randn(*s, device="cuda") for s in ((1, 8), (10240, 16), (16, 8)))
    with torch.no_grad():
        eager = scaled_bias(inp, x, w)
        compiled = torch.compile(scaled_bias, backend="inductor", fullgraph=True)(inp, x, w)
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
