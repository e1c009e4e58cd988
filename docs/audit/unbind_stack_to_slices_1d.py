"""Inductor's pre-grad ``unbind_stack_to_slices`` crashes on ``stack`` of pieces of a 1-D ``unbind`` (torch 2.13).

``split_cat.py``'s ``unbind_stack_to_slices_pass`` (on with
``torch._inductor.config.pre_grad_fusion_options["unbind_stack_to_slices_pass"]``) matches
``stack`` of the pieces of an ``unbind`` and rebuilds them as slices and a ``cat``; on
``torch.stack([torch.unbind(x)[0]] * 2)`` of a 1-D ``x`` (the pieces are 0-d) its ``cat`` has no
dim to concatenate along (``IndexError`` in ``_cat_meta``) and ``torch.compile`` fails where
eager runs. A 2-D ``x``, or a 1-D one stacked from distinct pieces, compiles and agrees. Found by
``pmverify audit --kinds graph`` (check_entry: a ``ListOf`` of unbind pieces drawn with one piece
twice).

Standalone: needs only torch. Exits 1 while ``torch.compile`` with the pass on fails or disagrees
with eager (the bug), 0 once they agree (and with ``PASS_OFF=1``, the pass off).
"""

import os
import sys

import torch
import torch._inductor.config


def repeat_first(x):
    first = torch.unbind(x, dim=0)[0]
    return torch.stack([first, first], dim=0)


def main() -> int:
    if not os.environ.get("PASS_OFF"):
        torch._inductor.config.pre_grad_fusion_options = {"unbind_stack_to_slices_pass": {}}
    x = torch.randn(2)
    eager = repeat_first(x)
    try:
        compiled = torch.compile(repeat_first, backend="inductor", fullgraph=True)(x)
    except Exception as exc:  # noqa: BLE001 - the bug shows as a failed compile
        message = next((line for line in str(exc).splitlines() if "Error" in line), str(exc).splitlines()[0])
        print(f"torch {torch.__version__}: torch.compile failed: {message}")
        return 1
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
