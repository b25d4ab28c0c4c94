"""The agent's fault windows: ``gameday_fault_active{kind,target,layer,run,fault}`` reads 1 while
a fault is held and 0 after, however it ends (revert, batch, lease expiry)."""

import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gameday.agent.metrics import AgentMetrics
from gameday.agent.registry import FaultRegistry
from gameday.clock import FakeClock
from gameday.contract.backend import FaultRequest
from gameday.errors import InvalidInput
from gameday.wire.protocol import parse_inject
from tests.agent.agent_marker import KIND, MarkerBackend


def windows(registry: FaultRegistry) -> dict[tuple[str, ...], float]:
    text = registry.metrics.render().decode()
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "gameday_fault_active"]
    return {(s.labels["kind"], s.labels["target"], s.labels["layer"], s.labels["run"]): s.value
            for s in family.samples}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_000.0)


@pytest.fixture
def registry(tmp_path: pathlib.Path, clock: FakeClock) -> FaultRegistry:
    return FaultRegistry(MarkerBackend(tmp_path / "markers"),
                         state_path=tmp_path / "state.json", node="n1", clock=clock)


def test_a_held_fault_reads_one_then_zero_after_its_revert(registry: FaultRegistry) -> None:
    fault = registry.apply(FaultRequest(KIND, {"gpu": 0}, {}, run="run-a"), 30)
    layer = fault.injected_at
    assert windows(registry) == {(KIND, "n1:gpu=0", layer, "run-a"): 1.0}
    registry.revert(fault.id)
    assert windows(registry) == {(KIND, "n1:gpu=0", layer, "run-a"): 0.0}


def test_a_window_names_its_fault_and_shows_its_target_redacted(
        registry: FaultRegistry) -> None:
    fault = registry.apply(FaultRequest(KIND, {"gpu": 3, "api_token": "s3cr3t-planted"}, {},
                                        run="run-c"), 30)
    text = registry.metrics.render().decode()
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "gameday_fault_active"]
    [sample] = family.samples
    assert sample.labels["fault"] == fault.id
    assert sample.labels["target"] == "n1:api_token=[redacted],gpu=3"
    assert "s3cr3t-planted" not in text


def test_a_batch_and_an_expired_lease_close_their_windows(registry: FaultRegistry,
                                                          clock: FakeClock) -> None:
    faults = registry.apply_many([(FaultRequest(KIND, {"gpu": 1}, {}, run="run-b"), 5),
                                  (FaultRequest(KIND, {"gpu": 2}, {}, run="run-b"), 60)])
    layer = faults[0].injected_at
    assert set(windows(registry).values()) == {1.0}
    clock.advance(6)
    registry.reap()
    assert windows(registry) == {(KIND, "n1:gpu=1", layer, "run-b"): 0.0,
                                 (KIND, "n1:gpu=2", layer, "run-b"): 1.0}
    registry.close()
    assert set(windows(registry).values()) == {0.0}


def test_only_the_last_ended_windows_are_kept() -> None:
    metrics = AgentMetrics()
    for index in range(AgentMetrics.ENDED_KEPT + 5):
        metrics.held(f"f{index}", KIND, {"gpu": index}, "virtual", "run-c")
        metrics.released(f"f{index}")
    text = metrics.render().decode()
    [family] = [f for f in text_string_to_metric_families(text)
                if f.name == "gameday_fault_active"]
    targets = {s.labels["target"] for s in family.samples}
    assert len(targets) == AgentMetrics.ENDED_KEPT
    assert "gpu=0" not in targets and f"gpu={AgentMetrics.ENDED_KEPT + 4}" in targets


def test_the_inject_body_names_its_run() -> None:
    request, _ = parse_inject({"kind": KIND, "target": {"gpu": 0}, "lease_s": 5, "run": "r"})
    assert request.run == "r"
    bare, _ = parse_inject({"kind": KIND, "target": {"gpu": 0}, "lease_s": 5})
    assert bare.run == ""
    with pytest.raises(InvalidInput, match="run must be a string"):
        parse_inject({"kind": KIND, "target": {"gpu": 0}, "lease_s": 5, "run": 7})


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.booleans(), st.integers(0, 7)), max_size=60),
       kept=st.integers(1, 4))
def test_each_window_reads_what_its_fault_did_last(
        steps: list[tuple[bool, int]], kept: int) -> None:
    """Faults held and released in any order (a release of one not held, one held
    again): each window reads 1 while its fault is held, 0 once released while among
    the last ``ENDED_KEPT`` ended, and is gone after that."""
    metrics = AgentMetrics()
    metrics.ENDED_KEPT = kept
    held: set[str] = set()
    ended: list[str] = []  # oldest first
    for hold, n in steps:
        fault = f"f{n}"
        if hold:
            metrics.held(fault, KIND, {"gpu": n}, "virtual", "run-p")
            held.add(fault)
            if fault in ended:
                ended.remove(fault)
        else:
            metrics.released(fault)
            if fault in held:
                held.remove(fault)
                ended.append(fault)
                del ended[:-kept]
    text = metrics.render().decode()
    [family] = [f for f in text_string_to_metric_families(text)
                if f.name == "gameday_fault_active"]
    assert {s.labels["fault"]: s.value for s in family.samples} == {
        **{fault: 0.0 for fault in ended}, **{fault: 1.0 for fault in held}}


def test_a_real_prometheus_reads_each_window_from_the_agents_metrics() -> None:
    """A real agent (the lab's virtual GPUs: the stand-in for NVML) scraped by a real
    Prometheus (2.42, 1 s scrapes): a fault's window reads 1 in Prometheus while it is
    held and 0 once reverted, with its labels as the collector made them; a fault of the
    same batch reads the same."""
    from gameday import testing
    from tests.verifiers.verifier_helpers import PrometheusUnderTest
    from tests.waiting import wait_until

    with testing.agent(node="node-0", gpus=2) as node:
        prometheus = PrometheusUnderTest(workloads=[node.url.split("//", 1)[1]])
        try:
            prometheus.wait_scraped()
            client = node.client()
            faults = client.inject_many([
                {"kind": "gpu.xid", "target": {"gpu": g}, "params": {"xid": 13},
                 "lease_s": 60, "run": "run-prom"} for g in (0, 1)])

            def windows() -> dict[str, float]:
                return {s["metric"]["fault"]: float(s["value"][1]) for s in
                        prometheus.query('gameday_fault_active{run="run-prom"}')}

            ids = {f["id"] for f in faults}
            wait_until(lambda: windows() == dict.fromkeys(ids, 1.0), what="windows at 1")
            [sample] = prometheus.query(f'gameday_fault_active{{fault="{faults[0]["id"]}"}}')
            assert sample["metric"]["kind"] == "gpu.xid"
            assert sample["metric"]["target"] == "node-0:gpu=0"
            client.revert_many(sorted(ids))
            wait_until(lambda: windows() == dict.fromkeys(ids, 0.0), what="windows at 0")
        finally:
            prometheus.close()
