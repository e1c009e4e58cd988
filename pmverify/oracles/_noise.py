"""The noise floor of a graph's results: how far their float64 values move when every intermediate
value is perturbed at float32 precision.

A result that is a small difference of large terms (a softmax gradient where the softmax is nearly
one-hot, a mean-subtracted sum) is determined by float32 arithmetic only to the rounding error of
those terms, not to an ulp of its own (small) magnitude: any correct float32 implementation of the
same math, a fused kernel that sums in another order say, lands anywhere within that noise. The
semantics rule measures errors in ulps of ``|ref| + mean|ref|``, which is right for most results but
too strict for a tensor that is *all* cancellation (every element near 0): there a correct rewrite's
error of 1e-6 is millions of ulps of 1e-13.

The estimate is Monte Carlo arithmetic (D. Stott Parker, "Monte Carlo Arithmetic: exploiting
randomness in floating-point arithmetic", UCLA CSD-970002, 1997; the "random rounding" mode of
Verificarlo, Denis et al. 2016, which perturbs the operands and the result of each operation): the
graph runs :data:`RUNS` times in float64, every floating operand and result of a functional op
multiplied by ``1 + u * d`` with ``d`` uniform in [-1, 1] and ``u`` the unit
roundoff of float32 (2**-24; of float64 for an op that computes in float64), plus ``eta * d`` with
``eta`` half the subnormal spacing of the dtype the op computes in (float16: 2**-25): near 0 a
float16 value is rounded to an absolute step, not a relative one (a float16 gradient that is 0 in
float64, its terms around 1e-6, is off by a few 6e-8 steps in any float16 implementation), each
run with its own seeded generator; the noise of an element is the RMS of its deviations from the unperturbed float64
reference. By default the perturbation stays at float32 level: the rounding of a float16 / bfloat16
op to its own dtype is what the semantics rule compares, so it must not be excused as noise (a
rewrite that adds a bf16 rounding is 2**16 times the float32 noise). A second set of runs perturbs each op at its own
dtype's unit roundoff; the semantics rule uses that only on elements whose
noise is many ulps of their own magnitude scale (a float16 gradient that cancels to 0), never on a
well-conditioned result, whose rounding order it still compares.

Random numbers are drawn as the graph before the pass drew them (:mod:`._rng`); in-place ops and
views are not perturbed (their outputs alias their inputs).
"""

from __future__ import annotations

from typing import Any

import torch

from .._compat import pytree
from .._execution import Replayer, float64_module, forked_rng

__all__ = ["RUNS", "noise_floor"]

#: Perturbed float64 runs; the noise of an element is the RMS of its deviations over them.
RUNS = 4
#: Seed of the perturbations' generator (the first run's; run i uses SEED + i).
SEED = 20261202
_FLOAT32_ROUNDOFF = 2.0**-24
#: Unit roundoff of each floating dtype (half its machine epsilon; the float8 types' too).
_OWN_ROUNDOFF = {
    dtype: torch.finfo(dtype).eps / 2
    for dtype in (
        torch.float64,
        torch.float32,
        torch.bfloat16,
        torch.float16,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    )
}

#: Absolute rounding error of each floating dtype near 0: half its subnormal spacing (float16:
#: 2**-25, float8_e4m3fn: 2**-10), the ``eta`` of ``fl(x) = x (1 + delta) + eta`` under gradual
#: underflow (Higham, "Accuracy and Stability of Numerical Algorithms", 2002, section 2.1), at both levels.
_UNDERFLOW = {dtype: torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps / 2 for dtype in _OWN_ROUNDOFF}


def _functional(node: torch.fx.Node) -> bool:
    """Whether ``node`` makes a new value: an ATen op whose schema neither writes nor aliases."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None:
        return False
    return all(a.alias_info is None for a in schema.arguments) and all(r.alias_info is None for r in schema.returns)


class _Perturbing(Replayer):
    """Runs a float64 twin of a graph (drawing what ``drawn`` recorded), each functional op's
    floating operands, as it reads them, and its floating results perturbed at the unit roundoff of
    the dtype it computes in before widening (``dtypes``: node name -> that dtype)."""

    def __init__(
        self, gm: torch.fx.GraphModule, drawn: dict[str, Any], dtypes: dict[str, Any], seed: int, own: bool
    ) -> None:
        super().__init__(gm, drawn)
        self.dtypes = dtypes
        self.own = own
        self.generator = torch.Generator().manual_seed(seed)

    def _perturb(self, value: Any, u: float, eta: float) -> Any:
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float64 or not value.numel():
            return value
        # drawn on CPU (the same perturbations on every device), used on the value's device
        d = (torch.rand(value.shape, generator=self.generator, dtype=torch.float64) * 2 - 1).to(value.device)
        return value * (1 + u * d) + eta * d

    def run_node(self, n: torch.fx.Node) -> Any:
        functional = n.name not in self.drawn and _functional(n)
        dtype = self.dtypes.get(n.name)
        roundoff = _OWN_ROUNDOFF.get(dtype, _FLOAT32_ROUNDOFF)
        self.u = (roundoff if self.own else min(roundoff, _FLOAT32_ROUNDOFF)) if functional else None
        self.eta = _UNDERFLOW.get(dtype, _UNDERFLOW[torch.float32])
        return super().run_node(n)

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if self.u is None:
            return super().call_function(target, args, kwargs)
        u, eta = self.u, self.eta
        args, kwargs = pytree.tree_map(lambda v: self._perturb(v, u, eta), (args, kwargs))
        return pytree.tree_map(lambda v: self._perturb(v, u, eta), super().call_function(target, args, kwargs))


class _DtypeRecorder(torch.fx.Interpreter):
    """Runs a graph in its own dtypes, keeping the dtype of each node's tensor result."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.dtypes: dict[str, torch.dtype] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        out = super().run_node(n)
        if isinstance(out, torch.Tensor):
            self.dtypes[n.name] = out.dtype
        return out


def _computed_dtypes(gm: torch.fx.GraphModule, inputs: tuple[Any, ...]) -> dict[str, torch.dtype]:
    """The dtype of each node's tensor result in a run of ``gm`` (in its own dtypes) on clones of
    ``inputs``."""
    recorder = _DtypeRecorder(gm)
    args = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad(), forked_rng(gm, args):
        recorder.run(*args)
    return recorder.dtypes


def _decomposed(gm: torch.fx.GraphModule, inputs: tuple[Any, ...]) -> torch.fx.GraphModule:
    """``gm`` retraced with Inductor's decompositions (``select_decomp_table``), so that the steps
    inside a composite op (``_safe_softmax``'s max, subtraction, exp, sum and division) are
    perturbed each, as a fused kernel may round each; ``gm`` itself where it does not retrace."""
    try:
        from torch.fx.experimental.proxy_tensor import make_fx

        from .._compat import select_decomp_table

        args = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        with torch.no_grad():
            return make_fx(gm, decomposition_table=select_decomp_table())(*args)
    except Exception:  # noqa: BLE001 - an op without a fake or decomposed form: perturb it whole
        return gm


def _spread(runs: list[Any], reference: tuple[list[Any], list[Any]], position: int, index: int) -> Any:
    """The RMS deviation of ``runs`` from ``reference`` at one result, or None where it is no
    floating tensor (or a run gave another shape)."""
    ref = reference[position][index]
    if not isinstance(ref, torch.Tensor) or not ref.is_floating_point():
        return None
    total = torch.zeros(ref.shape, dtype=torch.float64, device=ref.device)
    for run in runs:
        value = run[position][index]
        if not isinstance(value, torch.Tensor) or value.shape != ref.shape:
            return None
        total += (value.double() - ref.double()).nan_to_num(0.0, 0.0, 0.0) ** 2
    return (total / len(runs)).sqrt()


def noise_floor(
    gm: torch.fx.GraphModule,
    inputs: tuple[Any, ...],
    reference: tuple[list[Any], list[Any]],
    drawn: dict[str, Any] | None = None,
) -> tuple[tuple[list[Any], list[Any]], tuple[list[Any], list[Any]]] | None:
    """The noise of each result of ``gm`` at float32 level and at its ops' own dtypes (float16:
    2**-11, bfloat16: 2**-8; see the module docstring): for each level, ``(flat outputs, final
    inputs)`` lined up with ``reference`` (the unperturbed float64 run,
    :func:`~pmverify._execution.float64_reference`), each a float64 tensor of the result's
    shape (the RMS deviation of :data:`RUNS` perturbed runs of ``gm``'s float64 twin on clones of
    ``inputs``, ``gm`` decomposed as Inductor decomposes it unless it draws random numbers), or None
    where the result is no floating tensor. ``drawn``: what the run before the pass drew
    (:func:`pmverify._execution.run_recording`). None when the perturbed graph does not run. The caller sets
    deterministic fill."""
    levels = []
    try:
        graph = gm if drawn else _decomposed(gm, inputs)  # a retrace would rename what drew
        float64 = float64_module(graph)
        dtypes = _computed_dtypes(graph, inputs)
        for own in (False, True):
            runs = []
            for i in range(RUNS):
                args = [
                    (x.detach().clone().double() if x.is_floating_point() else x.clone())
                    if isinstance(x, torch.Tensor)
                    else x
                    for x in inputs
                ]
                with torch.no_grad(), forked_rng(float64, args):
                    out = _Perturbing(float64, drawn or {}, dtypes, SEED + i, own).run(*args)
                runs.append((pytree.tree_leaves(out), args))
            levels.append(tuple([_spread(runs, reference, p, i) for i in range(len(reference[p]))] for p in range(2)))
    except Exception:  # noqa: BLE001 - no perturbed run of this graph: no noise floor
        return None
    return levels[0], levels[1]  # type: ignore[return-value]
