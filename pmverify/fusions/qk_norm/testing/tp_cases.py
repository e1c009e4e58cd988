"""``qk_norm_tp_cases``: per-rank (SPMD) aten graphs with tensor-parallel MiniMax QK norms planted.

A case is built as in :mod:`.cases`, on the layer model of :mod:`.layers`: Hypothesis draws a plan (a world size, a head geometry, one
:class:`Layer` per planted layer, context ops, a seed); :func:`build_case` traces the planned
function once with ``torch._inductor.pattern_matcher.fwd_only`` and annotates every planted layer
with ``torch.fx.traceback.annotate({"pmverify_instance": i})`` for the ground truth. The graph is
the one every rank runs. At ``tp_world > 1`` a layer is vLLM's ``MiniMaxText01RMSNormTP.forward_qk``
(:func:`~pmverify.fusions.qk_norm.tp.qk_norm_tp_forward`: one ``[T, 2]`` functional all-reduce);
tracing a collective on real tensors needs a started process group, so the graph is traced on fake
example inputs. The real inputs are made separately: full tensors (all heads) from the seed, cut
into each rank's slice as vLLM's ``QKVParallelLinear`` holds it (q heads split, kv heads split or
replicated), so the ranks that share a replicated kv head hold the same k, v and k weight.

Nothing is filtered: 0 % of draws are rejected (tests/strategies/test_rejections.py).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.tensor import Shard

from pmverify import GraphCase, PlantedInstance
from pmverify.device import on_device, validate_device
from pmverify.validation import (
    short_repr,
    validate_all_reduce,
    validate_bool,
    validate_dtypes,
    validate_int,
    validate_order,
    validate_strategy,
)

from ....distributed import DEFAULT_GROUP_NAME
from ....strategies import Shown, tp_sizes
from ..config import SUPPORTED_DTYPES, QKNormConfig, kv_head_range
from ..tp import all_reduce, qk_norm_tp_forward
from .layers import (
    ANNOTATION,
    EPS,
    HEAD_DIMS,
    Inputs,
    Source,
    apply_ops,
    as_public_call,
    draw_context,
    draw_max_tokens,
    draw_near_miss,
    draw_plan,
    fill,
    hint_free,
    instance_nodes,
    other_eps,
    source,
    symbolize_tokens,
    trace,
    validate_dynamic,
    validate_dynamic_tokens,
)

__all__ = [
    "qk_norm_tp_cases",
    "QK_NORM_TP_NEAR_MISS_KINDS",
    "Layer",
    "make_layer",
    "build_case",
    "rank_head_dim",
    "LEAKS",
    "TP_LEAKS",
]

#: Near-miss kinds, in the order shrinking prefers them (after "no near miss").
QK_NORM_TP_NEAR_MISS_KINDS = ("eps", "divisor", "reduce_op", "dtype", "extra_user", "tokens")
_DEFAULT_MAX_TOKENS = 16
#: Head sizes in elements, simplest first; kv head counts, 1 first (replicated at every tp_world > 1).
_TP_HEAD_DIMS = HEAD_DIMS[:5]
_KV_HEADS = (1, 2, 4, 8)
_MAX_HEADS_PER_RANK = 4
#: Elementwise context ops without a second operand (every graph input is a qkv or a norm weight).
_OPS = ("neg", "tanh", "add:1.0", "mul:2.0", "sigmoid", "abs", "exp_tanh", "add:-0.5", "mul:0.5", "mul:-1.5")
#: Intermediates an ``extra_user`` near miss returns too: the all-reduced ``[T, 2]`` sums, q's mean
#: of squares, ... (q side); those of TP_LEAKS exist only in the all-reduce form.
LEAKS = ("reduced", "ms", "xf", "sq", "rstd", "normed", "qk_var", "var")
TP_LEAKS = ("reduced", "qk_var", "var")
_REDUCE_OPS = ("max", "min")  # both supported by gloo and NCCL


# --------------------------------------------------------------------------------------------- plan


@dataclasses.dataclass(frozen=True)
class Layer:
    """One planted QK-norm layer on a ``[rows, qkv_size]`` qkv; a near miss when ``reason`` is set."""

    rows: int  # tokens
    dtype: torch.dtype  # activation dtype it computes in (qkv and the cast back)
    weight_dtype: torch.dtype
    eps: float
    split3: bool = False  # one split node per consumer
    divisor: int | None = None  # what the reduced sums are divided by; None: tp_world
    reduce_op: str = "sum"
    leak: str | None = None  # intermediate also returned (see LEAKS)
    reason: str | None = None  # near-miss kind; None when a correct pass must rewrite it
    source: Source = Source()  # fresh qkv input or chained from the previous layer, then pre ops
    post: tuple[tuple[str, ...], ...] = ((), (), ())  # context ops of q_out, k_out and v

    def describe(self, world: int) -> str:
        name = ("qk_norm_tp" if world > 1 else "qk_norm") + ("_split3" if self.split3 else "")
        return name + (f"[{self.reason}]" if self.reason else "")


def _near_miss_variants(config: QKNormConfig, layer: Layer, kind: str, max_tokens: int) -> list[Layer]:
    """Every way (simplest first) to make ``layer`` a near miss of ``kind`` that the pass for
    ``config`` must not rewrite; empty when there is none."""
    world = config.tp_world
    miss = functools.partial(dataclasses.replace, layer, reason=kind)
    if kind == "eps":
        return [miss(eps=e) for e in other_eps(config.eps)]
    if kind == "divisor":
        return [miss(divisor=d) for d in dict.fromkeys((1, 2 * world, world + 1))] if world > 1 else []
    if kind == "reduce_op":
        return [miss(reduce_op=op) for op in _REDUCE_OPS] if world > 1 else []
    if kind == "dtype":
        others = [dt for dt in SUPPORTED_DTYPES if dt != config.dtype]  # float32 weights stay float32
        return [
            miss(dtype=dt, weight_dtype=torch.float32 if layer.weight_dtype == torch.float32 else dt) for dt in others
        ]
    if kind == "extra_user":
        leaks = [lk for lk in LEAKS if world > 1 or lk not in TP_LEAKS]
        leaks = [lk for lk in leaks if lk != "xf" or layer.dtype != torch.float32]  # xf is q itself
        return [miss(leak=lk) for lk in leaks]
    if kind == "tokens":
        return [miss(rows=rows) for rows in range(config.max_tokens + 1, max_tokens + 1)]
    raise ValueError(f"unknown near-miss kind {kind!r}")


def make_layer(
    config: QKNormConfig,
    near_miss: str | None = None,
    *,
    tokens: int = 1,
    variant: int = 0,
    split3: bool = False,
    weight_in_act_dtype: bool = False,
    source: Source | None = None,
    post: tuple[tuple[str, ...], ...] = ((), (), ()),
    max_tokens: int | None = None,
) -> Layer:
    """A layer for ``config`` with ``near_miss`` applied (its ``variant``-th way). For tests and
    reproducers. Raises ``ValueError`` when that near miss is impossible for ``config``."""
    weight_dtype = config.dtype if weight_in_act_dtype else torch.float32
    layer = Layer(tokens, config.dtype, weight_dtype, config.eps, split3, source=source or Source(), post=post)
    if near_miss is None:
        return layer
    limit = max_tokens if max_tokens is not None else config.max_tokens + 1
    variants = _near_miss_variants(config, layer, near_miss, limit)
    if variant >= len(variants):
        raise ValueError(f"near miss {near_miss!r} has {len(variants)} variants for {config!r}")
    return variants[variant]


# -------------------------------------------------------------------------------------------- build


def _norms(
    config: QKNormConfig,
    layer: Layer,
    qkv: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    op: Any = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The planted layer: ``([q_out, k_out, v], leaks)``. At tp_world > 1 without a leak it is
    :func:`qk_norm_tp_forward` itself; otherwise the same ops written out (at tp_world 1 without
    the all-reduce: vLLM's rank-local ``forward_qk``, patterns.py's ``qk_norm_pattern``). ``op``: the
    all-reduce op to call (None: the functional collective)."""
    world, sizes = config.tp_world, [config.q_size, config.kv_size, config.kv_size]
    if world > 1 and layer.leak is None:
        outs = qk_norm_tp_forward(
            qkv, q_weight, k_weight, sizes, layer.eps, world, config.group_name, layer.dtype,
            split3=layer.split3, reduce_op=layer.reduce_op, divisor=layer.divisor, all_reduce_op=op,
        )  # fmt: skip
        return list(outs), []
    if layer.split3:
        q, k, v = (qkv.split(sizes, dim=-1)[i] for i in range(3))
    else:
        q, k, v = qkv.split(sizes, dim=-1)
    qf, kf = q.to(torch.float32), k.to(torch.float32)
    sq = qf.pow(2)
    q_var, k_var = sq.mean(dim=-1, keepdim=True), kf.pow(2).mean(dim=-1, keepdim=True)
    seen = {"xf": qf, "sq": sq, "ms": q_var}
    if world > 1:
        seen["qk_var"] = torch.cat([q_var, k_var], dim=-1)
        seen["reduced"] = all_reduce(seen["qk_var"], config.group_name, layer.reduce_op, op)
        seen["var"] = seen["reduced"] / (world if layer.divisor is None else layer.divisor)
        q_var, k_var = seen["var"].chunk(2, dim=-1)
    seen["rstd"] = torch.rsqrt(q_var + layer.eps)
    seen["normed"] = qf * seen["rstd"]
    q_out = (seen["normed"] * q_weight).to(layer.dtype)
    k_out = (kf * torch.rsqrt(k_var + layer.eps) * k_weight).to(layer.dtype)
    return [q_out, k_out, v], [seen[layer.leak]] if layer.leak else []


def _program(config: QKNormConfig, layers: Sequence[Layer], inputs: Inputs, op: Any = None) -> tuple[torch.Tensor, ...]:
    """Compute the planned graph; layer ``i`` is annotated ``{"pmverify_instance": i}``."""
    outputs: list[torch.Tensor] = []
    pool: list[torch.Tensor] = []
    for i, layer in enumerate(layers):
        qkv = source(layer.source, layer.rows, config.qkv_size, layer.dtype, pool, inputs)
        q_weight = inputs.take("weight", (config.q_size,), layer.weight_dtype)
        k_weight = inputs.take("weight", (config.kv_size,), layer.weight_dtype)
        with torch.fx.traceback.annotate({ANNOTATION: i}):
            results, leaks = _norms(config, layer, qkv, q_weight, k_weight, op)
        outputs.extend(apply_ops(r, ops, layer.dtype, inputs) for r, ops in zip(results, layer.post, strict=True))
        outputs.extend(leaks)
        pool = results
    return tuple(outputs)


def _input_specs(layers: Sequence[Layer]) -> list[tuple[str, int, torch.dtype]]:
    """``(kind, rows, dtype)`` of each graph input, in the order :func:`_program` takes them."""
    specs = []
    for i, layer in enumerate(layers):
        if not (layer.source.chain and i > 0):
            specs.append(("qkv", layer.rows, layer.dtype))
        specs += [("q_weight", 0, layer.weight_dtype), ("k_weight", 0, layer.weight_dtype)]
    return specs


def rank_head_dim(config: QKNormConfig) -> int:
    return config.q_size // (config.num_heads // config.tp_world)


def _rank_inputs(config: QKNormConfig, specs: Sequence[tuple[str, int, torch.dtype]], seed: int) -> list[tuple]:
    """Each rank's real inputs: full tensors (all heads) drawn from ``seed``, activations uniform in
    [-2, 2) and norm weights in [0.875, 1.125), cut into each rank's heads."""
    generator = torch.Generator().manual_seed(seed)
    world, head_dim = config.tp_world, rank_head_dim(config)
    q_width, kv_width = config.num_heads * head_dim, config.num_kv_heads * head_dim

    def full(shape: tuple[int, ...], kind: str, dtype: torch.dtype) -> torch.Tensor:
        return fill(torch.rand(shape, generator=generator), kind, dtype)

    q_cols = [slice(r * config.q_size, (r + 1) * config.q_size) for r in range(world)]
    kv_cols = [
        slice(heads.start * head_dim, heads.stop * head_dim)
        for heads in (kv_head_range(config.num_kv_heads, world, r) for r in range(world))
    ]
    ranks: list[list[torch.Tensor]] = [[] for _ in range(world)]
    for kind, rows, dtype in specs:
        if kind == "qkv":
            q, k, v = (full((rows, width), "act", dtype) for width in (q_width, kv_width, kv_width))
            for r in range(world):
                ranks[r].append(torch.cat([q[:, q_cols[r]], k[:, kv_cols[r]], v[:, kv_cols[r]]], dim=1))
        else:
            weight = full((q_width if kind == "q_weight" else kv_width,), "weight", dtype)
            cols = q_cols if kind == "q_weight" else kv_cols
            for r in range(world):
                ranks[r].append(weight[cols[r]].clone())
    return [tuple(rank) for rank in ranks]


def build_case(
    config: QKNormConfig, layers: Sequence[Layer], *, seed: int = 0, label: str = "", all_reduce: Any = None
) -> GraphCase:
    """Build the :class:`GraphCase` of a plan: the per-rank graph traced by ``fwd_only`` on fake
    inputs, real per-rank inputs from ``seed``; ``all_reduce``: the all-reduce op the layers call
    (a validated ``OpOverload``, see :func:`qk_norm_tp_cases`; None: the functional collective).
    Raises ``ValueError`` for a layer with a ``reduce_op`` other than ``"sum"`` and ``all_reduce``."""
    specs = _input_specs(layers)
    widths = {"qkv": config.qkv_size, "q_weight": config.q_size, "k_weight": config.kv_size}
    mode = FakeTensorMode(allow_fallback_kernels=True)
    with mode:
        fake = [
            torch.empty((rows, widths[kind]) if kind == "qkv" else (widths[kind],), dtype=dtype)
            for kind, rows, dtype in specs
        ]
    gm = trace(lambda *args: _program(config, layers, Inputs(given=args), all_reduce), fake, mode)
    by_instance = instance_nodes(gm)
    world = config.tp_world
    pattern = "qk_norm_tp" if world > 1 else "qk_norm"
    planted = tuple(
        PlantedInstance(pattern, tuple(by_instance.get(i, ())), layer.reason is None, layer.reason)
        for i, layer in enumerate(layers)
    )
    if not label:
        label = (
            f"{', '.join(layer.describe(world) for layer in layers)} T={min(layer.rows for layer in layers)} "
            f"{str(config.dtype).removeprefix('torch.')} tp={world} "
            f"heads={config.num_heads}/{config.num_kv_heads}x{rank_head_dim(config)}"
        )
    return GraphCase(
        gm=gm,
        inputs=_rank_inputs(config, specs, seed),
        tp_world=world,
        form="functional",
        planted=planted,
        pass_config=config,
        label=label,
        placements=tuple(Shard(1) if kind == "qkv" else Shard(0) for kind, _, _ in specs),
        all_reduce=all_reduce if world > 1 else None,
    )


# -------------------------------------------------------------------------------------------- draw


@dataclasses.dataclass(frozen=True)
class _Spec:
    """Canonical arguments of :func:`qk_norm_tp_cases`."""

    config: QKNormConfig | None
    tp_world: st.SearchStrategy[int] | None
    min_tokens: int
    max_tokens: int
    min_instances: int
    max_instances: int
    kinds: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]
    dynamic: bool = False
    all_reduce: Any = None  # a project's all-reduce OpOverload; None: the functional collective


@st.composite
def _configs(draw: Any, spec: _Spec, world: int) -> QKNormConfig:
    """Rank 0's config of a small model: 1..4 q heads per rank, kv heads from (1, 2, 4, 8) that
    divide the q heads and divide or are divided by ``world``, ``max_tokens`` as in qk_norm_cases."""
    dtype = draw(st.sampled_from(spec.dtypes))
    head_dim = draw(st.sampled_from(_TP_HEAD_DIMS))
    num_heads = world * draw(st.integers(1, _MAX_HEADS_PER_RANK))
    kv_heads = [n for n in _KV_HEADS if (n % world == 0 or world % n == 0) and num_heads % n == 0]
    num_kv_heads = draw(st.sampled_from(kv_heads))
    eps = draw(st.sampled_from(EPS))
    max_tokens = draw_max_tokens(draw, spec.min_tokens, spec.max_tokens, spec.dynamic)
    return QKNormConfig.for_heads(
        num_heads, num_kv_heads, head_dim, tp_world=world, tp_rank=0, eps=eps, dtype=dtype,
        max_tokens=max_tokens, group_name=DEFAULT_GROUP_NAME,
    )  # fmt: skip


@st.composite
def _layers(draw: Any, config: QKNormConfig, spec: _Spec, tokens: int, guard: bool, chain: bool) -> Layer:
    """One layer: split form, weight dtype, near miss (kept off by ``guard``), source and post ops."""
    split3 = draw(st.booleans())
    weight_in_act_dtype = draw(st.booleans())  # drawn even for float32 (a no-op), for stable shrinking
    layer = make_layer(config, tokens=tokens, split3=split3, weight_in_act_dtype=weight_in_act_dtype)
    options = {}
    for kind in () if guard else spec.kinds:
        if kind == "reduce_op" and spec.all_reduce is not None:  # a project's all-reduce sums
            continue
        variants = _near_miss_variants(config, layer, kind, spec.max_tokens)
        if spec.dynamic:  # a static row count must not be a multiple of the token hint
            variants = [v for v in variants if v.rows == tokens or hint_free(v.rows)]
        if variants:
            options[kind] = variants
    layer = draw_near_miss(draw, layer, options)
    (source,), post = draw_context(draw, _OPS, chain=chain, sources=1, outputs=3)
    return dataclasses.replace(layer, source=source, post=post)


def _draw_case(draw: Any, spec: _Spec) -> GraphCase:
    if spec.config is not None:
        config = spec.config
    else:
        world = draw(spec.tp_world)
        if not isinstance(world, int) or isinstance(world, bool) or world < 1:
            raise InvalidArgument(f"tp_world drew {world!r}; it must draw positive ints")
        config = draw(_configs(spec, world))
    layers, seed = draw_plan(
        draw,
        spec,
        config.max_tokens,
        lambda tokens, guard, chain: _layers(config, spec, tokens, guard=guard, chain=chain),
        lambda layer: layer.reason is None,
    )
    case = build_case(config, layers, seed=seed, all_reduce=spec.all_reduce)
    return symbolize_tokens(draw, case, spec.min_tokens) if spec.dynamic else case


# ------------------------------------------------------------------------------------------- public


def qk_norm_tp_cases(
    config: QKNormConfig | None = None,
    *,
    tp_world: st.SearchStrategy[int] | None = None,
    min_tokens: int = 1,
    max_tokens: int | None = None,
    min_instances: int = 1,
    max_instances: int = 2,
    near_misses: bool = True,
    dtypes: Sequence[torch.dtype] | None = None,
    dynamic: bool | str | Sequence[str] = False,
    all_reduce: Any = None,
    device: str | torch.device | None = None,
) -> st.SearchStrategy[GraphCase]:
    """Return a strategy for tensor-parallel :class:`~pmverify.GraphCase` graphs with MiniMax QK
    norms planted in random elementwise context, for
    :class:`~pmverify.fusions.qk_norm.QKNormFusionPass`.

    Each case is the per-rank (SPMD) aten graph, the same on every rank, traced with
    ``torch._inductor.pattern_matcher.fwd_only`` (``form="functional"``), with ``tp_world`` = W
    ranks and one tuple of real inputs per rank (``len(case.inputs) == W``). Every planted layer
    takes a qkv ``[T, q_size + 2*kv_size]`` and its q and k norm-weight shards ``[q_size]``,
    ``[kv_size]``; at W > 1 it is :func:`~pmverify.fusions.qk_norm.tp.qk_norm_tp_forward` (vLLM's
    ``MiniMaxText01RMSNormTP.forward_qk``: one ``[T, 2]`` ``_c10d_functional.all_reduce`` on
    group ``config.group_name``; pattern ``"qk_norm_tp"``), at W = 1 the rank-local
    ``forward_qk`` (pattern ``"qk_norm"``); one split or one split per consumer. A layer's qkv is a
    fresh input or is derived from the previous layer's outputs (cat, tanh), then goes through up
    to 3 unary or scalar ops; each output through up to 2 and is returned. ``pass_config`` is rank
    0's :class:`QKNormConfig` (a verifier rebuilds it with ``tp_rank=r``); ``placements`` holds
    ``Shard(1)`` for each qkv and ``Shard(0)`` for each weight. Rank r's inputs are cut from full
    tensors (activations in [-2, 2], weights in [0.875, 1.125]) as vLLM's ``QKVParallelLinear``
    holds them: its q heads, then the k and v heads of ``kv_head_range(num_kv_heads, W, r)``; ranks
    sharing a replicated kv head (W > num_kv_heads) hold identical k, v and k weight.

    - ``config``: the :class:`QKNormConfig` of rank 0 to draw for: it must carry ``num_heads`` /
      ``num_kv_heads`` (:meth:`QKNormConfig.for_heads`) and ``tp_rank=0``; W is its ``tp_world``.
      None draws one: W from ``tp_world``, 4..16-element heads (4, 8, 6, 16, 5), 1..4 q heads per
      rank, kv heads from (1, 2, 4, 8) dividing the q heads, dividing or divided by W (so kv heads
      are often replicated), eps from (1e-6, 1e-5, 1e-8, 1e-2), dtype from ``dtypes``,
      ``max_tokens`` the strategy's ``max_tokens`` or the middle of [``min_tokens``, ``max_tokens``].
    - ``tp_world``: a strategy of world sizes (ranks), default :func:`tp_sizes` (1, 2, 4, 8); only
      without ``config``.
    - ``min_tokens`` / ``max_tokens``: bounds on T, the rows (tokens) of qkv; ``max_tokens``
      defaults to ``max(16, min_tokens)``. T is also at most ``config.max_tokens``; only a
      ``"tokens"`` near miss has more rows (up to ``max_tokens``).
    - ``min_instances`` / ``max_instances``: bounds on the number of planted layers (default 1..2).
    - ``near_misses``: whether some layers are near misses, which a correct pass must leave alone
      (``must_match=False``, ``reason`` one of :data:`QK_NORM_TP_NEAR_MISS_KINDS`): ``"eps"`` another eps;
      ``"divisor"`` the reduced sums divided by another world size (W > 1); ``"reduce_op"`` a
      ``"max"`` or ``"min"`` all-reduce (W > 1); ``"dtype"`` another activation dtype;
      ``"extra_user"`` an intermediate (the reduced ``[T, 2]``, q's mean of squares, ...) also
      returned; ``"tokens"`` more rows than ``config.max_tokens``. Never another group name. Every
      case keeps a layer that must match (``expected_matches >= 1``).
    - ``dtypes``: activation dtypes to draw ``config.dtype`` from, simplest first (default float32,
      float16, bfloat16); only without ``config``. Weights are float32 or the activation dtype.
    - ``dynamic``: ``False`` (default) for concrete sizes; ``True`` or ``"tokens"`` for a symbolic
      token count ``s0`` (the per-rank graph as vLLM compiles it for a range of batch sizes), as
      :func:`~pmverify.fusions.qk_norm.testing.qk_norm_cases` draws it: T drawn at 11, the range of
      ``s0`` within [``max(2, min_tokens)``, ``config.max_tokens``], one extra drawn size; every
      rank's ``Sym`` input is the hint. Same requirements (``min_tokens <= 11 <= max_tokens``, a
      ``config`` with ``max_tokens >= 11`` and no width divisible by 11).
    - ``all_reduce``: the all-reduce op the layers call at W > 1, as in
      :func:`~pmverify.strategies.tp_cases`: a project's own functional op ``(Tensor, str) ->
      Tensor`` (an ``OpOverload`` or its packet), such as vLLM's ``torch.ops.vllm.all_reduce``
      (what ``tensor_model_parallel_all_reduce`` is in vLLM's graphs), called with the group name by
      keyword as vLLM calls it, recorded in ``GraphCase.all_reduce``; it sums, so no ``"reduce_op"``
      near miss is drawn. Default None: ``_c10d_functional.all_reduce`` + ``wait_tensor``. The op
      runs as registered: its CPU kernel must reduce over the default group (``"0"``) of
      pmverify's worlds; :class:`~pmverify.fusions.qk_norm.QKNormFusionPass` matches only the
      functional form.
    - ``device``: the device of the cases (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a
      ``torch.device``; default None: CPU). A case is drawn and traced on CPU exactly as without
      it, then every rank's inputs and the graph are moved (:func:`pmverify.device.on_device`).

    Shrinks toward W = 1, one float32 layer on a fresh input, T = 1, no context, no near miss.

    Raises ``hypothesis.errors.InvalidArgument`` for a ``config`` that is not a ``QKNormConfig``,
    lacks ``num_heads``, has ``tp_rank != 0`` or a ``group_name`` other than the default group's
    (``"0"``: the only group of the worlds cases run on); ``tp_world`` not a strategy or given with
    ``config``; non-int or non-positive bounds, ``min_* > max_*``, ``min_tokens >
    config.max_tokens``; ``dtypes`` empty, unsupported or given with ``config``; when drawing, for
    a world size that is not a positive int; ``dynamic`` other than a bool or ``"tokens"``, or a
    dynamic case that cannot be drawn; ``all_reduce`` neither None, ``_c10d_functional.all_reduce``
    nor an op with schema ``(Tensor, str) -> Tensor``; ``device`` not a CPU or CUDA device.

    Example::

        @given(qk_norm_tp_cases(tp_world=tp_sizes(max_size=4)))
        def test_qk_norm_tp_pass(case):
            result = pmverify.check_case(QKNormFusionPass, case)
            assert result.ok and result.rewrite_count == case.expected_matches, result.violations
    """
    given_tp_world, given_max_tokens = tp_world, max_tokens
    if config is not None:
        if not isinstance(config, QKNormConfig):
            raise InvalidArgument(f"config={short_repr(config)} must be a QKNormConfig or None")
        if config.num_heads is None:
            raise InvalidArgument(
                f"config={config!r} has num_heads=None: build it with QKNormConfig.for_heads to give the head counts"
            )
        if config.tp_rank != 0:
            raise InvalidArgument(f"config.tp_rank={config.tp_rank} must be 0: pass_config is rank 0's config")
        if config.group_name != DEFAULT_GROUP_NAME:
            raise InvalidArgument(
                f"config.group_name={config.group_name!r}: the worlds cases run on (pmverify.distributed) have "
                f"one process group, the default one, named {DEFAULT_GROUP_NAME!r}"
            )
        if tp_world is not None:
            raise InvalidArgument(
                f"tp_world={short_repr(tp_world)} cannot be combined with config: the world size is "
                f"config.tp_world={config.tp_world}"
            )
    elif tp_world is None:
        tp_world = tp_sizes()
    if tp_world is not None:
        validate_strategy("tp_world", tp_world)
    validate_int("min_tokens", min_tokens, minimum=1)
    max_tokens = max(_DEFAULT_MAX_TOKENS, min_tokens) if max_tokens is None else max_tokens
    validate_int("max_tokens", max_tokens, minimum=1)
    validate_order("min_tokens", min_tokens, "max_tokens", max_tokens)
    if config is not None:
        validate_order("min_tokens", min_tokens, "config.max_tokens", config.max_tokens)
    validate_int("min_instances", min_instances, minimum=1)
    validate_int("max_instances", max_instances, minimum=1)
    validate_order("min_instances", min_instances, "max_instances", max_instances)
    validate_bool("near_misses", near_misses)
    if config is not None and dtypes is not None:
        raise InvalidArgument(f"dtypes={dtypes!r} cannot be combined with config: the dtype is config.dtype")
    arguments = dict(
        config=config, tp_world=given_tp_world, min_tokens=min_tokens, max_tokens=given_max_tokens,
        min_instances=min_instances, max_instances=max_instances, near_misses=near_misses, dtypes=dtypes,
        dynamic=dynamic, all_reduce=None if all_reduce is None else Shown(f"torch.ops.{all_reduce}"),
        device=device,
    )  # fmt: skip
    op = validate_all_reduce("all_reduce", all_reduce)
    target = validate_device("device", device)
    dtypes = validate_dtypes("dtypes", dtypes, SUPPORTED_DTYPES)
    dynamic = validate_dynamic(dynamic)
    if dynamic:
        validate_dynamic_tokens(min_tokens, max_tokens, config)
    kinds = QK_NORM_TP_NEAR_MISS_KINDS if near_misses else ()
    spec = _Spec(config, tp_world, min_tokens, max_tokens, min_instances, max_instances, kinds, dtypes, dynamic, op)
    return as_public_call(qk_norm_tp_cases, arguments, lambda draw: on_device(_draw_case(draw, spec), target))
