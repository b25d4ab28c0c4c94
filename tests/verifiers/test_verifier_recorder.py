"""gameday.engine.recorder and the RTO verifier's use of it: ticks on a FakeClock; the background
recorder against a real HTTP model server that fails for a known wall-clock window;
time to detect from a placement event log (a JSON endpoint, not the lab) and from a
real Prometheus scraping a test exporter; the run control starting the recorder and the
journal keeping its samples."""

import time

import pytest
from chaoslib.exceptions import ActivityFailed
from prometheus_client import Gauge

from gameday import controls
from gameday.clock import FakeClock
from gameday.engine.recorder import Channel, Reading, Recorder
from gameday.engine.session import Session, deactivate
from gameday.promql import PromQL
from tests.verifiers.verifier_helpers import (
    ModelServer,
    PlacementServer,
    PrometheusUnderTest,
    new_session,
    only_result,
    placement_document,
    record_fault,
    shard,
)
from tests.waiting import wait_until
from verifiers.detection import PlacementDetection, PromQLDetection
from verifiers.placement import HttpPlacementSource
from verifiers.rto import measure_recovery
from verifiers.sli import sli_channels


@pytest.fixture(autouse=True)
def _fresh_session() -> object:
    yield
    deactivate()


def test_ticks_on_a_fake_clock_and_the_combined_timeline() -> None:
    clock = FakeClock()
    states = {"http": [True, False, True], "promql": [True, True, False]}
    transitions: list[tuple[str, bool]] = []

    def sampler(name: str):  # type: ignore[no-untyped-def]
        def sample() -> tuple[bool, str]:
            clock.advance(0.01)  # each sample takes 10 ms
            ok = states[name].pop(0)
            return ok, "" if ok else f"{name} down"
        return sample

    recorder = Recorder([Channel("http", "GET x", sampler("http")),
                         Channel("promql", "promql y", sampler("promql"), 0.5)], clock=clock,
                        on_transition=lambda name, r: transitions.append((name, r.ok)))
    for _ in range(3):
        recorder.tick()
        clock.advance(0.1)
    http = recorder.readings("http")
    assert [r.ok for r in http] == [True, False, True]
    assert http[1].latency_s == pytest.approx(0.01) and http[1].error == "http down"
    # the third http sample (OK) was taken before promql's third (failing) one
    assert [r.ok for r in recorder.combined()] == [True, False, True]
    assert transitions == [("http", True), ("promql", True), ("http", False), ("http", True),
                           ("promql", False)]
    document = recorder.to_json()
    assert document["channels"][0]["samples"][1][:2] == [round(http[1].t, 3), False]
    assert document["channels"][0]["samples"][1][3] == "http down"


def test_a_sampler_that_raises_is_a_failed_reading() -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    recorder = Recorder([Channel("x", "x", broken)], clock=FakeClock())
    assert recorder.sample(recorder.channel()) == Reading(1_000_000.0, False, 0.0,
                                                          "RuntimeError: boom")


def test_an_answer_that_waited_for_a_thread_is_placed_when_it_arrived() -> None:
    """The recorder stamps a sample when it is sent, then a pool thread asks; on a busy
    machine the thread can start late. The reading's arrival (``done_at``) is measured
    from the send, so it is never placed before the answer really came back (an RTO
    stated too early, under load, before this). The pool's late start is made here by
    the clock moving on between the two halves of a sample."""
    clock = FakeClock()
    answered: list[float] = []

    def sampler() -> tuple[bool, str]:
        clock.sleep(0.01)  # the answer's own round trip
        answered.append(clock.now())
        return True, ""

    recorder = Recorder([Channel("x", "x", sampler)], clock=clock)
    channel = recorder.channel()
    sent = recorder._send(channel)
    clock.sleep(0.25)  # the pool thread starts late
    reading = recorder._finish(channel, sent)
    assert reading.t == 1_000_000.0 and reading.done_at >= answered[0]
    assert reading.latency_s == pytest.approx(0.26)


def test_background_recorder_measures_a_real_outage_window(model: ModelServer) -> None:
    session = new_session()
    session.recorder = Recorder(sli_channels({"http": f"{model.url}/predict",
                                              "interval_s": 0.05, "timeout_s": 0.5}))
    session.recorder.start()
    try:
        time.sleep(0.3)
        onset = record_fault(session).applied_at
        model.fail_window = (onset + 0.2, onset + 0.9)
        result = measure_recovery(stable_for_s=0.5, timeout_s=10, slo_s=5, detect={})
    finally:
        session.recorder.stop()
    assert onset + 0.15 <= result["detected_at"] < onset + 0.35
    assert onset + 0.85 <= result["recovered_at"] < onset + 1.05
    assert result["rto_s"] == pytest.approx(result["recovered_at"] - onset, abs=1e-3)
    recorded = only_result(session).measurement
    assert recorded["recorder"] == "run"
    assert recorded["timeline"][0][1] is True  # samples before the onset are kept
    readings = session.recorder.readings()
    assert readings[0].t < onset and len(readings) >= 20


def test_no_sli_and_no_recorder_fails_in_one_line(session: Session) -> None:
    record_fault(session)
    with pytest.raises(ActivityFailed, match=r"^measure_recovery: no sli given and no "
                                             r"recorder runs: pass sli"):
        measure_recovery()


def test_time_to_detect_and_to_recover_from_placement_events(
        model: ModelServer, placement_server: PlacementServer) -> None:
    session = new_session()
    onset = record_fault(session, node="node-0", gpu=0).applied_at
    model.fail_window = (onset, onset + 0.6)
    events = [{"t": onset - 5, "type": "alert_firing", "node": "node-0", "gpu": 0,
               "alert": "Old"},
              {"t": onset + 0.25, "type": "alert_firing", "node": "node-1", "gpu": 0,
               "alert": "Other"},
              {"t": onset + 0.3, "type": "alert_firing", "node": "node-0", "gpu": 0,
               "alert": "GpuDoubleBitEcc"}]
    placement_server.then(0.0, placement_document([shard(0, "node-0", 1)], events=events))
    with pytest.raises(ActivityFailed) as caught:
        measure_recovery({"http": f"{model.url}/predict", "timeout_s": 0.5},
                         stable_for_s=0.3, interval_s=0.05, timeout_s=10, slo_s=5,
                         detect={"placement": placement_server.placement_url},
                         detect_slo_s=0.1, recover_slo_s=5)
    assert str(caught.value).startswith("time to detect 0.3 s > slo 0.1 s (missed by 0.2 s)")
    result = only_result(session).measurement
    assert result["time_to_detect_s"] == 0.3 and result["detect_met"] is False
    assert result["detect_signal"] == "alert_firing node-0/gpu0 (GpuDoubleBitEcc)"
    assert result["time_to_recover_s"] == pytest.approx(result["rto_s"] - 0.3, abs=1e-3)
    assert result["met"] is True and result["recover_met"] is True


def test_placement_detection_ignores_other_gpus_and_earlier_events(
        placement_server: PlacementServer) -> None:
    events = [{"t": 5.0, "type": "gpu_cordoned", "node": "node-1", "gpu": 0},
              {"t": 7.0, "type": "shard_moved", "node": "node-0", "gpu": 0, "shard": 0,
               "to": {"node": "node-0", "gpu": 1}}]
    placement_server.then(0.0, placement_document([shard(0, "node-0", 1)], events=events))
    source = HttpPlacementSource(placement_server.placement_url)
    assert PlacementDetection(source, [("node-0", 0)]).first_after(1.0) is None
    found = PlacementDetection(source, []).first_after(1.0)
    assert found is not None and (found.t, found.what) == (5.0, "gpu_cordoned node-1/gpu0")


def test_promql_detection_finds_the_rising_edge(prometheus: PrometheusUnderTest) -> None:
    firing = Gauge("test_alert_firing", "an alert-like series", registry=prometheus.registry)
    firing.set(0)
    # Prometheus 2.42 scrapes a new target first some 5 s after it starts, later on a
    # loaded machine: wait for it (and fail saying so) rather than race it
    wait_until(lambda: bool(prometheus.query("test_alert_firing")), timeout_s=30,
               what="the first scrape of the series")
    time.sleep(1.1)  # so that a scrape before the onset saw it
    onset = time.time()
    time.sleep(0.5)
    firing.set(1)
    flipped = time.time()
    wait_until(lambda: bool(prometheus.query("test_alert_firing == 1")), timeout_s=30,
               what="a scrape that saw the flip", every_s=0.1)
    client = PromQL(prometheus.url)
    found = PromQLDetection(client, "test_alert_firing == 1", time.time, 0.1).first_after(onset)
    assert found is not None
    assert flipped - 0.1 <= found.t <= flipped + 1.2  # the scrape that saw it (1 s scrapes)
    already = PromQLDetection(client, "test_alert_firing + 1", time.time, 0.1)
    late = already.first_after(onset)
    assert late is not None and late.t == onset and "already true" in late.what


def test_the_control_starts_the_recorder_and_the_journal_keeps_it(model: ModelServer) -> None:
    session = new_session()
    controls._owned.append(session)
    controls.before_method_control({}, configuration={},
                                   sli={"http": f"{model.url}/predict", "interval_s": 0.05})
    assert session.recorder is not None and session.recorder.running
    time.sleep(0.3)
    model.broken = True
    time.sleep(0.2)
    model.broken = False
    time.sleep(0.2)
    state: dict[str, object] = {"status": "completed"}
    controls.after_experiment_control({}, state=state)
    controls.cleanup_control()
    assert not session.recorder.running
    sli = state["gameday"]["sli"]  # type: ignore[index]
    samples = sli["channels"][0]["samples"]
    assert sli["channels"][0]["sli"] == f"POST {model.url}/predict" and len(samples) >= 8
    assert sorted({s[1] for s in samples}) == [False, True]
    names = [event["event"] for event in state["gameday"]["timeline"]]  # type: ignore[index]
    assert names == ["sli_up", "sli_down", "sli_up"]


def test_follow_recorder_on_a_fake_clock_measures_from_the_timeline() -> None:
    """The recorder is ticked whenever the follower sleeps: no thread, no real time."""
    from verifiers.rto import RecoveryTracker, follow_recorder

    clock = FakeClock()
    onset = clock.now() + 0.5
    down = (onset + 0.35, onset + 1.25)  # off the 100 ms grid

    def sampler() -> tuple[bool, str]:
        ok = not down[0] <= clock.now() < down[1]
        return ok, "" if ok else "answered 503"

    recorder = Recorder([Channel("http", "fake", sampler)], clock=clock)

    class TickingClock(FakeClock):
        def sleep(self, seconds: float) -> None:
            clock.advance(seconds)
            recorder.tick()

        def now(self) -> float:
            return clock.now()

        def monotonic(self) -> float:
            return clock.monotonic()

    recorder.tick()
    tracker = RecoveryTracker(onset=onset, stable_for_s=1.0)
    follow_recorder(recorder, tracker, TickingClock(), interval_s=0.1, timeout_s=30)
    assert tracker.detected_at == pytest.approx(onset + 0.4, abs=1e-6)  # first tick inside
    assert tracker.recovered_at == pytest.approx(onset + 1.25, abs=1e-6)  # 1.2 down, 1.3 up
    assert tracker.samples == len(recorder.readings())


def test_a_promql_sli_channel_against_a_real_prometheus(prometheus: PrometheusUnderTest,
                                                        model: ModelServer) -> None:
    channels = sli_channels({"http": f"{model.url}/predict", "promql": "test_queue_depth > 5",
                             "prometheus_url": prometheus.url})
    assert [(c.name, c.interval_s) for c in channels] == [("http", 0.1), ("promql", 0.5)]
    recorder = Recorder(channels)
    recorder.tick()
    assert recorder.readings("promql")[0].ok is True  # queue b = 7
    recorder.channels[1] = sli_channels({"promql": "test_queue_depth > 100",
                                         "prometheus_url": prometheus.url})[0]
    recorder.channels[1].name = "promql"
    recorder.tick()
    assert recorder.readings("promql")[-1].error == "promql returned no series"
    recorder.tick()  # an HTTP sample counts against the PromQL sample before it
    assert [r.ok for r in recorder.combined()] == [True, True, False]
    assert recorder.combined()[-1].error == "promql: promql returned no series"


def test_a_held_sample_does_not_stop_the_sampling_and_nothing_passes_it() -> None:
    """Real threads: the first sample is held (a server queueing it) while the next ones
    are sent on cadence and answered; nothing is settled past the held one until it is
    answered, then every reading is, in send order, with both stamps."""
    import threading

    release = threading.Event()
    calls: list[int] = []
    lock = threading.Lock()

    def sample() -> tuple[bool, str]:
        with lock:
            calls.append(len(calls))
            first = len(calls) == 1
        if first:
            release.wait(5)
        return True, ""

    recorder = Recorder([Channel("http", "held", sample, 0.02, in_flight=8)])
    transitions: list[bool] = []
    recorder.on_transition = lambda name, reading: transitions.append(reading.ok)
    recorder.start()
    try:
        wait_until(lambda: len(recorder.readings()) >= 5, timeout_s=10,
                   what="samples answered while the first is held")
        assert recorder.settled() == [] and recorder.combined() == []
        release.set()
        wait_until(lambda: len(recorder.settled()) >= 6, timeout_s=10, what="settled")
    finally:
        recorder.stop()
    settled = recorder.settled()
    assert [r.t for r in settled] == sorted(r.t for r in settled)
    assert settled[0].latency_s > settled[1].latency_s  # held, then answered at once
    assert settled[0].done_at >= settled[1].done_at
    assert transitions == [True]
