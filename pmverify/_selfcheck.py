"""``pmverify selfcheck``: the default strategies against every fault in :data:`pmverify.faults.BANK`.

The bank is reached by name (:data:`DEFAULT_BANK`, resolved with importlib): the bank sets up its
own environment, and nothing generic imports ``pmverify.faults``. A bank is a mapping of fault name
-> row; a row has the attributes of ``pmverify.faults.Fault`` (``pass_cls``, ``bug``, ``oracles``,
``families()``, ``requires``, ``strict_order``, ``name``, and optionally ``entries``).

A row whose ``entries`` is not None (a function returning the pass's recorded pattern entries,
:class:`~pmverify._registry.entries.RecordedEntry`) is searched by :func:`pmverify._rewrites.entry_check.check_entry`
instead, entry by entry, each on instances drawn from its own pattern: its ``families`` are not read.

A row whose ``oracles`` hold ``"unfused"`` is detected by the search's warning instead
(:func:`pmverify._findings.summary.unfused_warnings` over its cases so far, batches added up, judged after
each batch): a fault that breaks no property, such as a fusion never registered for a dtype its
users run.

For each fault, the case families of its bank row are searched in rotation, a batch of
:data:`BATCH` cases from each in turn (as ``pmverify fuzz`` does), with :func:`pmverify.verify`,
until a case breaks a property or ``max_examples`` cases were checked. A fault is *detected* when
an oracle its row names fired, on the first failing case or on the shrunk one; a finding from other
oracles only is reported as such and counts as a miss (the fault is not pure, or an oracle is
wrong). Searches start fresh: the Hypothesis example database is not read or written, so the
counts do not depend on earlier runs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "FaultResult",
    "selfcheck",
    "run_fault",
    "load_bank",
    "table",
    "report",
    "BATCH",
    "DEFAULT_MAX_EXAMPLES",
    "DEFAULT_BANK",
]

#: ``MODULE:ATTRIBUTE`` of the function returning the default bank (it sets up the environment its
#: faults need first: Triton's interpreter without a GPU).
DEFAULT_BANK = "pmverify.faults.target:bank"

#: Cases per family before the rotation moves on.
BATCH = 10
#: Cases per fault, by default: enough to detect each fault of the bank.
DEFAULT_MAX_EXAMPLES = 200

#: The bank's name for detection by the search's :class:`~pmverify.UnfusedWarning`.
UNFUSED = "unfused"

#: ``FaultResult.status`` values.
DETECTED, ESCAPED, OTHER, ERROR = "detected", "escaped", "other oracles", "error"


@dataclasses.dataclass
class FaultResult:
    """What the search found for one fault.

    - ``name`` / ``bug`` / ``expected``: the bank row (fault name, bug kind, oracles that catch it).
    - ``status``: ``"detected"``, ``"escaped"`` (no case broke a property), ``"other oracles"``
      (only oracles the row does not name fired) or ``"error"`` (the search itself failed).
    - ``examples``: cases checked up to and including the first failing one (before shrinking);
      None when none failed (for a detection by the ``"unfused"`` warning: the cases searched up to
      the batch after which it first held).
      ``cases``: cases checked in all, shrinking included.
    - ``seconds``: wall time of the search, shrinking and reproducer included.
    - ``nodes``: ``call_function`` nodes in the shrunk case's graph (the reproducer's size);
      ``first_nodes``: in the first failing case's.
    - ``oracles``: oracles that fired on the shrunk cases (of every distinct failure of the search,
      ``PassVerificationError.failures``); ``first_oracles``: on the first failing case.
    - ``family``: the case family the failure came from; ``case``: the shrunk case's repr (for a
      detection by the ``"unfused"`` warning: the warning's text);
      ``reproducer``: the reproducer script's path; ``error``: why the search failed.
    """

    name: str
    bug: str
    expected: tuple[str, ...]
    status: str = ESCAPED
    examples: int | None = None
    cases: int = 0
    seconds: float = 0.0
    nodes: int | None = None
    first_nodes: int | None = None
    oracles: tuple[str, ...] = ()
    first_oracles: tuple[str, ...] = ()
    family: str | None = None
    case: str | None = None
    reproducer: str | None = None
    error: str | None = None

    @property
    def detected(self) -> bool:
        return self.status == DETECTED


class _Counter:
    """``on_result`` of :func:`pmverify.verify`: counts cases, adds up their summary and keeps the
    first failing one."""

    def __init__(self) -> None:
        from ._findings.summary import VerifySummary

        self.cases = 0
        self.first: tuple[int, tuple[str, ...], int] | None = None
        self.summary = VerifySummary()

    def __call__(self, result: Any) -> None:
        from ._findings.summary import VerifySummary

        self.cases += 1
        self.summary = self.summary + VerifySummary.of(result)
        if result.violations and self.first is None:
            oracles = tuple(sorted({v.oracle for v in result.violations}))
            self.first = (self.cases, oracles, _call_nodes(result.case))


def _call_nodes(case: Any) -> int:
    """``call_function`` nodes in ``case``'s graph."""
    return sum(1 for node in case.gm.graph.nodes if node.op == "call_function")


def load_bank(spec: str = DEFAULT_BANK) -> dict[str, Any]:
    """The bank ``spec`` (``MODULE:ATTRIBUTE`` of a function with no arguments) returns, imported
    by name. Raises what the function raises (``ValueError`` / ``RuntimeError``: its environment
    cannot run the faults), ``ImportError`` / ``AttributeError`` for a spec that names nothing."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)()


def run_fault(
    fault: Any,
    *,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    seed: int = 0,
    repro_dir: Any = None,
    shrink: bool = True,
    name: str | None = None,
    device: Any = None,
) -> FaultResult:
    """Search ``fault``'s case families for a case it breaks; return what was found.

    - ``max_examples``: cases to try at most (shrinking aside), split in batches of :data:`BATCH`
      over the families in rotation.
    - ``seed``: seed of the search; batch ``i`` uses ``batch_seed(seed, i)`` as ``pmverify fuzz``.
    - ``repro_dir``: where the reproducer goes (default that of :func:`pmverify.verify`).
    - ``shrink``: whether to shrink the failing case (default True); without, ``nodes`` and
      ``oracles`` are those of the first failing case, and the search takes seconds, not minutes.
    - ``name``: the name to report (default ``fault.name``, the pass class's).
    - ``device``: where every case runs (:func:`pmverify.verify`'s ``device``; None: CPU). On a
      CUDA device the kernel faults' Triton kernels run on the GPU, compiled (their op runs the
      Triton path on the tensors' device; Triton's interpreter is on only without a GPU).

    Runs under the active Hypothesis settings profile, without its example database and its
    explain phase (and shrink phase, unless ``shrink``): :func:`pmverify._engine.verify.fresh_settings`.
    """
    from ._engine.verify import fresh_settings, verify_in_rotation

    result = FaultResult(name or fault.name, fault.bug, fault.oracles)
    counter = _Counter()
    start = time.monotonic()
    try:
        if fault.requires is not None:
            fault.requires()
        searches = _entry_searches(fault, max_examples, counter, seed, repro_dir, shrink, device)
        if searches is None:
            searches = verify_in_rotation(
                fault.pass_cls,
                _families(fault, device),
                batch=BATCH,
                remaining=lambda: max_examples - counter.cases,
                seed=seed,
                on_result=counter,
                repro_dir=repro_dir,
                # a bank row may ask for strict order (a fault only a graph judged unsorted shows)
                strict_order=fault.strict_order,
                settings=fresh_settings(shrink=shrink),
                device=device,
            )
        for family, error in searches:
            if error is not None:
                result.family = family
                result.oracles = tuple(sorted({v.oracle for f in error.failures for v in f.result.violations}))
                result.case = repr(error.case)
                result.nodes = _call_nodes(error.case)
                result.reproducer = str(error.reproducer) if error.reproducer else None
                break
            if UNFUSED in fault.oracles and _warned(counter):
                break  # the warning holds over the cases so far: detected (judged below)
    except Exception as exc:  # noqa: BLE001 - a search that cannot run is reported, not raised
        logger.debug("selfcheck of %s failed", fault.name, exc_info=True)
        result.status, result.error = ERROR, f"{type(exc).__name__}: {exc}"
    result.seconds = time.monotonic() - start
    result.cases = counter.cases
    if counter.first is not None:
        result.examples, result.first_oracles, result.first_nodes = counter.first
    if result.status != ERROR and result.family is not None:
        fired = set(result.oracles) | set(result.first_oracles)
        result.status = DETECTED if fired & set(fault.oracles) else OTHER
    elif result.status != ERROR and UNFUSED in fault.oracles and _warned(counter):
        result.status, result.oracles, result.examples = DETECTED, (UNFUSED,), counter.cases
        result.case = _warned(counter)[0]
    return result


def _families(fault: Any, device: Any) -> Any:
    """``fault``'s case families, for cases run on ``device``: a bank row's ``families`` that takes
    a ``device`` argument sizes its cases for it (a kernel fault that shows only past the device's
    grid), else it is called without one."""
    import inspect

    try:
        takes_device = "device" in inspect.signature(fault.families).parameters
    except (TypeError, ValueError):
        takes_device = False
    return fault.families(device=device) if takes_device else fault.families()


def _entry_searches(
    fault: Any, max_examples: int, counter: _Counter, seed: int, repro_dir: Any, shrink: bool, device: Any = None
) -> Any:
    """For a row with ``entries``: ``(family, error)`` of :func:`~pmverify._rewrites.entry_check.check_entry`
    on each entry in turn with the cases left (family ``check_entry(module/name)``; error None, or
    the search's :class:`~pmverify.PassVerificationError`), up to the first error; None for a row
    without. A vacuous search (the entry never fired) raises."""
    entries = getattr(fault, "entries", None)
    if entries is None:
        return None
    from ._engine.verify import PassVerificationError, fresh_settings
    from ._findings.reproducer import pass_recipe
    from ._rewrites.entry_check import check_entry

    recipe = pass_recipe(fault.pass_cls)  # the row's pass holds its entries: its reproducers rebuild it
    pass_source = None if recipe is None else "\n".join([*recipe[0], f"PASS = {recipe[1]}()"])
    searches: list[tuple[str, Any]] = []
    for entry in entries():
        left = max_examples - counter.cases
        if left <= 0:
            break
        family = f"check_entry({entry.label})"
        try:
            check_entry(
                entry,
                max_examples=left,
                seed=seed,
                repro_dir=repro_dir,
                pass_source=pass_source,
                settings=fresh_settings(shrink=shrink),
                on_result=counter,
                device=device,
            )
        except PassVerificationError as error:
            searches.append((family, error))
            break
        searches.append((family, None))
    return searches


def _warned(counter: _Counter) -> list[str]:
    """The search's :class:`~pmverify.UnfusedWarning` texts over its cases so far."""
    from ._findings.summary import unfused_warnings

    return unfused_warnings(counter.summary)


def selfcheck(
    names: Sequence[str] | None = None,
    *,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    seed: int = 0,
    repro_dir: Any = None,
    shrink: bool = True,
    bank: dict[str, Any] | None = None,
    on_fault: Callable[[FaultResult], None] | None = None,
    device: Any = None,
) -> list[FaultResult]:
    """Run :func:`run_fault` for each fault named (default every fault of ``bank``, by default
    :func:`load_bank`'s, :data:`pmverify.faults.BANK`), in bank order, on ``device`` (None: CPU);
    ``on_fault`` is called with each result as it comes. Raises ``KeyError`` naming an unknown fault before running any."""
    bank = load_bank() if bank is None else bank
    names = list(bank) if not names else list(dict.fromkeys(names))
    unknown = [name for name in names if name not in bank]
    if unknown:
        raise KeyError(f"unknown fault {unknown[0]!r}; known: {', '.join(bank)}")
    results = []
    for name in names:
        result = run_fault(
            bank[name],
            max_examples=max_examples,
            seed=seed,
            repro_dir=repro_dir,
            shrink=shrink,
            name=name,
            device=device,
        )
        if on_fault is not None:
            on_fault(result)
        results.append(result)
    return results


_COLUMNS = (("detected", 12, "<"), ("examples", 9, ">"), ("seconds", 9, ">"), ("nodes", 7, ">"))


def _cells(result: FaultResult) -> list[str]:
    return [
        "yes" if result.detected else {ESCAPED: "NO", OTHER: "NO (other)", ERROR: "ERROR"}[result.status],
        "-" if result.examples is None else str(result.examples),
        f"{result.seconds:.1f}",
        "-" if result.nodes is None else str(result.nodes),
    ]


def table(results: Sequence[FaultResult]) -> str:
    """The results as a text table: fault, detected, examples to first detection, seconds,
    reproducer node count and the oracles that fired on the shrunk case (or the error)."""
    width = max([len("fault"), *(len(r.name) for r in results)]) + 2
    header = f"{'fault':<{width}}" + "".join(f"{name:{align}{w}}" for name, w, align in _COLUMNS) + "  oracles"
    lines = [header, "-" * len(header)]
    for result in results:
        cells = "".join(f"{c:{align}{w}}" for c, (_, w, align) in zip(_cells(result), _COLUMNS, strict=True))
        lines.append(f"{result.name:<{width}}{cells}  {', '.join(result.oracles) or result.error or '-'}")
    detected = sum(r.detected for r in results)
    lines.append(f"{detected} of {len(results)} faults detected")
    return "\n".join(lines)


def report(results: Sequence[FaultResult], **header: Any) -> dict[str, Any]:
    """The results as JSON-ready data: ``header`` items (seed, max_examples...), then ``faults``
    (one dict of :class:`FaultResult` fields per fault, plus ``detected``), ``detected``, ``escaped``
    and ``errors`` (fault names; an error is a fault that could not be searched, not an escape)."""
    faults = [{**dataclasses.asdict(r), "seconds": round(r.seconds, 3), "detected": r.detected} for r in results]
    return {
        **header,
        "faults": faults,
        "detected": [r.name for r in results if r.detected],
        "escaped": [r.name for r in results if not r.detected and r.status != ERROR],
        "errors": [r.name for r in results if r.status == ERROR],
    }
