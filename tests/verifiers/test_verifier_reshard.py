"""verifiers.reshard against a real JSON placement endpoint, and its polling on a FakeClock.

The placement documents follow the lab's ``/placement`` format: two nodes with two GPUs
each, one NVLink domain per node (nvl-0, nvl-1); the fault is on node-0/gpu0, which
holds shard 0.
"""

import time
from typing import Any

import pytest
from chaoslib.exceptions import ActivityFailed

from gameday.clock import FakeClock
from gameday.engine.session import Session, deactivate
from gameday.targets.base import Target
from tests.verifiers.verifier_helpers import (
    PlacementServer,
    free_port,
    new_session,
    only_result,
    placement_document,
    record_fault,
    shard,
)
from verifiers.placement import (
    HttpPlacementSource,
    Placement,
    PlacementError,
    parse_placement,
)
from verifiers.reshard import ReshardCheck, poll_reshard, verify_reshard


def healing_events(onset: float, to: tuple[str, int], *, alert_after: float = 0.15,
                   moved_after: float = 0.35) -> list[dict[str, Any]]:
    return [
        {"t": onset - 50, "type": "alert_firing", "node": "node-0", "gpu": 0,
         "alert": "OldAlert"},  # before the onset: ignored
        {"t": onset + alert_after, "type": "alert_firing", "node": "node-0", "gpu": 0,
         "alert": "GpuDoubleBitEcc"},
        {"t": onset + alert_after + 0.05, "type": "gpu_cordoned", "node": "node-0", "gpu": 0},
        {"t": onset + moved_after, "type": "shard_moved", "node": "node-0", "gpu": 0,
         "shard": 0, "to": {"node": to[0], "gpu": to[1]}},
    ]


def healed(onset: float, to: tuple[str, int], *others: dict[str, Any],
           **timing: float) -> dict[str, Any]:
    return placement_document([shard(0, *to), shard(1, "node-1", 0), *others],
                              cordoned=("node-0", 0), events=healing_events(onset, to, **timing))


@pytest.fixture(autouse=True)
def _fresh_session() -> Any:
    yield
    deactivate()


def test_reshard_within_the_domain_is_verified_with_its_times(
        placement_server: PlacementServer) -> None:
    session = new_session()
    onset = record_fault(session).applied_at
    moving = placement_document([shard(0, "node-0", 1, "starting"), shard(1, "node-1", 0)],
                                cordoned=("node-0", 0),
                                events=healing_events(onset, ("node-0", 1)))
    placement_server.then(onset + 0.2, placement_document(
        [shard(0, "node-0", 0, "failed"), shard(1, "node-1", 0)], cordoned=("node-0", 0),
        events=healing_events(onset, ("node-0", 1))[:3]))
    placement_server.then(onset + 0.4, moving)
    placement_server.then(onset + 0.6, healed(onset, ("node-0", 1)))
    result = verify_reshard(placement=placement_server.placement_url, interval_s=0.05,
                            timeout_s=5, detect_slo_s=1, reshard_slo_s=1)
    assert result["time_to_detect_s"] == 0.15
    assert result["detect_event"] == {"type": "alert_firing", "alert": "GpuDoubleBitEcc",
                                      "gpu": "node-0/gpu0"}
    assert result["time_to_reshard_s"] == 0.35
    assert result["moves"] == [{"shard": 0, "from": "node-0/gpu0", "to": "node-0/gpu1",
                                "at": onset + 0.35, "from_domain": "nvl-0",
                                "to_domain": "nvl-0", "same_nvlink_domain": True}]
    assert result["warnings"] == [] and result["shards"] == result["serving"] == 2
    assert result["polls"] >= 2 and result["faulted_gpus"] == ["node-0/gpu0"]
    recorded = only_result(session)
    assert recorded.verifier == "reshard.verify_reshard" and recorded.passed is True
    assert recorded.reason == ("re-sharded: shard 0 node-0/gpu0 -> node-0/gpu1 in 0.3 s; "
                               "detected in 0.1 s")


def test_other_domain_while_the_own_had_room(placement_server: PlacementServer) -> None:
    session = new_session()
    onset = record_fault(session, applied_at=time.time() - 10).applied_at
    placement_server.then(0, healed(onset, ("node-1", 1)))
    result = verify_reshard(placement=placement_server.placement_url)
    expected = ("shard 0 moved to node-1/gpu1 (nvlink domain nvl-1) although node-0/gpu1 in "
                "domain nvl-0 of faulted node-0/gpu0 was free")
    assert result["warnings"] == [expected]
    assert result["moves"][0]["same_nvlink_domain"] is False
    assert session.results[-1].reason.endswith(f"; warning: {expected}")
    with pytest.raises(ActivityFailed) as caught:
        verify_reshard(placement=placement_server.placement_url, same_nvlink_domain="required",
                       timeout_s=0.2, interval_s=0.05)
    assert str(caught.value) == f"{expected} after 0.2 s"
    assert verify_reshard(placement=placement_server.placement_url,
                          same_nvlink_domain="ignore")["warnings"] == []
    assert [r.passed for r in session.results] == [True, False, True]


def test_other_domain_is_fine_when_the_own_was_full(placement_server: PlacementServer) -> None:
    session = new_session()
    onset = record_fault(session, applied_at=time.time() - 10).applied_at
    placement_server.then(0, healed(onset, ("node-1", 1), shard(2, "node-0", 1)))
    result = verify_reshard(placement=placement_server.placement_url,
                            same_nvlink_domain="required")
    assert result["warnings"] == [] and result["moves"][0]["to"] == "node-1/gpu1"


def test_shard_left_on_the_faulted_gpu(placement_server: PlacementServer) -> None:
    session = new_session()
    record_fault(session)
    with pytest.raises(ActivityFailed) as caught:
        verify_reshard(placement=placement_server.placement_url, timeout_s=0.3,
                       interval_s=0.05, detect_slo_s=5)
    assert str(caught.value) == ("shard 0 still on faulted GPU node-0/gpu0 after 0.3 s "
                                 "(and 1 more problem)")
    recorded = only_result(session)
    assert recorded.passed is False and recorded.measurement["polls"] >= 3
    assert recorded.measurement["verified_at"] is None


@pytest.mark.parametrize(("shards", "cordoned", "message"), [
    ([shard(0, "node-1", 0), shard(1, "node-1", 0)], None,
     "node-1/gpu0 holds 2 shards (0, 1; max 1)"),
    ([shard(0, "node-0", 1, "failed"), shard(1, "node-1", 0)], None,
     "shard 0 is failed on node-0/gpu1"),
    ([shard(0, "node-0", 1), shard(1, "node-1", 0)], ("node-0", 1),
     "shard 0 on cordoned GPU node-0/gpu1"),
    ([shard(0, "node-0", 1)], None, "shard 1 is missing from the placement"),
    ([shard(0, "node-0", 1), {**shard(1, "node-1", 0), "node": None, "gpu": None,
                              "pid": None, "url": None, "status": "failed"}], None,
     "shard 1 is failed on no GPU"),
    ([], None, "the placement lists no shards after 0.4 s (and 2 more problems)"),
])
def test_unhealthy_placements_fail_naming_the_problem(
        placement_server: PlacementServer, shards: list[dict[str, Any]],
        cordoned: tuple[str, int] | None, message: str) -> None:
    session = new_session()
    record_fault(session, applied_at=time.time() - 10)
    placement_server.then(time.time() + 0.1,
                          placement_document(shards, cordoned=cordoned))
    with pytest.raises(ActivityFailed) as caught:
        verify_reshard(placement=placement_server.placement_url, timeout_s=0.4,
                       interval_s=0.05)
    text = message if "after" in message else f"{message} after 0.4 s"
    assert str(caught.value) == text


def test_two_shards_per_gpu_when_allowed(placement_server: PlacementServer) -> None:
    session = new_session()
    onset = record_fault(session, applied_at=time.time() - 10).applied_at
    placement_server.then(0, healed(onset, ("node-1", 0)))
    result = verify_reshard(placement=placement_server.placement_url, max_shards_per_gpu=2)
    assert result["moves"][0]["to"] == "node-1/gpu0"


def test_slow_detection_and_reshard_miss_their_slos(placement_server: PlacementServer) -> None:
    session = new_session()
    onset = record_fault(session, applied_at=time.time() - 30).applied_at
    placement_server.then(0, healed(onset, ("node-0", 1), alert_after=4.5, moved_after=12.3))
    with pytest.raises(ActivityFailed) as caught:
        verify_reshard(placement=placement_server.placement_url, detect_slo_s=2)
    assert str(caught.value) == "time to detect 4.5 s > slo 2 s (missed by 2.5 s)"
    with pytest.raises(ActivityFailed) as caught:
        verify_reshard(placement=placement_server.placement_url, reshard_slo_s=10)
    assert str(caught.value) == "time to re-shard 12.3 s > slo 10 s (missed by 2.3 s)"
    assert session.results[-1].measurement["time_to_reshard_s"] == 12.3


def test_placement_from_the_target(placement_server: PlacementServer) -> None:
    session = new_session(target=Target(kind="lab",
                                        placement_url=placement_server.placement_url))
    onset = record_fault(session, applied_at=time.time() - 10).applied_at
    placement_server.then(0, healed(onset, ("node-0", 1)))
    result = verify_reshard()
    assert result["placement"] == placement_server.placement_url
    assert result["time_to_reshard_s"] == 0.35


def test_fault_gpu_without_a_shard_needs_no_move(placement_server: PlacementServer) -> None:
    session = new_session()
    record_fault(session, node="node-1", gpu=1)
    result = verify_reshard(placement=placement_server.placement_url)
    assert result["moves"] == [] and result["time_to_reshard_s"] is None
    assert result["warnings"] == ["no alert or cordon event for faulted node-1/gpu1"]
    assert only_result(session).reason.startswith("no shard was on a faulted GPU")


def test_preconditions_fail_in_one_line(session: Session) -> None:
    with pytest.raises(ActivityFailed) as caught:
        verify_reshard(placement="http://127.0.0.1:1/placement")
    assert str(caught.value) == ("verify_reshard needs a GPU fault: no fault with a GPU "
                                 "target was applied in this session")
    record_fault(session)
    with pytest.raises(ActivityFailed, match="the run target has no placement_url"):
        verify_reshard()
    with pytest.raises(ActivityFailed, match="must be 'lab', 'target' or an http"):
        verify_reshard(placement="kubernetes")
    with pytest.raises(ActivityFailed, match="same_nvlink_domain must be one of"):
        verify_reshard(placement="lab", same_nvlink_domain="yes")
    url = f"http://127.0.0.1:{free_port()}/placement"
    with pytest.raises(ActivityFailed) as caught:
        verify_reshard(placement=url, timeout_s=0.2, interval_s=0.05)
    assert str(caught.value).startswith(f"cannot read placement: cannot read {url}: ")
    assert str(caught.value).endswith(" after 0.2 s")
    assert [r.passed for r in session.results] == [False] * 5


# -- the polling logic, without HTTP ----------------------------------------------------


class ScriptedSource:
    """An in-memory placement source whose answer depends on the (fake) clock."""

    def __init__(self, clock: FakeClock, script: list[tuple[float, dict[str, Any] | None]]):
        self.clock = clock
        self.script = script
        self.reads: list[float] = []

    def describe(self) -> str:
        return "scripted"

    def read(self) -> Placement:
        now = self.clock.now()
        self.reads.append(now)
        document = [doc for at, doc in self.script if at <= now + 1e-9][-1]
        if document is None:
            raise PlacementError("connection refused")
        return parse_placement(document)


def test_polling_waits_for_the_move_on_a_fake_clock() -> None:
    clock = FakeClock(start=0.0)
    initial = placement_document([shard(0, "node-0", 0), shard(1, "node-1", 0)])
    source = ScriptedSource(clock, [(0.0, initial), (1.0, None),
                                    (2.0, healed(0.0, ("node-0", 1), moved_after=1.9))])
    check = ReshardCheck(faulted=[("node-0", 0)], onset=0.0)
    found, snapshot, polls = poll_reshard(source, check, clock, timeout_s=30, interval_s=0.2)
    assert found.problems == [] and snapshot is not None
    assert polls == 11 and clock.now() == pytest.approx(2.0)
    assert found.resharded_at == 1.9 and found.detection is not None
    assert check.origins == {0: ("node-0", 0)}


def test_polling_times_out_on_a_fake_clock() -> None:
    clock = FakeClock(start=0.0)
    initial = placement_document([shard(0, "node-0", 0), shard(1, "node-1", 0)])
    source = ScriptedSource(clock, [(0.0, initial)])
    check = ReshardCheck(faulted=[("node-0", 0)], onset=0.0)
    found, _, polls = poll_reshard(source, check, clock, timeout_s=1.0, interval_s=0.3)
    assert polls == 5
    assert found.problems == ["shard 0 still on faulted GPU node-0/gpu0"]
    assert source.reads == pytest.approx([0.0, 0.3, 0.6, 0.9, 1.0])


def test_a_moved_shard_that_vanished_from_the_events_still_counts() -> None:
    clock = FakeClock(start=0.0)
    initial = placement_document([shard(0, "node-0", 0), shard(1, "node-1", 0)])
    moved = placement_document([shard(0, "node-1", 1), shard(1, "node-1", 0)])  # no events
    source = ScriptedSource(clock, [(0.0, initial), (0.5, moved)])
    check = ReshardCheck(faulted=[("node-0", 0)], onset=0.0, nvlink_rule="required")
    found, _, _ = poll_reshard(source, check, clock, timeout_s=2, interval_s=0.5)
    assert found.problems[0].startswith("shard 0 moved to node-1/gpu1 (nvlink domain nvl-1)")
    assert found.resharded_at is None


@pytest.mark.parametrize(("document", "message"), [
    ([], "placement is not a JSON object"),
    ({"shards": [{"shard": "0", "node": "n", "gpu": 0, "status": "serving"}]},
     "shards[0].shard must be int, got '0'"),
    ({"shards": [], "gpus": [{"node": "n", "gpu": True}]},
     "gpus[0].gpu must be int, got True"),
    ({"shards": [], "events": [{"type": "shard_moved"}]},
     "events[0].t must be float, got None"),
    ({"shards": [], "events": [{"t": 1, "type": "shard_moved", "to": {"node": "n"}}]},
     "events[0].to.gpu must be int, got None"),
    # another controller's JSON (Ray Serve's) is an error naming what it has, never an
    # empty placement
    ({"applications": {"app": {}}, "controller_info": {}},
     "placement has no key shards, keys: applications, controller_info: not a placement "
     "document (shards, gpus, events); for another controller's API use "
     "verifiers.replacement with a units mapping"),
    ({"shards": {"0": "node-0"}}, "placement has shards is a JSON dict: not a placement "
     "document (shards, gpus, events); for another controller's API use "
     "verifiers.replacement with a units mapping"),
    ({"shards": [], "events": {}}, "placement.events must be a list, got a JSON dict"),
])
def test_malformed_placement_names_the_key(document: Any, message: str) -> None:
    with pytest.raises(PlacementError) as caught:
        parse_placement(document)
    assert str(caught.value) == message


def test_http_source_reads_and_sorts_events(placement_server: PlacementServer) -> None:
    document = placement_document([shard(0, "node-0", 0)], events=[
        {"t": 5.0, "type": "gpu_cordoned", "node": "node-0", "gpu": 0},
        {"t": 2, "type": "alert_firing", "node": "node-0", "gpu": 0, "alert": "X"}])
    placement_server.then(0, document)
    placement = HttpPlacementSource(placement_server.placement_url).read()
    assert [event.type for event in placement.events] == ["alert_firing", "gpu_cordoned"]
    assert placement.gpu("node-0", 1) is not None and placement.gpu("node-9", 0) is None
    assert placement.shards_on("node-0", 0)[0].pid == 100
    assert placement.time > 0 and placement.version == 1


def test_a_detection_signal_that_cannot_be_read_says_why() -> None:
    """A refused Prometheus (a port nothing listens on): the signal finds nothing and
    keeps the reason, which verify_reshard's ``no detection by ...`` then gives."""
    import socket
    import time

    from gameday.promql import PromQL
    from verifiers.detection import PromQLDetection

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    signal = PromQLDetection(PromQL(f"http://127.0.0.1:{port}", timeout_s=1.0),
                             "up > 0", now=time.time)
    assert signal.first_after(time.time() - 1) is None
    assert signal.error and f"127.0.0.1:{port}" in signal.error


def test_a_detection_signal_that_lags_the_reshard_is_read_until_it_shows(
        placement_server: PlacementServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller re-shards before the system's signal shows the fault (a Prometheus
    that has not scraped the error yet): the signal, a stand-in that answers nothing for
    its first three reads, is read again until it shows the detection."""
    import verifiers.reshard as reshard
    from verifiers.detection import Detection

    session = new_session()
    onset = record_fault(session).applied_at
    document = healed(onset, ("node-0", 1))
    document["events"] = [e for e in document["events"] if e["type"] == "shard_moved"]
    placement_server.then(onset, document)

    class Lagging:
        error = ""
        reads = 0

        def describe(self) -> str:
            return "promql lagging"

        def first_after(self, since: float) -> Detection | None:
            self.reads += 1
            return Detection(since + 0.2, "promql lagging true") if self.reads > 3 else None

    lagging = Lagging()
    monkeypatch.setattr(reshard, "detection_signal", lambda detect, session: lagging)
    result = verify_reshard(placement=placement_server.placement_url, interval_s=0.05,
                            timeout_s=5, detect={"promql": "up"}, detect_slo_s=1)
    assert lagging.reads == 4 and result["time_to_detect_s"] == 0.2
    assert result["detect_event"] == {"type": "signal", "signal": "promql lagging true"}
