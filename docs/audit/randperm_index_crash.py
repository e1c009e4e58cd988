"""``torch.compile`` crashes on ``x[torch.randperm(n)]`` (torch 2.13, CPU; the pattern is device-agnostic).

``_misc_patterns_init`` (torch/_inductor/fx_passes/misc_patterns.py) registers
``randperm_index_pattern(x, slice_shape)``, ``x[torch.randperm(x.shape[0])[:slice_shape]]``,
traced with ``x`` of 4 rows and ``scalar_workaround={"slice_shape": 42}``. Slicing 4 elements up to
42 is a no-op that tracing elides, so the pattern holds no slice and no ``slice_shape``: it is
plain ``index(x, [randperm(n)])``. That is what the shuffling idiom ``x[torch.randperm(len(x))]``
lowers to, and on every match ``register_replacement``'s ``check_fn`` raises in
``_unflatten_match_kwargs`` ("Not all inputs to pattern found in match.kwargs ...
argname=slice_shape"), failing the whole compile with ``BackendCompilerFailed``. (With a real slice,
``x[torch.randperm(n)[:k]]``, the pattern does not match and nothing is rewritten.) Explains the
audit's crash on ``misc_patterns/randperm_index_pattern`` (the planted instance is the traced
pattern itself). Upstream: pytorch/pytorch issue 183988, fix in pull request 184276.

Standalone: needs only torch. Exits 1 while ``torch.compile`` raises or returns something that is
not a row permutation of ``x``, 0 once it returns one.
"""

import sys

import torch


def shuffle_rows(x):
    return x[torch.randperm(x.shape[0], device=x.device)]


def main() -> int:
    torch.manual_seed(0)
    x = torch.randn(16, 8)
    try:
        compiled = torch.compile(shuffle_rows, backend="inductor", fullgraph=True)(x)
    except Exception as exc:  # torch._dynamo.exc.BackendCompilerFailed
        message = str(exc).strip().splitlines()
        print(f"torch {torch.__version__}: torch.compile raised {type(exc).__name__}: {' '.join(message[:3])[:400]}")
        return 1
    is_permutation = torch.equal(compiled.sort(dim=0).values, x.sort(dim=0).values)
    print(f"torch {torch.__version__}: compiled; result is a row permutation of x: {is_permutation}")
    return 0 if is_permutation else 1


if __name__ == "__main__":
    sys.exit(main())
