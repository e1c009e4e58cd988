"""``minimal``: the simplest example of a strategy that satisfies a condition, as Hypothesis' own
test suite finds it (generate, then shrink; no database; derandomized so that runs agree)."""

from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.strategies import SearchStrategy

T = TypeVar("T")

_MINIMAL = settings(
    database=None,
    deadline=None,
    derandomize=True,
    max_examples=200,
    phases=[Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)


def minimal(strategy: SearchStrategy[T], condition: Callable[[T], Any] = lambda _: True) -> T:
    """Return the minimal example of ``strategy`` for which ``condition`` holds."""
    return find(strategy, condition, settings=_MINIMAL)


def rejections(strategy: SearchStrategy[Any], examples: int = 100) -> tuple[int, int]:
    """Draw ``examples`` valid values of ``strategy``; return (rejected draws, valid draws).

    Rejected draws are those a filter or ``assume`` threw away ("invalid" in Hypothesis'
    statistics). "overrun" cases are not counted: the engine cuts early cases at 5 times the length
    of the minimal one, for every strategy of varying size."""
    from collections import Counter

    from hypothesis import given
    from hypothesis.statistics import collector

    statistics = []

    @settings(max_examples=examples, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(value: Any) -> None:
        pass

    with collector.with_value(statistics.append):
        draw()
    (stats,) = statistics
    statuses = Counter(case["status"] for case in stats["generate-phase"]["test-cases"])
    return statuses["invalid"], statuses["valid"]
