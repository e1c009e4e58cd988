"""Inductor's attention fusion changes the output's strides (torch 2.13, CPU).

The ``_sfdp_pattern_*`` rewrites of torch/_inductor/fx_passes/fuse_attention.py run in the joint-graph
passes, before Inductor records the output strides it promises to keep (``keep_output_stride``), and
replace ``softmax(q @ k.T / s) @ v`` on permuted inputs (``_sfdp_pattern_7`` and its kin: "in real
workloads inputs to matmul are permuted") by ``scaled_dot_product_attention``, whose output has another
memory layout than the matmul's. The values agree; the layout does not, so code that views the
output as eager laid it out breaks under ``torch.compile``. Found by ``pmverify audit`` (structure
oracle: output strides) on the fp32 and half variants of most ``_sfdp`` rewrites, inference and
training (this script shows the inference form).

Standalone: needs only torch. Prints eager's and compiled strides and whether ``.view`` of the result
works, and exits 1 while the strides differ (the bug), 0 once they agree.
"""

import sys

import torch


def attention(query, key, value):
    q, k, v = (t.permute(0, 2, 1, 3) for t in (query, key, value))
    return torch.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1) @ v


def _views(out: torch.Tensor) -> str:
    try:
        out.view(out.shape[0], out.shape[1], -1)
    except RuntimeError:
        return "fails"
    return "works"


def main() -> int:
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 4, 8, 16) for _ in range(3))
    with torch.no_grad():
        eager = attention(query, key, value)
        compiled = torch.compile(attention, backend="inductor", fullgraph=True)(query, key, value)
    print(f"torch {torch.__version__}: values differ by {(eager - compiled).abs().max().item():.3g}")
    print(f"eager strides {eager.stride()} (.view {_views(eager)}), compiled {compiled.stride()} (.view {_views(compiled)})")
    return 1 if eager.stride() != compiled.stride() else 0


if __name__ == "__main__":
    sys.exit(main())
