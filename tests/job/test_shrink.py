"""Shrinking what the job already holds: a replayed failure saved unshrunk (in the worker, under
:func:`shrinking_from`), and a crash or a hang (each candidate in a forked child, :func:`dies_alike`)."""

import dataclasses
import threading
import time

import _crashing_passes as passes
import pytest
from hypothesis import Phase, given, settings

from pmverify._job.protocol import BatchRequest, CaseStarted, SearchDone
from pmverify._job.shrink import current_choices, dies_alike, minimal_key, shrink_in_forks, shrinking_from, warm_up

CASES = "_crashing_passes:CASES"


def _case_of(ops):
    """``(choices, case)`` of a case of ``passes.CASES`` with ``ops`` ops: a failure to shrink."""
    found = []

    @settings(database=None, max_examples=500, phases=[Phase.generate], deadline=None)
    @given(passes.CASES)
    def look(case):
        if f"fx_graphs: {ops} ops" in repr(case):
            found.append((current_choices(), case))
            raise StopIteration  # (ends the search)

    with pytest.raises(StopIteration):
        look()
    return found[-1]


@pytest.fixture(scope="module")
def big():
    choices, case = _case_of(4)
    warm_up(case)  # (children start faster)
    return choices, case


@pytest.mark.parametrize(
    ("pass_", "exit_code", "alike"),
    [
        (passes.exits, 3, True),
        (passes.exits, -11, False),
        (passes.segfault, -11, True),
        (passes.segfault, 3, False),
        (passes.raises, 3, False),  # an exception is a finding of its own, not a death
        (passes.identity, 0, False),
        (passes.hangs, None, True),  # outlasts the timeout
        (passes.hangs, 3, False),
        (passes.identity, None, False),
    ],
)
def test_dies_alike_tells_deaths_apart(big, pass_, exit_code, alike):
    beats = []
    timeout = 0.5 if pass_ is passes.hangs else 60  # (a case that finishes must not outlast it)
    got = dies_alike(
        pass_,
        big[1],
        exit_code=exit_code,
        timeout_s=timeout,
        stop_at=time.time() + 90,
        heartbeat=lambda: beats.append(1),
    )
    assert got is alike  # (a case that finishes is not waited on: it would outlast the 60 s timeout)
    if pass_ is passes.hangs:
        assert beats  # the job hears from the worker while a child hangs


def test_dies_alike_gives_up_at_the_end_of_the_budget(big):
    got = dies_alike(
        passes.hangs, big[1], exit_code=None, timeout_s=600, stop_at=time.time() + 1, heartbeat=lambda: None
    )
    assert got is None  # (not True: had it waited for the 600 s timeout, the case would have outlasted it)


@pytest.fixture
def no_threads(monkeypatch):
    """This process with no thread but its main one, as a worker is when it forks (tqdm's monitor
    and the threaded worlds other tests started are ended)."""
    from tqdm.std import tqdm

    from pmverify.distributed import shutdown_worlds

    monkeypatch.setattr(tqdm, "monitor_interval", 0)
    if tqdm.monitor is not None:
        tqdm.monitor.exit()
        tqdm.monitor = None
    shutdown_worlds()
    if threading.active_count() > 1:
        pytest.skip(f"threads of other tests run: {threading.enumerate()}")


def test_a_crash_shrinks_in_forked_children(big, no_threads):
    choices, case = big
    beats = []
    got = shrink_in_forks(
        passes.CASES,
        passes.exits,
        choices,
        exit_code=3,
        timeout_s=10,
        stop_at=time.time() + 120,
        heartbeat=lambda: beats.append(1),
    )
    assert got is not None
    shrunk_choices, shrunk, finished = got
    assert finished and "fx_graphs: 1 ops" in repr(shrunk) and shrunk_choices != choices and beats


def test_a_case_that_does_not_die_alike_in_a_child_is_not_shrunk(big, no_threads):
    got = shrink_in_forks(
        passes.CASES,
        passes.identity,
        big[0],
        exit_code=3,
        timeout_s=10,
        stop_at=time.time() + 60,
        heartbeat=lambda: None,
    )
    assert got is None


def test_forking_is_refused_while_other_threads_run(big, no_threads):
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="other")
    other.start()
    try:
        with pytest.raises(RuntimeError, match="runs other threads"):
            shrink_in_forks(
                passes.CASES, passes.exits, big[0], exit_code=3, timeout_s=1, stop_at=time.time() + 60, heartbeat=list
            )
    finally:
        stop.set()
        other.join()


def test_a_saved_failure_is_shrunk_from_its_choices(big, tmp_path):
    """What a replay of a failure saved unshrunk does: a search under ``shrinking_from`` starts from
    the saved case (a primary entry replayed exactly would be taken as shrunk) and shrinks it."""
    from pmverify import PassVerificationError, verify
    from pmverify._engine.verify import database_key

    choices, _ = big
    key = database_key(passes.raises, passes.CASES)
    with pytest.raises(PassVerificationError) as info:
        with shrinking_from(key, choices, time.time() + 60) as (outcome, replay):
            verify(passes.raises, passes.CASES, max_examples=5, seed=0, repro_dir=tmp_path, settings=replay)
    assert outcome["finished"] and "fx_graphs: 1 ops" in repr(info.value.result.case)
    assert settings.default.database is not None  # the profile is unchanged
    assert minimal_key(key) == key + b".pmverify-minimal"


class _Conn:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


@pytest.fixture
def worker(tmp_path):
    """A worker of the ``raises`` target, in this process, on a database folder (its settings:
    ``worker.settings``; Hypothesis' active profile is left alone)."""
    from pmverify._job.worker import _Worker

    previous = settings.default
    options = {"profile": "ci", "db": str(tmp_path / "db"), "repro_dir": str(tmp_path), "shrink": True, "log": None}
    worker = _Worker(_Conn(), "_crashing_passes:raises", CASES, options)
    worker.ready()
    yield worker
    assert settings.default is previous


def _replay(worker):
    worker.conn.sent.clear()
    worker.batch(BatchRequest(family=0, seed=0, max_examples=25, replay=True, stop_at=time.time() + 60))
    (done,) = [m for m in worker.conn.sent if isinstance(m, SearchDone)]
    cases = sum(isinstance(m, CaseStarted) for m in worker.conn.sent)
    return dataclasses.asdict(done.finding), cases


def test_a_replayed_failure_saved_unshrunk_is_shrunk_then_replays_without_shrinking(big, worker):
    choices, _ = big
    database = worker.settings.database
    database.save(worker.keys[0], choices)  # as a job stopped mid-shrink (or --no-shrink) left it
    found, cases = _replay(worker)
    assert found["replayed"] and found["shrunk"] and "fx_graphs: 1 ops" in found["case"]
    assert found["choices"] != choices and cases > 3
    # what the job then saves (Supervisor._save): the shrunk case, marked minimal, in place of the saved one
    database.save(worker.keys[0], found["choices"])
    database.save(minimal_key(worker.keys[0]), found["choices"])
    database.delete(worker.keys[0], choices)
    again, cases = _replay(worker)
    assert again["replayed"] and again["shrunk"] and again["case"] == found["case"]
    assert cases <= 2  # the replay and Hypothesis' final run of it: no shrinking


def test_without_shrinking_a_replayed_failure_stays_unshrunk(big, worker):
    worker.options["shrink"] = False
    worker.settings.database.save(worker.keys[0], big[0])
    found, _ = _replay(worker)
    assert found["replayed"] and not found["shrunk"] and "fx_graphs: 4 ops" in found["case"]
