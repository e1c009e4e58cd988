"""``torch.compile`` crashes on attention scaled by a 0-d tensor (torch 2.13, CPU; the pattern is device-agnostic).

``_sfdp_pattern_5`` and ``_6`` of torch/_inductor/fx_passes/fuse_attention.py take their scale as a
``scalar_workaround`` argument (``... / inv_scale``), which Inductor's matcher matches at any
value, a graph input included, and their ``extra_check`` (``_sfdp_params_check``) does not ask, as
``_sfdp_extra_check(aten.div.Tensor)`` of patterns 1-4 does, that the scale is a number. So
``softmax(q @ k.T / scale + mask) @ v`` with ``scale`` a 0-d tensor (a module's buffer) is
rewritten to ``scaled_dot_product_attention(..., scale=1.0 / scale)``, and SDPA refuses a tensor
``scale``: the whole compile fails with ``BackendCompilerFailed``. Found by ``pmverify audit``
(near miss ``overload``: a number made a 0-d tensor input) on ``_sfdp_pattern_5_half_inference``,
once every near-miss kind that applies was judged; the same compile passes with
``torch._inductor.config.pattern_matcher = False``.

Standalone: needs only torch. Exits 1 while ``torch.compile`` raises or disagrees with eager, 0
once they agree.
"""

import sys

import torch


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(4.0))

    def forward(self, query, key, value, mask):
        return torch.softmax(query @ key.transpose(-2, -1) / self.scale + mask, dim=-1) @ value


def main() -> int:
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 4, 8, 16) for _ in range(3))
    mask = torch.randn(2, 4, 8, 8)
    model = Attention()
    with torch.no_grad():
        eager = model(query, key, value, mask)
        try:
            compiled = torch.compile(model, backend="inductor", fullgraph=True)(query, key, value, mask)
        except Exception as exc:  # torch._dynamo.exc.BackendCompilerFailed
            message = str(exc).strip().splitlines()
            print(
                f"torch {torch.__version__}: torch.compile raised {type(exc).__name__}: {' '.join(message[:2])[:400]}"
            )
            return 1
    difference = (eager - compiled).abs().max().item()
    print(f"torch {torch.__version__}: max |eager - compiled| = {difference:.3g}")
    return 1 if difference > 1e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
