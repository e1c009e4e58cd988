"""mutation_barriers on a fused ``auto_functionalized`` node writing a tensor that no node it
replaced wrote (vLLM's QK-norm + RoPE fusion): ``q, k, v = split(qkv)``, each of ``q`` and ``k``
normed per head into an ``empty`` buffer, then rotated in place (all ``auto_functionalized``), is
replaced by one ``auto_functionalized`` node of a fused op writing ``qkv``, whose element is split
into the new ``q``, ``k`` and ``v``. The fused node is functional: ``qkv`` is as it was, and its
element is a fresh value, so its readers (``v`` read from it) read no version of ``qkv``; the fused
node's own read of ``qkv`` is still judged: placed after a write to ``qkv`` that the nodes it
replaced read before, it is caught.

Ops (namespace ``pmverify_qk_rope``, CPU, float32; heads ``[T, n, D]``, ``cos`` / ``sin``
``[T, D/2]``; rotation of the two halves, NeoX style; the norm is ``_fused_norm_ops``'s):

- ``rotary(query!, key!, cos, sin)``: ``query``, ``key`` rotated in place.
- ``fused_qk_norm_rope(qkv!, q_weight, k_weight, cos, sin, num_heads_q, num_heads_k, head_dim,
  epsilon)``: the ``q`` and ``k`` heads of ``qkv`` (``[T, (nq + 2 nk) D]``) normed and rotated in
  place, ``v`` left alone; the same arithmetic in the same order as the parts (bit-identical).
"""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
from _fused_norm_ops import AF, AF2, EPS, _norm, call_args, elements, ops
from hypothesis import strategies as st
from torch import Tensor

import pmverify
from pmverify import GraphCase, check_case

aten = torch.ops.aten
NAMESPACE = "pmverify_qk_rope"
ORACLES = ["mutation_barriers", "semantics", "functionalization", "aliasing"]


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def _ops() -> Any:
    """``torch.ops.pmverify_qk_rope``, the ops defined once per process."""
    namespace = getattr(torch.ops, NAMESPACE)
    if hasattr(namespace, "rotary"):
        return namespace

    @torch.library.custom_op(f"{NAMESPACE}::rotary", mutates_args=("query", "key"))
    def rotary(query: Tensor, key: Tensor, cos: Tensor, sin: Tensor) -> None:
        query.copy_(_rotate(query, cos, sin))
        key.copy_(_rotate(key, cos, sin))

    @torch.library.custom_op(f"{NAMESPACE}::fused_qk_norm_rope", mutates_args=("qkv",))
    def fused_qk_norm_rope(
        qkv: Tensor,
        q_weight: Tensor,
        k_weight: Tensor,
        cos: Tensor,
        sin: Tensor,
        num_heads_q: int,
        num_heads_k: int,
        head_dim: int,
        epsilon: float,
    ) -> None:
        t = qkv.shape[0]
        q, k, _ = qkv.split([num_heads_q * head_dim, num_heads_k * head_dim, num_heads_k * head_dim], -1)
        for part, heads, weight in ((q, num_heads_q, q_weight), (k, num_heads_k, k_weight)):
            normed = _norm(part.reshape(t, heads, head_dim), weight, epsilon)
            part.copy_(_rotate(normed, cos, sin).reshape(t, heads * head_dim))

    for defined in (rotary, fused_qk_norm_rope):
        defined.register_fake(lambda *args, **kwargs: None)
    return namespace


def _functionalized(graph: torch.fx.Graph, version: int, op: Any, args: dict[str, Any]) -> torch.fx.Node:
    """An ``auto_functionalized`` (``version`` 1) or ``_v2`` node of ``op`` on whole tensors."""
    if version == 1:
        return graph.call_function(AF, (op,), args)
    written = [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    kwargs = {k: v for k, v in args.items() if k not in written}
    kwargs.update({f"_{name}_base_index": i for i, name in enumerate(written)})
    kwargs["_all_bases"] = [args[name] for name in written]
    return graph.call_function(AF2, (op,), kwargs)


def _case(t: int, nq: int, nk: int, d: int, version: int, v_read: str, write: bool, seed: int = 0) -> GraphCase:
    """The post-grad graph of vLLM's QK norm + RoPE: ``split(qkv)``, per-head ``rms_norm`` of ``q``
    and ``k`` into ``empty`` buffers, ``rotary`` of the two (``auto_functionalized`` ``version``),
    outputs ``(q, -k)`` and ``v`` as ``v_read`` says (``"output"``: returned, ``"mul"``: ``v * 2``,
    ``"none"``); ``write``: ``qkv.copy_(qkv + 1)`` between the norms and the rotary (an early
    write-back; ``v`` then not read)."""
    g = torch.fx.Graph()
    qkv, qw, kw, cos, sin = (g.placeholder(name) for name in ("qkv", "q_weight", "k_weight", "cos", "sin"))
    split = g.call_function(aten.split_with_sizes.default, (qkv, [nq * d, nk * d, nk * d], -1))
    q, k, v = (g.call_function(operator.getitem, (split, i)) for i in range(3))
    normed = []
    for part, heads, weight in ((q, nq, qw), (k, nk, kw)):
        view = g.call_function(aten.reshape.default, (part, [t, heads, d]))
        buffer = g.call_function(aten.empty.memory_format, ([t, heads, d],), {"dtype": torch.float32})
        args = dict(result=buffer, input=view, weight=weight, epsilon=EPS)
        node = _functionalized(g, version, ops().rms_norm.default, args)
        normed.append(g.call_function(operator.getitem, (node, 1)))
    if write:
        g.call_function(aten.copy_.default, (qkv, g.call_function(aten.add.Tensor, (qkv, 1.0))))
    rotary = _functionalized(g, version, _ops().rotary.default, dict(query=normed[0], key=normed[1], cos=cos, sin=sin))
    rq, rk = (g.call_function(operator.getitem, (rotary, i)) for i in (1, 2))
    outputs = [rq, g.call_function(aten.neg.default, (rk,))]
    if v_read == "output":
        outputs.append(v)
    elif v_read == "mul":
        outputs.append(g.call_function(aten.mul.Tensor, (v, 2.0)))
    g.output(tuple(outputs))
    shapes = [(t, (nq + 2 * nk) * d), (d,), (d,), (t, d // 2), (t, d // 2)]
    generator = torch.Generator().manual_seed(seed)
    inputs = tuple(torch.rand(s, generator=generator) * 4 - 2 for s in shapes)
    return GraphCase(torch.fx.GraphModule(torch.nn.Module(), g), [inputs], form="functional")


def fuse_qk_norm_rope(graph: torch.fx.Graph, at: str = "split") -> int:
    """The fusion: each ``rotary`` node of two per-head norms of ``q`` and ``k`` split from one
    ``qkv`` replaced by one ``fused_qk_norm_rope`` node writing ``qkv`` (in the same
    ``auto_functionalized`` version), its element split into the new ``q``, ``k`` (reshaped to
    heads) and ``v``. The node goes where the pattern reads ``qkv`` (``at="split"``: correct) or at
    the ``rotary`` node (``at="rotary"``: wrong when ``qkv`` is written in between). Returns the
    number of fusions."""
    count = 0
    for rotary in [n for n in graph.nodes if n.target in (AF, AF2) and n.args[0] is _ops().rotary.default]:
        args = call_args(rotary)
        norms = [args[name].args[0] for name in ("query", "key")]
        views = [call_args(norm)["input"] for norm in norms]
        split = views[0].args[0].args[0]
        qkv, sizes, _ = split.args
        t, nq, d = views[0].args[1]
        nk = views[1].args[1][1]
        fused_args = dict(
            qkv=qkv,
            q_weight=call_args(norms[0])["weight"],
            k_weight=call_args(norms[1])["weight"],
            cos=args["cos"],
            sin=args["sin"],
            num_heads_q=nq,
            num_heads_k=nk,
            head_dim=d,
            epsilon=call_args(norms[0])["epsilon"],
        )
        version = 1 if rotary.target is AF else 2
        with graph.inserting_before(split if at == "split" else rotary):
            fused = _functionalized(graph, version, _ops().fused_qk_norm_rope.default, fused_args)
            new = graph.call_function(
                aten.split_with_sizes.default, (graph.call_function(operator.getitem, (fused, 1)), sizes, -1)
            )
            q, k, v = (graph.call_function(operator.getitem, (new, i)) for i in range(3))
            heads = [graph.call_function(aten.reshape.default, (p, [t, n, d])) for p, n in ((q, nq), (k, nk))]
        for index, element in elements(rotary).items():
            element.replace_all_uses_with(heads[index - 1])
        for old in split.users:
            if old.args[1] == 2:
                old.replace_all_uses_with(v)
        graph.eliminate_dead_code()
        count += 1
    return count


def _at_rotary(graph: torch.fx.Graph) -> int:
    return fuse_qk_norm_rope(graph, at="rotary")


@pytest.mark.parametrize("at", ["split", "rotary"])
@pytest.mark.parametrize("v_read", ["output", "mul", "none"])
@pytest.mark.parametrize("version", [1, 2])
def test_a_correct_qk_norm_rope_fusion_is_quiet(version, v_read, at):
    case = _case(4, 2, 1, 8, version, v_read, write=False)
    result = check_case(fuse_qk_norm_rope if at == "split" else _at_rotary, case, oracles=ORACLES)
    assert result.rewritten, "the pass rewrote nothing"
    assert result.ok, result.violations


@pytest.mark.parametrize("version", [1, 2])
def test_a_fused_node_placed_after_a_write_to_qkv_is_caught(version):
    """``qkv.copy_(qkv + 1)`` between the norms (which read the old ``qkv``) and the rotary: the
    fused node at the split reads the old ``qkv`` (quiet), at the rotary the new one (caught)."""
    correct = check_case(fuse_qk_norm_rope, _case(4, 2, 1, 8, version, "none", write=True), oracles=ORACLES)
    assert correct.rewritten and correct.ok, correct.violations
    result = check_case(_at_rotary, _case(4, 2, 1, 8, version, "none", write=True), oracles=ORACLES)
    messages = [v.message for v in result.violations if v.oracle == "mutation_barriers"]
    assert any("the read of `qkv` across copy_" in m for m in messages), result.violations


@st.composite
def _cases(draw: Any) -> GraphCase:
    """Sizes (T in 1..5, 1..3 q heads, 1..2 kv heads, head size 4 or 8), version, how ``v`` is read."""
    t, nq, nk = draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    d = draw(st.sampled_from((4, 8)))
    version = draw(st.sampled_from((1, 2)))
    v_read = draw(st.sampled_from(("output", "mul", "none")))
    return _case(t, nq, nk, d, version, v_read, write=False, seed=draw(st.integers(0, 2**16)))


def test_a_correct_qk_norm_rope_fusion_is_quiet_on_drawn_cases(tmp_path):
    summary = pmverify.verify(fuse_qk_norm_rope, _cases(), seed=0, oracles=ORACLES, repro_dir=tmp_path)
    assert summary.rewritten_cases > 0, summary.describe()
