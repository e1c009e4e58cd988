"""``check_case``: apply a pass to one case and ask the oracles."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis.errors import InvalidArgument

from .._case import GraphCase
from .._execution import RunPair, changed, matched_instances, rewrite_count
from ..device import case_device, on_device, require_runnable
from ..distributed import SPMDTimeoutError
from ..oracles import ORACLES, InternalError, Oracle, PmverifyInternalError, Violation, applicability, semantics
from ..oracles.expectations import kept_intermediate_notes, near_miss_notes, pass_put_barriers
from .apply import apply_direct

__all__ = ["CaseResult", "check_case", "judged_by", "graph_failure", "MODES"]

#: Apply modes: ``"direct"`` (no compile, the fast path) and ``"compiled"`` (``torch.compile``).
MODES = ("direct", "compiled")

OracleSpec = str | Oracle

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class CaseResult:
    """What the oracles found for one case.

    - ``case``: the :class:`GraphCase`; ``pair``: the :class:`RunPair` (graphs before/after).
    - ``violations``: every :class:`Violation` found (empty when the pass is correct on the case).
    - ``rewrite_count``: rewrites made: the pass's own count when it reports one, else the matches
      recorded through Inductor's pattern entries, else the number of planted instances it rewrote.
    - ``planted_matched``: for each planted instance, whether it was rewritten.
    - ``elapsed_s``: seconds for apply + oracles.
    - ``void_reason``: why the case says nothing about semantics, in words, else None; ``void_kind``:
      which kind of void it is (:data:`pmverify.oracles.semantics.VOID_KINDS`): ``"non_finite"``
      (its float64 reference is NaN/Inf) or ``"not_comparable"`` (its graphs draw random numbers
      otherwise before and after the pass, see :mod:`pmverify.oracles.semantics`). A void case is
      neither a pass nor a violation of semantics; the other oracles still judge it.
    - ``judged``: the oracles that had something to judge on the case (:func:`judged_by`: each
      oracle module's ``applies``).
    - ``rewritten``: whether the pass rewrote anything: ``rewrite_count > 0``, or it changed the graph
      (a hand-written pass that reports no count and rewrote nothing planted).
    - ``notes``: per planted instance (by index into ``case.planted``), why the oracles judged it
      otherwise than planted: a must-match instance that is "either is right" in this run because
      the pass itself put a mutation among its nodes
      (:func:`pmverify.oracles.expectations.pass_put_barriers`), or a near miss the pass rewrote
      that is not a finding (duplicated work on an ``extra_user`` one, the pass's own pattern entry
      matching it, :func:`pmverify.oracles.expectations.near_miss_notes`), or a must-match instance
      rewritten with an intermediate kept for its readers outside it
      (:func:`pmverify.oracles.expectations.kept_intermediate_notes`); empty otherwise, and
      when the expectations oracle did not judge the case.
    - ``internal_errors``: the oracles that failed themselves on the case (:class:`InternalError`,
      each with its traceback): an error of pmverify, not of the pass; those oracles are not in
      ``judged``, and ``ok`` does not count them.
    """

    case: GraphCase
    pair: RunPair
    violations: list[Violation]
    rewrite_count: int
    planted_matched: list[bool]
    elapsed_s: float
    void_reason: str | None = None
    judged: tuple[str, ...] = ()
    rewritten: bool = False
    notes: dict[int, str] = dataclasses.field(default_factory=dict)
    internal_errors: list[InternalError] = dataclasses.field(default_factory=list)
    void_kind: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def not_comparable(self) -> str | None:
        """``void_reason`` when the graphs cannot be compared value by value (``void_kind`` is
        ``"not_comparable"``), else None."""
        return self.void_reason if self.void_kind == semantics.NOT_COMPARABLE else None


def _has_collectives(case: GraphCase) -> bool:
    """Whether ``case``'s graph calls a collective: a functional or c10d one, or ``case.all_reduce``."""
    return any(
        node.op == "call_function"
        and (
            getattr(node.target, "namespace", None) in ("_c10d_functional", "c10d")
            or (case.all_reduce is not None and node.target == case.all_reduce)
        )
        for node in case.gm.graph.nodes
    )


def _resolve_oracles(oracles: Sequence[OracleSpec] | None) -> list[tuple[str, Oracle]]:
    if oracles is None:
        return list(ORACLES.items())
    given = oracles
    if isinstance(oracles, str):
        oracles = [oracles]
    elif not isinstance(oracles, Sequence):
        raise InvalidArgument(
            f"oracles={given!r}: expected None, an oracle name, or a list of oracle names and callables"
        )
    resolved = []
    for oracle in oracles:
        if isinstance(oracle, str):
            if oracle not in ORACLES:
                raise InvalidArgument(f"oracles={given!r}: unknown oracle {oracle!r}; known: {', '.join(ORACLES)}")
            resolved.append((oracle, ORACLES[oracle]))
        elif callable(oracle):
            resolved.append((getattr(oracle, "__name__", repr(oracle)), oracle))
        else:
            raise InvalidArgument(f"oracles={given!r}: {oracle!r} is neither an oracle name nor a callable")
    return resolved


def validate_oracles(oracles: Sequence[OracleSpec] | None) -> None:
    """Raise ``InvalidArgument`` naming ``oracles`` when it names an unknown oracle or holds
    something that is neither a name nor a callable."""
    _resolve_oracles(oracles)


def judged_by(pair: RunPair, oracles: Sequence[tuple[str, Oracle]]) -> tuple[str, ...]:
    """The names of ``oracles`` (``(name, check)`` pairs) that had something to judge on ``pair``:
    none when the pass raised; else each whose oracle module's ``applies(pair)`` holds
    (:func:`pmverify.oracles.applicability`; a callable oracle always does). An ``applies`` that
    raises counts as holding: the oracle itself reports a graph it cannot read."""
    if pair.error is not None or pair.after is None:
        return ()
    judged = []
    for name, oracle in oracles:
        try:
            ok = applicability(oracle)(pair)
        except SPMDTimeoutError:
            raise
        except Exception:  # noqa: BLE001 - the oracle itself reports a graph it cannot read
            ok = True
        if ok:
            judged.append(name)
    return tuple(judged)


def graph_failure(pair: RunPair) -> str | None:
    """How the rewritten graph itself fails, in words (``"raises RuntimeError(...)"``, ``"does not
    propagate fake tensors: ..."``), or None when it runs on every rank and propagates: what tells a
    finding of the pass from an error of an oracle that raised on the case."""
    try:
        pair.repropagated()
    except Exception as exc:  # noqa: BLE001 - the graph after the pass fails: what is asked
        return f"does not propagate fake tensors: {exc!r}"
    for rank in range(pair.case.tp_world):
        try:
            after = pair.results(rank).after
        except SPMDTimeoutError:
            raise
        except Exception:  # noqa: BLE001 - the case's own graph fails: not the pass's
            return None
        if isinstance(after, BaseException):
            return f"raises {after!r}"
    return None


def _oracle_raised(
    name: str, exc: Exception, pair: RunPair, violations: list[Violation], internal: list[InternalError]
) -> None:
    """An oracle ``name`` raised ``exc``: a finding of the pass when the rewritten graph itself fails
    (:func:`graph_failure`), else an :class:`InternalError` of pmverify, logged with its traceback."""
    failure = None if isinstance(exc, PmverifyInternalError) else graph_failure(pair)
    if failure is not None:
        violations.append(Violation(name, f"could not check the rewritten graph, which {failure}: {exc!r}"))
        return
    internal.append(InternalError.of(name, exc))
    logger.error(
        "pmverify internal error in %s on case %s (not a finding of the pass; the case counts as not judged by it)",
        name,
        pair.case.label or "(unlabelled)",
        exc_info=exc,
    )


def pass_or_factory(pass_: Any, pass_factory: Any) -> Any:
    """The pass under test of ``pass_=`` / ``pass_factory=`` (exactly one of them): ``pass_``, or
    ``pass_factory`` as a :class:`~pmverify._findings.factory.PassFactory`. Raises ``InvalidArgument``
    naming both when both are given or neither is, and as :func:`~pmverify._findings.factory.as_factory`
    does."""
    from .._findings.factory import as_factory

    if pass_ is None and pass_factory is None:
        raise InvalidArgument("pass_=None is not a pass: give the pass, or pass_factory= a function building it")
    if pass_ is not None and pass_factory is not None:
        raise InvalidArgument(
            f"pass_={pass_!r}, pass_factory={pass_factory!r}: give exactly one (the pass, or a function building it)"
        )
    return pass_ if pass_factory is None else as_factory(pass_factory)


def check_case(
    pass_: Any = None,
    case: GraphCase | None = None,
    *,
    oracles: Sequence[OracleSpec] | None = None,
    mode: str = "direct",
    strict_order: bool = False,
    pass_factory: Callable[..., Any] | None = None,
    device: Any = None,
) -> CaseResult:
    """Apply ``pass_`` to ``case`` and return what the oracles found; never raises on a finding.

    - ``pass_``: a pass object (``__call__(torch.fx.Graph)`` or ``PatternMatcherPass``) or a pass
      class built per case as ``pass_(case.pass_config)``.
    - ``pass_factory``: instead of ``pass_``, a module-level function building the pass, called
      as a class is: ``pass_factory(case.pass_config)`` (per rank of a tensor-parallel case), or
      ``pass_factory()`` when it takes no argument or the case carries no ``pass_config``; see
      :func:`pmverify.verify`.
    - ``oracles``: names from ``pmverify.oracles.ORACLES`` or callables ``RunPair -> [Violation]``
      (see :mod:`pmverify.oracles`: the pair is applied and its runs computed once, then handed to
      every oracle); default all.
    - ``mode``: ``"direct"`` (default: copy, fake-propagate, run the pass, recompile; no
      torch.compile) or ``"compiled"`` (``torch.compile`` the case's graph with Inductor twice,
      without and with the pass installed as ``post_grad_custom_post_pass``, and compare the two on
      every rank; see :mod:`pmverify._engine.compiled`). Compiled mode takes seconds a case, not
      milliseconds; ``pair.before`` / ``pair.after`` are then Inductor's post-grad graphs, and the
      expectations oracle judges the pass's match count, not node names.
    - ``strict_order``: a node the pass leaves before one of its inputs is a structure finding even
      when an Inductor pattern entry put it there (a multi-output replacement goes before its first
      output). Default False: Inductor's behaviour, which sorts the graph right after
      ``post_grad_custom_post_pass`` and so forgives the pattern entries' disorder (the pass's own
      code's is reported either way). Use True for a pass that another pass may run after before
      any sort: vLLM's pass manager runs its passes back to back, and so does a pass installed as
      ``post_grad_custom_pre_pass`` ahead of Inductor's own. Works in both modes.

    - ``device``: run the case on this device (``"cuda"``, ``"cuda:1"``, ``"cpu"`` or a
      ``torch.device``): the case is moved there first (:func:`pmverify.on_device`: inputs with
      their strides and aliasing, the graph's own ``device=`` arguments and constants), so the pass
      sees fake values on that device, and the runs before and after it and the float64 reference
      all run there. Default None: where the case's inputs are (CPU for the strategies' cases unless
      they were given ``device=``).

    A tensor-parallel case (``tp_world > 1``) is applied once per rank in direct mode and run on a
    real world of ``tp_world`` ranks (:mod:`pmverify.distributed`, threaded backend).

    Raises ``hypothesis.errors.InvalidArgument``, naming the argument and its value, for a bad
    argument: an unknown ``mode`` or oracle, a ``strict_order`` that is not a bool, a ``case`` that
    is not a ``GraphCase``, a ``pass_`` that is not a pass; ``ValueError`` for compiled mode on a
    tensor-parallel case whose graph calls collectives; in
    compiled mode, ``RuntimeError`` when the case does not compile or run even without the pass;
    :class:`pmverify.distributed.SPMDTimeoutError` when a tensor-parallel world did not finish within
    its timeout (``$PMVERIFY_TP_TIMEOUT_S``, default 120 s): an error of the run, not a finding.
    ``InvalidArgument`` when both ``pass_`` and ``pass_factory`` are given or neither is, or for a
    ``pass_factory`` that is not a function importable by its module path, or a bad ``device``;
    :class:`pmverify.DeviceUnavailable` for a device this machine lacks.
    """
    pass_ = pass_or_factory(pass_, pass_factory)
    if not isinstance(case, GraphCase):
        raise InvalidArgument(f"case={case!r} is not a GraphCase")
    if mode not in MODES:
        raise InvalidArgument(f"mode={mode!r} is not supported; one of {MODES}")
    if not isinstance(strict_order, bool):
        raise InvalidArgument(f"strict_order={strict_order!r} must be a bool")
    checks = _resolve_oracles(oracles)
    case = on_device(case, require_runnable("device", device))
    if device is None:  # a case drawn with device= under pmverify.device.simulated: fake, no values
        require_runnable("case (its inputs' device)", case_device(case))
    start = time.perf_counter()
    if mode == "compiled":
        from .compiled import apply_compiled  # imports torch._inductor: only when asked for

        if case.tp_world > 1 and _has_collectives(case):
            raise ValueError(
                f"mode='compiled' cannot run case {case.label or case!r}: its graph calls collectives on "
                f"{case.tp_world} ranks, which torch.compile cannot run in the one-process threaded world; "
                "check it in direct mode, or compile it per rank with pmverify.distributed.run_spmd(backend='gloo')"
            )

        pair = apply_compiled(pass_, case, strict_order=strict_order)
    else:
        pair = apply_direct(pass_, case, strict_order=strict_order)
    violations: list[Violation] = []
    internal: list[InternalError] = []
    if pair.error is not None:
        violations.append(Violation("crash", f"the pass raised {pair.error_summary}"))
    else:
        for name, oracle in checks:
            try:
                violations.extend(oracle(pair))
            except SPMDTimeoutError:
                raise  # a tensor-parallel world past its timeout: an error of the run, not a finding
            except Exception as exc:  # noqa: BLE001 - the pass's graph failing is a finding, else pmverify's error
                _oracle_raised(name, exc, pair, violations, internal)
    void = None
    if pair.error is None and any(oracle is ORACLES["semantics"] for _, oracle in checks):
        try:
            void = semantics.void(pair)
        except SPMDTimeoutError:
            raise
        except Exception as exc:  # noqa: BLE001 - the semantics oracle has reported a graph that fails
            void = None
            if graph_failure(pair) is None and not any(error.oracle == "semantics" for error in internal):
                _oracle_raised("semantics (void_reason)", exc, pair, violations, internal)
    matched = matched_instances(pair)
    count = rewrite_count(pair)
    rewrites = count if count is not None else sum(matched)
    failed = {error.oracle for error in internal}
    judged = tuple(name for name in judged_by(pair, checks) if name not in failed)
    rewritten = pair.error is None and (rewrites > 0 or changed(pair))
    notes: dict[int, str] = {}
    if "expectations" in judged:
        try:
            notes = {**kept_intermediate_notes(pair), **pass_put_barriers(pair), **near_miss_notes(pair)}
        except Exception:  # noqa: BLE001 - the expectations oracle has reported a graph it cannot read
            notes = {}
    return CaseResult(
        case,
        pair,
        violations,
        rewrites,
        matched,
        time.perf_counter() - start,
        void.reason if void is not None else None,
        judged,
        bool(rewritten),
        notes,
        internal,
        void.kind if void is not None else None,
    )
