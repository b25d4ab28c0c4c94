"""The seeded pick of a process selector's matches (gameday.contract.pick) and the
agent's checks of it: properties over random match sets and seeds."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gameday.contract.backend import FaultRequest
from gameday.contract.pick import Pick, parse_pick
from gameday.errors import FaultRejected
from gameday.node.processes import check_signal_request

PIDS = st.lists(st.integers(2, 4_000_000), min_size=1, max_size=40, unique=True)


@given(pids=PIDS, seed=st.integers(0, 2**63 - 1), count=st.integers(1, 50))
def test_a_count_pick_is_a_reproducible_subset_whatever_the_order(
        pids: list[int], seed: int, count: int) -> None:
    pick = Pick(seed=seed, count=count)
    chosen = pick.choose(pids)
    assert chosen == sorted(chosen) and set(chosen) <= set(pids)
    assert len(chosen) == min(count, len(pids))
    assert pick.choose(list(reversed(pids))) == chosen  # order of the matches is irrelevant


@given(pids=PIDS, seed=st.integers(0, 2**32), percent=st.floats(0.01, 100))
def test_a_percent_pick_takes_at_least_one_and_rounds_up(pids: list[int], seed: int,
                                                          percent: float) -> None:
    chosen = Pick(seed=seed, percent=percent).choose(pids)
    assert 1 <= len(chosen) <= len(pids)
    assert len(chosen) >= min(len(pids), math.floor(len(pids) * percent / 100))


def test_different_seeds_pick_differently_somewhere() -> None:
    pids = list(range(100, 120))
    assert len({tuple(Pick(seed=s, count=1).choose(pids)) for s in range(30)}) > 5


@pytest.mark.parametrize(("value", "message"), [
    ({"count": 1}, "seed: must be an integer"),
    ({"count": 1, "percent": 5, "seed": 1}, "exactly one of count or percent"),
    ({"count": 0, "seed": 1}, "count: must be an integer between 1"),
    ({"percent": 0, "seed": 1}, "percent: must be a number in (0, 100]"),
    ({"count": 1, "seed": 1, "sed": 2}, "sed: unknown"),
    ("one", "must be a mapping"),
])
def test_a_bad_pick_is_refused_naming_the_key(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        parse_pick(value)
    assert message in str(caught.value)
    request = FaultRequest("process.kill", {"name": "python", "pick": value}, {})
    with pytest.raises(FaultRejected) as refused:
        check_signal_request("process.kill", request)
    assert str(refused.value).startswith("target.pick: ") and message in str(refused.value)


def test_the_agent_refuses_a_pick_of_a_single_pid() -> None:
    request = FaultRequest("process.kill", {"pid": 4242, "pick": {"count": 1, "seed": 0}}, {})
    with pytest.raises(FaultRejected, match=r"^target\.pick: a pid names one process"):
        check_signal_request("process.kill", request)


def test_max_processes_still_bounds_what_was_picked() -> None:
    """Three real processes match; a pick of two is refused under max_processes 1 and
    shown (checked, nothing signalled) under max_processes 2."""
    import subprocess
    import sys

    from gameday.node.processes import SignalFault

    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
             for _ in range(3)]
    try:
        pids = [p.pid for p in procs]
        fault = SignalFault("process.kill", lambda target, params: list(pids))
        target = {"name": "python", "pick": {"count": 2, "seed": 5}}
        with pytest.raises(FaultRejected, match=r"matches 2 processes, params.max_processes "
                                                r"is 1"):
            fault.check(FaultRequest("process.kill", target, {}))
        shown = fault.check(FaultRequest("process.kill", target, {"max_processes": 2}))
        assert [p["pid"] for p in shown["processes"]] == Pick(seed=5, count=2).choose(pids)
        assert shown["pick"] == {"count": 2, "seed": 5}
        assert all(p.poll() is None for p in procs)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
