"""Inductor's attention fusion keeps only the keys whose mask is 1; eager keeps every nonzero (torch 2.13).

``_sfdp_pattern_15`` / ``_17`` / ``_20`` (torch/_inductor/fx_passes/fuse_attention.py, "for DistilBert")
match ``softmax(scores.masked_fill((attn_mask == 0).view(bs, 1, 1, k_len), -inf)) @ v``: a key is
masked out where the mask is 0 and attended to wherever it is nonzero. The replacements build
``(attn_mask == 1)`` as the boolean ``attn_mask`` of ``scaled_dot_product_attention``, so a key whose
mask is neither 0 nor 1 (2.0 here, as from adding two 0/1 masks, or any float mask) is attended to
in eager and masked out compiled; a row with no 1 in its mask comes out as 0 compiled (SDPA's value
for a fully masked row) where eager averages ``v`` over its nonzero keys. Found by ``pmverify
audit`` (semantics oracle, a plain instance with a float mask) on ``_sfdp_pattern_15_inference`` and
``_sfdp_pattern_20_inference``; the graph below takes the route of ``_sfdp_pattern_15``.

Standalone: needs only torch. Prints the largest difference between eager and ``torch.compile``
and exits 1 while they disagree (the bug), 0 once they agree.
"""

import sys

import torch


def attention(query, key, value, attn_mask):
    q, k, v = (t.permute(0, 2, 1, 3) for t in (query, key, value))
    scores = q @ k.transpose(-2, -1) / 4.0
    masked = (attn_mask == 0).view(q.size(0), 1, 1, k.size(-2)).expand_as(scores)
    return torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1) @ v


def main() -> int:
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 4, 8, 16) for _ in range(3))
    attn_mask = torch.tensor([[1.0, 1.0, 2.0, 0.0], [2.0, 2.0, 2.0, 0.0]])  # 0 = padding, nonzero = keep
    with torch.no_grad():
        eager = attention(query, key, value, attn_mask)
        compiled = torch.compile(attention, backend="inductor", fullgraph=True)(query, key, value, attn_mask)
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    print(f"batch 1 (mask {attn_mask[1].tolist()}): max |eager| = {eager[1].abs().max().item():.3g}, "
          f"max |compiled| = {compiled[1].abs().max().item():.3g}")
    return 1 if difference > 1e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
