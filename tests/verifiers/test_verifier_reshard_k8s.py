"""verifiers.reshard with the Kubernetes placement source.

Real: a Prometheus server scraping a test exporter that serves dcgm-exporter-style
series (``gpu``, ``UUID``, ``pod``, ``namespace``; one node labelled ``Hostname`` as in
dcgm-exporter releases, the other ``hostname`` as on its newest code), the official
``kubernetes`` client, real HTTP. STAND-IN: the Kubernetes API itself
(``gameday/testing/kube.py``, a small JSON/HTTP server speaking core/v1 pods and
nodes), since no cluster exists here; and the "controller" that moves the shard is the
test, changing the pods and the dcgm series as a scheduler and dcgm-exporter would.
"""

import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes.client  # noqa: F401 (imported now: it takes a while on a busy machine)
import pytest
from chaoslib.exceptions import ActivityFailed
from prometheus_client.metrics_core import Metric

from gameday.engine.session import deactivate
from gameday.testing.kube import KubeStandin
from tests.verifiers.verifier_helpers import (
    PrometheusUnderTest,
    new_session,
    only_result,
    record_fault,
)
from verifiers.reshard import verify_reshard

SHARD = "gameday.dev/shard"


class DcgmSeries:
    """A collector serving dcgm-exporter-style series whose labels the test changes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gpus: dict[tuple[str, int], dict[str, Any]] = {}

    def gpu(self, node: str, index: int, hostname_label: str, **extra: Any) -> None:
        with self.lock:
            self.gpus[(node, index)] = {"hostname_label": hostname_label, "pod": None,
                                        "dbe": 0, **extra}

    def collect(self) -> Iterator[Metric]:
        temp = Metric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge")
        dbe = Metric("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "double-bit ECC errors.", "gauge")
        with self.lock:
            for (node, index), gpu in sorted(self.gpus.items()):
                labels = {"gpu": str(index), "UUID": f"GPU-{node}-{index}",
                          "device": f"nvidia{index}", gpu["hostname_label"]: node,
                          "modelName": "NVIDIA H100 80GB HBM3"}
                if gpu["pod"]:
                    labels.update(namespace="inference", pod=gpu["pod"], container="server")
                temp.add_sample("DCGM_FI_DEV_GPU_TEMP", labels, 40.0)
                dbe.add_sample("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", labels, gpu["dbe"])
        yield temp
        yield dbe


@pytest.fixture
def cluster(prometheus: PrometheusUnderTest) -> Iterator[tuple[KubeStandin, DcgmSeries]]:
    api = KubeStandin().start()
    series = DcgmSeries()
    prometheus.registry.register(series)  # type: ignore[arg-type]
    try:
        yield api, series
    finally:
        prometheus.registry.unregister(series)  # type: ignore[arg-type]
        api.stop()
        deactivate()


def placement(api: KubeStandin, prometheus: PrometheusUnderTest) -> dict[str, Any]:
    return {"kubernetes": {"k8s_api_url": api.url, "k8s_api_token": api.token,
                           "namespace": "inference", "prometheus_url": prometheus.url}}


def wait_scraped(prometheus: PrometheusUnderTest, query: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(prometheus.query(query)) != count:
        assert time.monotonic() < deadline, f"{query} never had {count} series"
        time.sleep(0.2)


def test_reshard_off_an_unhealthy_gpu_joined_from_pods_and_dcgm_labels(
        prometheus: PrometheusUnderTest, cluster: tuple[KubeStandin, DcgmSeries]) -> None:
    api, series = cluster
    api.add_node("node-a", labels={"nvidia.com/gpu.clique": "rack-1.0"})
    api.add_node("node-b")
    for index in (0, 1):
        series.gpu("node-a", index, "Hostname")  # dcgm-exporter releases
        series.gpu("node-b", index, "hostname")  # dcgm-exporter's newest code
    api.add_pod("inference", "shard-0-old", "node-a", labels={SHARD: "0"})
    api.add_pod("inference", "shard-1", "node-b", labels={SHARD: "1"})
    series.gpus[("node-a", 0)]["pod"] = "shard-0-old"
    series.gpus[("node-b", 0)]["pod"] = "shard-1"
    wait_scraped(prometheus, 'DCGM_FI_DEV_GPU_TEMP{pod=~"shard-.*"}', 2)
    session = new_session()
    onset = record_fault(session, node="node-a", gpu=0).applied_at

    def controller() -> None:  # what the scheduler and dcgm-exporter would show
        time.sleep(0.3)
        series.gpus[("node-a", 0)]["dbe"] = 1
        deadline = time.monotonic() + 20
        while not any("/pods" in path for _, path, _ in api.requests):
            assert time.monotonic() < deadline  # the verifier has read the placement once
            time.sleep(0.05)
        time.sleep(0.5)
        del api.pods[("inference", "shard-0-old")]
        api.add_pod("inference", "shard-0-new", "node-a", labels={SHARD: "0"})
        with series.lock:
            series.gpus[("node-a", 0)]["pod"] = None
            series.gpus[("node-a", 1)]["pod"] = "shard-0-new"

    mover = threading.Thread(target=controller)
    mover.start()
    try:
        result = verify_reshard(placement(api, prometheus), timeout_s=20, interval_s=0.2,
                                detect={"promql": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0",
                                        "prometheus_url": prometheus.url},
                                reference=True)
    finally:
        mover.join()
    assert result["moves"] == [{
        "shard": 0, "from": "node-a/gpu0", "to": "node-a/gpu1", "at": None,
        "from_domain": "rack-1.0", "to_domain": "rack-1.0", "same_nvlink_domain": True}]
    assert result["shards"] == 2 and result["serving"] == 2
    assert result["resharded_by"] == "poll" and result["detect_event"]["type"] == "signal"
    assert 0.3 <= result["time_to_detect_s"] <= 0.3 + 1.5  # one scrape after the DBE
    assert 0.8 <= result["time_to_reshard_s"] <= 15
    assert result["time_to_respond_s"] == pytest.approx(
        result["time_to_reshard_s"] - result["time_to_detect_s"], abs=2e-3)
    assert result["respond_slo_s"] == 3.2 and result["detect_slo_s"] == 8.0
    assert result["onset"] == onset
    assert only_result(session).reason.startswith(
        "re-sharded: shard 0 node-a/gpu0 -> node-a/gpu1 in ")


def test_a_shard_left_on_the_unhealthy_gpu_fails_in_one_line(
        prometheus: PrometheusUnderTest, cluster: tuple[KubeStandin, DcgmSeries]) -> None:
    api, series = cluster
    api.add_node("node-a")
    series.gpu("node-a", 0, "hostname", dbe=1)
    series.gpu("node-a", 1, "hostname")
    api.add_pod("inference", "lone-0", "node-a", labels={SHARD: "0"})
    api.add_pod("inference", "lone-1", "node-a", labels={SHARD: "1"}, ready=False)
    series.gpus[("node-a", 0)]["pod"] = "lone-0"
    series.gpus[("node-a", 1)]["pod"] = "lone-1"
    wait_scraped(prometheus, 'DCGM_FI_DEV_GPU_TEMP{pod=~"lone-.*"}', 2)
    session = new_session()
    record_fault(session, node="node-a", gpu=0)
    with pytest.raises(ActivityFailed) as caught:
        verify_reshard(placement(api, prometheus), timeout_s=0.5, interval_s=0.2)
    assert str(caught.value) == ("shard 0 still on faulted GPU node-a/gpu0 after 0.5 s "
                                 "(and 1 more problem)")
    assert only_result(session).measurement["serving"] == 1  # lone-1 is not Ready


def test_an_unreachable_api_is_one_line(prometheus: PrometheusUnderTest) -> None:
    session = new_session()
    record_fault(session, node="node-a", gpu=0)
    with pytest.raises(ActivityFailed, match=r"^cannot read placement: kubernetes API at "
                                             r"http://127\.0\.0\.1:9: "):
        verify_reshard({"kubernetes": {"k8s_api_url": "http://127.0.0.1:9",
                                       "prometheus_url": prometheus.url}},
                       timeout_s=0.3, interval_s=0.1)
    deactivate()
