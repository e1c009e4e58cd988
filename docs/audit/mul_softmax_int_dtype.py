"""Inductor's joint-graph ``mul_softmax_pattern`` turns an integer max subtraction into float32 (torch 2.13).

The ``convert_element_type`` forms of ``mul_softmax_pattern`` / ``div_softmax_pattern``
(torch/_inductor/fx_passes/joint_graph.py) match ``y - amax(y, dim, keepdim)`` with ``y`` the cast
of ``inp * other`` to a ``dtype`` the pattern binds as a ``KeywordArg``, and the handler rewrites it
as ``(inp - amax(inp)) * other`` cast afterwards, without checking that ``dtype`` is a floating
one: for ``y = (x * 3.0).long()`` the compiled result is float32 and the truncation to integers
happens after the subtraction, so values differ from eager (by up to 3). Found by
``pmverify audit --kinds graph`` (a dtype drawn for the ``KeywordArg``).

Standalone: needs only torch. Exits 1 while eager and ``torch.compile`` disagree (dtype or
values), 0 once they agree (also with ``torch._inductor.config.pattern_matcher = False``).
"""

import sys

import torch


def centred(x):
    y = (x * 3.0).to(torch.int64)
    return y - y.amax(dim=-1, keepdim=True)


def main() -> int:
    torch.manual_seed(0)
    x = torch.randn(4, 8) * 4
    with torch.no_grad():
        eager = centred(x)
        compiled = torch.compile(centred, backend="inductor", fullgraph=True)(x)
    difference = (eager.double() - compiled.double()).abs().max().item()
    print(
        f"torch {torch.__version__}: eager {eager.dtype}, compiled {compiled.dtype}, max |difference| = {difference:.3g}"
    )
    return 1 if eager.dtype != compiled.dtype or difference > 0 else 0


if __name__ == "__main__":
    sys.exit(main())
