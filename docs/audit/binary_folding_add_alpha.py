"""Inductor's binary folding folds ``conv(x) + alpha * shift`` as ``conv(x) + shift`` (torch 2.13, CPU, freezing).

``binary_folding.py`` registers ``folded_op`` on ``add(convolution(...), other)`` (and ``sub``) and,
under ``torch._inductor.config.freezing``, folds the constant ``other`` into the convolution's bias.
The pattern's ``add`` holds no keyword argument and Inductor's matcher compares only those a
pattern node holds, so ``torch.add(conv(x), shift, alpha=2.0)`` matches too, and the fold adds
``shift`` once. Binary folding runs whatever ``config.pattern_matcher`` says, so the witness of the
rewrite is the fold pass emptied (``PASS_OFF=1``): then eager and compiled agree. Found by
``pmverify audit --kinds graph`` (check_entry's near miss: an optional argument the pattern does
not bind, the convolution's weight and ``other`` drawn as frozen parameters, the lever its
extra_check names).

Standalone: needs only torch. Prints the largest difference between eager and ``torch.compile``
(freezing on) and exits 1 while they disagree (the bug), 0 once they agree (and with
``PASS_OFF=1``, binary folding's patterns removed).
"""

import os
import sys

import torch
import torch._inductor.config


class ConvShift(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.register_buffer("shift", torch.randn(4, 1, 1))

    def forward(self, x):
        return torch.add(self.conv(x), self.shift, alpha=2.0)


def main() -> int:
    torch.manual_seed(0)
    if os.environ.get("PASS_OFF"):
        from torch._inductor.fx_passes import freezing_patterns

        freezing_patterns.lazy_init()
        freezing_patterns.binary_folding_pass.patterns.clear()
    torch._inductor.config.freezing = True
    model = ConvShift().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, backend="inductor")(x)
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
