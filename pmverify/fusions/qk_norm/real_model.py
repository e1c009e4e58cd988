"""Checking a pass on a real model: a tiny, randomly initialised transformers MiniMax-M2.

The check compiles the model twice with ``torch.compile`` (Inductor, CPU), once with the pass under
test installed as ``torch._inductor.config.post_grad_custom_post_pass`` and once without, runs both
on the same ``input_ids`` and compares ``last_hidden_state``; with ``dynamic=True`` the token dim is
marked dynamic (``torch._dynamo.mark_dynamic``), so the pass gets the graph with a symbolic token
count that vLLM and ``torch.compile(dynamic=True)`` give it, and both compiles run at two token
counts from one graph. It is the "compiled" apply mode of
the design applied to a model whose QK norms come from transformers' own ``MiniMaxM2RMSNorm``
(``weight * (xf * rsqrt(mean(xf²) + eps)).to(dtype)``), not from a graph pmverify drew.

transformers is an optional dependency (``pip install 'pmverify[models]'``): without it the check
returns a skipped result instead of raising. Nothing is downloaded: the model is built from a
``MiniMaxM2Config`` in code, with weights drawn from ``torch.manual_seed(seed)``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from pmverify import run_pass
from pmverify.device import require_device

from .config import SUPPORTED_DTYPES, QKNormConfig
from .fusion_pass import QKNormFusionPass

logger = logging.getLogger(__name__)

__all__ = ["RealModelResult", "check_minimax_m2", "TRANSFORMERS_MISSING"]

#: ``RealModelResult.skipped`` (and ``detail``) when transformers cannot be imported.
TRANSFORMERS_MISSING = "transformers is not installed (pip install 'pmverify[models]')"

#: Tolerance on ``max_abs_err``, in units of ``finfo(dtype).eps * max|output without the pass|``.
#: The bound is relative to the output's scale, not elementwise: an output element near zero
#: carries the rounding error of the large values it was computed from (attention, MoE router,
#: residual stream), so an elementwise rtol would flag noise there.
#: Measured on this CPU (seeds 0-9, 1 to 33 tokens), with ``emulate_precision_casts=True``:
#: bf16 and fp16 outputs are bit-identical with a correct pass (the fused op rounds where eager
#: does, and so does Inductor once it emulates casts); fp32 differs by 0.6-2.5 ulps of the scale
#: (reduction order); without cast emulation bf16 differs by up to 1 ulp. A pass whose
#: replacement drops the norm weight is off by 32-59 ulps. 8 ulps sits between, with margin on
#: both sides. Bugs under one ulp (weight multiplied before the cast instead of after, eps off by
#: 100x) land at 0.8-1.5 ulps: within tolerance, but ``exact`` turns False for bf16/fp16.
TOLERANCE_ULPS = 8


@dataclasses.dataclass
class RealModelResult:
    """The outcome of one real-model check.

    - ``name``: which model, e.g. ``"MiniMaxM2-tiny"``.
    - ``matches``: rewrites the pass reported, summed over every graph it was called on (a pass
      that reports no count, i.e. has no ``matched_count`` and is no ``PatternMatcherPass``, adds 0).
    - ``expected_matches``: rewrites a correct pass makes (q and k norm of every layer).
    - ``fused_ops``: ``torch.ops.pmverify.rms_norm`` nodes in the graphs after the pass, counted
      independently of what the pass reports.
    - ``graphs``: post-grad graphs the pass was called on (more than one after a graph break, or
      a recompile).
    - ``symbolic_graphs``: those of them with a symbolic size (a ``SymInt`` placeholder or input size).
    - ``dynamic``: whether the token dim was marked dynamic; ``sizes``: the token counts run.
    - ``max_abs_err``: max |with pass − without pass| over ``last_hidden_state``, in the output's
      units, computed in float32; ``nan`` when the check did not get that far.
    - ``output_scale``: max |output without the pass|, the scale the tolerance is relative to.
    - ``tolerance``: the bound ``max_abs_err`` must stay within (see ``TOLERANCE_ULPS``).
    - ``exact``: the two outputs are bit-identical (expected for bf16/fp16 with cast emulation).
    - ``ok``: ``matches == fused_ops == expected_matches`` and ``max_abs_err <= tolerance``; with
      ``dynamic`` also every graph symbolic (one graph served every size, the pass rewrote it).
    - ``elapsed_s``: wall-clock seconds for the whole check, import of transformers included.
    - ``timings_s``: seconds per phase: ``import``, ``build``, ``compile_with_pass`` and
      ``compile_without_pass`` (each the first call of a compiled model: compile plus one run),
      ``rerun_with_pass`` / ``rerun_without_pass`` (a second call: the compiled code alone).
    - ``skipped``: why the check did not run (transformers missing), else None.
    - ``detail``: one human-readable line: counts, error, tolerance and timings.
    """

    name: str
    matches: int = 0
    expected_matches: int = 0
    fused_ops: int = 0
    graphs: int = 0
    symbolic_graphs: int = 0
    dynamic: bool = False
    sizes: tuple[int, ...] = ()
    max_abs_err: float = math.nan
    output_scale: float = math.nan
    tolerance: float = math.nan
    exact: bool = False
    ok: bool = False
    elapsed_s: float = 0.0
    timings_s: dict[str, float] = dataclasses.field(default_factory=dict)
    skipped: str | None = None
    detail: str = ""


def _is_symbolic(graph: torch.fx.Graph) -> bool:
    """Whether ``graph`` has a symbolic size: a ``SymInt`` placeholder or a tensor input with one."""
    for node in graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) or (
            isinstance(val, torch.Tensor) and any(isinstance(size, torch.SymInt) for size in val.shape)
        ):
            return True
    return False


class _CountingPass(CustomGraphPass):
    """Run ``inner`` on every post-grad graph; accumulate its matches and the fused ops it left.

    A ``CustomGraphPass`` so that Inductor takes it as ``post_grad_custom_post_pass``; ``uuid()``
    is the inner pass's (None when it has none, which only matters with the FX graph cache on).
    """

    def __init__(self, inner: Any, fused_op: Any) -> None:
        self.inner = inner
        self.fused_op = fused_op
        self.per_graph: list[tuple[int, int]] = []
        self.symbolic_graphs = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.symbolic_graphs += _is_symbolic(graph)
        count = run_pass(self.inner, graph)
        fused = sum(1 for node in graph.nodes if node.target is self.fused_op)
        # a pass that reports no count is credited with the fused ops it left
        self.per_graph.append((fused if count is None else count, fused))
        logger.debug("pass on graph %d: %s matches, %d fused ops", len(self.per_graph), count, fused)

    def uuid(self) -> Any:
        inner_uuid = getattr(self.inner, "uuid", None)
        return inner_uuid() if callable(inner_uuid) else None

    @property
    def matches(self) -> int:
        return sum(count for count, _ in self.per_graph)

    @property
    def fused_ops(self) -> int:
        return sum(fused for _, fused in self.per_graph)


def _tiny_minimax_m2(transformers: Any, *, dtype: torch.dtype, tokens: int, experts_implementation: str) -> Any:
    """A 2-layer MiniMax-M2 whose q (64) and k (32) widths differ from the hidden size (48).

    Norm weights are drawn around 1 (transformers initialises them to ones, which would hide a
    replacement that drops the weight or multiplies it in the wrong order).
    """
    config = transformers.MiniMaxM2Config(
        vocab_size=64,
        hidden_size=48,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=max(64, tokens),
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = transformers.MiniMaxM2Model._from_config(
        config, attn_implementation="sdpa", experts_implementation=experts_implementation, dtype=dtype
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.5 * torch.randn(param.shape))
    return model.eval()


def _compile_and_run(
    model: Any,
    inputs: list[torch.Tensor],
    pass_: CustomGraphPass | None,
    emulate_precision_casts: bool,
    dynamic: bool,
) -> tuple[list[torch.Tensor], float, float]:
    """Compile ``model`` afresh, call it on ``inputs[0]`` twice, then on each other input; return
    the output of each input's first call and the seconds the first two calls took. With
    ``dynamic`` the token dim (1) of ``inputs[0]`` is marked dynamic before the first call.

    The FX graph cache and AOT autograd cache are off, so that neither compile is served from the
    other (nor from an earlier process) with or without the pass. Inductor's kernel cache stays
    on: it is keyed by the generated kernel source, so it can only reuse a kernel both variants
    generate identically, and it halves the second compile.
    """
    torch.compiler.reset()
    with (
        torch._inductor.config.patch(
            fx_graph_cache=False,
            fx_graph_remote_cache=False,
            emulate_precision_casts=emulate_precision_casts,
            post_grad_custom_post_pass=pass_,
        ),
        torch._functorch.config.patch(enable_autograd_cache=False, enable_remote_autograd_cache=False),
        torch.no_grad(),
    ):
        compiled = torch.compile(model, backend="inductor", dynamic=None if dynamic else False)
        if dynamic:
            torch._dynamo.mark_dynamic(inputs[0], 1)
        start = time.perf_counter()
        outs = [compiled(input_ids=inputs[0]).last_hidden_state]
        first = time.perf_counter() - start
        start = time.perf_counter()
        compiled(input_ids=inputs[0])
        second = time.perf_counter() - start
        outs += [compiled(input_ids=ids).last_hidden_state for ids in inputs[1:]]
    return outs, first, second


def check_minimax_m2(
    *,
    dtype: torch.dtype = torch.bfloat16,
    tokens: int = 8,
    seed: int = 0,
    pass_factory: Callable[[QKNormConfig], Any] | None = None,
    experts_implementation: str = "batched_mm",
    emulate_precision_casts: bool = True,
    dynamic: bool = False,
    device: Any = None,
) -> RealModelResult:
    """Check a QK-norm pass on a compiled tiny transformers MiniMax-M2 (CPU, Inductor).

    Builds a 2-layer ``MiniMaxM2Model`` (hidden 48, 4 query heads and 2 kv heads of head_dim 16,
    so q_size = 64 and kv_size = 32; 4 experts, top-2; vocabulary 64; sdpa attention) in
    ``dtype``, weights and activations alike, with weights from ``torch.manual_seed(seed)``;
    compiles it (``dynamic=False``) with and without the pass and compares ``last_hidden_state``
    ``[1, tokens, 48]`` on the same random ``input_ids`` ``[1, tokens]``; with ``dynamic`` the
    token dim is symbolic and both compiles also run ``tokens + 5`` tokens. ``torch.compiler.reset()``
    runs before each compile and at the end, which also drops whatever the caller had compiled.
    Takes ~12 s on a 2-core CPU with Inductor's kernel cache warm, ~25 s cold.

    - ``dtype``: float32, float16 or bfloat16 (default); the pass is configured for it.
    - ``tokens``: sequence length, in tokens (default 8); at least 1.
    - ``seed``: seeds the weights and the input ids (default 0).
    - ``pass_factory``: ``QKNormConfig -> pass``; the pass is anything callable on a
      ``torch.fx.Graph`` or a ``PatternMatcherPass``. Default :class:`QKNormFusionPass`.
    - ``experts_implementation``: transformers' MoE kernel: ``"batched_mm"`` (default) keeps the
      model in one graph; ``"eager"`` loops over the hit experts and breaks the graph at each
      data-dependent ``nonzero`` (the pass then runs on 11-14 graphs, ~2x slower).
    - ``emulate_precision_casts``: Inductor's flag of that name, for both compiles (default True).
      Without it Inductor drops the ``.to(dtype)`` rounding inside the unfused norm, so the
      reference differs from eager by one ulp and hides sub-ulp bugs of the replacement.
    - ``dynamic``: compile with the token dim of ``input_ids`` marked dynamic
      (``torch._dynamo.mark_dynamic``, as vLLM marks its token count): the pass sees ``Sym``
      placeholders and ``[1, s0, width]`` activations; the same compiled graph then runs
      ``tokens`` and ``tokens + 5`` tokens (default False: ``dynamic=False``, one size).
    - ``device``: where the model and its inputs live and the compiles generate code for
      (``"cuda"``: Triton kernels, and the pass's fused op dispatches to its own Triton kernels;
      default None: CPU, C++ code).

    Returns a :class:`RealModelResult`; ``skipped`` is set, and nothing raised, when transformers
    cannot be imported. Raises ``ValueError`` for a ``dtype`` the fusion does not support,
    ``tokens < 1`` (``tokens < 2`` with ``dynamic``: sizes 0 and 1 are specialised), or a
    ``dynamic`` that is not a bool; ``InvalidArgument`` for a bad ``device`` and
    :class:`pmverify.DeviceUnavailable` for one this machine lacks; errors of the pass itself
    propagate out of ``torch.compile``.

    Example::

        result = check_minimax_m2()
        assert result.ok, result.detail
    """
    name = "MiniMaxM2-tiny"
    if not isinstance(dynamic, bool):
        raise ValueError(f"dynamic={dynamic!r} must be a bool")
    least = 2 if dynamic else 1
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < least:
        raise ValueError(f"tokens={tokens!r} must be an int of at least {least}" + (" with dynamic" * dynamic))
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {', '.join(str(d) for d in SUPPORTED_DTYPES)}")
    device = require_device("device", device) or torch.device("cpu")
    start = time.perf_counter()
    timings: dict[str, float] = {}
    try:
        import transformers
    except ImportError:
        logger.info("%s skipped: %s", name, TRANSFORMERS_MISSING)
        return RealModelResult(name, skipped=TRANSFORMERS_MISSING, detail=TRANSFORMERS_MISSING)
    timings["import"] = time.perf_counter() - start

    phase = time.perf_counter()
    torch.manual_seed(seed)
    sizes = (tokens, tokens + 5) if dynamic else (tokens,)
    model = _tiny_minimax_m2(
        transformers, dtype=dtype, tokens=max(sizes), experts_implementation=experts_implementation
    )
    inputs = [torch.randint(0, model.config.vocab_size, (1, n)).to(device) for n in sizes]
    model = model.to(device)
    attn = model.layers[0].self_attn
    pass_config = QKNormConfig(
        q_size=attn.q_proj.out_features,
        kv_size=attn.k_proj.out_features,
        eps=model.config.rms_norm_eps,
        dtype=dtype,
    )
    counting = _CountingPass((pass_factory or QKNormFusionPass)(pass_config), torch.ops.pmverify.rms_norm.default)
    expected = 2 * model.config.num_hidden_layers
    timings["build"] = time.perf_counter() - phase

    try:
        fused, timings["compile_with_pass"], timings["rerun_with_pass"] = _compile_and_run(
            model, [ids.clone() for ids in inputs], counting, emulate_precision_casts, dynamic
        )
        plain, timings["compile_without_pass"], timings["rerun_without_pass"] = _compile_and_run(
            model, [ids.clone() for ids in inputs], None, emulate_precision_casts, dynamic
        )
    finally:
        torch.compiler.reset()

    max_abs_err, output_scale = 0.0, 0.0
    for n, with_pass, without in zip(sizes, fused, plain, strict=True):
        if with_pass.shape != without.shape or with_pass.dtype != without.dtype:
            max_abs_err = math.inf  # the pass changed what the model returns
            logger.warning(
                "%s at %d tokens: output %s %s with the pass, %s %s without",
                name,
                n,
                tuple(with_pass.shape),
                with_pass.dtype,
                tuple(without.shape),
                without.dtype,
            )
        else:
            max_abs_err = max(max_abs_err, (with_pass.float() - without.float()).abs().max().item())
        output_scale = max(output_scale, without.float().abs().max().item())
    tolerance = TOLERANCE_ULPS * torch.finfo(dtype).eps * output_scale
    graphs = len(counting.per_graph)
    ok = counting.matches == counting.fused_ops == expected and max_abs_err <= tolerance
    if dynamic:
        ok = ok and counting.symbolic_graphs == graphs >= 1
    elapsed = time.perf_counter() - start
    where = f"tokens={'/'.join(map(str, sizes))}" + (" dynamic" if dynamic else "") + f" on {device}"
    detail = (
        f"{name} {str(dtype).removeprefix('torch.')} {where} seed={seed}: "
        f"{counting.matches} matches, {counting.fused_ops} pmverify.rms_norm nodes "
        f"(expected {expected}) over {graphs} graphs ({counting.symbolic_graphs} symbolic); "
        f"max_abs_err={max_abs_err:.3g} (tolerance {tolerance:.3g}{', exact' if max_abs_err == 0 else ''}); "
        + ", ".join(f"{key} {value:.2f}s" for key, value in timings.items())
        + f"; total {elapsed:.1f}s"
    )
    logger.info("%s", detail)
    return RealModelResult(
        name,
        matches=counting.matches,
        expected_matches=expected,
        fused_ops=counting.fused_ops,
        graphs=graphs,
        symbolic_graphs=counting.symbolic_graphs,
        dynamic=dynamic,
        sizes=sizes,
        max_abs_err=max_abs_err,
        output_scale=output_scale,
        tolerance=tolerance,
        exact=max_abs_err == 0,
        ok=ok,
        elapsed_s=elapsed,
        timings_s=timings,
        detail=detail,
    )
