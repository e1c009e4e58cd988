"""Inductor's smooth-quant ``_int_mm`` weight prepack (freezing, ``quantization.py``
``_register_smooth_quant_int_mm_pattern``) crashes on a scale that is a number (torch 2.13).

Its pattern matches ``_int_mm(x, w).to(float32) * x_scale * w_scale`` with each scale a
``KeywordArg`` that may bind anything, and its handler reads ``x_scale.meta`` / ``w_scale.meta``:
scaled by Python numbers (per-tensor scales folded into the program, as a hand-written int8 matmul
does), ``torch.compile`` with ``freezing=True`` fails with ``AttributeError: 'float' object has no
attribute 'meta'`` where eager runs. Found by ``pmverify audit --kinds graph`` (check_entry: the
scales drawn as numbers).

Standalone: needs only torch. Exits 1 while ``torch.compile`` fails or disagrees with eager (the
bug), 0 once they agree (and with ``PASS_OFF=1``: freezing off, which the pass needs).
"""

import os
import sys

import torch
import torch._inductor.config


class Int8Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randint(-8, 8, (32, 16), dtype=torch.int8), requires_grad=False)

    def forward(self, x):
        return torch._int_mm(x, self.w).to(torch.float32) * 0.05 * 0.02


def main() -> int:
    if not os.environ.get("PASS_OFF"):
        torch._inductor.config.freezing = True
    model = Int8Linear().eval()
    x = torch.randint(-8, 8, (32, 32), dtype=torch.int8)
    with torch.no_grad():
        eager = model(x)
        try:
            compiled = torch.compile(model, backend="inductor", fullgraph=True)(x)
        except Exception as exc:  # noqa: BLE001 - the bug shows as a failed compile
            message = next((line for line in str(exc).splitlines() if "Error" in line), str(exc).splitlines()[0])
            print(f"torch {torch.__version__}: torch.compile failed: {message}")
            return 1
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
