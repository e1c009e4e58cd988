"""run_spmd: real collectives on threaded worlds (sizes 1-8) and one gloo world, failures that name
the rank, collective mismatches seen at once, the timeout a setting and an error of the run, world reuse and teardown."""

import pickle
import signal
import threading
import time

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

from pmverify.distributed import (
    BACKENDS,
    DEFAULT_GROUP_NAME,
    DEFAULT_TIMEOUT_S,
    TIMEOUT_ENV,
    SPMDError,
    SPMDTimeoutError,
    _threaded,
    default_timeout_s,
    run_spmd,
    shutdown_worlds,
)

WORLD_SIZES = [1, 2, 4, 8]


@pytest.fixture(scope="module", autouse=True)
def _worlds_torn_down():
    yield
    shutdown_worlds()


def _spmd_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("pmverify-spmd-")}


# Rank functions are module-level: the gloo and nccl backends pickle them by name.


def sum_both_ways(value: float) -> tuple[int, int, float, float, str]:
    """All-reduce ``value`` through dist.all_reduce and through the functional collectives."""
    eager = torch.tensor([value])
    dist.all_reduce(eager)
    functional = torch.ops._c10d_functional.all_reduce(torch.tensor([value]), "sum", DEFAULT_GROUP_NAME)
    functional = torch.ops._c10d_functional.wait_tensor(functional)
    return dist.get_rank(), dist.get_world_size(), eager.item(), functional.item(), dist.group.WORLD.group_name


def echo(*args):
    return dist.get_rank(), args


def all_reduce_sum(value: float) -> float:
    t = torch.tensor([value])
    dist.all_reduce(t)
    return t.item()


def rank_one_raises() -> None:
    if dist.get_rank() == 1:
        raise ValueError("rank one was told to fail")
    dist.all_reduce(torch.ones(1))  # blocks until the run releases it


def ranks_one_and_three_raise() -> None:
    rank = dist.get_rank()
    if rank in (1, 3):
        raise KeyError(f"failing rank {rank}")


def only_rank_zero_all_reduces() -> None:
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))


def nested_run() -> None:
    run_spmd(echo, 1, [()])


def nested_shutdown() -> None:
    shutdown_worlds()


def expected_sum(world_size: int) -> float:
    return world_size * (world_size + 1) / 2


# -- threaded: real reductions --------------------------------------------------------------------


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_threaded_collectives_really_sum(world_size):
    results = run_spmd(sum_both_ways, world_size, [(float(r + 1),) for r in range(world_size)])
    total = expected_sum(world_size)
    assert results == [(r, world_size, total, total, DEFAULT_GROUP_NAME) for r in range(world_size)]


def test_default_group_name_is_the_world_group_name():
    assert DEFAULT_GROUP_NAME == "0"
    assert run_spmd(lambda: dist.group.WORLD.group_name, 2, [(), ()]) == ["0", "0"]


def test_results_come_back_in_rank_order():
    args = [(r, f"arg{r}") for r in range(4)]
    assert run_spmd(echo, 4, args) == [(r, args[r]) for r in range(4)]


@given(
    world_size=st.sampled_from(WORLD_SIZES),
    data=st.data(),
)
def test_threaded_sums_under_hypothesis(world_size, data):
    values = data.draw(st.lists(st.integers(-1000, 1000), min_size=world_size, max_size=world_size))
    results = run_spmd(all_reduce_sum, world_size, [(float(v),) for v in values])
    assert results == [float(sum(values))] * world_size


def test_calling_thread_keeps_its_own_world():
    run_spmd(all_reduce_sum, 2, [(1.0,), (2.0,)])
    assert not dist.is_initialized()
    assert torch._C._is_multithreading_enabled()


# -- threaded: reuse and teardown ------------------------------------------------------------------


def test_a_world_is_reused_across_calls():
    run_spmd(all_reduce_sum, 4, [(1.0,)] * 4)
    threads = _spmd_threads()
    assert len({t for t in threads if "-w4-" in t.name}) == 4
    for _ in range(20):
        assert run_spmd(all_reduce_sum, 4, [(1.0,)] * 4) == [4.0] * 4
    assert _spmd_threads() == threads


def test_shutdown_worlds_leaves_no_threads():
    shutdown_worlds()
    before = set(threading.enumerate())
    run_spmd(all_reduce_sum, 8, [(1.0,)] * 8)
    run_spmd(all_reduce_sum, 2, [(1.0,)] * 2)
    assert len(set(threading.enumerate()) - before) == 10
    shutdown_worlds()
    assert set(threading.enumerate()) <= before
    assert not _spmd_threads()
    assert run_spmd(all_reduce_sum, 2, [(1.0,), (2.0,)]) == [3.0, 3.0]  # a fresh world after a shutdown


# -- threaded: failures ----------------------------------------------------------------------------


def test_a_raising_rank_fails_the_run_with_its_traceback_and_the_world_still_works():
    with pytest.raises(SPMDError) as info:
        run_spmd(rank_one_raises, 4, [()] * 4, timeout_s=30)
    err = info.value
    assert err.rank == 1 and err.backend == "threaded"
    assert "rank 1 of world 4" in str(err)
    assert "ValueError: rank one was told to fail" in str(err)
    assert "in rank_one_raises" in err.traceback and err.traceback.rstrip() in str(err)
    assert isinstance(err.__cause__, ValueError)
    assert run_spmd(all_reduce_sum, 4, [(1.0,), (2.0,), (3.0,), (4.0,)]) == [10.0] * 4


def test_the_lowest_failing_rank_is_reported():
    with pytest.raises(SPMDError, match="rank 1 of world 4") as info:
        run_spmd(ranks_one_and_three_raise, 4, [()] * 4)
    assert info.value.rank == 1


def test_a_collective_mismatch_is_seen_without_waiting_for_the_timeout_and_the_world_still_works():
    run_spmd(all_reduce_sum, 2, [(1.0,), (2.0,)])
    threads = _spmd_threads()
    with pytest.raises(SPMDError, match="collective mismatch") as info:
        run_spmd(only_rank_zero_all_reduces, 2, [(), ()], timeout_s=600)  # a timeout would hang the test
    err = info.value
    assert err.rank is None and not isinstance(err, SPMDTimeoutError)
    assert "ranks [0] wait in a collective that ranks [1] returned without calling" in str(err)
    assert "all_reduce" in err.traceback  # where rank 0 was stuck
    assert run_spmd(sum_both_ways, 2, [(1.0,), (2.0,)])[0][2:4] == (3.0, 3.0)
    assert _spmd_threads() == threads  # the same world: its ranks were released


def test_a_rank_that_never_returns_gets_its_world_abandoned(monkeypatch):
    monkeypatch.setattr(_threaded, "_RELEASE_GRACE_S", 0.2)
    go_on = threading.Event()
    late_outcome = []

    def stuck_then_all_reduce():
        if dist.get_rank() == 0:
            go_on.wait(30)  # not in a collective: termination cannot release it
            try:
                dist.all_reduce(torch.ones(1))
                late_outcome.append("all_reduce ran")
            except Exception as exc:
                late_outcome.append(type(exc).__name__)
        else:
            dist.all_reduce(torch.ones(1))

    with pytest.raises(SPMDError, match="abandoned"):
        run_spmd(stuck_then_all_reduce, 2, [(), ()], timeout_s=0.5)
    assert run_spmd(all_reduce_sum, 2, [(1.0,), (2.0,)]) == [3.0, 3.0]  # a fresh world
    go_on.set()
    shutdown_worlds()  # joins the abandoned world's threads too
    assert late_outcome == ["ValueError"]  # its default group was dropped: no joining the new world
    assert not _spmd_threads()


def sleep_then_all_reduce(seconds: float) -> float:
    time.sleep(seconds)  # a rank slower than the timeout, as on a loaded machine
    return all_reduce_sum(1.0)


def test_a_world_past_its_timeout_is_a_timeout_error_that_names_the_setting(monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "0.2")
    with pytest.raises(SPMDTimeoutError) as info:
        run_spmd(sleep_then_all_reduce, 2, [(1.0,), (1.0,)])
    err = info.value
    assert err.timeout_s == 0.2 and err.unfinished == [0, 1] and err.finished == [] and err.rank is None
    assert "did not finish within timeout_s=0.2 s" in str(err) and f"${TIMEOUT_ENV}" in str(err)
    assert "not a finding" in str(err)
    assert run_spmd(all_reduce_sum, 2, [(1.0,), (2.0,)], timeout_s=60) == [3.0, 3.0]  # the world still works
    again = pickle.loads(pickle.dumps(err))  # as the process backends send it
    assert isinstance(again, SPMDTimeoutError) and (again.unfinished, again.timeout_s) == ([0, 1], 0.2)


@pytest.mark.parametrize(
    ("value", "expected"), [(None, DEFAULT_TIMEOUT_S), ("", DEFAULT_TIMEOUT_S), ("7.5", 7.5), (" 300 ", 300.0)]
)
def test_the_timeout_setting_comes_from_the_environment(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    else:
        monkeypatch.setenv(TIMEOUT_ENV, value)
    assert default_timeout_s() == expected
    assert DEFAULT_TIMEOUT_S >= 60  # generous: a timeout is an error of the run, not a finding


@pytest.mark.parametrize("value", ["soon", "0", "-3", "inf", "nan"])
def test_a_bad_timeout_setting_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(TIMEOUT_ENV, value)
    with pytest.raises(ValueError, match=rf"\${TIMEOUT_ENV}={value!r} must be a positive number of seconds"):
        run_spmd(echo, 2, [(), ()])


def interrupt_the_caller_then_all_reduce() -> None:
    if dist.get_rank() == 0:
        # A real SIGINT at the main thread: interrupt_main() only sets a flag, which a main thread
        # blocked in a wait does not see until the wait ends.
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        dist.all_reduce(torch.ones(1))  # rank 1 never joins: the interrupted run must release it


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt in the main thread, whatever an earlier test in this worker
    process left behind (a handler, or SIGINT blocked: a lost signal hung this test for its whole
    timeout once, in a full run under xdist); restored afterwards."""
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    yield f"SIGINT handler before: {handler!r}, blocked before: {signal.SIGINT in blocked}"
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    signal.signal(signal.SIGINT, handler)


def test_an_interrupted_caller_leaves_no_collective_in_flight(sigint_raises):
    # The world is reused if every rank reports within a second, else replaced: either way the
    # next calls must not meet rank 0's abandoned all_reduce.
    with pytest.raises(KeyboardInterrupt):
        try:
            run_spmd(interrupt_the_caller_then_all_reduce, 2, [(), ()], timeout_s=30)
        except SPMDError as exc:
            raise AssertionError(f"the SIGINT never reached the caller ({sigint_raises})") from exc
    for _ in range(3):
        assert run_spmd(all_reduce_sum, 2, [(1.0,), (2.0,)]) == [3.0, 3.0]


def test_run_spmd_is_not_reentrant():
    with pytest.raises(SPMDError, match="not re-entrant"):
        run_spmd(nested_run, 2, [(), ()])
    with pytest.raises(SPMDError, match="called from inside fn"):
        run_spmd(nested_shutdown, 1, [()])


# -- argument checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"world_size": 0}, ValueError, "world_size=0"),
        ({"world_size": -2}, ValueError, "world_size=-2"),
        ({"world_size": 2.0}, ValueError, "world_size=2.0"),
        ({"world_size": True}, ValueError, "world_size=True"),
        ({"args_per_rank": [()]}, ValueError, r"len\(args_per_rank\)=1 must equal world_size=2"),
        ({"args_per_rank": [(), (), ()]}, ValueError, r"len\(args_per_rank\)=3"),
        ({"args_per_rank": [(), 5]}, TypeError, r"args_per_rank\[1\]=5"),
        ({"args_per_rank": None}, TypeError, "args_per_rank=None"),
        ({"backend": "mpi"}, ValueError, r"backend='mpi' is not one of BACKENDS=\('threaded', 'gloo', 'nccl'\)"),
        ({"fn": 42}, TypeError, "fn=42 is not callable"),
        ({"timeout_s": 0}, ValueError, "timeout_s=0"),
        ({"timeout_s": float("nan")}, ValueError, "timeout_s=nan"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, message):
    call = {"fn": echo, "world_size": 2, "args_per_rank": [(), ()], "backend": "threaded", "timeout_s": 5.0} | kwargs
    fn, world_size, args_per_rank = call.pop("fn"), call.pop("world_size"), call.pop("args_per_rank")
    with pytest.raises(error, match=message):
        run_spmd(fn, world_size, args_per_rank, **call)


def test_backends():
    assert BACKENDS == ("threaded", "gloo", "nccl")


# -- gloo: one world start -------------------------------------------------------------------------


def test_gloo_refuses_an_unpicklable_fn_before_starting_anything():
    with pytest.raises(TypeError, match="module-level function"):
        run_spmd(lambda: None, 2, [(), ()], backend="gloo")


@pytest.mark.multiproc
def test_gloo_sums_and_reports_a_raising_rank():
    results = run_spmd(sum_both_ways, 2, [(1.0,), (2.0,)], backend="gloo")
    assert results == [(0, 2, 3.0, 3.0, DEFAULT_GROUP_NAME), (1, 2, 3.0, 3.0, DEFAULT_GROUP_NAME)]
    with pytest.raises(SPMDError) as info:
        run_spmd(rank_one_raises, 2, [(), ()], backend="gloo", timeout_s=60)
    err = info.value
    assert err.rank == 1 and err.backend == "gloo"
    assert "ValueError: rank one was told to fail" in str(err)
    assert "in rank_one_raises" in err.traceback
    with pytest.raises(SPMDError) as info:  # a fresh world: the failed one was torn down
        run_spmd(rank_one_dies, 2, [(), ()], backend="gloo", timeout_s=60)
    assert info.value.rank == 1 and "rank 1 exited with code 7" in str(info.value)  # not rank 0's reset peer


def rank_one_dies() -> None:
    if dist.get_rank() == 1:
        import os

        os._exit(7)
    dist.all_reduce(torch.ones(1))  # fails when its peer is gone


# -- nccl ------------------------------------------------------------------------------------------


def nccl_sum(value: float) -> float:
    t = torch.tensor([value], device=f"cuda:{dist.get_rank()}")
    dist.all_reduce(t)
    return t.item()


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="checks the refusal without enough CUDA devices")
def test_nccl_without_enough_cuda_devices_is_refused_up_front():
    with pytest.raises(RuntimeError, match="nccl"):
        run_spmd(nccl_sum, 2, [(1.0,), (2.0,)], backend="nccl")


@pytest.mark.gpu
@pytest.mark.multiproc
@pytest.mark.skipif(
    torch.cuda.device_count() < 2 or not dist.is_nccl_available(), reason="needs 2 CUDA devices and NCCL"
)
def test_nccl_sums():
    assert run_spmd(nccl_sum, 2, [(1.0,), (2.0,)], backend="nccl") == [3.0, 3.0]
