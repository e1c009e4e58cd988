"""Inductor's pre-grad ``split_stack_to_cats`` permutes the wrong dims when a ``stack`` takes split
pieces along another dim (torch 2.13).

``split_cat.py``'s ``split_stack_to_cats_pass`` (on with
``torch._inductor.config.pre_grad_fusion_options["split_stack_to_cats_pass"]``) matches ``stack`` of
pieces of a ``split`` and rebuilds them as a ``reshape``, a ``permute`` and a ``view``. On
``torch.stack([torch.split(x, [3], dim=-2)[0]], dim=0)`` of a ``(3, 3, 1)`` ``x`` the permute swaps
the two size-3 dims: the compiled result is ``x`` transposed where eager's is ``x[None]``. Found by
``pmverify audit --kinds graph`` (check_entry: a split along dim -2, stacked along dim 0).

Standalone: needs only torch. Exits 1 while ``torch.compile`` with the pass on disagrees with eager
(the bug), 0 once they agree (and with ``PASS_OFF=1``, the pass off).
"""

import os
import sys

import torch
import torch._inductor.config


def stack_one_piece(x):
    (piece,) = torch.split(x, [3], dim=-2)
    return torch.stack([piece], dim=0)


def main() -> int:
    if not os.environ.get("PASS_OFF"):
        torch._inductor.config.pre_grad_fusion_options = {"split_stack_to_cats_pass": {}}
    x = torch.randn(3, 3, 1)
    eager = stack_one_piece(x)
    try:
        compiled = torch.compile(stack_one_piece, backend="inductor", fullgraph=True)(x)
    except Exception as exc:  # noqa: BLE001 - a failed compile is the bug too
        message = next((line for line in str(exc).splitlines() if "Error" in line), str(exc).splitlines()[0])
        print(f"torch {torch.__version__}: torch.compile failed: {message}")
        return 1
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
