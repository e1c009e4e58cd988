"""``planted``'s strategy (:func:`cases`): the instances drawn as a linked list (each one's inputs,
trace, kind and ground truth, :func:`_instance`), a context, the splice, and in a dynamic case
the symbolic re-trace with the ground truth asked again there."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._case import GraphCase
from .._execution import propagate_fake
from .._shapes.symbolic import SymbolizeError, static_source
from .._validation import short_repr
from ._broadcast import broadcast_kind
from ._device import finished, on_cpu, on_cpu_inputs
from ._dynamic import symbolize_drawn
from ._joint import requires_grad_flags, tangents, with_requires_grad
from ._near_miss import kind_applies, variants
from ._planted_dynamic import hinted_args, symbolic_truth
from ._planted_spec import PlantSpec
from ._planted_splice import splice
from ._planted_trace import hinted, traced
from ._planted_truth import judged
from ._traced import Traced

__all__ = ["cases"]

_CPU = torch.device("cpu")


def _instance(draw: Any, spec: PlantSpec) -> tuple[Traced, torch.device]:
    """One instance of the pattern: its inputs, trace, kind (plain or a near miss) and ground
    truth; and the device ``inputs`` drew it on (it is traced and judged on CPU)."""
    args = draw(spec.inputs)
    if not isinstance(args, (tuple, list)):
        raise InvalidArgument(f"inputs drew {short_repr(args)}; it must draw tuples of pattern inputs")
    args, drawn_on = on_cpu_inputs(args)
    form = broadcast_kind(args)  # like() marks a tensor it drew in a broadcast form
    if spec.numbers is not None:
        args = spec.numbers.draw(draw, tuple(args))
    # requiring grad as the example does (a strategy of the caller's may draw plain tensors)
    grads = None if spec.example_inputs is None else requires_grad_flags(spec.example_inputs)
    at_hints = None
    if spec.dynamic:  # the sizes to make symbolic at their hints, where the pattern runs so
        at_hints = hinted(spec, with_requires_grad(hinted_args(draw, args, spec.dynamic), grads))
    gm, args = at_hints if at_hints is not None else traced(spec, with_requires_grad(args, grads))
    # a joint trace (training rewrite) also takes tangents, drawn like its forward outputs
    base = Traced(gm, (*args, *draw(tangents(gm, len(args)))), primals=len(args))
    chosen, applicable = _kind_of(draw, spec, base)
    return judged(spec, base, chosen, form, applicable), drawn_on


def _kind_of(draw: Any, spec: PlantSpec, base: Traced) -> tuple[Traced, tuple[str, ...]]:
    """``base`` or a near miss of it, and the near-miss kinds ``base`` has candidates of.

    Half the instances are plain (False shrinks first), the others one near-miss kind each. The
    kind and the choice among its variants are drawn either way: an instance's span has the same
    choices whatever its kind, so that shrinking it to a simpler kind misaligns no later choice.
    The kind is drawn among those the instance has candidates of, so that no kind is starved by
    kinds that do not apply to it and fall through to the next one. With ``near_miss`` given,
    every instance is made that kind (the same choices drawn, ignored)."""
    kinds = spec.kinds
    near = bool(kinds) and draw(st.booleans())
    applicable = tuple(k for k in kinds if kind_applies(base, k))
    kind = draw(st.sampled_from(applicable or kinds)) if kinds else None
    which = draw(st.integers(0, 255)) if kinds else 0
    if spec.near_miss is not None:
        near, kind = True, spec.near_miss
    if near:
        start = kinds.index(kind)
        for k in kinds[start:] + kinds[:start]:  # fall through to the next kind
            variant = variants(spec.pattern, base, k, spec.trace_fn, lambda n: which % n)
            if variant is not None:
                return variant, applicable
    return base, applicable


def _go_on(draw: Any) -> bool:
    """Whether another instance follows: 2 in 3 do; shrinks to stop."""
    return bool(draw(st.integers(0, 2)))


@st.composite
def _instances(draw: Any, spec: PlantSpec, index: int) -> list[tuple[Traced, torch.device]]:
    """Instance ``index`` and those after it: one instance, whether another follows (asked whenever
    there is room, so that every instance has the same choices), and the rest nested inside, as a
    linked list. The shrinker drops an instance by putting the rest in its place (a descendant span
    of the same label), where a count drawn first would reinterpret every later instance's choices."""
    instance = _instance(draw, spec)
    count = index + 1
    more = count < spec.max_instances and (_go_on(draw) or count < spec.min_instances)
    return [instance, *(draw(_instances(spec, count)) if more else [])]


@st.composite
def cases(draw: Any, spec: PlantSpec, device: torch.device | None = None) -> GraphCase:
    """One case of ``spec``: its instances, maybe a context (always one when there is no
    instance), spliced; in a dynamic case traced again symbolically, the ground truth asked there.
    Drawn on CPU, then moved to ``device``, else to the first device other than CPU the inputs or
    the context were drawn on (:mod:`._device`)."""
    devices: list[torch.device] = []
    case = _case(draw, spec, devices)
    return finished(case, device, next((d for d in devices if d.type != "cpu"), _CPU))


def _case(draw: Any, spec: PlantSpec, devices: list[torch.device]) -> GraphCase:
    """:func:`cases` on CPU; ``devices`` gets the devices the inputs and the context were drawn on."""
    name = spec.name
    low, high = spec.min_instances, spec.max_instances
    drawn = draw(_instances(spec, 0)) if high > 0 and (low > 0 or _go_on(draw)) else []
    instances = [instance for instance, _ in drawn]
    devices.extend(drawn_on for _, drawn_on in drawn)
    count = len(instances)
    context = None
    if count == 0 or (spec.context is not None and draw(st.booleans())):
        context = draw(spec.context)
        if not isinstance(context, GraphCase) or context.tp_world != 1 or context.form != "functional":
            raise InvalidArgument(f"context drew {context!r}; it must draw functional GraphCases with tp_world=1")
        context, drawn_on = on_cpu(context)
        devices.append(drawn_on)
        context = _static_context(context)
    dynamic = spec.dynamic
    gm, inputs, records = splice(draw, name, context, instances, bool(dynamic))
    propagate_fake(gm, inputs)
    kinds = [inst.reason or "plain" for inst in instances]
    label = f"planted {name} x{count} ({', '.join(kinds) or 'none'})"
    if spec.cap is not None:
        label += f" ({spec.cap})"
    if context is not None:
        label += f" in {sum(1 for n in context.gm.graph.nodes if n.op == 'call_function')}-op context"
    pass_config = spec.pass_config if spec.pass_config is not None else getattr(context, "pass_config", None)
    case = GraphCase(gm, [inputs], tp_world=1, form="functional", planted=records, pass_config=pass_config, label=label)
    if not dynamic:
        return case
    try:
        symbolic = symbolize_drawn(draw, case, dynamic)
    except SymbolizeError as exc:  # e.g. a static size the inputs strategy drew divisible by a hint
        return dataclasses.replace(case, label=f"{label} (static: {exc})")
    if not symbolic.symbols:
        return symbolic
    first = len(records) - len(instances)
    asked = [(first + i, inst.matcher) for i, inst in enumerate(instances)]
    return dataclasses.replace(symbolic, planted=symbolic_truth(symbolic, asked))


def _static_context(context: GraphCase) -> GraphCase:
    """A drawn context with concrete sizes: a symbolic one's source (its planted instances keep
    their ground truth on the symbolic graph, under the source's node names)."""
    if not context.symbols:
        return context
    source = static_source(context)
    planted = tuple(
        dataclasses.replace(symbolic, nodes=static.nodes)
        for static, symbolic in zip(source.planted, context.planted, strict=True)
    )
    return dataclasses.replace(source, planted=planted)
