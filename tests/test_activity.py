"""gameday.activity, the public API for users' own activities, against real agents.

The agents are real ``AgentServer``s over loopback HTTP with real bearer tokens
(``gameday.testing.agent``): one with the marker backend of ``tests.agent.agent_marker``
(a fault is a file on disk), two with the lab's virtual GPUs (the only GPUs this machine
has; the stand-in for NVML). No mocks.
"""

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from chaoslib.exceptions import ActivityFailed

from gameday import activity, testing
from gameday.clock import FakeClock
from gameday.engine import session as sessions
from gameday.errors import BlastRadiusExceeded, GamedayError, InvalidInput, TargetUnavailable
from gameday.experiment.extension import BlastRadius, Extension
from gameday.targets.base import Target
from tests.agent.agent_marker import KIND, MarkerBackend


def open_session(agents: list[testing.RunningAgent], tmp: Path,
                 radius: BlastRadius | None = None) -> sessions.Session:
    target = Target(kind="host", agents={a.node: a.client() for a in agents}, source="test")
    return sessions.activate(sessions.Session(
        target=target, extension=Extension(blast_radius=radius or BlastRadius(), lease_s=30),
        ledger_path=tmp / "ledger.jsonl"))


@pytest.fixture(autouse=True)
def no_session() -> Iterator[None]:
    sessions.deactivate()
    yield
    session = sessions.active()
    if session is not None:
        session.close()
    sessions.deactivate()


@pytest.fixture
def markers(tmp_path: Path) -> MarkerBackend:
    return MarkerBackend(tmp_path / "markers", node="node-0")


def test_outside_a_run_the_session_is_refused_with_one_line() -> None:
    with pytest.raises(activity.NotInRun) as caught:
        activity.session()
    assert "\n" not in str(caught.value) and "gameday run" in str(caught.value)
    assert caught.value.exit_code == 2
    with pytest.raises(activity.NotInRun):
        activity.target()


def test_a_run_without_a_target_says_so() -> None:
    sessions.activate(sessions.Session())
    assert activity.session() is sessions.active()
    with pytest.raises(TargetUnavailable, match="needs a target"):
        activity.target()


def test_a_recorded_result_reaches_the_session_and_fail_raises_one_line() -> None:
    session = sessions.activate(sessions.Session(clock=FakeClock(start=500.0)))
    session.activity = "my-probe"
    ok = activity.record("mine.check", True, {"x": 1}, "fine")
    with pytest.raises(ActivityFailed) as caught:
        activity.fail("mine.check", "too slow:\n  412 ms > 250 ms", {"p99_ms": 412})
    assert str(caught.value) == "too slow: 412 ms > 250 ms"
    assert [(r.verifier, r.passed, r.name, r.reason, r.measurement) for r in session.results] == [
        ("mine.check", True, "my-probe", "fine", {"x": 1}),
        ("mine.check", False, "my-probe", "too slow: 412 ms > 250 ms", {"p99_ms": 412})]
    assert ok.at == 500.0  # stamped by the session's clock


def test_failing_turns_gameday_errors_into_activity_failed_and_lets_others_through() -> None:
    with pytest.raises(ActivityFailed, match=r"^arguments\.x: must be > 0$"), activity.failing():
        raise InvalidInput("must be > 0", path="arguments.x")
    with pytest.raises(KeyError), activity.failing():
        raise KeyError("not a gameday error")


def test_inject_on_node_goes_through_the_agent_under_a_lease_into_the_ledger(
        tmp_path: Path, markers: MarkerBackend) -> None:
    with testing.agent(markers) as node:
        session = open_session([node], tmp_path)
        entry = activity.inject_on_node(KIND, node=None, target={"what": "marker"},
                                        params={"note": "1"}, action="mine", lease_s=12)
        assert markers.markers() == {entry.id}  # really applied, on disk
        assert [f["id"] for f in node.active_faults()] == [entry.id]
        assert (entry.node, entry.kind, entry.lease_s, entry.action) == ("node-0", KIND, 12, "mine")
        assert [e.id for e in session.ledger.active()] == [entry.id]
        assert activity.applied([entry])["faults"][0]["details"] == entry.details
        assert activity.revert_all() == {"reverted": 1}
        assert markers.markers() == set() and session.ledger.active() == []
        assert activity.revert_all() == {"reverted": 0}  # idempotent


def test_inject_on_node_names_what_is_wrong(tmp_path: Path, markers: MarkerBackend) -> None:
    with testing.agent(markers) as node:
        open_session([node], tmp_path)
        with pytest.raises(InvalidInput, match=r"^node\.node: no node 'node-9' in target host"):
            activity.inject_on_node(KIND, node="node-9", target={})
        with pytest.raises(InvalidInput, match=r"name the node: 0 nodes can apply gpu\.ecc"):
            activity.inject_on_node("gpu.ecc", node=None, target={"gpu": 0})
        assert markers.markers() == set()


def test_the_node_blast_radius_refuses_a_second_node_before_injecting(tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = [stack.enter_context(testing.agent(node=f"node-{n}", gpus=2)) for n in (0, 1)]
        session = open_session(nodes, tmp_path, BlastRadius(max_nodes=1))
        first = activity.inject_on_gpus("gpu.xid", {"node": "node-0", "index": 1},
                                        params={"xid": 13})
        assert [(e.node, e.target) for e in first] == [("node-0", {"gpu": 1})]
        with pytest.raises(BlastRadiusExceeded, match="nothing injected"):
            activity.inject_on_node("gpu.xid", node="node-1", target={"gpu": 0},
                                    params={"xid": 13})
        with pytest.raises(BlastRadiusExceeded, match="max_nodes is 1"):
            activity.inject_on_gpus("gpu.xid", {"node": "node-1", "index": 0}, params={"xid": 13})
        assert nodes[1].active_faults() == [] and len(session.ledger.active()) == 1


def test_inject_on_gpus_applies_per_gpu_and_all_or_nothing(tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = [stack.enter_context(testing.agent(node=f"node-{n}", gpus=2)) for n in (0, 1)]
        session = open_session(nodes, tmp_path)
        entries = [*activity.inject_on_gpus("gpu.xid", {"node": "node-0"}, params={"xid": 13}),
                   *activity.inject_on_gpus("gpu.thermal", {"node": "node-1"},
                                          params={"temperature_c": 90.0, "clock_ratio": 0.5,
                                                  "reason": "hw_thermal",
                                                  "allow_device_settings": False})]
        assert sorted((e.node, e.target["gpu"]) for e in entries) == [
            ("node-0", 0), ("node-0", 1), ("node-1", 0), ("node-1", 1)]
        assert sum(len(n.active_faults()) for n in nodes) == 4
        with pytest.raises(GamedayError):  # refused by the agents: nothing more applied
            activity.inject_on_gpus("gpu.ecc", {"node": "node-1"},
                                    params={"kind": "triple_bit", "count": 1})
        assert sum(len(n.active_faults()) for n in nodes) == 4
        assert session.revert_all() == []
        assert sum(len(n.active_faults()) for n in nodes) == 0


def test_a_closed_run_is_let_go_without_the_cyclic_collector(tmp_path: Path) -> None:
    """A run that injected and reverted through real agents, once closed and no longer
    referenced, is freed by reference counting alone (its ledger view and timeline, a
    fleet's are a million objects, do not wait for the cyclic collector, which a fault
    action holds back); a weak reference to it is dead with the collector disabled."""
    import gc
    import weakref

    with testing.agent(node="node-0", gpus=2) as node:
        session = open_session([node], tmp_path)
        entries = activity.inject_on_gpus("gpu.xid", {"node": "node-0"}, params={"xid": 13})
        assert len(entries) == 2 and len(session.ledger.active()) == 2
        assert activity.revert_all() == {"reverted": 2}
        gone = weakref.ref(session)
        ledger = weakref.ref(session.ledger)
        sessions.deactivate()
        enabled = gc.isenabled()
        gc.disable()
        try:
            session.close()
            del session, entries
            assert gone() is None and ledger() is None
        finally:
            if enabled:
                gc.enable()
