"""Inductor's attention fusion drops the cast to float16 of float32 attention (torch 2.13, CPU).

``_sfdp_pattern_7`` / ``_8`` / ``_9`` / ``_10`` (torch/_inductor/fx_passes/fuse_attention.py) match
``softmax((q @ k.T / s).to(float32)).to(float16) @ v.to(float16)`` (7 and 9 with a dropout, 9 and 10
scaling ``q`` first) and replace it by ``scaled_dot_product_attention(q, k, v, scale=1 / s)``, whose
result has the dtype of ``q``. The patterns are registered for float32 as well as half inputs; with
float32 ``q, k, v`` the ``.to(float32)`` vanishes from the trace but the two ``.to(float16)`` stay,
so eager returns float16 and the compiled program float32; in training the backward, traced for
the float16 output, then fails to compile (``expected scalar type torch.float32 but found
torch.float16`` in a ``bmm``) when the attention has its dropout. Found by ``pmverify audit``
(structure oracle: output dtype, and fake tensors not propagating; plain instances with float32
inputs) on the float32 variants ``_sfdp_pattern_7_inference``, ``_9_inference``, ``_8_training``,
``_10_training`` (dtype) and ``_7_training``, ``_9_training`` (the failing backward). Below, the
function without dropout is rewritten by ``_sfdp_pattern_7_inference`` under ``no_grad`` and by
``_sfdp_pattern_8_training`` with gradients, the one with dropout by ``_sfdp_pattern_7_training``.

Standalone: needs only torch. Prints eager's and the compiled output dtypes and whether the
compiled backward runs, and exits 1 while the dtypes differ or the backward fails (the bug), 0 once
they agree and it runs.
"""

import logging
import sys

import torch


def attention(query, key, value, dropout_p=0.0):
    q, k, v = (t.permute(0, 2, 1, 3) for t in (query, key, value))
    scores = (q @ k.transpose(-2, -1) / 4.0).to(torch.float32)
    weights = torch.softmax(scores, dim=-1)
    if dropout_p:
        weights = torch.dropout(weights, dropout_p, True)
    return weights.to(torch.float16) @ v.to(torch.float16)


def main() -> int:
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)  # the failure's traceback
    torch.manual_seed(0)
    inputs = [torch.randn(2, 4, 8, 16) for _ in range(3)]
    compiled = torch.compile(attention, backend="inductor", fullgraph=True)
    with torch.no_grad():
        eager_out, compiled_out = attention(*inputs), compiled(*inputs)
    print(f"torch {torch.__version__}: inference: eager {eager_out.dtype}, compiled {compiled_out.dtype}")
    training = [t.clone().requires_grad_() for t in inputs]
    eager_train, compiled_train = attention(*training), compiled(*training)
    print(f"training: eager {eager_train.dtype}, compiled {compiled_train.dtype}")
    bad = eager_out.dtype != compiled_out.dtype or eager_train.dtype != compiled_train.dtype
    training = [t.clone().requires_grad_() for t in inputs]
    try:
        compiled(*training, dropout_p=0.1).float().sum().backward()
        print("training with dropout: compiled backward runs")
    except Exception as error:  # torch._inductor.exc.InductorError
        print(f"training with dropout: compiled backward fails: {str(error).splitlines()[0]}")
        bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
