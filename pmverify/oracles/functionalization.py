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

(a) and (b) live here, (c) in :mod:`._functionalization_stand_ins`; what they share (the
auto_functionalized nodes, their elements, the ranks checked) in :mod:`._functionalization_elements`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import operator
from typing import Any

import torch

from .._execution import (
    RunPair,
    compare,
    float64_reference,
    propagate_fake,
    rank_pair,
    run_graph,
)
from ._functionalization_elements import (
    AUTO_FUNCTIONALIZED,
    af_nodes,
    checked_ranks,
    describe_element,
    element_descriptions,
    in_world,
    is_af,
    on_rank,
    op_name,
)
from ._functionalization_stand_ins import check_stand_ins
from ._violation import Violation
from .semantics import lined_up, named_results, noise_results, region_results

__all__ = ["applies", "check", "AUTO_FUNCTIONALIZED", "element_descriptions"]

logger = logging.getLogger(__name__)

_FAILED = object()  # a node whose fake value could not be computed
_SKIPPED = object()  # a node the fake run does not need


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
    from .._compat import FakeTensorMode

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
                        f"`{user.name}` reads element {index!r} of `{af.name}` ({op_name(af)}), which does not "
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
                        f"`{user.name}` reads {describe_element(af, index)}, which is None; {layout}",
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
                        f"`{user.name}` reads {describe_element(af, index)}, which is {_describe_value(element)}, "
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


def _decomposed(after: torch.fx.GraphModule, inputs: tuple[Any, ...]) -> torch.fx.GraphModule | str:
    """A copy of ``after`` through Inductor's ``decompose_auto_functionalized``, or what fails."""
    from .._compat import decompose_auto_functionalized

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
    left = [n.name for n in decomposed.graph.nodes if is_af(n)]
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
    ranks = checked_ranks(pair)
    afters = [rank_pair(pair, rank).after for rank in ranks]
    prepared = []
    for rank, after in zip(ranks, afters, strict=True):
        decomposed = _decomposed(after, pair.case.inputs[rank])
        if isinstance(decomposed, str):
            nodes = tuple(n.name for n in after.graph.nodes if is_af(n)) if "left" in decomposed else ()
            return [Violation("functionalization", on_rank(rank, pair, decomposed), nodes)]
        prepared.append(decomposed)
    # the float64 reference of the graph before the pass: the semantics oracle's (computed once per
    # pair) in direct mode on one rank, else a float64 run of ``pair.before`` (Inductor's post-grad
    # graph in compiled mode; each rank's in the world)
    own_reference = pair.compiled is None and pair.case.tp_world == 1
    before = None if own_reference else pair.before
    args = [(before, after, d, pair.case.inputs[rank]) for rank, after, d in zip(ranks, afters, prepared, strict=True)]
    try:
        runs = in_world(pair, _decomposition_runs, args)
    except Exception as exc:  # noqa: BLE001 - a world that fails is the semantics oracle's finding
        logger.debug("the decomposition's runs fail on the tensor-parallel world: %s", exc)
        return []
    for rank, after, (expected_run, got_run, reference) in zip(ranks, afters, runs, strict=True):
        if expected_run is None:
            continue
        if isinstance(got_run, BaseException):
            message = f"the rewritten graph runs, but raises after {_DECOMPOSITION}: {got_run!r}"
            return [Violation("functionalization", on_rank(rank, pair, message))]
        expected, got = named_results(after, expected_run), named_results(after, got_run)
        if len(expected) != len(got):
            return [
                Violation("functionalization", on_rank(rank, pair, f"{_DECOMPOSITION} changed the number of outputs"))
            ]
        if own_reference:
            reference = pair.results(0).reference
        violations = _compare_decomposed(pair, expected, got, reference)
        if violations:
            return [dataclasses.replace(v, message=on_rank(rank, pair, v.message)) for v in violations]
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


def applies(pair: RunPair) -> bool:
    """Whether this oracle has something to judge on ``pair`` (whose pass ran): an
    ``auto_functionalized`` / ``auto_functionalized_v2`` node in the graph before or after the pass."""
    graphs = [pair.before.graph] + ([pair.after.graph] if pair.after is not None else [])
    return any(af_nodes(graph) for graph in graphs)


def check(pair: RunPair) -> list[Violation]:
    """Return the functionalization violations of ``pair`` (a ``RunPair``): (a) getitems of
    auto_functionalized nodes that index no element or carry meta of another shape/dtype, (b) a
    rewritten graph Inductor's ``decompose_auto_functionalized`` cannot lower or lowers to other
    values, (c) nodes that read an auto_functionalized element before the pass and another value
    after it. Returns [] when the pass raised or no graph holds an auto_functionalized node; never
    raises on a finding."""
    if pair.after is None:
        return []
    afs = af_nodes(pair.after.graph)
    if not afs and not af_nodes(pair.before.graph):
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
    violations += check_stand_ins(pair)
    return violations
