"""End to end: the all-reduce QK norm of a column-parallel attention input, compiled by
torch.compile with the shipped pass on a gloo world of 2 processes, against eager on the same ranks
and against the float64 norm of the full (all-heads) tensors."""

import pytest
import torch
import torch.distributed as dist

from pmverify.distributed import run_spmd, shutdown_worlds

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, TOKENS, WORLD = 4, 2, 8, 16, 5, 2


@pytest.fixture(scope="module", autouse=True)
def _worlds_torn_down():
    yield
    shutdown_worlds()


def compiled_rank(x, w_q, w_k, w_v, q_weight, k_weight):
    """One rank: ``qkv = x @ W_qkv_shardᵀ`` (column parallel), then vLLM's ``forward_qk`` with the
    functional all-reduce; compiled with ``QKNormFusionPass`` as ``post_grad_custom_post_pass``.
    Returns (matched_count, eager outputs, compiled outputs)."""
    from torch.distributed._functional_collectives import all_reduce

    from pmverify.fusions.qk_norm import QKNormConfig, QKNormFusionPass

    rank, group = dist.get_rank(), dist.group.WORLD
    config = QKNormConfig.for_heads(
        HEADS, KV_HEADS, HEAD_DIM, tp_world=WORLD, tp_rank=rank, eps=1e-6, dtype=torch.bfloat16,
        group_name=group.group_name,
    )  # fmt: skip
    w_qkv = torch.cat([w_q, w_k, w_v]).to(torch.bfloat16)
    sizes = [config.q_size, config.kv_size, config.kv_size]

    def forward(x):
        qkv = x @ w_qkv.t()
        q, k, v = qkv.split(sizes, dim=-1)
        qf, kf = q.to(torch.float32), k.to(torch.float32)
        qk_var = torch.cat([qf.pow(2).mean(dim=-1, keepdim=True), kf.pow(2).mean(dim=-1, keepdim=True)], dim=-1)
        qk_var = all_reduce(qk_var, "sum", group) / WORLD
        q_var, k_var = qk_var.chunk(2, dim=-1)
        q = (qf * torch.rsqrt(q_var + 1e-6) * q_weight).to(torch.bfloat16)
        k = (kf * torch.rsqrt(k_var + 1e-6) * k_weight).to(torch.bfloat16)
        return q, k, v

    eager = forward(x)
    pass_ = QKNormFusionPass(config)
    torch.compiler.reset()
    options = {"post_grad_custom_post_pass": pass_, "fx_graph_cache": False}
    compiled = torch.compile(forward, fullgraph=True, options=options)(x)
    return pass_.matched_count, eager, compiled


def _shards(rank):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(TOKENS, HIDDEN, generator=generator).to(torch.bfloat16)
    w_q = torch.randn(HEADS * HEAD_DIM, HIDDEN, generator=generator) / 4
    w_k = torch.randn(KV_HEADS * HEAD_DIM, HIDDEN, generator=generator) / 4
    w_v = torch.randn(KV_HEADS * HEAD_DIM, HIDDEN, generator=generator) / 4
    q_weight = 1 + torch.rand(HEADS * HEAD_DIM, generator=generator) / 8
    k_weight = 1 + torch.rand(KV_HEADS * HEAD_DIM, generator=generator) / 8
    q_cols = slice(rank * HEADS // WORLD * HEAD_DIM, (rank + 1) * HEADS // WORLD * HEAD_DIM)
    kv_cols = slice(rank * KV_HEADS // WORLD * HEAD_DIM, (rank + 1) * KV_HEADS // WORLD * HEAD_DIM)
    full = (x, w_q, w_k, q_weight, k_weight)
    return (x, w_q[q_cols], w_k[kv_cols], w_v[kv_cols], q_weight[q_cols], k_weight[kv_cols]), full, (q_cols, kv_cols)


@pytest.mark.multiproc
@pytest.mark.slow  # two processes compiling the model: the longest default test (18 s)
def test_gloo_world_of_2_compiled_with_the_pass():
    args = [_shards(rank)[0] for rank in range(WORLD)]
    results = run_spmd(compiled_rank, WORLD, args, backend="gloo", timeout_s=300)
    (x, w_q, w_k, q_weight, k_weight) = _shards(0)[1]
    w_qkv = torch.cat([w_q, w_k]).to(torch.bfloat16)
    qk = (x @ w_qkv.t()).double()
    q_full, k_full = qk[:, : HEADS * HEAD_DIM], qk[:, HEADS * HEAD_DIM :]

    def norm(t, weight):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.double()

    q_ref, k_ref = norm(q_full, q_weight), norm(k_full, k_weight)
    for rank, (matched, eager, compiled) in enumerate(results):
        assert matched == 1, f"rank {rank}: the pass did not fuse the all-reduce form under torch.compile"
        q_cols, kv_cols = _shards(rank)[2]
        for name, e, c, ref in (
            ("q", eager[0], compiled[0], q_ref[:, q_cols]),
            ("k", eager[1], compiled[1], k_ref[:, kv_cols]),
        ):
            # eager really reduced over both ranks: it is the norm over the whole hidden size (bf16 rounding)
            torch.testing.assert_close(e.double(), ref, rtol=1.6e-2, atol=1e-2, msg=f"rank {rank} eager {name}")
            torch.testing.assert_close(c.double(), ref, rtol=1.6e-2, atol=1e-2, msg=f"rank {rank} compiled {name}")
            torch.testing.assert_close(c, e, rtol=1.6e-2, atol=1e-2, msg=f"rank {rank} {name}: compiled vs eager")
        assert torch.equal(compiled[2], eager[2])
