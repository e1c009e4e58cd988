"""``planted``: instances of a pattern spliced into random context graphs, with ground truth.

A case is drawn in four steps (:mod:`._planted_draw`):

1. the instances, as a linked list (each in a span of choices that ends in whether another follows
   and holds the rest, so that the shrinker drops any one of them): inputs from ``inputs``, a trace
   of the pattern on them (:mod:`._planted_trace`; Inductor's ``fwd_only``, as
   ``register_replacement`` traces its search function), a kind (a plain instance or a near miss,
   :mod:`._near_miss`) and its ground truth (:mod:`._planted_truth`);
2. a context :class:`~pmverify.GraphCase` (from ``context``; none at all, the simplest, when there
   is at least one instance);
3. per instance input: a placeholder used directly, or a placeholder turned into the input by a
   *late producer* (``clone``, or ``view`` of a flat input) placed right before the input's first
   use inside the instance; per instance output: returned directly, or through a *consumer*
   (``neg``; of its float32 upcast where ``neg`` does not run on its dtype: float8) placed right
   after it, so a replacement inserted at the wrong place breaks the graph;
4. a layout: each instance's steps are inserted, in order, at random positions among the context
   nodes and earlier instances (offsets shrink to 0: contiguous, at the start;
   :mod:`._planted_splice`).

The caller's arguments become one :class:`~._planted_spec.PlantSpec` first
(:func:`~._planted_spec.canonical_spec`: validated, a recorded rewrite unpacked, the
``scalar_workaround`` arguments drawn as :mod:`._planted_args` says).

Instances share no value with the context or each other, so every interleaving is a topological
order and the case is valid by construction: the strategy never filters (0 % rejections in
Hypothesis statistics, e.g. ``pytest tests/strategies/test_planted.py --hypothesis-show-statistics``).

Cost (the planted rows of ``benchmarks/strategies.py``, 200 draws, in CPU seconds on the 2-core
machine shared with other jobs, where wall time varies twofold): ``planted(rms_norm)`` about 39
cases/s before the argument near misses of issue 15 and 34 after (their ground truth costs a matcher
run per near miss of new shapes); ``planted(qk_norm)`` 28-38 before, 27-37 after, within noise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from .._case import GraphCase
from .._registry.record import RecordedRewrite
from ._device import validated
from ._like import TensorLike
from ._near_miss import NEAR_MISS_KINDS
from ._planted_draw import cases
from ._planted_spec import canonical_spec
from ._planted_splice import PRODUCERS
from ._public import Shown, public_call

__all__ = ["planted", "NEAR_MISS_KINDS", "PRODUCERS"]

_DEFAULT_MAX_INSTANCES = 3


def planted(
    pattern: Callable[..., Any] | RecordedRewrite,
    inputs: st.SearchStrategy[Sequence[Any]] | None = None,
    *,
    context: st.SearchStrategy[GraphCase] | None = None,
    min_instances: int = 0,
    max_instances: int = _DEFAULT_MAX_INSTANCES,
    near_misses: bool | Sequence[str] = True,
    near_miss: str | None = None,
    trace_fn: Callable[..., Any] | None = None,
    example_inputs: Sequence[Any] | None = None,
    pass_config: Any = None,
    name: str | None = None,
    scalar_workaround: Mapping[str, float | int] | None = None,
    exclusive_arg_names: Sequence[str] = (),
    dynamic: bool | str | Sequence[str] = False,
    device: str | torch.device | None = None,
) -> st.SearchStrategy[GraphCase]:
    """Return a strategy for :class:`~pmverify.GraphCase` graphs with instances of ``pattern``
    spliced into random context graphs, and the ground truth of each instance.

    - ``pattern``: a search function of tensors (and Python scalars), as given to Inductor's
      ``register_replacement``, or a :class:`~pmverify.RecordedRewrite` (from
      :func:`pmverify.record_patterns`), which gives the search function, ``trace_fn``,
      ``example_inputs``, ``scalar_workaround``, ``exclusive_arg_names`` and the name: do not give
      those with it.
    - ``inputs``: a strategy of input tuples for ``pattern`` (e.g. :func:`like` of the example
      inputs), every argument or all but the ``scalar_workaround`` ones. A correct pass must match
      ``pattern`` on every tuple it draws. Required for a plain function; a recorded rewrite's
      default is ``like`` its example inputs at capped sizes (at most 4096 elements, sides up to 64).
    - ``context``: a strategy of functional, single-rank cases to splice into (default
      :func:`fx_graphs`; ``st.nothing()``: never a context). Its planted instances are kept, renamed.
    - ``min_instances`` / ``max_instances``: instances per case (default 0..3).
    - ``near_misses``: True (all of :data:`NEAR_MISS_KINDS`, default), False (none), or the kinds
      to draw from. ``near_miss``: one of them, which every instance is made (default None: half
      the instances plain).
    - ``trace_fn``: how to trace ``pattern`` (default Inductor's ``fwd_only``).
    - ``example_inputs``: the example inputs the pass registers ``pattern`` with (default: those of
      a :func:`like` ``inputs``); a plain instance whose trace has another structure than the
      pattern's on them is ``must_match=None, reason="trace_differs"``.
    - ``pass_config``: every case's ``pass_config`` (default the context case's).
    - ``name``: the pattern's name in the ground truth and node names (default ``pattern.__name__``
      without a ``_pattern`` suffix, made an identifier).
    - ``scalar_workaround`` / ``exclusive_arg_names``: as given to ``register_replacement``; each
      ``scalar_workaround`` argument is drawn around its example value, as Inductor matches it at
      any value.
    - ``dynamic``: ``False`` (default), ``True`` or a dim name or list of names of
      :data:`~pmverify.strategies._dynamic.DYNAMIC_DIMS` (``"tokens"``): symbolic sizes, as
      torch.compile gives a pass its graph with ``dynamic=True``.
    - ``device``: the device of the cases (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a
      ``torch.device``; default None: where ``inputs`` or ``context`` drew, the first device
      other than CPU among their draws, else CPU). Every case is drawn, traced and judged on CPU (inputs and context drawn elsewhere
      are copied to CPU first), then moved whole (:func:`pmverify.device.on_device`).

    Each case's ``planted`` holds, per instance, its ``call_function`` node names (producers and
    consumers excluded), ``must_match`` (True, False, or None: either is right), the near-miss
    ``reason`` and ``detail``, and where the truth came from (``truth_from``); instances keep the
    shapes and dtypes ``inputs`` draws (at a symbol's hint in a dynamic case). ``inputs`` is one
    tuple of CPU tensors (or on ``device``) (``tp_world=1``, ``form="functional"``). Shrinks toward one plain
    instance in no context, inputs used directly, outputs returned.

    Raises ``hypothesis.errors.InvalidArgument`` for a ``pattern`` that is not callable, ``inputs``
    or ``context`` not a strategy (``inputs`` missing for a plain function), non-int or negative
    bounds, ``min_instances > max_instances``, ``min_instances=0`` with ``context=st.nothing()``,
    unknown near-miss kinds, ``example_inputs`` not a tuple or list or too short, ``trace_fn``,
    ``example_inputs``, ``scalar_workaround`` or ``exclusive_arg_names`` given with a recorded
    rewrite, ``dynamic`` not False, True, a dim name or a list of them, a recorded rewrite whose
    example inputs :func:`like` cannot draw, a ``scalar_workaround`` that is not a mapping of
    ``pattern``'s argument names to distinct ints or floats, ``exclusive_arg_names`` that are not
    its argument names, a ``device`` that is not a CPU or CUDA device; when drawing, for ``inputs``
    drawing something other than a tuple or list
    (or of another length), a pattern that does not trace, traces to no op or to an in-place op,
    and a context that is not a functional single-rank case.

    See the docs page *The strategies*, section *How ``planted`` draws*, for the near-miss kinds and their ground
    truth, the drawn wildcard values, recorded rewrites' default inputs and dynamic shapes.

    Example, for a pass that registers ``rms_pattern`` with ``scalar_workaround={"eps": 1e-6}``::

        def rms_pattern(x, w, eps):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

        example = (torch.empty(8, 16), torch.empty(16))  # register_replacement's example_inputs
        cases = planted(rms_pattern, like(example, vary={"tokens": [(0, 0)]}), min_instances=1,
                        scalar_workaround={"eps": 1e-6})

        def test_my_pass():
            pmverify.verify(MyRMSNormPass(), cases)
    """
    target = validated(device)
    spec = canonical_spec(
        pattern,
        inputs,
        context=context,
        min_instances=min_instances,
        max_instances=max_instances,
        near_misses=near_misses,
        near_miss=near_miss,
        trace_fn=trace_fn,
        example_inputs=example_inputs,
        pass_config=pass_config,
        name=name,
        scalar_workaround=scalar_workaround,
        exclusive_arg_names=exclusive_arg_names,
        dynamic=dynamic,
    )
    # the public call as given, for the strategy's repr (which keys the example database)
    call_args = (Shown(repr(pattern)) if isinstance(pattern, RecordedRewrite) else pattern,)
    call_args += () if inputs is None else (inputs,)
    call_kwargs = {
        "context": context,
        "min_instances": min_instances,
        "max_instances": max_instances,
        "near_misses": near_misses,
        "near_miss": near_miss,
        "trace_fn": trace_fn,
        # shapes and dtypes only, as in the spec (converted once validated)
        "example_inputs": None if example_inputs is None else tuple(map(TensorLike.of, example_inputs)),
        "pass_config": pass_config,
        "name": name,
        "scalar_workaround": scalar_workaround,
        "exclusive_arg_names": exclusive_arg_names,
        "dynamic": dynamic,
        "device": device,
    }
    return public_call(planted, cases(spec, target), *call_args, **call_kwargs)
