"""Inductor's quantized max-pool lowering (``quantization._register_quantized_maxpool2d_lowering``,
torch 2.13) ignores the quantization parameters of the pattern it matches.

It matches ``quantize_per_tensor(max_pool2d(dequantize_per_tensor(x, s_in, zp_in, ...)), s_out,
zp_out, ...)`` and lowers it to ``quantized.max_pool2d(x)``: right only when the output is quantized
with the input's scale and zero point, which its ``extra_check`` does not ask (it checks only that
the max pool's values, not its indices, are read). Re-quantized with another zero point, the result
keeps the input's integers: eager gives 113 (0.0 quantized at zero point 113), compiled 0. Found by
``pmverify audit --kinds lowering`` (check_entry in compiled mode, Inductor's pattern matcher off,
without and with the entry alone).

Standalone: needs only torch. Exits 1 while eager and ``torch.compile`` disagree, 0 once they agree
(also with ``torch._inductor.config.pattern_matcher = False``).
"""

import sys

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers torch.ops.quantized_decomposed

qd = torch.ops.quantized_decomposed


def requantized_pool(x):
    x = qd.dequantize_per_tensor.default(x, 0.01, 0, 0, 255, torch.uint8)
    y = torch.nn.functional.max_pool2d(x, [2, 2], [2, 2])
    return qd.quantize_per_tensor.default(y, 0.01, 113, 0, 255, torch.uint8)


def main() -> int:
    x = torch.randint(0, 50, (1, 2, 4, 4), dtype=torch.uint8)
    with torch.no_grad():
        eager = requantized_pool(x)
        compiled = torch.compile(requantized_pool, backend="inductor", fullgraph=True)(x)
    differ = int((eager.int() - compiled.int()).abs().max())
    print(f"torch {torch.__version__}: eager {eager.flatten()[:4].tolist()}, compiled {compiled.flatten()[:4].tolist()}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
