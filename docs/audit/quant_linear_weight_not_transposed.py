"""Inductor's weight prepacks take any ``permute`` of the weight for its transpose (torch 2.13, CPU, freezing).

``quantization.py`` registers ``qlinear_weight_prepack`` on ``mm(dequantize_per_tensor(x),
permute(dequantize_per_channel(w), axes))`` and ``linear_dynamic_fp16_weight_prepack`` on
``mm(x, permute(no_fuse(no_fuse(w, float16), float32), axes))``, and rewrites them, under
``torch._inductor.config.freezing``, as oneDNN linears of ``x`` and ``w``, i.e. ``x @ w.T``. The
axes are ``KeywordArg("permute_axes")`` and only the ``bmm`` forms of the int8 prepack check them
(``[1, 0]``): ``x @ w.permute(0, 1)`` (no transpose) is computed as ``x @ w.T``: other values for
a square weight, "could not create a primitive descriptor" (a compile or run failure) for another
shape; the float16 ``bmm`` form also takes a 3-D weight. Found by ``pmverify audit --kinds
graph`` (the axes drawn as a permutation of the weight's dims: most of the audit's "could not
create a primitive descriptor" rows are this, not a limit of the CPU).
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

HANDLERS = ("qlinear_weight_prepack", "linear_dynamic_fp16_weight_prepack")
TOLERANCE = 1e-3
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


nf = qd.convert_element_type.no_fuse


class Fp16Weight(torch.nn.Module):
    """A float32 weight stored as float16 (PT2E's dynamic fp16 linear: ``no_fuse`` casts)."""

    def __init__(self, out_features=8, in_features=16, compute_dtype=torch.float32) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(out_features, in_features))
        self.compute_dtype = compute_dtype

    def weight(self):
        return nf(nf(self.w, torch.float16), self.compute_dtype)


class Int8IdentityPermute(Int8Weight):
    def __init__(self) -> None:
        super().__init__(out_features=16)

    def forward(self, qx):
        return torch.mm(dequantize_x(qx), self.weight().permute(0, 1))


class Fp16IdentityPermute(Fp16Weight):
    def __init__(self) -> None:
        super().__init__(out_features=16)

    def forward(self, x):
        return torch.mm(x, self.weight().permute(0, 1))


def programs():
    return [
        (Int8IdentityPermute(), (torch.randint(0, 256, (4, 16), dtype=torch.uint8),)),
        (Fp16IdentityPermute(), (torch.randn(4, 16),)),
    ]


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
