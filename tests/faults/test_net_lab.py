"""Network and service faults on the embedded lab: real processes, real Prometheus, real
HTTP through the nodes' links (CONNECT tunnels), the shipped experiments run through
the real ``gameday run`` command line. One lab for the module."""

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gameday.lab.httpjson import fetch_json
from tests.conftest import gameday, lab_agents, read_json

pytestmark = pytest.mark.lab

ROW = [[(i + 1) / 16 for i in range(16)]]


def _predict(lab_dir: Path, timeout_s: float = 8.0) -> tuple[Any, float]:
    url = read_json(lab_dir / "lab.json")["service_url"] + "/predict"
    started = time.monotonic()
    try:
        status, _ = fetch_json("POST", url, {"inputs": ROW}, timeout=timeout_s)
    except OSError as exc:
        status = type(exc).__name__
    return status, time.monotonic() - started


@pytest.mark.parametrize(("experiment", "kind"), [
    ("link-flap-node", "net.link_flap"),
    ("net-loss-node", "net.loss"),
    ("net-latency-node", "net.latency"),
    ("service-latency-router", "service.latency"),
])
def test_shipped_experiment_passes(experiment: str, kind: str, tmp_path: Path,
                                   lab_env: dict[str, str]) -> None:
    journal_path = tmp_path / "journal.json"
    result = gameday(["run", f"experiments/{experiment}.yaml", "--journal-path",
                      str(journal_path)], lab_env, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    journal = json.loads(journal_path.read_text())
    faults = journal["gameday"]["faults"]
    assert [f["kind"] for f in faults] == [kind]
    assert faults[0]["injected_at"] == "virtual" and faults[0]["reverted_at"]
    rto = next(r for r in journal["gameday"]["verifiers"] if r["verifier"].startswith("rto"))
    assert rto["passed"] and rto["measurement"]["failures"] > 0


def test_partition_hangs_the_nodes_shards_and_heals(lab_dir: Path,
                                                   lab_env: dict[str, str]) -> None:
    node1 = lab_agents(lab_dir)["node-1"]
    links = node1.inventory()["links"]
    assert [(item["name"], item["state"], item["mtu"]) for item in links] == [
        ("uplink", "up", 1500)]
    fault = node1.inject("net.partition", {"link": "uplink"}, {"duration_s": 1.5}, 30)
    try:
        status, took = _predict(lab_dir)
        assert status == 200 and 1.2 <= took < 5.0  # held, then delivered when it healed
    finally:
        node1.revert(fault["id"])
    status, took = _predict(lab_dir)
    assert status == 200 and took < 1.0


def test_service_timeout_answers_504_after_hang_s(lab_dir: Path,
                                                  lab_env: dict[str, str]) -> None:
    node0 = lab_agents(lab_dir)["node-0"]
    fault = node0.inject("service.timeout", {"name": "router"}, {"hang_s": 0.5}, 30)
    try:
        status, took = _predict(lab_dir)
        assert status == 504 and 0.45 <= took < 3.0
    finally:
        node0.revert(fault["id"])
    assert _predict(lab_dir)[0] == 200
    with pytest.raises(Exception, match=r"service\.timeout"):
        lab_agents(lab_dir)["node-1"].inject("service.timeout", {"name": "router"}, {}, 30)


def test_latency_on_a_nodes_uplink_slows_the_answers_by_the_delay(
        lab_dir: Path, lab_env: dict[str, str]) -> None:
    """net.latency on node-1's uplink: every answer needs node-1's shards, so each takes
    at least the delay longer (the lab's link holds each request once), and none after."""
    node1 = lab_agents(lab_dir)["node-1"]
    _, before = _predict(lab_dir)
    with pytest.raises(Exception, match="mechanism"):  # the host's mechanisms, not the lab's
        node1.inject("net.latency", {"link": "uplink"}, {"delay_ms": 5, "mechanism": "nfqueue"},
                     30)
    fault = node1.inject("net.latency", {"link": "uplink"},
                         {"delay_ms": 400, "jitter_ms": 100}, 30)
    try:
        assert fault["injected_at"] == "virtual"
        timings = [_predict(lab_dir) for _ in range(3)]
        assert all(status == 200 for status, _ in timings)
        assert all(0.3 <= took < 0.5 + before + 1.5 for _, took in timings), timings
        assert node1.inventory()["links"][0]["stats"]["delayed"] >= 3
    finally:
        node1.revert(fault["id"])
    status, took = _predict(lab_dir)
    assert status == 200 and took < before + 0.25
