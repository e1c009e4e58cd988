"""``qk_norm_cases``: random aten graphs with MiniMax QK norms planted in elementwise context.

A case is built in two steps. Hypothesis draws a plan (geometry, one :class:`Layer` per planted
QK-norm layer, context ops, a seed for the input values); :func:`build_case` turns the plan into a
:class:`GraphCase` by running the planned function once eagerly (to create the inputs) and tracing it
with ``torch._inductor.pattern_matcher.fwd_only``, the tracer ``register_replacement`` uses, so the
graph is in the post-grad form the QK-norm patterns match. Every planted norm is wrapped in
``torch.fx.traceback.annotate({"pmverify_instance": i})``; the traced nodes that carry the annotation
are the instance's ground truth.

The three forms are the ones of :mod:`pmverify.fusions.qk_norm.patterns`: ``"qk_norm"`` (one split of
qkv, vLLM's weight-before-cast norm), ``"qk_norm_split3"`` (one split per consumer) and ``"rms_norm"``
(transformers' MiniMax-M2 weight-after-cast norm, applied to q and to k as separate contiguous tensors).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pmverify import GraphCase, PlantedInstance
from pmverify.device import on_device, validate_device

from ..config import SUPPORTED_DTYPES, QKNormConfig
from .layers import (
    ANNOTATION,
    EPS,
    HEAD_DIMS,
    TOKEN_HINT,
    Inputs,
    Source,
    apply_ops,
    as_public_call,
    draw_context,
    draw_max_tokens,
    draw_near_miss,
    draw_plan,
    hint_free,
    instance_nodes,
    other_eps,
    source,
    symbolize_tokens,
    trace,
    validate_dynamic,
    validate_dynamic_tokens,
)

__all__ = ["qk_norm_cases", "QK_NORM_FORMS", "QK_NORM_NEAR_MISS_KINDS", "make_layer", "build_case", "Layer"]

#: Planted forms, simplest first.
QK_NORM_FORMS = ("qk_norm", "qk_norm_split3", "rms_norm")
#: Near-miss kinds, in the order shrinking prefers them (after "no near miss").
QK_NORM_NEAR_MISS_KINDS = ("eps", "split_sizes", "dtype", "weight_length", "extra_user", "tokens")

_SPLIT_FORMS = ("qk_norm", "qk_norm_split3")
_DEFAULT_MAX_TOKENS = 16
_MAX_HEADS = 8
#: Elementwise context ops (activation dtype, values stay bounded), simplest first.
_OPS = (
    "neg", "tanh", "add_input", "mul_input", "add:1.0", "mul:2.0", "sigmoid", "abs", "exp_tanh",
    "add:-0.5", "mul:0.5", "mul:-1.5",
)  # fmt: skip
#: Intermediates of a norm that an ``extra_user`` near miss gives a user outside the instance.
_LEAKS = ("xf", "sq", "ms", "rstd", "normed")
_MAX_WIDTH_DELTA = 8


# --------------------------------------------------------------------------------------------- plan


@dataclasses.dataclass(frozen=True)
class _Norm:
    """One planted RMS norm (of q or of k): what it computes on, and whether it is a near miss."""

    width: int  # elements in the normalised (last) dim
    rows: int  # tokens
    dtype: torch.dtype  # activation dtype it computes in
    weight_dtype: torch.dtype
    weight_len: int
    eps: float
    leak: str | None = None  # intermediate given a user outside the instance
    reason: str | None = None  # near-miss kind; None when a correct pass must rewrite it


@dataclasses.dataclass(frozen=True)
class Layer:
    """One planted QK-norm layer: q and k norms of one form.

    Split forms share one qkv source (``sources[0]``, width ``q.width + k.width + v_width``) and are
    one :class:`PlantedInstance`; the per-tensor form has a source and an instance per norm.
    ``post`` holds the context ops of each output (q_out, k_out and, for split forms, v).
    """

    form: str
    norms: tuple[_Norm, _Norm]
    v_width: int = 0
    sources: tuple[Source, ...] = ()
    post: tuple[tuple[str, ...], ...] = ()

    @property
    def split_sizes(self) -> list[int]:
        return [self.norms[0].width, self.norms[1].width, self.v_width]

    def describe(self) -> str:
        reasons = [n.reason for n in self.norms]
        if self.form in _SPLIT_FORMS:
            reason = next((r for r in reasons if r), None)
            return self.form + (f"[{reason}]" if reason else "")
        tags = [f"{side}:{r}" for side, r in zip("qk", reasons, strict=True) if r]
        return self.form + (f"[{','.join(tags)}]" if tags else "")


def _base_layer(config: QKNormConfig, form: str, tokens: int, weight_in_act_dtype: bool) -> Layer:
    """A layer that a correct pass for ``config`` must rewrite."""
    weight_dtype = config.dtype if weight_in_act_dtype else torch.float32

    def norm(width: int) -> _Norm:
        return _Norm(width, tokens, config.dtype, weight_dtype, width, config.eps)

    v_width = config.kv_size if form in _SPLIT_FORMS else 0
    return Layer(form, (norm(config.q_size), norm(config.kv_size)), v_width)


def _targets(layer: Layer, kind: str, guard: bool) -> tuple[str, ...]:
    """Which norms a near miss of ``kind`` may touch ("q", "k" or "both"), simplest first.

    Split forms are one instance: kinds that change qkv itself touch both norms. ``guard`` (the
    case still needs a must-match instance) keeps one per-tensor norm clean and split forms clean.
    """
    if layer.form in _SPLIT_FORMS:
        if guard:
            return ()
        return ("both",) if kind in ("split_sizes", "dtype", "tokens") else ("q", "k", "both")
    return ("q", "k") if guard else ("q", "k", "both")


def _touched(target: str) -> tuple[bool, bool]:
    return (target in ("q", "both"), target in ("k", "both"))


def _near_miss_variants(config: QKNormConfig, layer: Layer, kind: str, target: str, max_tokens: int) -> list[Layer]:
    """Every way (simplest first) to turn ``layer`` into a near miss of ``kind`` on ``target``
    norms that the pass for ``config`` must not rewrite; empty when there is none."""
    touched = _touched(target)
    q, k = layer.norms

    def each(change: Callable[[_Norm], _Norm | None]) -> Layer | None:
        norms = []
        for norm, hit in zip(layer.norms, touched, strict=True):
            if hit:
                new = change(norm)
                if new is None:
                    return None
                norm = dataclasses.replace(new, reason=kind)
            norms.append(norm)
        return dataclasses.replace(layer, norms=tuple(norms))

    variants: list[Layer | None] = []
    if kind == "eps":
        variants = [each(lambda n, e=e: dataclasses.replace(n, eps=e)) for e in other_eps(config.eps)]
    elif kind == "split_sizes" and layer.form in _SPLIT_FORMS:
        deltas = sorted((d for d in range(-_MAX_WIDTH_DELTA, _MAX_WIDTH_DELTA + 1) if d), key=lambda d: (abs(d), -d))
        for d in deltas:
            # Move d elements across the q|k boundary, then across the k|v boundary: qkv keeps its width.
            for qw, kw, vw in (
                (q.width - d, k.width + d, layer.v_width),
                (q.width, k.width + d, layer.v_width - d),
            ):
                if min(qw, kw, vw) >= 1:
                    norms = (
                        dataclasses.replace(q, width=qw, weight_len=qw, reason=kind),
                        dataclasses.replace(k, width=kw, weight_len=kw, reason=kind),
                    )
                    variants.append(dataclasses.replace(layer, norms=norms, v_width=vw))
    elif kind == "split_sizes":
        for d in sorted(range(-_MAX_WIDTH_DELTA, _MAX_WIDTH_DELTA + 1), key=lambda d: (abs(d), -d)):
            variants.append(
                each(
                    lambda n, d=d: (
                        dataclasses.replace(n, width=n.width + d, weight_len=n.width + d)
                        if n.width + d >= 1 and n.width + d not in (config.q_size, config.kv_size)
                        else None
                    )
                )
            )
    elif kind == "dtype":
        for dtype in (d for d in SUPPORTED_DTYPES if d != config.dtype):
            variants.append(
                each(
                    lambda n, dt=dtype: dataclasses.replace(
                        n, dtype=dt, weight_dtype=torch.float32 if n.weight_dtype == torch.float32 else dt
                    )
                )
            )
    elif kind == "weight_length":
        variants = [each(lambda n: dataclasses.replace(n, weight_len=1) if n.width > 1 else None)]
    elif kind == "extra_user":
        for leak in _LEAKS:
            variants.append(
                each(
                    lambda n, lk=leak: (
                        None if lk == "xf" and n.dtype == torch.float32 else dataclasses.replace(n, leak=lk)
                    )
                )
            )
    elif kind == "tokens":
        for rows in range(config.max_tokens + 1, max_tokens + 1):
            variants.append(each(lambda n, r=rows: dataclasses.replace(n, rows=r)))
    else:
        raise ValueError(f"unknown near-miss kind {kind!r}")
    return [v for v in variants if v is not None]


def make_layer(
    config: QKNormConfig,
    form: str,
    near_miss: str | None = None,
    *,
    tokens: int = 1,
    target: str | None = None,
    variant: int = 0,
    weight_in_act_dtype: bool = False,
    max_tokens: int | None = None,
) -> Layer:
    """A layer of ``form`` for ``config`` with ``near_miss`` applied (its ``variant``-th way) to
    ``target`` ("q", "k" or "both"; default: the first allowed). For tests and reproducers.
    Raises ``ValueError`` when that near miss is impossible for ``config``."""
    if form not in QK_NORM_FORMS:
        raise ValueError(f"form={form!r} must be one of {QK_NORM_FORMS}")
    layer = _base_layer(config, form, tokens, weight_in_act_dtype)
    if near_miss is None:
        return layer
    target = target or _targets(layer, near_miss, guard=False)[0]
    limit = max_tokens if max_tokens is not None else config.max_tokens + 1
    variants = _near_miss_variants(config, layer, near_miss, target, limit)
    if variant >= len(variants):
        raise ValueError(f"near miss {near_miss!r} on {target!r} has {len(variants)} variants for {config!r}")
    return variants[variant]


# -------------------------------------------------------------------------------------------- build


def _rms_norm(
    x: torch.Tensor, weight: torch.Tensor, norm: _Norm, weight_after_cast: bool, leaks: list[torch.Tensor]
) -> torch.Tensor:
    """The norm as patterns.py writes it: vLLM ``forward_qk``,
    ``(xf * rsqrt(mean(xf²) + eps) * weight).to(dtype)``, or with ``weight_after_cast``
    transformers' ``MiniMaxM2RMSNorm``, ``weight * (xf * rsqrt(mean(xf²) + eps)).to(dtype)``."""
    xf = x.to(torch.float32)
    sq = xf.pow(2)
    ms = sq.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(ms + norm.eps)
    normed = xf * rstd
    if norm.leak:
        leaks.append({"xf": xf, "sq": sq, "ms": ms, "rstd": rstd, "normed": normed}[norm.leak])
    return weight * normed.to(norm.dtype) if weight_after_cast else (normed * weight).to(norm.dtype)


def _program(layers: Sequence[Layer], inputs: Inputs) -> tuple[torch.Tensor, ...]:
    """Compute the planned graph; instance ``i`` is annotated ``{ANNOTATION: i}``."""
    outputs: list[torch.Tensor] = []
    pool: list[torch.Tensor] = []
    instance = 0
    for layer in layers:
        q, k = layer.norms
        leaks: list[torch.Tensor] = []
        if layer.form in _SPLIT_FORMS:
            sizes = layer.split_sizes
            qkv = source(layer.sources[0], q.rows, sum(sizes), q.dtype, pool, inputs)
            q_weight = inputs.take("weight", (q.weight_len,), q.weight_dtype)
            k_weight = inputs.take("weight", (k.weight_len,), k.weight_dtype)
            with torch.fx.traceback.annotate({ANNOTATION: instance}):
                if layer.form == "qk_norm":
                    xq, xk, v = qkv.split(sizes, dim=-1)
                else:
                    xq = qkv.split(sizes, dim=-1)[0]
                    xk = qkv.split(sizes, dim=-1)[1]
                    v = qkv.split(sizes, dim=-1)[2]
                results = [
                    _rms_norm(xq, q_weight, q, False, leaks),
                    _rms_norm(xk, k_weight, k, False, leaks),
                    v,
                ]
            instance += 1
        else:
            results = []
            for norm, src in zip(layer.norms, layer.sources, strict=True):
                x = source(src, norm.rows, norm.width, norm.dtype, pool, inputs)
                weight = inputs.take("weight", (norm.weight_len,), norm.weight_dtype)
                with torch.fx.traceback.annotate({ANNOTATION: instance}):
                    results.append(_rms_norm(x, weight, norm, True, leaks))
                instance += 1
        dtypes = [q.dtype, k.dtype, q.dtype][: len(results)]
        outputs.extend(apply_ops(r, ops, dt, inputs) for r, ops, dt in zip(results, layer.post, dtypes, strict=True))
        outputs.extend(leaks)
        pool = results
    return tuple(outputs)


def _planted(layers: Sequence[Layer]) -> list[tuple[str, bool, str | None]]:
    """``(pattern, must_match, reason)`` per instance id, in annotation order."""
    planted = []
    for layer in layers:
        reasons = [n.reason for n in layer.norms]
        if layer.form in _SPLIT_FORMS:
            reason = next((r for r in reasons if r), None)
            planted.append(("qk_norm", reason is None, reason))
        else:
            planted.extend(("rms_norm", r is None, r) for r in reasons)
    return planted


def build_case(config: QKNormConfig, layers: Sequence[Layer], *, seed: int = 0, label: str = "") -> GraphCase:
    """Build the :class:`GraphCase` of a plan: inputs from ``seed``, graph traced by ``fwd_only``.
    Layers without ``sources`` / ``post`` get the simplest (see :func:`_complete`)."""
    layers = [_complete(layer) for layer in layers]
    maker = Inputs(seed)
    _program(layers, maker)  # eager run: creates the inputs in the order the program takes them
    inputs = tuple(maker.created)
    gm = trace(lambda *args: _program(layers, Inputs(given=args)), inputs)
    by_instance = instance_nodes(gm)
    planted = tuple(
        PlantedInstance(pattern, tuple(by_instance.get(i, ())), must_match, reason)
        for i, (pattern, must_match, reason) in enumerate(_planted(layers))
    )
    if not label:
        tokens = min(norm.rows for layer in layers for norm in layer.norms)
        label = (
            f"{', '.join(layer.describe() for layer in layers)} T={tokens} "
            f"{str(config.dtype).removeprefix('torch.')} q={config.q_size} kv={config.kv_size} eps={config.eps:g}"
        )
    return GraphCase(
        gm=gm,
        inputs=[inputs],
        tp_world=1,
        form="functional",
        planted=planted,
        pass_config=config,
        label=label,
    )


def _complete(layer: Layer) -> Layer:
    """Fill a layer's missing sources and post ops with the simplest ones (fresh inputs, none)."""
    sources = layer.sources or ((Source(),) if layer.form in _SPLIT_FORMS else (Source(), Source()))
    post = layer.post or (((),) * (3 if layer.form in _SPLIT_FORMS else 2))
    return dataclasses.replace(layer, sources=sources, post=post)


# -------------------------------------------------------------------------------------------- draw


@dataclasses.dataclass(frozen=True)
class _Spec:
    """Canonical arguments of :func:`qk_norm_cases`."""

    config: QKNormConfig | None
    min_tokens: int
    max_tokens: int
    min_instances: int
    max_instances: int
    kinds: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]
    forms: tuple[str, ...] = QK_NORM_FORMS
    dynamic: bool = False


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def _configs(draw: Any, spec: _Spec) -> QKNormConfig:
    """A small config: 4..32-element heads, up to 8 q heads, kv heads dividing them, ``max_tokens``
    the strategy's ``max_tokens`` or (leaving room for "tokens" near misses) about half of it."""
    dtype = draw(st.sampled_from(spec.dtypes))
    head_dim = draw(st.sampled_from(HEAD_DIMS))
    q_heads = draw(st.integers(1, _MAX_HEADS))
    kv_heads = draw(st.sampled_from(_divisors(q_heads)))
    eps = draw(st.sampled_from(EPS))
    max_tokens = draw_max_tokens(draw, spec.min_tokens, spec.max_tokens, spec.dynamic)
    return QKNormConfig(q_heads * head_dim, kv_heads * head_dim, eps, dtype, max_tokens)


@st.composite
def _layers(draw: Any, config: QKNormConfig, spec: _Spec, tokens: int, guard: bool, chain: bool) -> Layer:
    """One layer: form, near miss (kept off by ``guard``), sources and post ops."""
    form = draw(st.sampled_from(spec.forms))
    weight_in_act_dtype = draw(st.booleans())  # drawn even for float32 (a no-op), for stable shrinking
    layer = _base_layer(config, form, tokens, weight_in_act_dtype)
    # (target, variant) together are one variant: see draw_near_miss
    options: dict[str, list[Layer]] = {}
    for kind in spec.kinds:
        variants = [
            variant
            for target in _targets(layer, kind, guard)
            for variant in _near_miss_variants(config, layer, kind, target, spec.max_tokens)
            if not spec.dynamic or _hint_free(variant)
        ]
        if variants:
            options[kind] = variants
    layer = draw_near_miss(draw, layer, options)
    split = form in _SPLIT_FORMS
    sources, post = draw_context(draw, _OPS, chain=chain, sources=1 if split else 2, outputs=3 if split else 2)
    return dataclasses.replace(layer, sources=sources, post=post)


def _hint_free(layer: Layer) -> bool:
    """Whether no static size of ``layer`` is a multiple of the token hint (its T, the hint itself,
    is the symbolic one): a dynamic case's near miss must not be mistaken for the token count."""
    sizes = [size for norm in layer.norms for size in (norm.width, norm.weight_len)]
    sizes += [norm.rows for norm in layer.norms if norm.rows != TOKEN_HINT]
    if layer.form in _SPLIT_FORMS:
        sizes += [layer.v_width, sum(layer.split_sizes)]
    return hint_free(*sizes)


def _draw_case(draw: Any, spec: _Spec) -> GraphCase:
    config = draw(_configs(spec)) if spec.config is None else spec.config
    layers, seed = draw_plan(
        draw,
        spec,
        config.max_tokens,
        lambda tokens, guard, chain: _layers(config, spec, tokens, guard=guard, chain=chain),
        lambda layer: any(must_match for _, must_match, _ in _planted([layer])),
    )
    case = build_case(config, layers, seed=seed)
    return symbolize_tokens(draw, case, spec.min_tokens) if spec.dynamic else case


# ------------------------------------------------------------------------------------------- public


def _check_int(name: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be an int")
    if value < minimum:
        raise InvalidArgument(f"{name}={value!r} must be at least {minimum}")


def qk_norm_cases(
    config: QKNormConfig | None = None,
    *,
    min_tokens: int = 1,
    max_tokens: int | None = None,
    min_instances: int = 1,
    max_instances: int = 2,
    near_misses: bool = True,
    dtypes: Sequence[torch.dtype] | None = None,
    forms: Sequence[str] | None = None,
    dynamic: bool | str | Sequence[str] = False,
    device: str | torch.device | None = None,
) -> st.SearchStrategy[GraphCase]:
    """Return a strategy for :class:`~pmverify.GraphCase` graphs with MiniMax QK norms planted in
    random elementwise context, for :class:`~pmverify.fusions.qk_norm.QKNormFusionPass`.

    Each case is an aten graph traced with ``torch._inductor.pattern_matcher.fwd_only`` (the
    post-grad form; ``form="functional"``, ``tp_world=1``), one tuple of real, finite inputs
    (activations in [-2, 2], norm weights in [0.875, 1.125]), ``pass_config`` = the
    :class:`QKNormConfig` it is drawn for, and one :class:`PlantedInstance` per planted norm:
    pattern ``"qk_norm"`` for a split form (q and k norms of one qkv ``[T, q_size + 2*kv_size]``),
    ``"rms_norm"`` for each per-tensor norm of a ``[T, q_size]`` q or ``[T, kv_size]`` k. A layer's
    qkv (or q, k) is a fresh input or is derived from the previous layer's outputs (cat, tanh), then
    goes through up to 3 elementwise ops; each output goes through up to 2 and is returned.

    - ``config``: the :class:`QKNormConfig` to draw for (``tp_world`` must be 1); None draws one:
      head_dim 4..32 elements, 1..8 q heads, kv heads dividing them, eps from
      (1e-6, 1e-5, 1e-8, 1e-2), dtype from ``dtypes``, ``max_tokens`` the strategy's
      ``max_tokens`` or the middle of [``min_tokens``, ``max_tokens``].
    - ``min_tokens`` / ``max_tokens``: bounds on T, the rows (tokens) of the planted activations;
      ``max_tokens`` defaults to ``max(16, min_tokens)``. T is also at most ``config.max_tokens``;
      only a ``"tokens"`` near miss has more rows (up to ``max_tokens``).
    - ``min_instances`` / ``max_instances``: bounds on the number of planted layers (default 1..2);
      a per-tensor layer records two instances (q and k).
    - ``near_misses``: whether some norms are near misses, which a correct pass must leave alone
      (``must_match=False``, ``reason`` one of :data:`QK_NORM_NEAR_MISS_KINDS`): ``"eps"`` another eps
      (including the next float up); ``"split_sizes"`` split sizes moved across the q|k or k|v
      boundary, same qkv width (per-tensor: a width that is neither ``q_size`` nor ``kv_size``);
      ``"dtype"`` another activation dtype; ``"weight_length"`` a ``[1]`` weight that broadcasts;
      ``"extra_user"`` an fp32 intermediate (``x.float()``, ``x²``, mean, rsqrt, normed) also
      returned; ``"tokens"`` more rows than ``config.max_tokens`` (only when that is below
      ``max_tokens``). Every case keeps an instance that must match (``expected_matches >= 1``).
    - ``dtypes``: activation dtypes to draw ``config.dtype`` from, simplest first (default float32,
      float16, bfloat16); only without ``config``. Weights are float32 or the activation dtype.
    - ``forms``: the planted forms to draw from (default all of :data:`QK_NORM_FORMS`), for a pass that
      handles only some of them.
    - ``dynamic``: ``False`` (default) for concrete sizes; ``True`` or ``"tokens"`` (the same here:
      head sizes are the pass's config, the token count is the only dim that varies) for a graph
      with a symbolic token count, as vLLM and ``torch.compile(dynamic=True)`` give it: one
      ``Sym`` placeholder ``s0`` first, every planted activation ``[s0, width]``, SymInt sizes in
      the graph (:func:`pmverify.symbolize`). The case is drawn with T = 11 (the hint of
      ``s0``); ``case.symbols[0]``'s range is the guards' range within [``max(2, min_tokens)``,
      ``config.max_tokens``] (a compile range the pass applies to,
      ``QKNormFusionPass.is_applicable_for_range``), its sizes the hint, the range's ends and one
      drawn size. Why the upper end: the pass fuses a symbolic token count whatever its range, as
      vLLM's passes do, and leaves the choice of range to ``is_applicable_for_range``; a symbolic
      planted norm is therefore always a must-match instance. A ``"tokens"`` near miss keeps a
      static row count over ``config.max_tokens`` in the symbolic graph (which the pass must not
      fuse), and no static size of the case is a multiple of 11. Needs ``min_tokens <= 11 <=
      max_tokens``, and a ``config`` with ``max_tokens >= 11`` and no width divisible by 11.
    - ``device``: the device of the cases (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a
      ``torch.device``; default None: CPU). A case is drawn and traced on CPU exactly as without
      it, then moved whole (:func:`pmverify.device.on_device`).

    Shrinks toward one float32 ``"qk_norm"`` layer on a fresh input, T = 1, no context, no near miss.

    Raises ``hypothesis.errors.InvalidArgument`` for a ``config`` that is not a ``QKNormConfig`` or
    has ``tp_world != 1``, non-int or non-positive bounds, ``min_* > max_*``, ``min_tokens >
    config.max_tokens``, ``dtypes`` empty, unsupported or given with ``config``, ``forms`` empty or
    holding an unknown form, ``dynamic`` other than a bool or ``"tokens"``, a dynamic case that
    cannot be drawn (see ``dynamic``), or a ``device`` that is not a CPU or CUDA device.

    Example::

        @given(qk_norm_cases(max_instances=3))
        def test_qk_norm_pass(case):
            result = pmverify.check_case(QKNormFusionPass, case)
            assert result.ok and result.rewrite_count == case.expected_matches, result.violations
    """
    if config is not None and not isinstance(config, QKNormConfig):
        raise InvalidArgument(f"config={config!r} must be a QKNormConfig or None")
    if config is not None and config.tp_world != 1:
        raise InvalidArgument(f"config.tp_world={config.tp_world} must be 1: qk_norm_cases draws single-rank graphs")
    given_max_tokens, given_dtypes, given_forms = max_tokens, dtypes, forms
    _check_int("min_tokens", min_tokens, 1)
    if max_tokens is None:
        max_tokens = max(_DEFAULT_MAX_TOKENS, min_tokens)
    _check_int("max_tokens", max_tokens, 1)
    if min_tokens > max_tokens:
        raise InvalidArgument(f"min_tokens={min_tokens} is larger than max_tokens={max_tokens}")
    if config is not None and min_tokens > config.max_tokens:
        raise InvalidArgument(
            f"min_tokens={min_tokens} is larger than config.max_tokens={config.max_tokens}: no instance could match"
        )
    _check_int("min_instances", min_instances, 1)
    _check_int("max_instances", max_instances, 1)
    if min_instances > max_instances:
        raise InvalidArgument(f"min_instances={min_instances} is larger than max_instances={max_instances}")
    if not isinstance(near_misses, bool):
        raise InvalidArgument(f"near_misses={near_misses!r} must be a bool")
    if dtypes is None:
        dtypes = SUPPORTED_DTYPES
    elif config is not None:
        raise InvalidArgument(f"dtypes={dtypes!r} cannot be combined with config: the dtype is config.dtype")
    else:
        if isinstance(dtypes, (str, torch.dtype)) or not isinstance(dtypes, Sequence):
            raise InvalidArgument(f"dtypes={dtypes!r} must be a sequence of torch dtypes")
        if not dtypes:
            raise InvalidArgument(f"dtypes={dtypes!r} is empty")
        for dtype in dtypes:
            if dtype not in SUPPORTED_DTYPES:
                raise InvalidArgument(f"dtypes={dtypes!r} holds {dtype!r}, not one of {SUPPORTED_DTYPES}")
    if forms is None:
        forms = QK_NORM_FORMS
    elif isinstance(forms, str) or not isinstance(forms, Sequence) or not forms or set(forms) - set(QK_NORM_FORMS):
        raise InvalidArgument(f"forms={forms!r} must be a non-empty sequence drawn from {QK_NORM_FORMS}")
    given_dynamic, dynamic = dynamic, validate_dynamic(dynamic)
    target = validate_device("device", device)
    if dynamic:
        validate_dynamic_tokens(min_tokens, max_tokens, config)
    kinds = QK_NORM_NEAR_MISS_KINDS if near_misses else ()
    spec = _Spec(
        config,
        min_tokens,
        max_tokens,
        min_instances,
        max_instances,
        kinds,
        tuple(dict.fromkeys(dtypes)),
        tuple(f for f in QK_NORM_FORMS if f in forms),
        dynamic,
    )
    arguments = dict(
        config=config, min_tokens=min_tokens, max_tokens=given_max_tokens, min_instances=min_instances,
        max_instances=max_instances, near_misses=near_misses, dtypes=given_dtypes, forms=given_forms,
        dynamic=given_dynamic, device=device,
    )  # fmt: skip
    return as_public_call(qk_norm_cases, arguments, lambda draw: on_device(_draw_case(draw, spec), target))
