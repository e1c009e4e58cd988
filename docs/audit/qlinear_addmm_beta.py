"""Inductor's int8 weight prepack drops the ``beta`` of ``addmm(bias, x, w.t(), beta=k)`` (torch 2.13, CPU, freezing).

``quantization.py`` registers ``qlinear_weight_prepack`` on ``addmm(b, dequantize_per_tensor(x),
permute(dequantize_per_channel(w)))`` and rewrites it, under ``torch._inductor.config.freezing``,
as ``onednn.qlinear_pointwise(..., bias=b, ...)``. The pattern's ``addmm`` holds no keyword
argument and Inductor's matcher compares only those a pattern node holds, so ``torch.addmm(bias,
x, w.t(), beta=2.0)`` matches too, and the bias is added once. ``linear_dynamic_fp16_weight_prepack``
(the float16 dynamic linear) drops it the same way. Found by ``pmverify audit --kinds graph``
(check_entry's near miss: an optional argument the pattern does not bind).
The freezing weight-prepack patterns run whatever ``config.pattern_matcher`` says, so the witness
of the rewrite is its handler removed (``PASS_OFF=1``): then eager and compiled agree.

Standalone: needs only torch. Prints eager's and ``torch.compile``'s dtypes and largest
difference (or the compile error) and exits 1 while they disagree (the bug), 0 once they agree.
"""

import os
import sys

import torch
import torch._inductor.config
import torch.ao.quantization.fx._decomposed  # registers torch.ops.quantized_decomposed

HANDLERS = ("qlinear_weight_prepack",)
TOLERANCE = 1e-4
qd = torch.ops.quantized_decomposed


def dequantize_x(qx):
    return qd.dequantize_per_tensor(qx, 0.02, 3, 0, 255, torch.uint8)


class Int8Weight(torch.nn.Module):
    def __init__(self, out_features=8, in_features=16, w_zp=0) -> None:
        super().__init__()
        qmin, qmax = -128 + max(w_zp, 0), 127 + min(w_zp, 0)
        shape = (out_features, in_features)
        self.register_buffer("qw", torch.randint(qmin, qmax + 1, shape, dtype=torch.int8))
        self.register_buffer("w_scale", torch.rand(out_features) * 0.01 + 0.001)
        self.register_buffer("w_zp", torch.full((out_features,), w_zp, dtype=torch.long))

    def weight(self):
        return qd.dequantize_per_channel(self.qw, self.w_scale, self.w_zp, 0, -128, 127, torch.int8)


class AddmmBeta(Int8Weight):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("bias", torch.randn(8))

    def forward(self, qx):
        return torch.addmm(self.bias, dequantize_x(qx), self.weight().t(), beta=2.0)


def programs():
    return [(AddmmBeta(), (torch.randint(0, 256, (4, 16), dtype=torch.uint8),))]


def is_handler(entry) -> bool:
    return getattr(getattr(entry, "handler", None), "__name__", "") in HANDLERS


def remove_handlers() -> None:
    from torch._inductor.fx_passes import freezing_patterns

    freezing_patterns.lazy_init()
    for pattern_pass in freezing_patterns.pass_patterns:
        for entries in pattern_pass.patterns.values():
            entries[:] = [e for e in entries if not is_handler(e)]


def main() -> int:
    torch.manual_seed(0)
    if os.environ.get("PASS_OFF"):
        remove_handlers()
    torch._inductor.config.freezing = True
    failed = 0
    for model, args in programs():
        model = model.eval()
        with torch.no_grad():
            eager = model(*args)
            try:
                compiled = torch.compile(model, backend="inductor")(*args)
            except Exception as exc:  # a compile crash on a program eager runs
                print(
                    f"torch {torch.__version__}: {type(model).__name__}: eager runs, "
                    f"torch.compile fails: {str(exc).splitlines()[0][:160]}"
                )
                failed = 1
                continue
        difference = (eager.double() - compiled.double()).abs().max().item()
        print(
            f"torch {torch.__version__}: {type(model).__name__}: eager {eager.dtype}, "
            f"compiled {compiled.dtype}, max |eager - compiled| = {difference:.3g}"
        )
        if eager.dtype != compiled.dtype or difference > TOLERANCE:
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
