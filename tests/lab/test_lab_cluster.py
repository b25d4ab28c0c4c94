"""The embedded lab for real: processes, Prometheus, HTTP, agents, signals. One lab for the
module; the last test takes it down and checks that nothing is left."""

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gameday.errors import LabError
from gameday.lab import api as lab
from gameday.lab.httpjson import fetch_json
from tests.lab.helpers import (
    agent,
    assert_nothing_left,
    lab_footprint,
    metrics_text,
    placement,
    predict,
    shard_entry,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.lab

LAB_JSON_KEYS = {"version", "dir", "status", "supervisor_pid", "pgid", "started_at",
                 "ready_at", "startup", "shape", "token_file", "service_url", "prometheus_url",
                 "controller_url", "placement_url", "trainer_url", "nodes", "processes"}


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("lab")
    lab.up(directory)
    try:
        yield directory
    finally:
        lab.down(directory)


@pytest.fixture
def info(lab_dir: Path) -> dict[str, Any]:
    return lab.status(lab_dir)


@pytest.fixture(scope="module")
def golden(lab_dir: Path) -> list[list[float]]:
    code, body = predict(lab.status(lab_dir))
    assert code == 200, body
    outputs: list[list[float]] = body["outputs"]
    return outputs


def test_lab_json_follows_the_contract(lab_dir: Path) -> None:
    info = lab.up(lab_dir)
    assert set(info) == LAB_JSON_KEYS
    assert info["version"] == 1 and info["status"] == "ready"
    assert info["dir"] == str(lab_dir) and info["pgid"] == info["supervisor_pid"]
    assert info["shape"] == {"nodes": 2, "gpus_per_node": 4, "shards": 6}
    assert info["placement_url"] == info["controller_url"] + "/placement"
    assert [n["name"] for n in info["nodes"]] == ["node-0", "node-1"]
    assert all(n["exporter_url"].endswith("/metrics") for n in info["nodes"])
    assert sorted(p["role"] for p in info["processes"]) == [
        "controller", "node", "node", "prometheus", "router", "storage", "supervisor",
        "trainer"]
    assert info["started_at"] < info["ready_at"]
    steps = info["startup"]  # what it waited for, in order, ending ready when it was
    assert [s["at_s"] for s in steps] == sorted(s["at_s"] for s in steps)
    assert steps[-1]["waiting_for"] is None and all(s["waiting_for"] for s in steps[:-1])
    assert abs(steps[-1]["at_s"] - (info["ready_at"] - info["started_at"])) < 0.5
    assert any(s["waiting_for"].startswith("prometheus to ") for s in steps[:-1])
    token = Path(info["token_file"])
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text().strip()) == 64


def test_status_shows_every_process_alive_and_every_shard_serving(info: dict[str, Any]) -> None:
    assert info["status"] == "ready"
    assert all(p["alive"] and p["healthy"] for p in info["processes"])
    assert all(n["faults"] == [] and n["faults_error"] is None for n in info["nodes"])
    shards = info["placement"]["shards"]
    assert [s["status"] for s in shards] == ["serving"] * 6
    assert len({(s["node"], s["gpu"]) for s in shards}) == 6
    assert info["prometheus_targets"] == {"total": 7, "up": 7, "down": []}
    text = lab.format_status(info)
    assert text.splitlines()[0].startswith(f"lab in {info['dir']}: ready (2x4/6)")
    assert "targets 7/7 up" in text and "none active" in text


def test_prometheus_scrapes_dcgm_metrics_with_their_labels(info: dict[str, Any]) -> None:
    code, body = fetch_json("GET", info["prometheus_url"]
                            + "/api/v1/query?query=DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    assert code == 200
    series = body["data"]["result"]
    assert len(series) == 8
    labels = series[0]["metric"]
    assert {"gpu", "UUID", "device", "modelName", "Hostname"} <= set(labels)
    assert {s["metric"]["Hostname"] for s in series} == {"node-0", "node-1"}


def test_predict_answers(info: dict[str, Any], golden: list[list[float]]) -> None:
    assert len(golden) == 3 and all(len(row) == 8 for row in golden)
    assert predict(info) == (200, {"outputs": golden})
    code, body = fetch_json("POST", info["service_url"] + "/predict", {"inputs": [[1.0]]})
    assert code == 400 and "16" in body["error"]


def test_double_bit_ecc_moves_the_shard_and_answers_stay_identical(
        info: dict[str, Any], golden: list[list[float]]) -> None:
    before = shard_entry(info, 0)
    node, gpu = before["node"], before["gpu"]
    client = agent(info, node)
    fault = client.inject("gpu.ecc", {"gpu": gpu},
                          {"kind": "double_bit", "count": 1, "xid": 48}, lease_s=120)
    try:
        def failing() -> str | None:
            code, body = predict(info)
            return body["error"] if code == 503 else None

        error = wait_until(failing, 5, "/predict to fail")
        where = f"{node}/gpu{gpu}"
        assert error == f"shard 0 ({where}): uncorrectable ECC error (Xid 48) on {where}"

        def moved() -> dict[str, Any] | None:
            entry = shard_entry(info, 0)
            ok = entry["status"] == "serving" and entry["gpu"] != gpu
            return entry if ok else None

        after = wait_until(moved, 20, "shard 0 to move")
        assert after["node"] == node  # same NVLink domain
        assert after["pid"] != before["pid"] and after["url"] != before["url"]
        assert wait_until(lambda: predict(info)[0] == 200, what="/predict to recover")
        assert predict(info) == (200, {"outputs": golden})
        doc = placement(info)
        bad = next(g for g in doc["gpus"] if (g["node"], g["gpu"]) == (node, gpu))
        assert bad["state"] == "cordoned" and bad["shards"] == []
        types = [e["type"] for e in doc["events"]]
        assert {"alert_firing", "gpu_cordoned", "shard_moved"} <= set(types)
        move = next(e for e in doc["events"] if e["type"] == "shard_moved")
        assert (move["shard"], move["node"], move["gpu"]) == (0, node, gpu)
        assert move["to"] == {"node": after["node"], "gpu": after["gpu"]}
        nodes = {n["name"]: n for n in lab.status(Path(info["dir"]))["nodes"]}
        assert [f["id"] for f in nodes[node]["faults"]] == [fault["id"]]
    finally:
        client.revert(fault["id"])

    def uncordoned() -> bool:
        doc = placement(info)
        return any((g["node"], g["gpu"], g["state"]) == (node, gpu, "healthy")
                   for g in doc["gpus"])

    wait_until(uncordoned, 20, "the GPU to be uncordoned")
    assert "gpu_uncordoned" in [e["type"] for e in placement(info)["events"]]
    metrics = metrics_text(info["controller_url"] + "/metrics")
    assert "gameday_controller_shard_moves_total 1.0" in metrics
    assert "gameday_controller_response_seconds_count 1.0" in metrics


def test_corrupt_weights_change_answers_silently_until_reverted(
        info: dict[str, Any], golden: list[list[float]]) -> None:
    entry = shard_entry(info, 1)
    client = agent(info, entry["node"])
    fault = client.inject("gpu.ecc", {"gpu": entry["gpu"]},
                          {"count": 0, "corrupt_weights": True}, lease_s=60)
    try:
        code, body = predict(info)
        assert code == 200 and body["outputs"] != golden
        assert shard_entry(info, 1)["pid"] == entry["pid"]  # nobody noticed
    finally:
        client.revert(fault["id"])
    assert predict(info) == (200, {"outputs": golden})


def test_a_second_up_reuses_the_lab_and_another_shape_is_refused(lab_dir: Path) -> None:
    first = lab.up(lab_dir)
    assert lab.up(lab_dir) == first
    with pytest.raises(LabError) as refused:
        lab.up(lab_dir, shards=4)
    assert str(refused.value) == (f"a lab with 2x4/6 already runs in {lab_dir}; run "
                                  "`gameday lab down` first")


def test_down_leaves_no_process_port_or_lock(lab_dir: Path) -> None:
    info = lab.up(lab_dir)
    pids, ports = lab_footprint(info)
    assert len(pids) == 14 and os.getpid() not in pids  # 6 shards + 8 (FUSE, trainer incl.)
    lab.down(lab_dir)
    assert_nothing_left(info, pids, ports)
    with pytest.raises(LabError, match="no lab runs in"):
        lab.status(lab_dir)
    lab.down(lab_dir)  # a no-op now
