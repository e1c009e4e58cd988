"""Inductor's float16 dynamic-linear prepack does not ask that the weight is cast back to float32 (torch 2.13, CPU, freezing).

``quantization.py`` registers ``linear_dynamic_fp16_weight_prepack`` on ``mm(x,
permute(no_fuse(no_fuse(w, dtype_fp16), dtype_fp32)))`` (``no_fuse`` is
``quantized_decomposed.convert_element_type.no_fuse``) and rewrites it, under
``torch._inductor.config.freezing``, as ``onednn.linear_dynamic_fp16``, which takes a float32
activation. Its ``extra_check`` asks that ``dtype_fp16`` is float16 and nothing of
``dtype_fp32``: a weight stored as float16 and computed in bfloat16 (or float16), with an
activation of that dtype, is rewritten too and ``torch.compile`` fails ("onednn linear dynamic
fp16: data type of input should be float"; "Weight should be of type float or float16" for
others) where eager runs. Found by ``pmverify audit --kinds graph`` (the cast's dtype drawn by its
schema type).
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

HANDLERS = ("linear_dynamic_fp16_weight_prepack",)
TOLERANCE = 1e-3
qd = torch.ops.quantized_decomposed

nf = qd.convert_element_type.no_fuse


class Fp16Weight(torch.nn.Module):
    """A float32 weight stored as float16 (PT2E's dynamic fp16 linear: ``no_fuse`` casts)."""

    def __init__(self, out_features=8, in_features=16, compute_dtype=torch.float32) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(out_features, in_features))
        self.compute_dtype = compute_dtype

    def weight(self):
        return nf(nf(self.w, torch.float16), self.compute_dtype)


class Bf16ComputeLinear(Fp16Weight):
    def __init__(self) -> None:
        super().__init__(compute_dtype=torch.bfloat16)

    def forward(self, x):
        return torch.mm(x, self.weight().t())


def programs():
    return [(Bf16ComputeLinear(), (torch.randn(4, 16, dtype=torch.bfloat16),))]


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
