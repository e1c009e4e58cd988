"""Ground truth of a self-contained planted instance, from Inductor's matcher holding the rewrite
alone (:func:`isolated_truth`): shared by :func:`~pmverify.strategies.planted` and the recorded
example inputs' checks (:mod:`._recorded_inputs`)."""

from __future__ import annotations

import copy
import dataclasses

from .._execution import propagate_fake, quiet_fake_tensor_errors
from .._fx import arg_key
from .._registry.record import RecordedRewrite, isolated_pass
from ._traced import Traced, signature

__all__ = ["isolated_truth"]

#: Ground-truth outcomes kept per rewrite before its memo is emptied.
_OUTCOME_CACHE_SIZE = 1024


def isolated_truth(rewrite: RecordedRewrite, inst: Traced) -> Traced:
    """The ground truth of a self-contained instance (plain, or a near miss edited in its graph)
    from Inductor's matcher holding ``rewrite`` alone, run on the instance's graph:

    - a plain instance it rewrites stays ``must_match=True``; one its ``extra_check`` rejects is
      ``must_match=False, reason="extra_check"``; one it cannot match at all (another trace than the
      registered pattern, a failed re-trace) is ``must_match=None, reason="trace_differs"``;
    - a near miss it rewrites (e.g. a ``"constant"`` a ``scalar_workaround`` makes a wildcard) is
      ``must_match=None``, its reason kept; one it leaves alone stays ``must_match=False``;
    - where the matcher raises (an ``extra_check`` that raises), ``must_match=None`` (reason
      ``"matcher_raised"`` for a plain instance): the pass under test raises there too, a crash.

    Memoised per rewrite on the instance's exact trace, its tensor inputs' shapes, strides and
    dtypes (what ``extra_check`` sees: fake tensors, no values) and its other inputs' values (a
    ``scalar_workaround`` argument's value is in ``match.kwargs``)."""
    isolated = isolated_pass(rewrite)
    key = (tuple(arg_key(a) for a in inst.args), signature(inst.gm))
    outcome = isolated.outcomes.get(key)
    if outcome is None:
        gm = copy.deepcopy(inst.gm)
        propagate_fake(gm, inst.args)
        isolated.checks.clear()
        try:
            with quiet_fake_tensor_errors():
                matched = isolated.pass_.apply(gm.graph) > 0
        except Exception:  # noqa: BLE001 - e.g. a raising extra_check: the pass under test shows it
            outcome = "matcher_raised"
        else:
            outcome = "matched" if matched else ("extra_check" if False in isolated.checks else "no_match")
        if len(isolated.outcomes) >= _OUTCOME_CACHE_SIZE:
            isolated.outcomes.clear()
        isolated.outcomes[key] = outcome
    if outcome == "matcher_raised":
        return dataclasses.replace(inst, must_match=None, reason=inst.reason or outcome)
    if inst.must_match is True:
        if outcome == "extra_check":
            return dataclasses.replace(inst, must_match=False, reason="extra_check")
        if outcome == "no_match":
            return dataclasses.replace(inst, must_match=None, reason="trace_differs")
    elif outcome == "matched":
        return dataclasses.replace(inst, must_match=None)
    return inst
