"""verifiers.rpo: the loss arithmetic on hand-made series, and both measures against a
real Prometheus scraping a prometheus_client exporter run by the test (not the lab): a
stand-in training job that checkpoints and restarts, and Kafka-style stream offsets."""

import math
import threading
import time

import pytest
from chaoslib.exceptions import ActivityFailed
from prometheus_client import Gauge

from gameday.engine.session import deactivate
from gameday.promql import PromQL, PromQLError, Series
from tests.verifiers.verifier_helpers import (
    PrometheusUnderTest,
    new_session,
    only_result,
    record_fault,
)
from tests.waiting import wait_until
from verifiers.rpo import (
    assess_checkpoint_loss,
    changed_after,
    checkpoint_loss,
    find_restart,
    stream_loss,
)


def series(*samples: tuple[float, float]) -> Series:
    return Series({}, tuple(samples))


def test_loss_is_progress_before_the_drop_minus_the_resumed_step() -> None:
    progress = series((0, 0), (1, 4), (2, 8), (3, 12), (4, 16), (5, 20), (7, 11), (8, 15))
    durable = series((0, 0), (3, 10), (5, 10), (7, 10))
    resumed = series((7, 10), (8, 10))
    loss = assess_checkpoint_loss(progress, 5.5, gap_s=1.5, resolution_s=1.0,
                                  durable=durable, resumed=resumed)
    assert loss is not None
    # progress 20 shown at t=5 (scraped up to 1 s before), gone by t=6: up to 8 unseen,
    # and the step in flight
    assert (loss.progress_at_fault.low, loss.resumed_from.low, loss.lost.low) == (20, 10, 10)
    assert loss.progress_at_fault.high == 29 and loss.lost.high == 19
    assert loss.restarted_at == 7 and loss.progress_seen_at == 5
    assert loss.steps_per_s == 4 and loss.lost_s == 4.75
    assert loss.durable_at_fault == 10 and loss.resumed_behind_durable == 0


def test_progress_seen_below_the_resumed_step_is_a_bound_not_a_clamped_zero() -> None:
    """The last scrape came before the checkpoint the job resumed from: the loss is not
    0 but unknown between 0 and what the job's pace allows."""
    progress = series((0, 0), (1, 19), (2, 38), (3.2, 41), (4.2, 60))
    resumed = series((0, 0), (3.2, 40), (4.2, 40))
    loss = assess_checkpoint_loss(progress, 2.3, gap_s=1.5, resolution_s=0.25,
                                  resumed=resumed)
    assert loss is not None and loss.restart_signal == "resumed-from changed"
    assert loss.progress_at_fault.low == 38 and loss.resumed_from.low == 40
    assert loss.lost.low == 0 and loss.lost.high >= 6  # truth here: 4 to 6


def test_a_gap_just_before_the_fault_still_bounds_the_loss_at_the_earlier_pace() -> None:
    """Scrapes missed just before the fault (a loaded machine): the last run before the
    restart shows one value, so the pace comes from the run before the gap; the figure
    stays a bound instead of becoming unbounded (and the verdict inconclusive)."""
    progress = series((0, 0), (1, 4), (2, 8), (3, 12), (6, 24), (6.25, 24), (8, 11),
                      (9, 15))
    resumed = series((8, 10), (9, 10))
    loss = assess_checkpoint_loss(progress, 6.2, gap_s=1.5, resolution_s=0.25,
                                  resumed=resumed)
    assert loss is not None and loss.steps_per_s == 4
    assert loss.progress_at_fault.low == 24 and math.isfinite(loss.progress_at_fault.high)
    assert loss.progress_at_fault.high >= 25  # the step in flight at least
    assert loss.lost.low == 14 and math.isfinite(loss.lost.high)


def test_samples_before_the_job_loaded_its_checkpoint_are_not_its_progress() -> None:
    """An exporter that serves step 0 until the checkpoint is loaded: the resumed step is
    where progress starts moving at the job's pace, not 0."""
    progress = series((0, 0), (1, 100), (2, 200), (3, 292), (4, 0), (5, 0), (6, 290),
                      (7, 390))
    loss = assess_checkpoint_loss(progress, 3.5, gap_s=1.5, resolution_s=0.0)
    assert loss is not None
    assert loss.resumed_from.high == 290 and loss.resumed_from.low >= 90  # never 0
    assert loss.lost.low == 2  # 292 seen - 290
    early = series(*progress.samples[:6])  # only the not-loaded samples yet: wait
    assert assess_checkpoint_loss(early, 3.5, gap_s=1.5) is None


def test_a_restart_without_a_gap_is_seen_from_the_process_start_time() -> None:
    progress = series((0, 0), (1, 10), (2, 20), (3, 30), (4, 30), (5, 31), (6, 41))
    started = series((0, 100.0), (3, 100.0), (4.5, 104.2), (6, 104.2))
    restart_at = changed_after(started, 3.2)
    assert restart_at == 4.5
    loss = assess_checkpoint_loss(progress, 3.2, gap_s=1.5, resolution_s=0.0, exact=True,
                                  restarts=[(restart_at, "restart expression changed")],
                                  resumed=series((4.5, 30), (6, 30)))
    assert loss is not None and loss.lost.exact and loss.lost.low == 0
    assert loss.restart_signal == "restart expression changed"


def test_exact_sources_give_an_exact_figure() -> None:
    logged = series(*((t * 0.05, float(t)) for t in range(1, 47)), (5.0, 41.0), (5.05, 42.0))
    loss = assess_checkpoint_loss(logged, 2.31, gap_s=1.5, exact=True,
                                  durable_as_of=lambda t: 40.0 if t >= 2.0 else 30.0)
    assert loss is not None and loss.lost.exact
    assert (loss.progress_at_fault.low, loss.resumed_from.low, loss.lost.low) == (46, 40, 6)


def test_a_gap_is_a_restart_even_when_nothing_was_lost() -> None:
    progress = series((0, 0), (1, 10), (2, 10), (5, 10), (6, 14))
    assert find_restart(progress, onset=1.5, gap_s=1.5) == 3
    loss = assess_checkpoint_loss(progress, 1.5, gap_s=1.5, resumed=series((5, 10), (6, 10)))
    assert loss is not None and loss.lost.low == 0


def test_no_restart_yet_and_restarts_before_the_onset_are_ignored() -> None:
    progress = series((0, 5), (1, 2), (2, 6), (3, 10))
    assert find_restart(progress, onset=1.5, gap_s=1.5) is None
    assert assess_checkpoint_loss(progress, 1.5, gap_s=1.5) is None


def test_resuming_behind_the_last_durable_checkpoint_is_noted() -> None:
    progress = series((0, 0), (1, 20), (2, 30), (3, 5), (4, 15))
    durable = series((0, 0), (1, 20), (2, 20))
    loss = assess_checkpoint_loss(progress, 2.5, gap_s=1.5, durable=durable,
                                  resumed=series((3, 5), (4, 5)))
    assert loss is not None and loss.resumed_behind_durable == 15 and loss.lost.low == 25


class StandInJob:
    """A stand-in training job: steps at 20/s, a durable checkpoint every 10 steps,
    exported through prometheus_client; ``crash()`` restarts it from its checkpoint."""

    def __init__(self, prometheus: PrometheusUnderTest) -> None:
        registry = prometheus.registry
        self.step_gauge = Gauge("job_step", "step", registry=registry)
        self.durable_gauge = Gauge("job_checkpoint_step", "durable step", registry=registry)
        self.resumed_gauge = Gauge("job_resumed_from_step", "resumed from", registry=registry)
        self.step = 0
        self.durable = 0
        self.stalled = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self._lock:
                self.step += 1
                if self.step % 10 == 0 and not self.stalled:
                    self.durable = self.step
                self.step_gauge.set(self.step)
                self.durable_gauge.set(self.durable)

    def crash(self) -> tuple[int, int]:
        """Restart from the last durable checkpoint; return (progress, resumed)."""
        with self._lock:
            lost_at, self.step = self.step, self.durable
            self.resumed_gauge.set(self.durable)
            self.step_gauge.set(self.step)
            return lost_at, self.durable

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_checkpoint_loss_against_a_real_prometheus(prometheus: PrometheusUnderTest) -> None:
    job = StandInJob(prometheus)
    try:
        wait_until(lambda: prometheus.query("job_step > 20"), 10, "job_step > 20", every_s=0.2)
        job.stalled = True  # the store stalls: no checkpoint becomes durable
        time.sleep(1.5)
        session = new_session()
        record_fault(session, kind="process.kill")
        progress, resumed = job.crash()
        result = checkpoint_loss(progress="job_step", durable="job_checkpoint_step",
                                 resumed="job_resumed_from_step",
                                 prometheus_url=prometheus.url, slo_steps=200,
                                 timeout_s=15, interval_s=0.3)
        truth = progress - resumed
        assert result["resumed_from"] == resumed and result["met"] is True
        # Prometheus sees progress once a second: a bound that holds the truth
        assert result["lost_steps_min"] <= truth <= result["lost_steps_max"]
        assert result["exact"] is False and result["resolution_steps"] > 0
        assert 8 <= result["steps_per_s"] <= 21  # 20/s at most: a 50 ms wait per step
        assert result["lost_s"] == pytest.approx(
            result["lost_steps_max"] / result["steps_per_s"], abs=0.01)
        recorded = only_result(session)
        low, high = result["lost_steps_min"], result["lost_steps_max"]
        assert recorded.passed is True and recorded.reason.startswith(
            f"rpo {low:g} to {high:g} steps (")
        deactivate()

        for slo, verdict in ((low - 1, "missed"), ((low + high) // 2, "inconclusive")):
            session = new_session()  # the same loss against the experiment's slo.rpo_steps
            session.extension = type(session.extension)(
                slo=type(session.extension.slo)(rpo_steps=slo))
            record_fault(session, kind="process.kill", applied_at=result["onset"])
            with pytest.raises(ActivityFailed) as caught:
                checkpoint_loss(progress="job_step", durable="job_checkpoint_step",
                                resumed="job_resumed_from_step",
                                prometheus_url=prometheus.url, timeout_s=5)
            if verdict == "missed":
                assert str(caught.value).startswith(
                    f"rpo {low:g} to {high:g} steps > slo {slo:g} steps (missed by 1 steps; ")
            else:
                assert str(caught.value).startswith(
                    f"inconclusive: rpo {low:g} to {high:g} steps (")
            assert only_result(session).measurement["verdict"] == verdict
            assert only_result(session).passed is False
            deactivate()
    finally:
        job.close()
        deactivate()


def test_checkpoint_loss_fails_in_one_line_when_no_restart_comes(
        prometheus: PrometheusUnderTest) -> None:
    session = new_session()
    record_fault(session, kind="process.kill")
    with pytest.raises(ActivityFailed, match=r"^job did not restart within timeout 1 s after "
                                             r"the fault \(progress last 3, no restart and "
                                             r"resumed step seen\)"):
        checkpoint_loss(progress='max(test_queue_depth{queue="a"})', durable=None,
                        resumed=None, prometheus_url=prometheus.url, timeout_s=1,
                        interval_s=0.2)
    with pytest.raises(ActivityFailed, match=r"returned 2 series .*aggregate it to one"):
        checkpoint_loss(progress="test_queue_depth", prometheus_url=prometheus.url,
                        timeout_s=1)
    deactivate()


def test_stream_loss_against_a_real_prometheus(prometheus: PrometheusUnderTest) -> None:
    accepted = Gauge("topic_log_end_offset", "accepted", ["partition"],
                     registry=prometheus.registry)
    committed = Gauge("group_committed_offset", "committed", ["partition"],
                      registry=prometheus.registry)
    for partition, offset in (("0", 100), ("1", 200)):
        accepted.labels(partition=partition).set(offset)
        committed.labels(partition=partition).set(offset - 40)
    wait_until(lambda: prometheus.query("group_committed_offset"), 10,
               "group_committed_offset", every_s=0.2)
    time.sleep(1.2)
    session = new_session()
    record_fault(session, kind="process.kill")
    accepted.labels(partition="0").set(500)  # after the fault: not counted
    committed.labels(partition="0").set(100)  # caught up
    committed.labels(partition="1").set(170)  # 30 lost for good
    with pytest.raises(ActivityFailed) as caught:
        stream_loss(accepted="max by (partition) (topic_log_end_offset)",
                    committed="max by (partition) (group_committed_offset)",
                    prometheus_url=prometheus.url, slo_messages=0, settle_s=1.5,
                    timeout_s=15, interval_s=0.3)
    # (offsets that never moved before the fault give no scrape interval: the 500 may
    # have been accepted before the fault, for all the scrapes can tell)
    assert str(caught.value) == ('stream lost 30 to 430 messages > slo 0 (missed by 30; '
                                 '{partition="1"} lost 30; accepted\'s scrape interval '
                                 'unknown)')
    result = only_result(session).measurement
    assert [(s["series"], s["lost"], s["lost_max"]) for s in result["per_series"]] == [
        ('{partition="0"}', 0, 400), ('{partition="1"}', 30, 30)]
    assert result["resolution_s"] is None and result["verdict"] == "missed"
    deactivate()


class KafkaExporterStandIn:
    """Kafka exporter series (``kafka_topic_partition_current_offset``,
    ``kafka_consumergroup_current_offset``) on the Prometheus exporter, moved by a real
    producer thread (20 offsets/s per partition) and a consumer committing 10 behind;
    ``fault()`` freezes partition 1's consumer 30 offsets behind what was accepted at
    that instant, for good, and returns that ground truth. Kafka itself is not
    installed here; the series names and labels are the kafka_exporter's."""

    def __init__(self, prometheus: PrometheusUnderTest) -> None:
        self.accepted = Gauge("kafka_topic_partition_current_offset", "log end offset",
                              ["topic", "partition"], registry=prometheus.registry)
        self.committed = Gauge("kafka_consumergroup_current_offset", "committed",
                               ["consumergroup", "topic", "partition"],
                               registry=prometheus.registry)
        self.offsets = {"0": 1000, "1": 5000}
        self.frozen: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self._lock:
                for partition in self.offsets:
                    self.offsets[partition] += 1
                    self.accepted.labels(topic="orders", partition=partition).set(
                        self.offsets[partition])
                    committed = self.frozen.get(partition, self.offsets[partition] - 10)
                    self.committed.labels(consumergroup="billing", topic="orders",
                                          partition=partition).set(committed)

    def fault(self) -> int:
        with self._lock:
            self.frozen["1"] = self.offsets["1"] - 30
            return 30

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_stream_loss_through_kafka_exporter_series_states_its_resolution(
        prometheus: PrometheusUnderTest) -> None:
    exporter = KafkaExporterStandIn(prometheus)
    accepted = 'max by (partition) (kafka_topic_partition_current_offset{topic="orders"})'
    committed = ('max by (partition) (kafka_consumergroup_current_offset{topic="orders",'
                 'consumergroup="billing"})')
    try:
        wait_until(lambda: len(prometheus.query(
            "count_over_time(kafka_topic_partition_current_offset[30s]) >= 4")) == 2, 30,
            "four scrapes of the offsets", every_s=0.2)
        session = new_session()
        record_fault(session, kind="process.kill")
        truth = exporter.fault()
        result = stream_loss(accepted=accepted, committed=committed,
                             prometheus_url=prometheus.url, settle_s=1.5, timeout_s=20,
                             interval_s=0.3)
        assert result["lost_min"] <= truth <= result["lost_max"]
        assert 0.8 <= result["resolution_s"] <= 1.3  # the fixture scrapes every 1 s
        assert result["exact"] is (result["lost_min"] == result["lost_max"])
        assert result["verdict"] == "no objective"
        low, high = result["lost_min"], result["lost_max"]
        print(f"truth {truth}; measured {low:g} to {high:g}, resolution "
              f"{result['resolution_s']:g} s")
        deactivate()
        for slo, verdict in ((low - 1, "missed"), (high, "met"),
                             ((low + high) / 2, "inconclusive")):
            if verdict == "inconclusive" and low == high:
                continue
            session = new_session()
            record_fault(session, kind="process.kill", applied_at=result["onset"])
            if verdict == "met":
                stream_loss(accepted=accepted, committed=committed,
                            prometheus_url=prometheus.url, slo_messages=slo, settle_s=1.0,
                            timeout_s=10)
            else:
                with pytest.raises(ActivityFailed) as caught:
                    stream_loss(accepted=accepted, committed=committed,
                                prometheus_url=prometheus.url, slo_messages=slo,
                                settle_s=1.0, timeout_s=10)
                start = ("stream lost" if verdict == "missed" else "inconclusive: stream lost")
                assert str(caught.value).startswith(f"{start} {low:g} to {high:g} messages ")
                assert "accepted scraped every " in str(caught.value)
            assert only_result(session).measurement["verdict"] == verdict
            deactivate()
    finally:
        exporter.close()
        deactivate()


def test_promql_errors_are_one_line(prometheus: PrometheusUnderTest) -> None:
    with pytest.raises(PromQLError, match=r"^query 'sum\(' failed at .*: HTTP 400: "):
        PromQL(prometheus.url).instant("sum(")
    with pytest.raises(PromQLError, match="cannot reach Prometheus"):
        PromQL("http://127.0.0.1:9", timeout_s=0.5).instant("up")
