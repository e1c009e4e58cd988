"""``planted``: instances of a pattern spliced into random context graphs, with ground truth.

A case is drawn in four steps:

1. the instances, as a linked list (each in a span of choices that ends in whether another follows
   and holds the rest, so that the shrinker drops any one of them): inputs from ``inputs``, a trace of the pattern on them
   (Inductor's ``fwd_only``, as ``register_replacement`` traces its search function), and a kind: a
   plain instance or a near miss (:mod:`._near_miss`);
2. a context :class:`~pmverify.GraphCase` (from ``context``; none at all, the simplest, when there
   is at least one instance);
3. per instance input: a placeholder used directly, or a placeholder turned into the input by a
   *late producer* (``clone``, or ``view`` of a flat input) placed right before the input's first
   use inside the instance; per instance output: returned directly, or through a *consumer*
   (``neg``; of its float32 upcast where ``neg`` does not run on its dtype: float8) placed right
   after it, so a replacement inserted at the wrong place breaks the graph;
4. a layout: each instance's steps are inserted, in order, at random positions among the context
   nodes and earlier instances (offsets shrink to 0: contiguous, at the start).

Instances share no value with the context or each other, so every interleaving is a topological
order and the case is valid by construction: the strategy never filters (0 % rejections in
Hypothesis statistics, e.g. ``pytest tests/strategies/test_planted.py --hypothesis-show-statistics``).

Cost (the planted rows of ``benchmarks/strategies.py``, 200 draws, in CPU seconds on the 2-core
machine shared with other jobs, where wall time varies twofold): ``planted(rms_norm)`` about 39
cases/s before the argument near misses of issue 15 and 34 after (their ground truth costs a matcher
run per near miss of new shapes); ``planted(qk_norm)`` 28-38 before, 27-37 after, within noise.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .._case import GraphCase, PlantedInstance
from .._execution import error_summary, propagate_fake
from .._fx import GRADIENT_OUTPUTS, flat_nodes, trace
from .._record import RecordedRewrite, isolated_pass
from .._symbolic import HINTS, SymbolizeError, static_source
from .._validation import short_repr, validate_choices, validate_int, validate_order, validate_strategy
from ._broadcast import broadcast_kind
from ._dtype_support import add_reader
from ._dynamic import DYNAMIC_DIMS, symbolize_drawn, validate_dynamic
from ._joint import detached, gradient_outputs, requires_grad_flags, tangents, with_requires_grad
from ._like import TensorLike, like
from ._near_miss import NEAR_MISS_KINDS, kind_applies, variants
from ._planted_dynamic import hinted_args, symbolic_truth
from ._public import Shown, public_call
from ._recorded_inputs import NumberForms, recorded_example
from ._traced import Traced, runs_eagerly, signature
from ._truth import isolated_truth

__all__ = ["planted", "NEAR_MISS_KINDS", "PRODUCERS"]

#: How an instance input reaches the instance, simplest first.
PRODUCERS = (None, "clone", "view")
_DEFAULT_MAX_INSTANCES = 3


@dataclasses.dataclass
class _Step:
    """One node to create in the spliced graph: ``source`` is the node's graph ("ctx" or an
    instance index), ``node`` the node to copy (or None for producers/consumers/extra users)."""

    source: Any
    node: torch.fx.Node | None
    kind: str = "copy"  # copy | producer | consumer | extra_user
    arg: Any = None  # producer: (placeholder node, how, shape); consumer/extra user: the node it reads


def _identifier(name: str) -> str:
    """``name`` made a Python identifier (it prefixes node names): a lambda is ``lambda``."""
    name = re.sub(r"\W+", "_", name).strip("_") or "pattern"
    return f"p{name}" if name[0].isdigit() else name


def _pattern_name(pattern: Callable[..., Any]) -> str:
    """The function's name without a ``_pattern`` suffix, as an identifier."""
    name = getattr(pattern, "__name__", type(pattern).__name__)
    return _identifier(name.removesuffix("_pattern") if name != "_pattern" else name)


def _instance_steps(draw: Any, i: int, inst: Traced, dynamic: bool = False) -> tuple[list[_Step], list[torch.fx.Node]]:
    """The steps of instance ``i`` in order, and its output nodes (before splicing). In a
    ``dynamic`` case an input with a size at a hint is never a ``view`` of a flat input (its size,
    a multiple of the hint, would be a static size divisible by it)."""
    graph = inst.gm.graph
    values = dict(zip(graph.find_nodes(op="placeholder"), inst.args, strict=True))
    how = {
        ph: _keeping_layout(draw(st.sampled_from(PRODUCERS)), value, dynamic)
        for ph, value in values.items()
        if isinstance(value, torch.Tensor) and ph.users
    }
    output = next(iter(graph.find_nodes(op="output")))
    outputs = list(dict.fromkeys(n for n in flat_nodes(output.args[0]) if n.op != "placeholder"))
    consumed = {} if inst.unused else {out: draw(st.booleans()) for out in outputs}
    steps: list[_Step] = []
    produced: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        for ph in node.all_input_nodes:
            if how.get(ph) and ph not in produced:
                produced.add(ph)
                steps.append(_Step(i, None, "producer", (ph, how[ph], list(values[ph].shape))))
        steps.append(_Step(i, node))
        if node.name == inst.extra_user:
            steps.append(_Step(i, None, "extra_user", node))
        if consumed.get(node):
            steps.append(_Step(i, None, "consumer", node))
    return steps, ([] if inst.unused else outputs)


def _keeping_layout(how: str | None, value: torch.Tensor, dynamic: bool = False) -> str | None:
    """``how``, when its producer gives a tensor of ``value``'s strides (a view of a flat input is
    contiguous; a clone keeps a permuted dense layout, not gaps nor expanded dims); else None (the
    input used directly): Inductor's matcher re-traces on the strides it sees."""
    if how == "view" and (not value.is_contiguous() or (dynamic and any(side in HINTS for side in value.shape))):
        return None
    if how == "clone" and torch.empty_like(value).stride() != value.stride():
        return None
    return how


def _layout(draw: Any, context_steps: list[_Step], sequences: list[list[_Step]]) -> list[_Step]:
    """Insert each sequence, in order, among the steps placed so far; offsets shrink to 0."""
    merged = list(context_steps)
    for seq in sequences:
        pos = draw(st.integers(0, len(merged))) if merged else 0
        for step in seq:
            merged.insert(pos, step)
            pos += 1
            if pos < len(merged):
                pos += draw(st.integers(0, len(merged) - pos))
    return merged


def _splice(
    draw: Any, name: str, context: GraphCase | None, instances: list[Traced], dynamic: bool = False
) -> tuple[Any, ...]:
    """Build the spliced graph: returns (graph module, inputs, planted records)."""
    graph = torch.fx.Graph()
    env: dict[Any, dict[torch.fx.Node, Any]] = {}
    values: list[Any] = []
    ctx_out: list[torch.fx.Node] = []
    context_steps: list[_Step] = []
    if context is not None:
        env["ctx"] = {}
        for ph, value in zip(context.gm.graph.find_nodes(op="placeholder"), context.inputs[0], strict=True):
            env["ctx"][ph] = graph.placeholder(ph.name)
            values.append(value)
        for node in context.gm.graph.nodes:
            if node.op == "output":
                ctx_out = flat_nodes(node.args[0])
            elif node.op != "placeholder":
                context_steps.append(_Step("ctx", node))

    sequences, outputs = [], []
    for i, inst in enumerate(instances):
        env[i] = {}
        steps, outs = _instance_steps(draw, i, inst, dynamic)
        flat = {s.arg[0] for s in steps if s.kind == "producer" and s.arg[1] == "view"}
        for ph, value in zip(inst.gm.graph.find_nodes(op="placeholder"), inst.args, strict=True):
            if not isinstance(value, torch.Tensor):
                env[i][ph] = value
                continue
            if not ph.users:
                continue
            env[i][ph] = graph.placeholder(f"{name}{i}_{ph.name}")
            value = detached(value)  # a joint trace computes its gradients itself
            values.append(value.reshape(-1).clone() if ph in flat else value)
        sequences.append(steps)
        outputs.append(outs)

    finals: dict[tuple[int, torch.fx.Node], torch.fx.Node] = {}
    extra_outputs: list[torch.fx.Node] = []
    for step in _layout(draw, context_steps, sequences):
        local = env[step.source]
        if step.kind == "copy":
            new = graph.node_copy(step.node, lambda n, local=local: local[n])
            local[step.node] = new
            if step.source != "ctx":
                finals[(step.source, step.node)] = new
        elif step.kind == "producer":
            ph, how, shape = step.arg
            source = local[ph]
            target = torch.ops.aten.view.default if how == "view" else torch.ops.aten.clone.default
            local[ph] = graph.call_function(target, (source, shape) if how == "view" else (source,))
        elif step.kind == "consumer":  # neg (of a float32 upcast where neg does not run: float8)
            finals[(step.source, step.arg)] = add_reader(graph, local[step.arg], step.arg.meta.get("val"))
        else:  # extra_user
            extra_outputs.append(graph.call_function(torch.ops.aten.clone.default, (local[step.arg],)))

    returned = [env["ctx"][n] for n in ctx_out] if context is not None else []
    gradients = []  # positions of a joint instance's gradients (GRADIENT_OUTPUTS)
    for i, outs in enumerate(outputs):
        grads = gradient_outputs(instances[i].gm, instances[i].primals) if instances[i].primals is not None else ()
        gradients += [len(returned) + j for j, out in enumerate(outs) if out in grads]
        returned += [finals[(i, out)] for out in outs]
    returned += extra_outputs
    output = graph.output(tuple(returned))
    if gradients:
        output.meta[GRADIENT_OUTPUTS] = tuple(gradients)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)

    records = []
    if context is not None:
        rename = {node.name: env["ctx"][node].name for node in env["ctx"]}
        records += [dataclasses.replace(p, nodes=tuple(rename[n] for n in p.nodes)) for p in context.planted]
    for i, inst in enumerate(instances):
        names = tuple(env[i][n].name for n in inst.gm.graph.nodes if n.op == "call_function")
        records.append(
            PlantedInstance(
                name, names, inst.must_match, inst.reason, inst.detail, inst.truth_from, tuple(inst.applicable)
            )
        )
    return gm, tuple(values), tuple(records)


class _Rewrite:
    """A recorded rewrite in a strategy's spec: Hypothesis prints a dataclass field by field (the
    example tensors' values would enter the example database key); this prints its repr."""

    def __init__(self, rewrite: RecordedRewrite) -> None:
        self.rewrite = rewrite

    def __repr__(self) -> str:
        return repr(self.rewrite)


def _scalar_values(example: Any) -> st.SearchStrategy[Any]:
    """Values of a ``scalar_workaround`` argument, ``example`` first (the simplest: shrinks to it).

    Inductor's pattern holds such an argument as a wildcard (a ``KeywordArg``) and matches it at any
    value, so a replacement must be checked at other values than the example: a replacement that
    hard-codes the example value is wrong everywhere else. A float draws values of its sign around
    and far from it (1e-2, 0.5, 1, 10x and 0.1x it, and a range from 0.1x to max(1, 10x)); an int
    a small range of its sign around it; a bool both values; anything else only the example."""
    if isinstance(example, bool):
        return st.sampled_from([example, not example])
    if isinstance(example, int):
        low, high = (max(0, example - 4), example + 4) if example >= 0 else (example - 4, min(-1, example + 4))
        return st.just(example) | st.integers(low, high)
    if not isinstance(example, float) or not math.isfinite(example):
        return st.just(example)
    sign = -1.0 if math.copysign(1.0, example) < 0 else 1.0
    size = abs(example)
    far = [1e-2, 0.5, 1.0, *([10 * size, 0.1 * size] if size else [])]
    others = [v for v in dict.fromkeys(sign * v for v in far) if v != example]
    low, high = (0.1 * size, max(1.0, 10 * size)) if size else (0.0, 1.0)
    low, high = (low, high) if sign > 0 else (-high, -low)
    return st.just(example) | st.sampled_from(others) | st.floats(low, high, allow_nan=False, allow_infinity=False)


@st.composite
def _with_scalars(
    draw: Any,
    inputs: st.SearchStrategy[Sequence[Any]],
    count: int,
    scalars: tuple[tuple[int, st.SearchStrategy[Any]], ...],
) -> tuple[Any, ...]:
    """The ``count`` arguments of a pattern: a tuple from ``inputs`` with each ``(position,
    strategy)`` of ``scalars`` drawn in place. ``inputs`` may draw every argument (the drawn value
    at a scalar's position is replaced) or only the others, as ``register_replacement``'s
    ``example_inputs`` hold them (the scalars are then put at their positions)."""
    args = draw(inputs)
    if not isinstance(args, (tuple, list)):
        raise InvalidArgument(f"inputs drew {short_repr(args)}; it must draw tuples of pattern inputs")
    args = list(args)
    if len(args) == count - len(scalars):
        for position, _ in sorted(scalars, key=lambda pair: pair[0]):
            args.insert(position, None)
    elif len(args) != count:
        raise InvalidArgument(
            f"inputs drew {len(args)} values; the pattern takes {count} arguments, {len(scalars)} of them "
            "scalar_workaround ones: draw all of them, or all but those"
        )
    for position, values in scalars:
        args[position] = draw(values)
    return tuple(args)


def _parameters(pattern: Callable[..., Any]) -> list[str]:
    """The parameter names of ``pattern``, in order (InvalidArgument when it has no signature)."""
    try:
        return list(inspect.signature(pattern).parameters)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"pattern={_name(pattern)} has no signature to read its argument names from: {exc}"
        ) from exc


def _check_wildcards(
    pattern: Callable[..., Any], scalar_workaround: Any, exclusive_arg_names: Any
) -> tuple[dict[int, Any], tuple[str, ...]]:
    """Validate ``scalar_workaround`` / ``exclusive_arg_names`` as ``register_replacement`` takes
    them; return the workaround values by argument position, and the exclusive names."""
    if scalar_workaround is None and not exclusive_arg_names:
        return {}, ()
    names = _parameters(pattern)
    workaround = {} if scalar_workaround is None else scalar_workaround
    if not isinstance(workaround, Mapping):
        raise InvalidArgument(f"scalar_workaround={workaround!r} must be a mapping of argument names to numbers")
    for key, value in workaround.items():
        if key not in names:
            raise InvalidArgument(
                f"scalar_workaround={dict(workaround)!r} names {key!r}, not an argument of pattern={_name(pattern)} "
                f"(its arguments: {names})"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidArgument(f"scalar_workaround[{key!r}]={value!r} must be a finite int or float")
    if len(set(workaround.values())) != len(workaround):
        raise InvalidArgument(
            f"scalar_workaround={dict(workaround)!r} gives two arguments the same value: Inductor tells them apart "
            "by value"
        )
    if isinstance(exclusive_arg_names, str) or not isinstance(exclusive_arg_names, Sequence):
        raise InvalidArgument(f"exclusive_arg_names={exclusive_arg_names!r} must be a sequence of argument names")
    if len(set(exclusive_arg_names)) != len(exclusive_arg_names):
        raise InvalidArgument(f"exclusive_arg_names={tuple(exclusive_arg_names)!r} names an argument twice")
    for key in exclusive_arg_names:
        if key not in names:
            raise InvalidArgument(
                f"exclusive_arg_names={tuple(exclusive_arg_names)!r} names {key!r}, not an argument of "
                f"pattern={_name(pattern)} (its arguments: {names})"
            )
    positions = {i: workaround[name] for i, name in enumerate(names) if name in workaround}
    return positions, tuple(exclusive_arg_names)


def _arity(pattern: Callable[..., Any]) -> tuple[int, int] | None:
    """How many arguments ``pattern`` takes at least and at most, when they are positional ones."""
    try:
        parameters = inspect.signature(pattern).parameters.values()
    except (TypeError, ValueError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not all(p.kind in positional for p in parameters):
        return None
    return sum(p.default is inspect.Parameter.empty for p in parameters), len(parameters)


def _full_example(pattern: Callable[..., Any], example: Sequence[Any], positions: dict[int, Any]) -> tuple[Any, ...]:
    """``example`` as the pattern's arguments: given without the ``scalar_workaround`` ones
    (``register_replacement``'s form), their example values are put at their positions.
    InvalidArgument when its length fits neither form, or it holds a tensor where a
    ``scalar_workaround`` argument goes."""
    arity = _arity(pattern)
    example = list(example)
    if arity is None:
        return tuple(example)
    low, count = arity
    if positions and len(example) == count - len(positions):
        for position in sorted(positions):
            example.insert(position, positions[position])
    elif not low <= len(example) <= count or (positions and len(example) != count):
        takes = f"{count}" if low == count or positions else f"{low} to {count}"
        scalars = f" ({len(positions)} of them scalar_workaround ones)" if positions else ""
        raise InvalidArgument(
            f"example_inputs={short_repr(tuple(example))} holds {len(example)} values; pattern={_name(pattern)} "
            f"takes {takes} arguments{scalars}"
        )
    names = _parameters(pattern)
    for position in positions:
        if isinstance(example[position], (torch.Tensor, TensorLike)):
            raise InvalidArgument(
                f"scalar_workaround names {names[position]!r}, but example_inputs[{position}] is the tensor "
                f"{short_repr(example[position])}: a scalar_workaround argument is a Python number"
            )
    return tuple(example)


#: Near misses made by editing an argument of the trace: a wildcard may hold that argument.
_EDITED_KINDS = ("constant", "dim", "split_sizes")
#: Near misses in what the trace does not pin (:mod:`._argument_near_miss`): Inductor's matcher
#: for the pattern judges them, for every plain pattern (it ignores keyword arguments the pattern
#: does not hold, so it rewrites some of them).
_ASKED_KINDS = ("optional_arg", "overload", "reduction_dim")


class _Wildcards:
    """What a plain pattern's pass treats as wildcards (``register_replacement``'s
    ``scalar_workaround`` and ``exclusive_arg_names``, maybe none), and Inductor's matcher for the
    pattern registered with them (built on first use, from the example inputs or the first drawn
    ones): the ground truth of an edited near miss. Its repr (which keys the example database)
    names the arguments only."""

    def __init__(self, spec: dict[str, Any], positions: dict[int, Any], exclusive: tuple[str, ...]) -> None:
        self.spec, self.positions, self.exclusive = spec, positions, exclusive
        self.given = bool(positions or exclusive)
        self.broken = False  # the pattern does not register: no matcher to ask
        self.reference: tuple[Any, ...] | None = None  # the structure of the registered trace
        self._rewrite: RecordedRewrite | None = None

    def rewrite(self, args: tuple[Any, ...]) -> RecordedRewrite:
        if self._rewrite is None:
            from .._record import pattern_rewrite

            spec = self.spec
            example = spec["example_inputs"] if spec["example_inputs"] is not None else args
            example = tuple(x.zeros() if isinstance(x, TensorLike) else x for x in example)
            self.reference = signature(trace(spec["pattern"], example, spec["trace_fn"]), loose=True)
            self._rewrite = pattern_rewrite(
                spec["pattern"],
                tuple(x for i, x in enumerate(example) if i not in self.positions),
                trace_fn=spec["trace_fn"],
                scalar_workaround=self._workaround() or None,
                exclusive_arg_names=self.exclusive,
            )
        return self._rewrite

    def _workaround(self) -> dict[str, Any]:
        names = _parameters(self.spec["pattern"]) if self.positions else []
        return {names[i]: value for i, value in self.positions.items()}

    def __repr__(self) -> str:
        return f"wildcards(scalar_workaround={self._workaround()!r}, exclusive_arg_names={self.exclusive!r})"


def _traced(spec: dict[str, Any], args: tuple[Any, ...]) -> tuple[torch.fx.GraphModule, tuple[Any, ...]]:
    """Trace the pattern on ``args``; with default inputs of a recorded rewrite, a drawn
    ``scalar_workaround`` value or number for a 0-d tensor it does not trace with or run with (e.g.
    a dropout probability above 1) is put back to its example value, not reported as the caller's
    error. The pattern itself must run eagerly on the inputs (:func:`runs_eagerly`: a program a model
    could hold); a draw on which it does not, even at those example values, is rejected."""
    numbers = spec.get("numbers")
    examples = {
        **(spec.get("scalar_examples") or {}),
        **(
            {}
            if numbers is None
            else {i: v for i, v in numbers.examples.items() if not isinstance(args[i], torch.Tensor)}
        ),
    }
    try:
        gm = _trace_checked(spec["pattern"], args, spec["trace_fn"])
    except InvalidArgument:
        if all(args[i] is value for i, value in examples.items()):
            raise
    else:
        if runs_eagerly(spec["pattern"], args):
            return gm, args
    fallback = tuple(examples.get(i, a) for i, a in enumerate(args))
    gm = _trace_checked(spec["pattern"], fallback, spec["trace_fn"])
    if not runs_eagerly(spec["pattern"], fallback):
        reject()
    return gm, fallback


def _instance(draw: Any, spec: dict[str, Any]) -> Traced:
    """One instance of the pattern: its inputs, trace, kind (plain or a near miss) and ground truth."""
    pattern, trace_fn = spec["pattern"], spec["trace_fn"]
    args = draw(spec["inputs"])
    if not isinstance(args, (tuple, list)):
        raise InvalidArgument(f"inputs drew {short_repr(args)}; it must draw tuples of pattern inputs")
    form = broadcast_kind(args)  # like() marks a tensor it drew in a broadcast form
    if "numbers" in spec:
        args = spec["numbers"].draw(draw, tuple(args))
    # requiring grad as the example does (a strategy of the caller's may draw plain tensors)
    grads = None if spec["example_inputs"] is None else requires_grad_flags(spec["example_inputs"])
    hinted = None
    if spec.get("dynamic"):  # the sizes to make symbolic at their hints, where the pattern runs so
        hinted = _hinted(spec, with_requires_grad(hinted_args(draw, args, spec["dynamic"]), grads))
    gm, args = hinted if hinted is not None else _traced(spec, with_requires_grad(args, grads))
    # a joint trace (training rewrite) also takes tangents, drawn like its forward outputs
    base = Traced(gm, (*args, *draw(tangents(gm, len(args)))), primals=len(args))
    # Half the instances are plain (False shrinks first), the others one near-miss kind each. The
    # kind and the choice among its variants are drawn either way: an instance's span has the same
    # choices whatever its kind, so that shrinking it to a simpler kind misaligns no later choice.
    # The kind is drawn among those the instance has candidates of, so that no kind is starved by
    # kinds that do not apply to it and fall through to the next one.
    # With ``near_miss`` given, every instance is made that kind (the same choices drawn, ignored).
    near = bool(spec["kinds"]) and draw(st.booleans())
    applicable = tuple(k for k in spec["kinds"] if kind_applies(base, k))
    kind = draw(st.sampled_from(applicable or spec["kinds"])) if spec["kinds"] else None
    which = draw(st.integers(0, 255)) if spec["kinds"] else 0
    if spec.get("near_miss") is not None:
        near, kind = True, spec["near_miss"]
    chosen = base
    if near:
        start = spec["kinds"].index(kind)
        for k in spec["kinds"][start:] + spec["kinds"][:start]:  # fall through to the next kind
            variant = variants(pattern, base, k, trace_fn, lambda n: which % n)
            if variant is not None:
                chosen = variant
                break
    if chosen.must_match is True and not _same_structure(spec, signature(chosen.gm, loose=True)):
        # Another graph than the pass registered (e.g. a matmul traced as a broadcasting mul at a
        # contracted size of 1): Inductor cannot match it, a hand-written pass may.
        chosen = dataclasses.replace(chosen, must_match=None, reason="trace_differs")
    if "rewrite" in spec and chosen.must_match is not None and not chosen.extra_user:
        chosen = isolated_truth(spec["rewrite"].rewrite, chosen)
    elif "wildcards" in spec and chosen.must_match is False:
        wildcards = spec["wildcards"]
        if wildcards.given and chosen.reason in _EDITED_KINDS:
            # the edited argument may be one the pass's matcher holds as a wildcard: ask it
            chosen = isolated_truth(wildcards.rewrite(args), chosen)
        elif chosen.reason in _ASKED_KINDS:
            chosen = _asked_truth(wildcards, args, chosen, signature(gm, loose=True))
    if chosen.reason in (None, "trace_differs") and form is not None:
        chosen = _broadcast_truth(spec, chosen)
    if spec.get("dynamic"):  # asked again on the symbolic graph (_planted_dynamic.symbolic_truth)
        if "rewrite" in spec:
            chosen = dataclasses.replace(chosen, matcher=spec["rewrite"].rewrite)
        else:
            chosen = dataclasses.replace(chosen, matcher=_matcher(spec["wildcards"], args, signature(gm, loose=True)))
    if chosen.reason is not None:  # a near miss: whose matcher its ground truth came from
        own = "rewrite" in spec or spec["wildcards"].given
        chosen = dataclasses.replace(chosen, truth_from="matcher" if own else "pattern")
    return dataclasses.replace(chosen, applicable=applicable)


def _hinted(spec: dict[str, Any], args: tuple[Any, ...]) -> tuple[torch.fx.GraphModule, tuple[Any, ...]] | None:
    """The pattern traced on ``args`` (its inputs with sizes set to hints), or None when it does not
    trace or run eagerly there (the caller keeps the drawn sizes)."""
    try:
        gm = _trace_checked(spec["pattern"], args, spec["trace_fn"])
    except InvalidArgument:
        return None
    return (gm, args) if runs_eagerly(spec["pattern"], args) else None


def _matcher(wildcards: _Wildcards, args: tuple[Any, ...], structure: tuple[Any, ...]) -> RecordedRewrite | None:
    """Inductor's matcher for a plain pattern (registered as :class:`_Wildcards` says), when it
    registers and its trace has the instance's ``structure`` (loose signature) before any near-miss
    change; else None (no matcher to ask)."""
    if wildcards.broken:
        return None
    try:
        rewrite = wildcards.rewrite(args)
        isolated_pass(rewrite)
    except Exception:  # noqa: BLE001 - whatever register_replacement raises: no matcher
        wildcards.broken = True
        return None
    return rewrite if wildcards.reference == structure else None


def _asked_truth(wildcards: _Wildcards, args: tuple[Any, ...], inst: Traced, structure: tuple[Any, ...]) -> Traced:
    """The ground truth of an :data:`_ASKED_KINDS` near miss of a plain pattern, from Inductor's
    matcher for the pattern; ``must_match=None`` (either is right) where it cannot tell: the
    pattern does not register (e.g. it does not trace on zeros), or the instance before the change
    has another ``structure`` (loose signature) than the registered trace (without example inputs
    the matcher is registered on the first drawn ones, e.g. at a contracted size of 1)."""
    if not wildcards.broken:
        try:
            rewrite = wildcards.rewrite(args)
            isolated_pass(rewrite)
        except Exception:  # noqa: BLE001 - whatever register_replacement raises: no matcher
            if wildcards.given:
                raise
            wildcards.broken = True
        else:
            if wildcards.reference == structure:
                return isolated_truth(rewrite, inst)
    return dataclasses.replace(inst, must_match=None)


class _SearchCall:
    """The search function called on a :func:`like` tuple (the ``scalar_workaround`` arguments at
    their example values where the tuple leaves them out); shown by the function's name."""

    #: ``planted`` reports a pattern that does not trace itself ("does not trace"); ``like`` draws
    #: no broadcast form for it rather than raising first.
    pmverify_from_planted = True

    def __init__(self, pattern: Callable[..., Any], positions: dict[int, Any]) -> None:
        self.pattern, self.positions = pattern, positions

    def __call__(self, *args: Any) -> Any:
        return self.pattern(*_full_example(self.pattern, args, self.positions))

    def __repr__(self) -> str:
        return _name(self.pattern)


def _broadcast_truth(spec: dict[str, Any], inst: Traced) -> Traced:
    """The ground truth of an instance whose inputs :func:`like` drew in a broadcast form (a size
    1, a missing leading dim, stride 0): a recorded rewrite's matcher was asked (its
    ``extra_check`` included); a plain pattern's instance is ``must_match=None`` (a correct pass may
    refuse the form: the semantics oracle judges it where it rewrites); reason ``"broadcast"`` for
    one that need not match."""
    if inst.must_match is True and "wildcards" in spec:
        inst = dataclasses.replace(inst, must_match=None, reason="broadcast")
    elif inst.reason == "trace_differs":
        inst = dataclasses.replace(inst, reason="broadcast")
    return inst


def _go_on(draw: Any) -> bool:
    """Whether another instance follows: 2 in 3 do; shrinks to stop."""
    return bool(draw(st.integers(0, 2)))


@st.composite
def _instances(draw: Any, spec: dict[str, Any], index: int) -> list[Traced]:
    """Instance ``index`` and those after it: one instance, whether another follows (asked whenever
    there is room, so that every instance has the same choices), and the rest nested inside, as a
    linked list. The shrinker drops an instance by putting the rest in its place (a descendant span
    of the same label), where a count drawn first would reinterpret every later instance's choices."""
    instance = _instance(draw, spec)
    count = index + 1
    more = count < spec["max_instances"] and (_go_on(draw) or count < spec["min_instances"])
    return [instance, *(draw(_instances(spec, count)) if more else [])]


@st.composite
def _cases(draw: Any, spec: dict[str, Any]) -> GraphCase:
    name = spec["name"]
    low, high = spec["min_instances"], spec["max_instances"]
    instances = draw(_instances(spec, 0)) if high > 0 and (low > 0 or _go_on(draw)) else []
    count = len(instances)
    context = None
    if count == 0 or (spec["context"] is not None and draw(st.booleans())):
        context = draw(spec["context"])
        if not isinstance(context, GraphCase) or context.tp_world != 1 or context.form != "functional":
            raise InvalidArgument(f"context drew {context!r}; it must draw functional GraphCases with tp_world=1")
        context = _static_context(context)
    dynamic = spec.get("dynamic", False)
    gm, inputs, records = _splice(draw, name, context, instances, bool(dynamic))
    propagate_fake(gm, inputs)
    kinds = [inst.reason or "plain" for inst in instances]
    label = f"planted {name} x{count} ({', '.join(kinds) or 'none'})"
    if "cap" in spec:
        label += f" ({spec['cap']})"
    if context is not None:
        label += f" in {sum(1 for n in context.gm.graph.nodes if n.op == 'call_function')}-op context"
    pass_config = spec["pass_config"] if spec["pass_config"] is not None else getattr(context, "pass_config", None)
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


def _trace_checked(pattern: Callable[..., Any], args: tuple[Any, ...], trace_fn: Any) -> torch.fx.GraphModule:
    """Trace ``pattern`` on ``args``; InvalidArgument when it does not trace, has no op, or holds an
    in-place op (a register_replacement pattern is functional; Inductor's matcher never matches
    across the mutation region an in-place op starts)."""
    from torch._inductor.pattern_matcher import is_mutation_op

    try:
        gm = trace(pattern, args, trace_fn)
    except Exception as exc:
        hint = ""
        if _is_joint(trace_fn) and not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            hint = " (a joint_fwd_bwd trace needs an input that requires grad: like() draws them as the example)"
        raise InvalidArgument(
            f"pattern={_name(pattern)} does not trace on inputs {_describe(args)}{hint}: {error_summary(exc)}"
        ) from exc
    if not any(n.op == "call_function" for n in gm.graph.nodes):
        raise InvalidArgument(f"pattern={_name(pattern)} traces to a graph without ops on inputs {_describe(args)}")
    mutating = [n.format_node() for n in gm.graph.nodes if n.op == "call_function" and is_mutation_op(n)]
    if mutating:
        raise InvalidArgument(
            f"pattern={_name(pattern)} traces to in-place ops ({'; '.join(mutating)}); planted instances must be "
            "functional, as register_replacement patterns are (use with_mutations for in-place graphs)"
        )
    return gm


def _is_joint(trace_fn: Any) -> bool:
    from torch._inductor.pattern_matcher import joint_fwd_bwd

    return trace_fn is joint_fwd_bwd


def _name(pattern: Any) -> str:
    return getattr(pattern, "__qualname__", None) or repr(pattern)


def _reference(spec: dict[str, Any]) -> tuple[Any, ...] | None:
    """The structure of the pattern traced on the pass's example inputs (memoised in ``spec``)."""
    if spec["example_inputs"] is None:
        return None
    if "reference" not in spec:
        example = tuple(x.zeros() if isinstance(x, TensorLike) else x for x in spec["example_inputs"])
        spec["reference"] = signature(_trace_checked(spec["pattern"], example, spec["trace_fn"]), loose=True)
    return spec["reference"]


def _same_structure(spec: dict[str, Any], structure: tuple[Any, ...]) -> bool:
    """Whether ``structure`` (a loose signature) is the pattern's traced on the example inputs, or
    traced with numbers for the 0-d tensors that stand for them (or there are no example inputs)."""
    reference, numbers = _reference(spec), spec.get("numbers")
    return reference in (None, structure) or (numbers is not None and numbers.reference == structure)


def _describe(args: Sequence[Any]) -> str:
    return short_repr(tuple(args))


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
) -> st.SearchStrategy[GraphCase]:
    """Return a strategy for :class:`~pmverify.GraphCase` graphs with instances of ``pattern``
    spliced into random context graphs, and the ground truth of each instance.

    - ``pattern``: a plain function of tensors (and Python scalars), as given to Inductor's
      ``register_replacement`` as its search function, or a :class:`~pmverify.RecordedRewrite`
      (see below). It is traced on every drawn input tuple.
    - ``inputs``: a strategy of input tuples for ``pattern`` (e.g. :func:`like` of the example
      inputs given to ``register_replacement``). A correct pass must match ``pattern`` on every
      tuple it draws: restrict it to the shapes and dtypes the pass claims. Required for a plain
      function; for a recorded rewrite, default ``like`` its example inputs at capped sizes, with
      0-d tensors that stand for numbers drawn as numbers (see below). With
      ``scalar_workaround`` arguments, it may draw every argument of ``pattern`` or all but those
      (as ``register_replacement``'s ``example_inputs``); those are drawn (see below).
    - ``context``: a strategy of functional, single-rank cases to splice into; default
      :func:`fx_graphs`. Its planted instances, if any, are kept (renamed). A case with at least one
      instance may have no context at all (the simplest); ``st.nothing()`` means never a context
      (then ``min_instances`` must be at least 1).
    - ``min_instances`` / ``max_instances``: bounds on the instances per case (default 0..3); a case
      with none is a context graph only (a pass must not match anything there).
    - ``near_misses``: True (all of :data:`NEAR_MISS_KINDS`), False (none), or a sequence of kinds
      to draw from: ``"constant"``, ``"dim"``, ``"split_sizes"`` and ``"extra_user"`` near misses
      must not match (``must_match=False``); a ``"dtype"`` instance (the pattern on another float
      dtype) and an ``"unused"`` one (dead code) may match or not (``must_match=None``): the
      semantics oracle judges a pass that rewrites them. A ``"constant"``, ``"dim"`` or
      ``"split_sizes"`` near miss that edits an argument the pass holds as a wildcard (give
      ``scalar_workaround``) is ``must_match=None``. Near misses in what the pattern's trace does
      not pin (:mod:`._argument_near_miss`): ``"optional_arg"`` (an optional argument the trace
      omits set on one call: ``alpha=0.5``, ``beta=2``, ``dtype=``, ``keepdim``...),
      ``"overload"`` (``aten.add.Scalar`` for ``aten.add.Tensor``, a literal made a 0-d tensor
      input) and ``"reduction_dim"`` (every ``dim`` argument moved to another dim) are judged by
      Inductor's matcher for the pattern (registered as ``register_replacement`` does, with
      ``scalar_workaround``; a matcher run, up to 25-50 ms, per instance of new shapes): one it
      rewrites is ``must_match=None`` (it ignores keyword arguments its pattern does not hold, so a
      replacement that drops ``alpha=`` is a semantics finding), one it leaves is
      ``must_match=False``. A ``"values"`` instance (a 0/1 mask given 2, -inf, -1 or 0.5, an
      additive mask 1 or -1e4, a bias +-1e4 or -inf, at every other element) is
      ``must_match=None``: the matcher does not see values, the semantics oracle judges the rewrite
      (a case whose float64 reference is non-finite is void). Drop a kind your pass rightly does
      not compare. A kind a pattern has no valid near miss of falls through to the next kind, then
      to a plain instance. The finding for a rewritten near miss names what it changed
      (``PlantedInstance.detail``). Each instance records the kinds it had candidates of
      (``PlantedInstance.applicable_near_misses``).
    - ``near_miss``: one of the kinds of ``near_misses``: every instance is made that near miss
      (falling through as above where it has no valid one), none plain; for a search that judges
      each kind that applies at least once (:func:`pmverify.check_rewrite`). Default None: half
      the instances plain, the others a kind drawn among those the instance has candidates of.
    - ``trace_fn``: how to trace ``pattern`` (default ``torch._inductor.pattern_matcher.fwd_only``,
      as ``register_replacement``).
    - ``example_inputs``: the example inputs the pass registers ``pattern`` with, with or without
      the ``scalar_workaround`` arguments (default: those of
      ``inputs`` when it is a :func:`like` strategy itself; a derived strategy such as
      ``like(...).map(f)`` loses them, so give them here). A plain instance whose trace has another
      structure than the pattern traced on them (ops and wiring; sizes and other literals aside, as
      Inductor's first match) is recorded ``must_match=None, reason="trace_differs"``: e.g. ``x @ w``
      traces as a broadcasting ``mul`` when the contracted size is 1. Without them, traces are not
      compared.
    - ``pass_config``: set as every case's ``pass_config`` (what ``verify(PassClass, ...)`` builds
      the pass with); default the context case's.
    - ``name``: the pattern name in the ground truth and in node names (default
      ``pattern.__name__`` without a ``_pattern`` suffix; made an identifier: a lambda is ``lambda``).
    - ``scalar_workaround``: as given to ``register_replacement``: argument names of ``pattern``
      mapped to example values (``{"eps": 1e-6}``). Inductor's pattern holds a literal of that value
      as a wildcard and matches it at any value, so each such argument is drawn, not fixed (see
      below), and an edited near miss of it is judged by Inductor's own matcher for ``pattern``
      registered with these arguments: one it matches is ``must_match=None`` (the semantics oracle
      judges its rewrite). Without it, the ``"constant"`` near miss of ``eps`` is
      ``must_match=False`` with ``truth_from="pattern"``: a pass whose own pattern entry matches it
      (``eps`` a wildcard there) or whose matcher is unknown rewrites it without a finding (see
      :mod:`pmverify.oracles.expectations`). Default none.
    - ``exclusive_arg_names``: as given to ``register_replacement`` (arguments that must be
      distinct nodes); given to that matcher. Default none.
    - ``dynamic``: ``False`` (default: concrete sizes), ``True`` or ``"tokens"`` (a name or a list
      of names of :data:`~pmverify.strategies._dynamic.DYNAMIC_DIMS`): symbolic sizes, as
      torch.compile gives a pass its graph with ``dynamic=True`` (see "Dynamic shapes" below).

    Dynamic shapes: each instance's inputs are drawn by ``inputs`` with concrete sizes, then the
    sizes to make symbolic are set to a symbol's hint (``s0`` 11, ``s1`` 13), their drawn entries
    repeated cyclically: with ``"tokens"``, the token count T (the leading dim of the first tensor
    input of rank >= 2) in the leading dim of every tensor input of rank >= 2 whose leading dim is
    T (a 1-d input keeps its size); with ``True``, each size above 1 of the inputs drawn static
    (shrunk to) or at the next free hint, in every dim of that size (duck sizing, as ``ShapeEnv``
    does). Where the pattern does not run at those sizes (another input relates to them) the
    instance keeps its drawn sizes. The context is drawn by ``fx_graphs(dynamic=dynamic)`` by
    default (a given ``context`` strategy may draw symbolic cases: their concrete source is
    spliced). The case is then traced again in a ``ShapeEnv``
    (:func:`pmverify._symbolic.symbolize`): one ``Sym`` placeholder per symbol first, every input
    dim at a hint that symbol, and every size argument of the instances (``view``, ``expand``,
    ``full``...) its ``SymInt`` expression; one more size per symbol is drawn in its range
    (:attr:`~pmverify.Symbol.sizes`). The ground truth then follows Inductor's matcher for the
    pattern (the recorded rewrite, or the plain pattern registered as below) run on the symbolic
    graph with symbolic fake values, its re-trace and ``extra_check`` included: a must-match
    instance it does not match there becomes ``must_match=None, reason="symbolic"``, a near miss it
    matches there ``must_match=None``. A case where a static size of the inputs is divisible by a
    hint (e.g. ``inputs`` drew 22) cannot be traced so and stays static (its label says why).

    A :class:`~pmverify.RecordedRewrite` (from :func:`pmverify.record_patterns`) gives the search
    function, ``trace_fn``, ``example_inputs``, ``scalar_workaround``, ``exclusive_arg_names`` and
    the name (its ``pattern_name``, else the search function's): do not give those with it.
    ``inputs`` then draws the search function's arguments (as
    :attr:`~pmverify.RecordedRewrite.search_args` holds them). By default (:mod:`._recorded_inputs`)
    they are drawn like the example inputs (their layouts too) at capped sizes: where an example
    tensor holds more than 4096 elements or a side above 64, one map of sizes keeping ranks, sizes 0
    and 1, equal and distinct sizes and divisibility shrinks them (kept only where the search
    function runs there and Inductor's matcher judges the capped example as the recorded one; the
    cases' labels name it); and a 0-d float or int example tensor the search function reads only as
    a number is drawn as a Python number (3 in 4, shrunk to; values as for a ``scalar_workaround``
    float or int) or as the 0-d tensor.

    Every instance is a program eager PyTorch runs: the search function itself (not its decomposed
    trace, which may be laxer about dtypes) runs on the instance's inputs; a drawn value of a
    ``scalar_workaround`` argument or number that it does not run with is put back to its example
    value, a draw it does not run on even then is rejected, and a ``"dtype"`` near miss casts only
    to dtypes it runs on. A producer that would change an input's layout (a ``view`` of a flat
    input for a non-contiguous one, a ``clone`` of a padded or expanded one) is not drawn.

    Each ``scalar_workaround`` argument is drawn, not fixed at its example value (whatever
    ``inputs`` drew there): Inductor's pattern holds it as a wildcard and
    matches it at any value, so a replacement that ignores it (hard-codes the example's ``eps``) is
    wrong on what Inductor rewrites. A float draws its example value (the simplest, shrunk to), 1e-2,
    0.5, 1, 10x and 0.1x the example, or a float of its sign from 0.1x to max(1, 10x); an int a
    small range of its sign around it; a bool either value. A drawn value the search function does
    not trace with (e.g. a probability above 1) is put back to the example value.

    A recorded rewrite's ground truth comes from Inductor's matcher holding that rewrite alone
    (:meth:`~pmverify.RecordedRewrite.pattern_pass`), run on each
    instance's own graph: a plain instance whose inputs the ``extra_check`` rejects is
    ``must_match=False, reason="extra_check"`` (so a pass that registers the same search function
    twice, with complementary checks, must be checked rewrite by rewrite); one the matcher cannot
    match at all is ``must_match=None, reason="trace_differs"``; a near miss it matches anyway (a
    ``"constant"`` that ``scalar_workaround`` makes a wildcard) is ``must_match=None``. This costs one
    matcher run (a re-trace of the search function, 25-50 ms) per instance of new shapes.

    Each instance's nodes are interleaved with context nodes at random positions; an instance input
    may be computed late (``clone`` or ``view`` right before its first use) and an output may be
    consumed (``neg``) right after it is computed, so a replacement inserted before its inputs or
    after its users' breaks the graph. ``GraphCase.planted`` holds, per instance, its node names
    (placeholders, producers and consumers excluded), ``must_match`` and the near-miss ``reason``.

    Shrinks toward one plain instance in no context, inputs used directly, outputs returned.

    Raises ``hypothesis.errors.InvalidArgument`` for a ``pattern`` that is not callable, ``inputs``
    or ``context`` not a strategy (``inputs`` missing for a plain function), non-int or negative
    bounds, ``min_instances > max_instances``, ``min_instances=0`` with ``context=st.nothing()``,
    unknown near-miss kinds, ``example_inputs`` not a tuple or list or too short, ``trace_fn``,
    ``example_inputs``, ``scalar_workaround`` or ``exclusive_arg_names`` given with a recorded
    rewrite, ``dynamic`` not False, True, a dim name or a list of them, a recorded rewrite whose example inputs :func:`like` cannot draw, a
    ``scalar_workaround`` that is not a mapping of ``pattern``'s argument names to distinct ints or
    floats, ``exclusive_arg_names`` that are not its argument names; when drawing, for ``inputs``
    drawing something other than a tuple or list (or of another length), a pattern that does not
    trace, traces to no op or to an in-place op, and a context that is not a functional single-rank
    case.

    Example, for a pass that registers ``rms_pattern`` with ``scalar_workaround={"eps": 1e-6}``::

        def rms_pattern(x, w, eps):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

        example = (torch.empty(8, 16), torch.empty(16))  # register_replacement's example_inputs
        cases = planted(rms_pattern, like(example, vary={"tokens": [(0, 0)]}), min_instances=1,
                        scalar_workaround={"eps": 1e-6})

        def test_my_pass():
            pmverify.verify(MyRMSNormPass(), cases)
    """
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
        "example_inputs": example_inputs,
        "pass_config": pass_config,
        "name": name,
        "scalar_workaround": scalar_workaround,
        "exclusive_arg_names": exclusive_arg_names,
        "dynamic": dynamic,
    }
    dynamic = validate_dynamic("dynamic", dynamic, DYNAMIC_DIMS)
    rewrite = pattern if isinstance(pattern, RecordedRewrite) else None
    if rewrite is not None:
        given = (
            ("trace_fn", trace_fn),
            ("example_inputs", example_inputs),
            ("scalar_workaround", scalar_workaround),
            ("exclusive_arg_names", exclusive_arg_names or None),
        )
        for arg, value in given:
            if value is not None:
                raise InvalidArgument(
                    f"{arg}={short_repr(value)} is given by the recorded rewrite {rewrite!r}; leave it unset"
                )
        try:
            recorded_args = recorded_example(rewrite) if inputs is None else None
            example_inputs = rewrite.search_args if recorded_args is None else recorded_args.args
        except ValueError as exc:
            raise InvalidArgument(f"pattern={rewrite!r}: {exc}") from exc
        pattern, trace_fn = rewrite.search_fn, rewrite.trace_fn
        # as Inductor uses them: names that are no argument of the search function draw nothing
        names = _parameters(pattern)
        workaround = {k: v for k, v in (rewrite.scalar_workaround or {}).items() if k in names}
        scalar_workaround = workaround or None
        exclusive_arg_names = tuple(k for k in rewrite.exclusive_arg_names if k in names)
        if name is None:
            name = rewrite.pattern_name
        if inputs is None:  # (no broadcast forms: the audit's cases stay as they were)
            inputs = like(example_inputs, scales=recorded_args.scales, broadcast=False)
    if not callable(pattern):
        raise InvalidArgument(f"pattern={_name(pattern)} must be a function, as given to register_replacement")
    if inputs is None:
        raise InvalidArgument(
            f"inputs=None: give a strategy of input tuples for pattern={_name(pattern)} (only a recorded "
            "rewrite has default inputs)"
        )
    validate_strategy("inputs", inputs)
    if context is not None:
        validate_strategy("context", context)
    validate_int("min_instances", min_instances, 0)
    validate_int("max_instances", max_instances, 0)
    validate_order("min_instances", min_instances, "max_instances", max_instances)
    if context is not None and context.is_empty:
        if min_instances < 1:
            raise InvalidArgument(
                f"min_instances={min_instances!r} must be at least 1 with context={context!r} (no context)"
            )
        context = None
    elif context is None:
        from ._graphs import fx_graphs

        context = fx_graphs(dynamic=dynamic) if dynamic else fx_graphs()
    if isinstance(near_misses, bool):
        kinds = NEAR_MISS_KINDS if near_misses else ()
    else:
        kinds = validate_choices("near_misses", near_misses, NEAR_MISS_KINDS)
    if near_miss is not None and near_miss not in kinds:
        raise InvalidArgument(f"near_miss={near_miss!r} is not one of the kinds drawn (near_misses={near_misses!r})")
    if trace_fn is not None and not callable(trace_fn):
        raise InvalidArgument(f"trace_fn={trace_fn!r} must be callable")
    if name is not None and not isinstance(name, str):
        raise InvalidArgument(f"name={name!r} must be a str")
    if example_inputs is None:
        example_inputs = getattr(inputs, "pmverify_example_inputs", None)
    elif isinstance(example_inputs, torch.Tensor) or not isinstance(example_inputs, (tuple, list)):
        raise InvalidArgument(f"example_inputs={short_repr(example_inputs)} must be a tuple or list")
    positions, exclusive = _check_wildcards(pattern, scalar_workaround, exclusive_arg_names)
    if example_inputs is not None:  # (its length checked now, not when drawing)
        example_inputs = _full_example(pattern, example_inputs, positions)
    rebuild = getattr(inputs, "pmverify_with_pattern", None)
    if rebuild is not None and not dynamic:  # like() draws broadcast forms where the pattern runs on them
        inputs = rebuild(_SearchCall(pattern, positions))
    if positions:  # drawn around their example values, as Inductor matches them at any value
        count = len(_parameters(pattern))
        inputs = _with_scalars(inputs, count, tuple((i, _scalar_values(v)) for i, v in positions.items()))
    spec = {
        "pattern": pattern,
        "inputs": inputs,
        "context": context,
        "min_instances": min_instances,
        "max_instances": max_instances,
        "kinds": tuple(k for k in NEAR_MISS_KINDS if k in kinds),
        "trace_fn": trace_fn,
        "pass_config": pass_config,
        "name": _pattern_name(pattern) if name is None else _identifier(name),
        # shapes and dtypes only: the strategy's repr keys the example database
        "example_inputs": None if example_inputs is None else tuple(map(TensorLike.of, example_inputs)),
    }
    # Inductor's matcher for the pattern (the ground truth of some near misses); the spec's repr keys
    # the example database: each prints its arguments only
    if rewrite is not None:
        spec["rewrite"] = _Rewrite(rewrite)
    else:
        spec["wildcards"] = _Wildcards(spec, positions, exclusive)
    if positions:  # only when given, as it enters the repr
        spec["scalar_examples"] = positions
    if near_miss is not None:  # likewise
        spec["near_miss"] = near_miss
    if dynamic:  # likewise
        spec["dynamic"] = dynamic
    if rewrite is not None and recorded_args is not None:
        if recorded_args.numbers:
            spec["numbers"] = NumberForms(
                {i: _scalar_values(v) for i, v in recorded_args.numbers.items()},
                recorded_args.number_reference,
                recorded_args.numbers,
            )
        if recorded_args.describe_cap() is not None:
            spec["cap"] = recorded_args.describe_cap()
    if call_kwargs["example_inputs"] is not None:  # shapes and dtypes only, as in the spec
        call_kwargs["example_inputs"] = tuple(map(TensorLike.of, call_kwargs["example_inputs"]))
    return public_call(planted, _cases(spec), *call_args, **call_kwargs)
