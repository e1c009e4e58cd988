"""Inductor's pre-grad ``simplify_split_cat`` gives the wrong shape when the ``cat`` is along
another dim than the ``split`` (torch 2.13).

``split_cat.py``'s ``split_cat_pass`` (on with
``torch._inductor.config.pre_grad_fusion_options["split_cat_pass"]``) matches ``cat`` of pieces of
a ``split`` and simplifies it. On ``torch.cat([p, p], dim=-2)`` with ``p = torch.split(x, [1, 1, 9],
dim=1)[0]`` of a ``(1, 11)`` ``x`` it concatenates along the split's dim instead: the compiled
result has shape ``(1, 2)`` where eager's is ``(2, 1)``. Found by ``check_entry(entry,
dynamic=True)`` on ``split_cat/simplify_split_cat[stack/cat]#3`` (a size drawn at a symbol's hint,
11; the pre-grad graph itself stays static).

Standalone: needs only torch. Exits 1 while ``torch.compile`` with the pass on disagrees with eager
(the bug), 0 once they agree (and with ``PASS_OFF=1``, the pass off).
"""

import os
import sys

import torch
import torch._inductor.config


def repeat_first_piece(x):
    first = torch.split(x, [1, 1, 9], dim=1)[0]
    return torch.cat([first, first], dim=-2)


def main() -> int:
    if not os.environ.get("PASS_OFF"):
        torch._inductor.config.pre_grad_fusion_options = {"split_cat_pass": {}}
    x = torch.randn(1, 11)
    eager = repeat_first_piece(x)
    try:
        compiled = torch.compile(repeat_first_piece, backend="inductor", fullgraph=True)(x)
    except Exception as exc:  # noqa: BLE001 - a failed compile is the bug too
        message = next((line for line in str(exc).splitlines() if "Error" in line), str(exc).splitlines()[0])
        print(f"torch {torch.__version__}: torch.compile failed: {message}")
        return 1
    if compiled.shape != eager.shape:
        print(f"torch {torch.__version__}: eager {tuple(eager.shape)}, compiled {tuple(compiled.shape)}")
        return 1
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
