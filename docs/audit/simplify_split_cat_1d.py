"""Inductor's pre-grad ``simplify_split_cat`` crashes on ``cat`` of one piece of a 1-D split (torch 2.13).

``split_cat.py``'s ``split_cat_pass`` (on with
``torch._inductor.config.pre_grad_fusion_options["split_cat_pass"]``) matches ``cat`` / ``stack``
of the pieces of a ``split`` and rebuilds them; on ``torch.cat([torch.split(x, [1, 1, 3])[0]],
-1)`` of a 1-D ``x`` its ``replace_cat`` flattens with ``start_dim`` after ``end_dim`` and
``torch.compile`` fails. Found by ``pmverify audit --kinds graph`` (check_entry: a ``ListOf`` of
split pieces drawn with one element).

Standalone: needs only torch. Exits 1 while ``torch.compile`` with the pass on fails or disagrees
with eager (the bug), 0 once they agree (and with ``PASS_OFF=1``, the pass off).
"""

import os
import sys

import torch
import torch._inductor.config


def first_piece(x):
    return torch.cat([torch.split(x, [1, 1, 3], dim=0)[0]], -1) * 2


def main() -> int:
    if not os.environ.get("PASS_OFF"):
        torch._inductor.config.pre_grad_fusion_options = {"split_cat_pass": {}}
    x = torch.randn(5)
    eager = first_piece(x)
    try:
        compiled = torch.compile(first_piece, backend="inductor", fullgraph=True)(x)
    except Exception as exc:  # noqa: BLE001 - the bug shows as a failed compile
        message = next((line for line in str(exc).splitlines() if "Error" in line), str(exc).splitlines()[0])
        print(f"torch {torch.__version__}: torch.compile failed: {message}")
        return 1
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
