"""Inductor's attention fusion drops the ``alpha`` of the mask add (torch 2.13, CPU and CUDA).

``_sfdp_pattern_5`` / ``_6`` (torch/_inductor/fx_passes/fuse_attention.py) match
``softmax(q @ k.T / inv_scale + attn_mask) @ v``. Inductor's matcher compares only the keyword
arguments a pattern node holds, and the pattern's ``add`` holds none, so
``torch.add(scores, attn_mask, alpha=3.0)`` matches too; the replacement,
``scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=1 / inv_scale)``, adds the mask
once. Found by ``pmverify audit`` (near miss ``optional_arg``).

Standalone: needs only torch. Prints the largest difference between eager and ``torch.compile``
and exits 1 while they disagree (the bug), 0 once they agree.
"""

import sys

import torch


def attention(query, key, value, attn_mask):
    scores = query @ key.transpose(-2, -1) / 4.0
    weights = torch.softmax(torch.add(scores, attn_mask, alpha=3.0), dim=-1)
    return weights @ value


def main() -> int:
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 4, 8, 16) for _ in range(3))
    attn_mask = torch.randn(1, 1, 8, 8)
    with torch.no_grad():
        eager = attention(query, key, value, attn_mask)
        compiled = torch.compile(attention, backend="inductor", fullgraph=True)(query, key, value, attn_mask)
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
