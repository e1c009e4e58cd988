"""Functionalization oracle: ``auto_functionalized`` tuples are routed correctly.

Inductor's post-grad graphs call a mutating op as ``auto_functionalized(op, x=..., ...)`` (v1) or
``auto_functionalized_v2(op, ..., _x_base_index=i, _all_bases=[...])`` (v2); the node returns the
tuple ``(op outputs..., new values...)``: one slot per op return (a single ``None`` slot for an op
that returns nothing), then the new value of each mutated arg in schema order (v1) or of each base
in ``_all_bases`` order (v2). Its users read it through ``getitem`` nodes. A pass that rebuilds such
a node (vLLM's fusions of ``fused_add_rms_norm``, quantization ops...) must remap every ``getitem``
by hand; this oracle checks that it did, on the rewritten graph:

(a) **Indices and meta**: every ``getitem`` of an auto_functionalized node indexes a real element
    of the tuple (in range, not the ``None`` slot of an op that returns nothing), and the
    ``meta["val"]`` the pass left on it has the element's shape and dtype. The true tuple comes from
    running the node in fake tensors on the rewritten graph's own fake values (re-propagated, the
    graph's ancestors of auto_functionalized nodes only).
(b) **Inductor still lowers it**: ``decompose_auto_functionalized`` (what ``post_grad_passes``
    runs once custom passes are done) applies to a copy of the rewritten graph (fake values
    re-propagated first), the result lints and computes what the rewritten graph computes (outputs
    and final input values) on the case's rank-0 inputs, by the one numeric rule
    (:func:`pmverify._execution.compare`: undecomposed as "before", decomposed as "after", against
    the float64 run of the graph before the pass, with its region reference and noise floor). A
    pass that marks
    ``only_clone_these_tensors`` wrongly, or leaves a node the decomposition cannot trace, fails here.
(c) **A stand-in carries the new value**: every node present (same name, op and target) in both
    graphs that, before the pass, read an element of an auto_functionalized node must read the
    same value after it, at the same argument position, by the one numeric rule: as accurate against
    the float64 value that node reads in a float64 run of the graph before the pass (a fused bf16 /
    fp8 stand-in an ulp off the unfused chain but as accurate holds). Values are captured, cloned,
    at the moment the node runs, on clones of the rank-0 inputs: after the pass by an
    ``torch.fx.Interpreter`` run; before it, and its float64 reference, region reference and noise
    floor, through a copy of the graph whose outputs are the values read (:func:`_reads_module`),
    so a later ``copy_`` into an input does not change what was read. A swapped ``getitem`` that
    keeps shapes right is caught here, naming the element read now and the one read before.

A tensor-parallel case (direct mode) is checked on every rank, each on its own rewritten graph and
inputs, with the graph runs of (b) and (c) made in one threaded world of all its ranks, as the
semantics oracle makes them (a collective, a fused one included, reduces over every rank; run on
one rank's inputs alone it would see that rank's rows only); the first rank with a finding is
named; its values are compared by the rule without the region reference and noise floor.

A graph with no auto_functionalized node before or after the pass is not looked at beyond that
test. An index out of range, or one that reads the ``None`` slot, stops (b) and (c) (the graph
cannot run); every finding is a :class:`Violation`, nothing raises.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import operator
from collections.abc import Iterator
from typing import Any

import torch

from .._execution import (
    RunPair,
    clone_inputs,
    compare,
    deterministic_fill,
    float64_module,
    float64_reference,
    propagate_fake,
    random_calls,
    rank_pair,
    run_graph,
)
from ._violation import Violation
from .semantics import lined_up, named_results, noise_results, region_results

__all__ = ["applies", "check", "AUTO_FUNCTIONALIZED", "element_descriptions"]

logger = logging.getLogger(__name__)

#: The auto_functionalized higher-order ops, v1 then v2.
AUTO_FUNCTIONALIZED = (torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2)

_FAILED = object()  # a node whose fake value could not be computed
_SKIPPED = object()  # a node the fake run does not need


def _af_nodes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The auto_functionalized nodes of ``graph`` in graph order (two index look-ups when none)."""
    if not any(graph.find_nodes(op="call_function", target=target) for target in AUTO_FUNCTIONALIZED):
        return []
    return [node for node in graph.nodes if _is_af(node)]


def _is_af(node: Any) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in AUTO_FUNCTIONALIZED


def _af_getitem(node: Any) -> tuple[torch.fx.Node, Any] | None:
    """``(af node, index)`` when ``node`` is a getitem of an auto_functionalized node."""
    if (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target is operator.getitem
        and len(node.args) == 2
        and _is_af(node.args[0])
    ):
        return node.args[0], node.args[1]
    return None


def _op_name(af: torch.fx.Node) -> str:
    op = af.args[0] if af.args else af.kwargs.get("_mutable_op")
    return getattr(op, "_name", None) or getattr(op, "__name__", None) or str(op)


def element_descriptions(af: torch.fx.Node) -> list[str] | None:
    """What each element of ``af``'s result tuple is, from the op's schema and the node's kwargs
    (``["output 0", "new value of base 0, `x_1` (arg `x`)"]``); None for an op without a schema."""
    op = af.args[0] if af.args else af.kwargs.get("_mutable_op")
    if not isinstance(op, torch._ops.OpOverload):
        return None
    schema = op._schema
    mutable = [arg.name for arg in schema.arguments if arg.alias_info is not None and arg.alias_info.is_write]
    returns = schema.returns
    if not returns:
        outs = ["output 0, None: the op returns nothing"]
    else:
        outs = [f"output {i}" + (f" `{r.name}`" if r.name else "") for i, r in enumerate(returns)]
    if af.target is torch.ops.higher_order.auto_functionalized:
        news = []
        for name in mutable:
            value = af.kwargs.get(name)
            news.append(f"new value of `{name}`" + (f" (`{value.name}`)" if isinstance(value, torch.fx.Node) else ""))
        return outs + news
    if torch._library.utils.is_out(op):
        return [f"out argument `{name}`" for name in mutable]
    bases = af.kwargs.get("_all_bases") or []
    news = []
    for k, base in enumerate(bases):
        users = [
            key[1 : -len("_base_index")]
            for key, value in af.kwargs.items()
            if key.endswith("_base_index") and (value == k or (isinstance(value, (list, tuple)) and k in value))
        ]
        text = f"new value of base {k}" + (f", `{base.name}`" if isinstance(base, torch.fx.Node) else "")
        news.append(text + (f" (arg {', '.join(f'`{u}`' for u in users)})" if users else ""))
    return outs + news


def _describe_element(af: torch.fx.Node, index: Any) -> str:
    names = element_descriptions(af)
    if isinstance(index, int) and names is not None and -len(names) <= index < len(names):
        return f"element {index} of `{af.name}` ({names[index]})"
    return f"element {index!r} of `{af.name}` ({_op_name(af)})"


# --- (a) indices and meta -------------------------------------------------------------------


class _FakeRun(torch.fx.Interpreter):
    """Fake-tensor run of the ancestors of ``wanted`` nodes; a node that fails (or whose inputs
    failed) gets ``_FAILED`` instead of raising; ``values`` keeps each wanted node's result."""

    def __init__(self, gm: torch.fx.GraphModule, wanted: list[torch.fx.Node]) -> None:
        super().__init__(gm)
        self.wanted = set(wanted)
        self.needed: set[torch.fx.Node] = set()
        stack = list(wanted)
        while stack:
            node = stack.pop()
            if node not in self.needed:
                self.needed.add(node)
                stack.extend(node.all_input_nodes)
        self.values: dict[torch.fx.Node, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op == "placeholder":
            return super().run_node(n)
        if n not in self.needed:
            return _SKIPPED
        if any(self.env.get(arg, _FAILED) is _FAILED or self.env.get(arg) is _SKIPPED for arg in n.all_input_nodes):
            return _FAILED
        try:
            result = super().run_node(n)
        except Exception as exc:  # noqa: BLE001 - the value is unknown; other oracles report why
            logger.debug("fake run of %s failed: %r", n.name, exc)
            return _FAILED
        if n in self.wanted:
            self.values[n] = result
        return result


def _true_tuples(gm: torch.fx.GraphModule, inputs: tuple[Any, ...], afs: list[torch.fx.Node]) -> dict:
    """Each auto_functionalized node's result tuple, in fake tensors (absent where unknown)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fake = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs]
        run = _FakeRun(gm, afs)
        try:
            run.run(*fake)
        except Exception as exc:  # noqa: BLE001 - placeholders or the output node failed
            logger.debug("fake run failed: %r", exc)
    return run.values


def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {value.dtype}"
    return repr(value)


def _check_getitems(pair: Any, afs: list[torch.fx.Node]) -> tuple[list[Violation], bool]:
    """Violations of (a); and whether some index is out of range (the graph cannot run)."""
    tuples = _true_tuples(pair.after, pair.case.inputs[0], afs)
    before = {node.name: node for node in pair.before.graph.nodes}
    violations, broken = [], False
    for af in afs:
        names = element_descriptions(af)
        value = tuples.get(af)
        size = len(value) if isinstance(value, (tuple, list)) else (len(names) if names is not None else None)
        for user in af.users:
            if user.target is not operator.getitem or len(user.args) != 2 or user.args[0] is not af:
                continue
            if _as_before(user, before):
                continue  # the graph before the pass read it so (make_fx's dead getitem of a None slot)
            index = user.args[1]
            layout = f"its tuple has {size} elements" if size is not None else "its tuple has an unknown length"
            if names is not None:
                layout += ": " + "; ".join(f"{i}: {name}" for i, name in enumerate(names))
            if not isinstance(index, int) or (size is not None and not -size <= index < size):
                broken = True
                violations.append(
                    Violation(
                        "functionalization",
                        f"`{user.name}` reads element {index!r} of `{af.name}` ({_op_name(af)}), which does not "
                        f"exist; {layout}",
                        (user.name, af.name),
                    )
                )
                continue
            if not isinstance(value, (tuple, list)):
                continue
            element = value[index]
            if element is None:
                broken = True
                violations.append(
                    Violation(
                        "functionalization",
                        f"`{user.name}` reads {_describe_element(af, index)}, which is None; {layout}",
                        (user.name, af.name),
                    )
                )
                continue
            left = user.meta.get("val")
            if left is None or not isinstance(element, torch.Tensor):
                continue
            same = (
                isinstance(left, torch.Tensor)
                and tuple(left.shape) == tuple(element.shape)
                and left.dtype == element.dtype
            )
            if not same:
                violations.append(
                    Violation(
                        "functionalization",
                        f"`{user.name}` reads {_describe_element(af, index)}, which is {_describe_value(element)}, "
                        f"but the pass left meta['val'] {_describe_value(left)} on it (stale meta misleads later "
                        "passes)",
                        (user.name, af.name),
                    )
                )
    return violations, broken


def _as_before(getitem: torch.fx.Node, before: dict[str, torch.fx.Node]) -> bool:
    """Whether the graph before the pass has this ``getitem`` as it is: same name, index and meta,
    of an auto_functionalized node of the same name, op and arguments. What the graph held before
    the pass is never a finding against the pass."""
    then = before.get(getitem.name)
    if then is None or then.target is not operator.getitem or len(then.args) != 2 or then.args[1] != getitem.args[1]:
        return False
    af, then_af = getitem.args[0], then.args[0]
    if not isinstance(then_af, torch.fx.Node) or then_af.name != af.name or then_af.target is not af.target:
        return False

    def names(node: torch.fx.Node) -> Any:
        return torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.name)

    same_meta = _describe_value(then.meta.get("val")) == _describe_value(getitem.meta.get("val"))
    return same_meta and names(then_af) == names(af)


# --- (b) Inductor's decomposition -----------------------------------------------------------


def _ranks(pair: Any) -> range:
    """The ranks whose rewritten graphs are checked: every rank of a tensor-parallel case in direct
    mode (each has its own, :func:`rank_pair`), else rank 0."""
    return range(pair.case.tp_world) if pair.compiled is None and pair.case.tp_world > 1 else range(1)


def _in_world(pair: Any, fn: Any, args_per_rank: list[tuple]) -> list[Any]:
    """``fn(*args_per_rank[r])`` for each rank of :func:`_ranks`: a tensor-parallel case's in one
    threaded world of all its ranks (as the semantics oracle runs them), so that its collectives
    reduce over every rank, not over one rank's rows alone. Only graph runs go in ``fn``: fake
    propagation and graph edits are not thread-safe and are done before, rank by rank. Raises
    :class:`~pmverify.distributed.SPMDError` where the world fails."""
    if len(args_per_rank) == 1:
        return [fn(*args_per_rank[0])]
    from ..distributed import run_spmd

    with deterministic_fill():
        return run_spmd(fn, len(args_per_rank), args_per_rank)


def _named(rank: int, pair: Any, message: str) -> str:
    return f"rank {rank}: {message}" if len(_ranks(pair)) > 1 else message


def _decomposed(after: torch.fx.GraphModule, inputs: tuple[Any, ...]) -> torch.fx.GraphModule | str:
    """A copy of ``after`` through Inductor's ``decompose_auto_functionalized``, or what fails."""
    from torch._inductor.fx_passes.post_grad import decompose_auto_functionalized

    decomposed = copy.deepcopy(after)
    try:
        propagate_fake(decomposed, inputs)
    except Exception as exc:  # noqa: BLE001 - the structure oracle reports it; decompose with the meta left
        logger.debug("re-propagation failed, decomposing with the meta the pass left: %r", exc)
        decomposed = copy.deepcopy(after)
    else:
        # the values the pass's trace recorded (symbolic sizes, on a symbolic case) describe another
        # trace than the concrete one just propagated: Inductor's decomposition, tracing its
        # replacement with both, asserts that the two graphs have as many nodes
        for node in decomposed.graph.nodes:
            node.meta.pop("eager_input_vals", None)
    try:
        decompose_auto_functionalized(decomposed.graph)
        decomposed.graph.lint()
        decomposed.recompile()
    except Exception as exc:  # noqa: BLE001 - a graph Inductor cannot lower is a finding
        return f"{_DECOMPOSITION} fails on the rewritten graph: {exc!r}"
    left = [n.name for n in decomposed.graph.nodes if _is_af(n)]
    if left:
        return f"{_DECOMPOSITION} left {', '.join(left)} in the graph"
    return decomposed


_DECOMPOSITION = "Inductor's decompose_auto_functionalized (post_grad_passes)"


def _decomposition_runs(before: Any, after: Any, decomposed: Any, inputs: tuple[Any, ...]) -> tuple[Any, Any, Any]:
    """(the rewritten graph's results or None where it does not run, the decomposed graph's or the
    exception it raised, the float64 reference of ``before`` or None when not asked for). Each run
    is made whatever the others did, so that the ranks of a world call the same collectives."""
    try:
        expected = run_graph(after, inputs)
    except Exception as exc:  # noqa: BLE001 - the semantics oracle reports a graph that does not run
        logger.debug("the rewritten graph does not run: %r", exc)
        expected = None
    try:
        got: Any = run_graph(decomposed, inputs)
    except Exception as exc:  # noqa: BLE001
        got = exc
    return expected, got, float64_reference(before, inputs) if before is not None else None


def _check_decomposition(pair: Any) -> list[Violation]:
    ranks = _ranks(pair)
    afters = [rank_pair(pair, rank).after for rank in ranks]
    prepared = []
    for rank, after in zip(ranks, afters, strict=True):
        decomposed = _decomposed(after, pair.case.inputs[rank])
        if isinstance(decomposed, str):
            nodes = tuple(n.name for n in after.graph.nodes if _is_af(n)) if "left" in decomposed else ()
            return [Violation("functionalization", _named(rank, pair, decomposed), nodes)]
        prepared.append(decomposed)
    # the float64 reference of the graph before the pass: the semantics oracle's (computed once per
    # pair) in direct mode on one rank, else a float64 run of ``pair.before`` (Inductor's post-grad
    # graph in compiled mode; each rank's in the world)
    own_reference = pair.compiled is None and pair.case.tp_world == 1
    before = None if own_reference else pair.before
    args = [(before, after, d, pair.case.inputs[rank]) for rank, after, d in zip(ranks, afters, prepared, strict=True)]
    try:
        runs = _in_world(pair, _decomposition_runs, args)
    except Exception as exc:  # noqa: BLE001 - a world that fails is the semantics oracle's finding
        logger.debug("the decomposition's runs fail on the tensor-parallel world: %s", exc)
        return []
    for rank, after, (expected_run, got_run, reference) in zip(ranks, afters, runs, strict=True):
        if expected_run is None:
            continue
        if isinstance(got_run, BaseException):
            message = f"the rewritten graph runs, but raises after {_DECOMPOSITION}: {got_run!r}"
            return [Violation("functionalization", _named(rank, pair, message))]
        expected, got = named_results(after, expected_run), named_results(after, got_run)
        if len(expected) != len(got):
            return [
                Violation("functionalization", _named(rank, pair, f"{_DECOMPOSITION} changed the number of outputs"))
            ]
        if own_reference:
            reference = pair.results(0).reference
        violations = _compare_decomposed(pair, expected, got, reference)
        if violations:
            return [dataclasses.replace(v, message=_named(rank, pair, v.message)) for v in violations]
    return []


def _compare_decomposed(pair: Any, expected: list, got: list, reference: Any) -> list[Violation]:
    references = lined_up(reference, reference) if reference is not None else [None] * len(expected)
    violations = []
    for i, ((name, b), (_, a)) in enumerate(zip(expected, got, strict=True)):
        r = references[i] if i < len(references) else None
        message = compare(name, b, a, r)
        if message and r is not None and pair.compiled is None and pair.case.tp_world == 1:
            noise, region = noise_results(pair, 0), region_results(pair, 0)  # the graph before the pass's
            noise_i = tuple(lined_up(level, reference)[i] for level in noise) if noise else None
            local_i = lined_up(region, reference)[i] if region else None
            message = compare(name, b, a, r, region_reference=local_i, noise=noise_i)
        if message:
            violations.append(
                Violation(
                    "functionalization",
                    f'after {_DECOMPOSITION} the rewritten graph computes otherwise ("before": as the pass left it, "after": decomposed): {message}',
                )
            )
    return violations


# --- (c) stand-ins carry the new value ------------------------------------------------------


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """``(path, leaf)`` for each leaf of an FX argument structure; a path is a tuple of indices and
    keys from ``(args, kwargs)``."""
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.fx.Node):
        for i, item in enumerate(value):
            yield from _paths(item, (*path, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    else:
        yield path, value


def _label(node: torch.fx.Node, path: tuple) -> str:
    where, first, *rest = path
    if node.op == "output" and where == 0 and first == 0 and rest:
        return f"graph output {rest[0]}" + "".join(f"[{p!r}]" for p in rest[1:])
    text = f"`{node.name}` argument {first}" if where == 0 else f"`{node.name}` argument `{first}`"
    return text + "".join(f"[{p!r}]" for p in rest)


def _lookup(structure: Any, path: tuple) -> Any:
    for key in path:
        structure = structure[key]
    return structure


class _Capture(torch.fx.Interpreter):
    """Runs a graph and keeps a clone of the value each wanted node reads at each wanted path, as
    it is when the node runs."""

    def __init__(self, gm: torch.fx.GraphModule, wanted: dict[torch.fx.Node, list[tuple]]) -> None:
        super().__init__(gm)
        self.wanted = wanted
        self.read: dict[tuple[str, tuple], Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        if n in self.wanted:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            for path in self.wanted[n]:
                try:
                    value = _lookup((args, kwargs), path)
                except (IndexError, KeyError, TypeError):
                    continue
                self.read[(n.name, path)] = value.clone() if isinstance(value, torch.Tensor) else value
        return super().run_node(n)


def _capture(gm: torch.fx.GraphModule, inputs: tuple[Any, ...], wanted: dict) -> dict:
    run = _Capture(gm, wanted)
    try:
        with torch.no_grad():
            run.run(*clone_inputs(inputs))
    except Exception as exc:  # noqa: BLE001 - what was read up to the failure still counts
        logger.debug("interpreter run failed: %r", exc)
    return run.read


def _reads(node: Any) -> str:
    found = _af_getitem(node)
    if found is not None:
        af, index = found
        return f"{_describe_element(af, index)} through `{node.name}`"
    if isinstance(node, torch.fx.Node):
        return f"`{node.name}` (not an element of an auto_functionalized node)"
    return f"the constant {node!r}"


def _snapshot(value: Any) -> Any:
    """What a node reads, as it is when the node runs (a later in-place op does not change it)."""
    return value.clone() if isinstance(value, torch.Tensor) else value


def _reads_module(gm: torch.fx.GraphModule, keys: list[tuple[str, tuple]]) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose outputs are what each ``(node name, path)`` of ``keys`` reads, taken
    just before that node runs, in that order; every node still runs. Its float64 reference, region
    reference and noise floor (the semantics oracle's machinery) are then those of the values read."""
    module = copy.deepcopy(gm)
    graph = module.graph
    nodes = {node.name: node for node in graph.nodes}
    snapshots = []
    for name, path in keys:
        reader = nodes[name]
        with graph.inserting_before(reader):
            snapshots.append(graph.call_function(_snapshot, (_lookup((reader.args, reader.kwargs), path),)))
    graph.output_node().args = (tuple(snapshots),)
    module.recompile()
    return module


class _Read:
    """What the graph before the pass read at each key (by position in ``keys``), its float64
    reference, and, asked for only when a value is flagged, the region reference and noise floor
    of those values (:func:`_reads_module`), each computed once."""

    def __init__(self, pair: Any, keys: list[tuple[str, tuple]], runs: tuple | None = None) -> None:
        """``runs``: ``(module, values, reference, drawn)`` as :func:`_reads_runs` made them (a
        tensor-parallel case's, in its world; then no slack is asked for: a rank alone cannot run
        the region reference and noise floor of a graph holding collectives), else made here."""
        self.pair, self.keys = pair, keys
        self.inputs = pair.case.inputs[0]
        if runs is None:
            module = _reads_module(pair.before, keys)
            runs = (module, *_reads_runs(module, self.inputs))
        self.module, values, reference, self.drawn = runs
        self.values = values[0]
        self.tp = len(_ranks(pair)) > 1
        self.reference = reference[0] if reference is not None else None
        self._reference_results = reference
        self._slack: tuple[Any, Any] | None = None

    def slack(self) -> tuple[Any, Any]:
        """(region reference outputs or None, (float32-level, own-dtype-level) noise outputs or None)."""
        if self._slack is None:
            from ._noise import noise_floor
            from ._region_reference import region_reference, rewritten_region

            pair, region, noise = self.pair, None, None
            with deterministic_fill():
                if pair.compiled is None and not random_calls(self.module):
                    region_run = region_reference(
                        self.module,
                        float64_module(self.module),
                        rewritten_region(pair.before, pair.after),
                        self.inputs,
                    )
                    region = region_run[0] if region_run is not None else None
                if self._reference_results is not None:
                    levels = noise_floor(self.module, self.inputs, self._reference_results, self.drawn)
                    noise = (levels[0][0], levels[1][0]) if levels is not None else None
            self._slack = (region, noise)
        return self._slack

    def difference(self, i: int, after: Any) -> str | None:
        """How ``after`` breaks the semantics rule against the value read before at key ``i``."""
        before = self.values[i]
        reference = self.reference[i] if self.reference is not None else None
        message = compare("the value", before, after, reference)
        if message is None or reference is None or self.tp:
            return message
        region, noise = self.slack()
        return compare(
            "the value",
            before,
            after,
            reference,
            region_reference=region[i] if region is not None else None,
            noise=(noise[0][i], noise[1][i]) if noise is not None else None,
        )


def _reads_runs(module: torch.fx.GraphModule, inputs: tuple[Any, ...]) -> tuple[Any, Any, dict]:
    """(the values ``module`` (:func:`_reads_module`) reads, their float64 reference, what it drew)."""
    drawn: dict[str, Any] = {}
    values = run_graph(module, inputs, drawn=drawn)
    return values, float64_reference(module, inputs, drawn=drawn), drawn


def _stand_in_runs(after: Any, wanted: dict, module: Any, inputs: tuple[Any, ...]) -> tuple[dict, tuple]:
    """One rank's runs of (c) in its world: what the rewritten graph's nodes read, and the runs of
    the graph before the pass that read them (:func:`_reads_runs`)."""
    return _capture(after, inputs, wanted), (module, *_reads_runs(module, inputs))


def _wanted(pair: Any, after: torch.fx.GraphModule) -> tuple[dict, list[tuple[str, tuple]]]:
    """The nodes of ``after`` to capture and the ``(node name, argument path)`` keys they read: the
    nodes that read an auto_functionalized element before the pass and are still there after it."""
    after_nodes = {node.name: node for node in after.graph.nodes}
    wanted_after: dict[torch.fx.Node, list[tuple]] = {}
    keys: list[tuple[str, tuple]] = []
    for node in pair.before.graph.nodes:
        paths = [path for path, leaf in _paths((node.args, node.kwargs)) if _af_getitem(leaf) is not None]
        twin = after_nodes.get(node.name)
        if not paths or twin is None or twin.op != node.op or twin.target != node.target:
            continue
        wanted_after[twin] = paths
        keys += [(node.name, path) for path in paths]
    return wanted_after, keys


def _check_stand_ins(pair: Any) -> list[Violation]:
    ranks = _ranks(pair)
    afters = [rank_pair(pair, rank).after for rank in ranks]
    wanted = [_wanted(pair, after) for after in afters]
    if len(ranks) == 1:
        wanted_after, keys = wanted[0]
        if not keys:
            return []
        return _stand_in_violations(pair, afters[0], keys, _capture(afters[0], pair.case.inputs[0], wanted_after))
    # a tensor-parallel case: every rank's graphs run in one world; the modules are built first
    modules = [_reads_module(pair.before, keys) if keys else None for _, keys in wanted]
    args = [
        (after, w, m, pair.case.inputs[r]) for r, after, (w, _), m in zip(ranks, afters, wanted, modules, strict=True)
    ]
    if not any(keys for _, keys in wanted):
        return []
    try:
        runs = _in_world(pair, _stand_in_runs, args)
    except Exception as exc:  # noqa: BLE001 - a world that fails is the semantics oracle's finding
        logger.debug("the stand-ins' runs fail on the tensor-parallel world: %s", exc)
        return []
    for rank, after, (_, keys), (captured, reads) in zip(ranks, afters, wanted, runs, strict=True):
        if not keys:
            continue
        violations = _stand_in_violations(pair, after, keys, captured, reads)
        if violations:
            return [dataclasses.replace(v, message=_named(rank, pair, v.message)) for v in violations]
    return []


def _stand_in_violations(
    pair: Any, after_gm: Any, keys: list, after: dict, reads: tuple | None = None
) -> list[Violation]:
    after_nodes = {node.name: node for node in after_gm.graph.nodes}
    read = None
    before_nodes = {node.name: node for node in pair.before.graph.nodes}
    violations = []
    for i, key in enumerate(keys):
        if key not in after:
            continue
        read = _Read(pair, keys, reads) if read is None else read
        difference = read.difference(i, after[key])
        if difference is None:
            continue
        name, path = key
        node, twin = before_nodes[name], after_nodes[name]
        then = _lookup((node.args, node.kwargs), path)
        try:
            now = _lookup((twin.args, twin.kwargs), path)
        except (IndexError, KeyError, TypeError):
            continue
        violations.append(
            Violation(
                "functionalization",
                f"{_label(node, path)} now reads {_reads(now)}, where it read {_reads(then)}; {difference}",
                tuple(dict.fromkeys(n.name for n in (node, now, then) if isinstance(n, torch.fx.Node))),
            )
        )
    return violations


def applies(pair: RunPair) -> bool:
    """Whether this oracle has something to judge on ``pair`` (whose pass ran): an
    ``auto_functionalized`` / ``auto_functionalized_v2`` node in the graph before or after the pass."""
    graphs = [pair.before.graph] + ([pair.after.graph] if pair.after is not None else [])
    return any(_af_nodes(graph) for graph in graphs)


def check(pair: RunPair) -> list[Violation]:
    """Return the functionalization violations of ``pair`` (a ``RunPair``): (a) getitems of
    auto_functionalized nodes that index no element or carry meta of another shape/dtype, (b) a
    rewritten graph Inductor's ``decompose_auto_functionalized`` cannot lower or lowers to other
    values, (c) nodes that read an auto_functionalized element before the pass and another value
    after it. Returns [] when the pass raised or no graph holds an auto_functionalized node; never
    raises on a finding."""
    if pair.after is None:
        return []
    afs = _af_nodes(pair.after.graph)
    if not afs and not _af_nodes(pair.before.graph):
        return []
    violations: list[Violation] = []
    broken = False
    if afs:
        found, broken = _check_getitems(pair, afs)
        violations += found
    if broken:
        return violations
    if afs:
        violations += _check_decomposition(pair)
    violations += _check_stand_ins(pair)
    return violations
