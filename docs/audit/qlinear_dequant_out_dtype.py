"""Inductor's int8 weight prepack ignores the ``out_dtype=`` of the dequantizes it fuses (torch 2.13, CPU, freezing).

``quantization.py`` registers ``qlinear_weight_prepack`` (and ``qconv_weight_prepack``) on
``mm(dequantize_per_tensor(x, ...), permute(dequantize_per_channel(w, ...)))`` and rewrites it,
under ``torch._inductor.config.freezing``, as ``onednn.qlinear_pointwise`` whose output dtype is
the pattern's (float32 for the patterns without a cast). The pattern's dequantize nodes hold no
keyword argument and Inductor's matcher compares only those a pattern node holds, so dequantizes
given ``out_dtype=torch.bfloat16`` match too: eager computes the linear in bfloat16 and returns
bfloat16, the compiled program returns float32 (other values too). Found by ``pmverify audit
--kinds graph`` (check_entry's near miss: an optional argument the pattern does not bind).

The freezing weight-prepack patterns run whatever ``config.pattern_matcher`` says, so the witness
of the rewrite is its handler removed (``PASS_OFF=1``): then eager and compiled agree.

Standalone: needs only torch. Prints eager's and ``torch.compile``'s dtypes and largest
difference and exits 1 while they disagree (the bug), 0 once they agree.
"""

import os
import sys

import torch
import torch._inductor.config
import torch.ao.quantization.fx._decomposed  # registers torch.ops.quantized_decomposed

HANDLERS = ("qlinear_weight_prepack",)
qd = torch.ops.quantized_decomposed


class QLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("qw", torch.randint(-128, 128, (8, 16), dtype=torch.int8))
        self.register_buffer("w_scale", torch.rand(8) * 0.01 + 0.001)
        self.register_buffer("w_zp", torch.zeros(8, dtype=torch.long))

    def forward(self, qx):
        x = qd.dequantize_per_tensor(qx, 0.02, 3, 0, 255, torch.uint8, out_dtype=torch.bfloat16)
        w = qd.dequantize_per_channel(
            self.qw, self.w_scale, self.w_zp, 0, -128, 127, torch.int8, out_dtype=torch.bfloat16
        )
        return torch.mm(x, w.t())


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
    model = QLinear().eval()
    qx = torch.randint(0, 256, (4, 16), dtype=torch.uint8)
    with torch.no_grad():
        eager = model(qx)
        compiled = torch.compile(model, backend="inductor")(qx)
    difference = (eager.double() - compiled.double()).abs().max().item()
    print(
        f"torch {torch.__version__}: eager {eager.dtype}, compiled {compiled.dtype}, "
        f"max |eager - compiled| = {difference:.3g}"
    )
    return 1 if eager.dtype != compiled.dtype or difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
