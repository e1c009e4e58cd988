"""Inductor's training attention patterns ignore the dropout's rescaling factor (torch 2.13, CPU).

The ``*_training`` ``_sfdp_pattern_*`` rewrites of torch/_inductor/fx_passes/fuse_attention.py
with dropout are registered from pre-serialized patterns
(torch/_inductor/fx_passes/serialized_patterns/, e.g. ``_sfdp_pattern_16.py``) in which only the
threshold of the decomposed dropout, ``aten.gt.Scalar(rand, dropout_p)``, is bound to
``KeywordArg('dropout_p')`` (the ``scalar_workaround`` value 0.113377); the rescaling factor
``1 / (1 - dropout_p)`` in ``aten.mul.Tensor(mul, <scale>)`` (forward) and
``aten.mul.Tensor(convert_element_type(gt), <scale>)`` (backward) is ``Ignored()``. So a dropout
that keeps with probability ``1 - p`` but rescales by anything other than ``1 / (1 - p)`` is
replaced by ``scaled_dot_product_attention(..., dropout_p=p)``, which rescales by ``1 / (1 - p)``.
Explains the audit findings shrunk to the ``constant`` variant (``aten.gt.Scalar``'s threshold
changed while the scale stayed) on the dropout training patterns (``_sfdp_pattern_16`` and its kin;
which of them show it in one run depends on the cases drawn: see docs/audit/README.md).

Reach: ``torch.nn.functional.dropout`` cannot trigger it (its decomposition always uses the same p
for threshold and scale), nor can a plain hand-written ``(rand_like(a) > p) * a * s`` (autograd's
backward of it does not have the shape of ``native_dropout_backward``, so the training pattern
does not match). It takes a dropout written as a ``torch.autograd.Function`` whose backward
mirrors ``native_dropout_backward``, as below (the graph of ``_sfdp_pattern_16``, BERT-style
attention with an additive mask; the rewrite fires, counter ``fuse_attention``).

Dropout draws different random numbers in eager and compiled code, so the comparison is in
distribution: with ``value`` all ones every output element is ``scale * sum_j keep_j * attn_j``,
whose mean is ``(1 - p) * scale`` (0.625 here) in eager and 1 after the rewrite. Standalone: needs
only torch. Prints both means with their standard errors and exits 1 while they differ by more
than 8 standard errors (the bug), 0 once they agree.
"""

import sys

import torch

P = 0.5  # probability of dropping an element
SCALE = 1.25  # rescaling of the kept elements: not 1 / (1 - P) = 2


class ScaledDropout(torch.autograd.Function):
    """Keeps each element with probability 1 - P and multiplies the kept ones by SCALE."""

    @staticmethod
    def forward(ctx, x):
        keep = torch.rand_like(x) > P
        ctx.save_for_backward(keep)
        return keep * x * SCALE

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return grad * (keep.type_as(grad) * SCALE)


def attention(query, key, value, attn_mask):
    q, k, v = (t.permute([0, 2, 1, 3]) for t in (query, key, value))
    weights = (torch.matmul(q, k.transpose(-2, -1)).div(4.0) + attn_mask).softmax(dim=-1)
    return ScaledDropout.apply(weights).to(dtype=query.dtype).matmul(v)


def mean_and_error(output):
    rows = output[..., 0].flatten().double()  # with value all ones, every column is the same
    return rows.mean().item(), (rows.std() / rows.numel() ** 0.5).item()


def main() -> int:
    torch.manual_seed(0)
    batch, seq, heads, dim = 8, 64, 4, 8
    query, key = (torch.randn(batch, seq, heads, dim, requires_grad=True) for _ in range(2))
    value = torch.ones(batch, seq, heads, dim, requires_grad=True)
    attn_mask = torch.zeros(batch, 1, 1, seq)
    eager = attention(query, key, value, attn_mask)
    compiled = torch.compile(attention, backend="inductor")(query, key, value, attn_mask)
    compiled.sum().backward()  # training graph: the rewrite runs on the joint forward/backward graph
    (eager_mean, eager_err), (compiled_mean, compiled_err) = mean_and_error(eager), mean_and_error(compiled)
    sigmas = abs(eager_mean - compiled_mean) / (eager_err**2 + compiled_err**2) ** 0.5
    print(
        f"torch {torch.__version__}: dropout p={P}, scale={SCALE}; mean output (expected "
        f"{(1 - P) * SCALE:.4g}): eager {eager_mean:.4f} +- {eager_err:.4f}, "
        f"compiled {compiled_mean:.4f} +- {compiled_err:.4f}; difference {sigmas:.1f} standard errors"
    )
    return 1 if sigmas > 8 else 0


if __name__ == "__main__":
    sys.exit(main())
