"""Inductor's attention fusion rounds a float32 mask to float16 (torch 2.13, CPU): a precision loss.

``_sfdp_pattern_16`` (torch/_inductor/fx_passes/fuse_attention.py, "for BertLarge with dropout") is
also registered for float16 ``q, k, v`` with a float32 mask ("for models like albert"; the
``_half_mask_fp32`` variants). Eager adds the mask to the scores in float32 (type promotion); on
CPU ``_sfdp_replacement_16`` first does ``attn_mask.to(dtype=query.dtype)``, so every mask value is
rounded to float16 (half an ulp of float16 at its magnitude: 0.004 at 8, 0.008 at 16) before it
enters the softmax. For a 0 / -10000 padding mask this changes nothing; for a soft bias of a few
units and up the compiled result and its gradients are several times farther from a float64
reference than eager's. ``_sfdp_replacement_24`` does the same (``attention_mask.to(query.dtype)``):
the audit's "less accurate in aggregate" finding on ``_sfdp_pattern_24_half_inference``. Found first
by ``pmverify audit`` (semantics oracle) on ``_sfdp_pattern_16_half_mask_fp32_training`` and
``_half_mask_fp32_bs1_training``, where it drew q = k = 0 and a mask of magnitude about 1: there compiled is only 1.1-2x eager's
error, below an ulp; with random q, k and a mask of magnitude 1-2 compiled is about as accurate as
eager (0.8-1.4x). Whether the rounding survives is Inductor's choice: with a (1, heads, q, k) bias in
training it fuses the cast into the softmax and drops it; the (batch, 1, 1, k) mask below, the
pattern's own shape, is rounded.

The pattern needs its dropout; ``p = 1e-9`` keeps it in the graph but drops nothing (eager keeps an
element with probability ``1 - p``, which is 1.0 in float32; compiled drops one where its uniform
draw is at most ``p``, 3 in 2**31, under 1e-4 for the whole run), so outputs compare elementwise.

Standalone: needs only torch. Prints the RMS error of eager and compiled against a float64 run
(output and the three gradients) and exits 1 while compiled's is more than twice eager's on any of
them (the bug), 0 once it is not.
"""

import sys

import torch

DROPOUT_P = 1e-9


def attention(query, key, value, attn_mask):
    q, k, v = (t.permute(0, 2, 1, 3) for t in (query, key, value))
    scores = torch.matmul(q, k.transpose(-2, -1)).div(8.0) + attn_mask
    weights = torch.nn.functional.dropout(scores.softmax(dim=-1), DROPOUT_P)
    return weights.to(dtype=query.dtype).matmul(v)


def run(fn, inputs, attn_mask, grad_out, dtype=None):
    leaves = [(t.to(dtype) if dtype else t).detach().requires_grad_() for t in inputs]
    out = fn(*leaves, attn_mask.to(dtype) if dtype else attn_mask)
    out.backward(grad_out.to(out.dtype))
    return [out.detach()] + [t.grad for t in leaves]


def main() -> int:
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(8, 32, 4, 64, generator=generator).half() for _ in range(3)]
    attn_mask = torch.randn(8, 1, 1, 32, generator=generator) * 8.0  # float32, a soft per-key bias
    grad_out = torch.randn(8, 4, 32, 64, generator=generator).half()
    compiled_fn = torch.compile(attention, backend="inductor", fullgraph=True)
    eager, compiled = run(attention, inputs, attn_mask, grad_out), run(compiled_fn, inputs, attn_mask, grad_out)
    reference = run(attention, inputs, attn_mask, grad_out, torch.float64)
    print(f"torch {torch.__version__}: RMS error vs float64, eager / compiled:")
    worst = 0.0
    for name, e, c, r in zip(("output", "grad query", "grad key", "grad value"), eager, compiled, reference):
        eager_rms = (e.double() - r).pow(2).mean().sqrt().item()
        compiled_rms = (c.double() - r).pow(2).mean().sqrt().item()
        worst = max(worst, compiled_rms / eager_rms)
        print(f"  {name}: {eager_rms:.3g} / {compiled_rms:.3g} ({compiled_rms / eager_rms:.2f}x)")
    return 1 if worst > 2.0 else 0


if __name__ == "__main__":
    sys.exit(main())
