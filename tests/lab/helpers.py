"""Helpers for tests that run a real lab."""

import fcntl
import json
import os
import socket
import urllib.request
from pathlib import Path
from typing import Any, TypeVar

from gameday.lab.httpjson import fetch_json
from gameday.lab.proc import group_members, pid_alive
from gameday.node.faultfs.mount import fuse_mounts
from gameday.wire.agent_client import AgentClient

T = TypeVar("T")

#: A fixed batch of inputs (16 features each).
INPUTS = [[(i + 1) / 16 for i in range(16)], [-0.5] * 16, [float(i % 3) for i in range(16)]]


def metrics_text(url: str) -> str:
    """The body of a ``/metrics`` page."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text: str = response.read().decode()
    return text


def lab_json(lab_dir: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((lab_dir / "lab.json").read_text())
    return document


def predict(info: dict[str, Any]) -> tuple[int, Any]:
    return fetch_json("POST", info["service_url"] + "/predict", {"inputs": INPUTS},
                      timeout=10.0)


def placement(info: dict[str, Any]) -> dict[str, Any]:
    code, body = fetch_json("GET", info["placement_url"])
    assert code == 200
    document: dict[str, Any] = body
    return document


def agent(info: dict[str, Any], node: str) -> AgentClient:
    token = Path(info["token_file"]).read_text().strip()
    [url] = [n["agent_url"] for n in info["nodes"] if n["name"] == node]
    return AgentClient(url, token)


def shard_entry(info: dict[str, Any], shard: int) -> dict[str, Any]:
    entry: dict[str, Any] = placement(info)["shards"][shard]
    return entry


def port_of(url: str) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1].split("/")[0])


def lab_footprint(info: dict[str, Any]) -> tuple[list[int], list[int]]:
    """Every pid and port of a running lab (shards included)."""
    shards = placement(info)["shards"]
    pids = [p["pid"] for p in info["processes"]] + [s["pid"] for s in shards]
    urls = [p["url"] for p in info["processes"] if p["url"]]
    urls += [n["exporter_url"] for n in info["nodes"]] + [s["url"] for s in shards]
    return pids, sorted({port_of(u) for u in urls})


def processes_mentioning(directory: Path) -> list[str]:
    """Command lines of live processes that name ``directory`` (a lab's processes do)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and pid_alive(int(entry.name)):
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(directory) in cmdline:
                found.append(cmdline)
    return found


def assert_nothing_left(info: dict[str, Any], pids: list[int], ports: list[int]) -> None:
    lab_dir = Path(info["dir"])
    assert [p for p in pids if pid_alive(p)] == []
    assert group_members(info["pgid"]) == []
    assert processes_mentioning(lab_dir) == []
    assert fuse_mounts(lab_dir) == [], "the store is still mounted"
    for port in ports:
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"
    assert not (lab_dir / "lab.json").exists()
    fd = os.open(lab_dir / "lab.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
    finally:
        os.close(fd)
