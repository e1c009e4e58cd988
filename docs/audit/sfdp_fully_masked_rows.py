"""Inductor's attention fusion zeroes fully masked rows that eager averages (torch 2.13, CPU).

``_sfdp_pattern_18`` and ``_19`` (torch/_inductor/fx_passes/fuse_attention.py, "for hf_GPT2") match
``softmax(torch.where(causal_mask, scores, finfo(dtype).min) [+ attn_mask]) @ v``. The fill value is
finite, so a query row whose causal mask is all False gets equal scores and eager returns the mean
of ``v`` over all keys (GPT-2 fills with ``finfo.min``, not ``-inf``, so that such rows stay finite). The replacements hand the mask to
``scaled_dot_product_attention`` (18: the boolean mask itself; 19: ``where(causal_mask, attn_mask,
-inf)``), which returns 0 for a fully masked row. Found by ``pmverify audit`` (semantics oracle):
on ``_sfdp_pattern_19_half_inference`` (a plain instance, causal mask all False) and on
``_sfdp_pattern_18_inference`` (a drawn boolean mask that masks a whole batch; the case's planted
near miss, ``values`` on the key, plays no part).

Standalone: needs only torch. Prints the largest difference between eager and ``torch.compile`` for
both patterns (float16 for 19, float32 for 18) and exits 1 while they disagree (the bug), 0 once they agree.
"""

import sys

import torch


def gpt2_attention(query, key, value, causal_mask, attn_mask):  # _sfdp_pattern_19
    scores = torch.matmul(query, key.permute(0, 1, 3, 2))
    scores = scores.div(torch.full([], 4.0, dtype=scores.dtype))
    fill = torch.full((), torch.finfo(query.dtype).min, dtype=query.dtype)
    scores = torch.where(causal_mask, scores, fill) + attn_mask
    return scores.softmax(dim=-1).type(value.dtype).matmul(value)


def gpt2_permuted_attention(query, key, value, causal_mask):  # _sfdp_pattern_18
    q, k, v = (t.permute(0, 2, 1, 3) for t in (query, key, value))
    scores = torch.matmul(q, k.permute(0, 1, 3, 2))
    scores = scores.div(torch.full([], 4.0, dtype=scores.dtype))
    fill = torch.full((), torch.finfo(q.dtype).min, dtype=q.dtype)
    return torch.where(causal_mask, scores, fill).softmax(dim=-1).matmul(v), k, v


def main() -> int:
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 4, 8, 16) for _ in range(3))
    causal_mask = torch.ones(8, 8, dtype=torch.bool).tril().view(1, 1, 8, 8).clone()
    causal_mask[..., 0, :] = False  # query 0 sees no key (e.g. a padded position)
    key_mask = torch.tensor([True, True, False, True, False, False, False, False]).view(2, 1, 1, 4)
    with torch.no_grad():
        half = [t.half() for t in (query, key, value)]  # the half variant, as the audit found it
        eager19 = gpt2_attention(*half, causal_mask, torch.zeros(1, 1, 8, 8))
        compiled19 = torch.compile(gpt2_attention, backend="inductor", fullgraph=True)(
            *half, causal_mask, torch.zeros(1, 1, 8, 8))
        eager18 = gpt2_permuted_attention(query, key, value, key_mask)[0]
        compiled18 = torch.compile(gpt2_permuted_attention, backend="inductor", fullgraph=True)(
            query, key, value, key_mask)[0]
    difference19 = (eager19.float() - compiled19.float()).abs().max().item()
    difference18 = (eager18 - compiled18).abs().max().item()
    print(f"torch {torch.__version__}: _sfdp_pattern_19 route: max |eager - compiled| = {difference19:.3g}; "
          f"fully masked row: eager {eager19[0, 0, 0, :3].tolist()}, compiled {compiled19[0, 0, 0, :3].tolist()}")
    print(f"_sfdp_pattern_18 route (batch 1 fully masked): max |eager - compiled| = {difference18:.3g}")
    return 1 if max(difference19, difference18) > 1e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
