"""The channels of ``bench/injection_latency.py``: how each fault kind is injected on
the lab and how it is seen (and seen gone) through its channel.

:class:`Lab` is the running lab as a user reaches it (lab.json, agents, ``/predict``,
the placement, Prometheus); :func:`case_for` gives a fault kind's :class:`Case`, whose
``prepare`` picks a target and parameters for one :class:`Trial`.
"""

import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gameday.contract.gpus import gpu_label
from gameday.errors import GamedayError
from gameday.kinds import CATALOGUE
from gameday.lab.httpjson import fetch_json
from gameday.wire.agent_client import AgentClient

__all__ = ["PROBE_TIMEOUT_S", "SETTLE_DEADLINE_S", "BenchError", "Case", "Lab", "Trial",
           "case_for", "proc_state", "wait"]

ROW = [[(i + 1) / 16 for i in range(16)]]
PROBE_TIMEOUT_S = 0.05
PROMETHEUS_POLL_S = 0.02
LOCAL_POLL_S = 0.001
SCRAPE_INTERVAL_MS = 1000.0
METRIC_GOAL_MS = SCRAPE_INTERVAL_MS + 100.0
DIRECT_GOAL_MS = 100.0
SETTLE_DEADLINE_S = 90.0
HOG_MEMORY_MIB = 64
HOG_CPU_SEEN_NS = 10_000_000


class BenchError(Exception):
    """A bench step did not finish in time, or the lab misbehaved (one line)."""


def wait(what: str, done: Callable[[], bool], deadline_s: float, poll_s: float) -> None:
    end = time.perf_counter() + deadline_s
    while not done():
        if time.perf_counter() > end:
            raise BenchError(f"{what} not within {deadline_s:g} s")
        time.sleep(poll_s)


@dataclass
class Lab:
    """The running lab as the bench reaches it: lab.json, agents, HTTP endpoints."""

    info: dict[str, Any]
    agents: dict[str, AgentClient] = field(init=False)

    def __post_init__(self) -> None:
        token = Path(self.info["token_file"]).read_text().strip()
        self.agents = {n["name"]: AgentClient(n["agent_url"], token)
                       for n in self.info["nodes"]}

    def predict_ok(self, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
        try:
            status, _ = fetch_json("POST", self.info["service_url"] + "/predict",
                                   {"inputs": ROW}, timeout=timeout_s)
        except OSError:
            return False
        return status == 200

    def placement(self) -> dict[str, Any]:
        status, body = fetch_json("GET", self.info["placement_url"], timeout=2.0)
        if status != 200 or not isinstance(body, dict):
            raise BenchError(f"placement answered {status}")
        return body

    def settled(self) -> bool:
        try:
            doc = self.placement()
        except (OSError, BenchError):
            return False
        return (all(s["status"] == "serving" for s in doc["shards"])
                and all(g["state"] == "healthy" for g in doc["gpus"])
                and self.predict_ok(2.0))

    def settle(self) -> None:
        wait("the lab settling (all shards serving, all GPUs healthy, /predict 200)",
             self.settled, SETTLE_DEADLINE_S, 0.1)

    def spare_gpu(self) -> tuple[str, int]:
        for gpu in reversed(self.placement()["gpus"]):
            if not gpu["shards"] and gpu["state"] == "healthy":
                return str(gpu["node"]), int(gpu["gpu"])
        raise BenchError("no spare GPU (one holding no shard) in the placement")

    def shard_pid(self, shard: int = 0) -> int:
        for item in self.placement()["shards"]:
            if item["shard"] == shard and item["status"] == "serving":
                return int(item["pid"])
        raise BenchError(f"shard {shard} is not serving")

    def series(self, metric: str, node: str, gpu: int) -> float | None:
        query = f'{metric}{{Hostname="{node}",gpu="{gpu}"}}'
        url = (self.info["prometheus_url"] + "/api/v1/query?"
               + urllib.parse.urlencode({"query": query}))
        status, body = fetch_json("GET", url, timeout=2.0)
        if status != 200 or not isinstance(body, dict) or body.get("status") != "success":
            raise BenchError(f"Prometheus answered {status} to {query}")
        result = body["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def active_faults(self) -> list[dict[str, Any]]:
        return [f for client in self.agents.values() for f in client.faults()]


@dataclass
class Trial:
    """One injection: where, with what, and how to see it come and go."""

    node: str
    target: dict[str, Any]
    params: dict[str, Any]
    seen: Callable[[dict[str, Any]], bool]  # given the fault record
    gone: Callable[[dict[str, Any]], bool]
    ready: Callable[[], bool] = lambda: True  # the channel shows no fault before the inject


@dataclass(frozen=True)
class Case:
    kind: str
    channel: str
    goal_ms: float
    poll_s: float
    prepare: Callable[[Lab], Trial]
    # inject at a random phase of the scrape cycle: up to this many seconds after the
    # channel was last seen clean (which happens right after a scrape)
    phase_s: float = 0.0


# -- channels -------------------------------------------------------------------------

#: What a GPU kind's catalogue entry leaves to its caller: the one of its "give this or
#: that" parameters, or its required one, that a trial sets. Every other parameter is
#: the catalogue's default; a GPU kind missing here whose entry has no usable default
#: stops the bench with the catalogue's own error, naming the parameter.
GPU_CHOSEN: dict[str, dict[str, Any]] = {
    "gpu.oom": {"fraction": 0.5}, "gpu.memory_leak": {"rate_fraction_per_s": 0.5},
    "gpu.xid": {"xid": 31}}


def gpu_metrics(kind: str) -> tuple[str, ...]:
    """The DCGM series the catalogue says ``kind`` is seen through, in its order."""
    return tuple(dict.fromkeys(re.findall(r"\bDCGM_FI_[A-Z0-9_]+",
                                          CATALOGUE[kind].seen_through)))


def gpu_params(kind: str) -> dict[str, Any]:
    """A trial's parameters of ``kind``: the catalogue's defaults (those that are not
    None), and ``GPU_CHOSEN``."""
    try:
        checked = CATALOGUE[kind].parse(GPU_CHOSEN.get(kind, {})).to_json()
    except GamedayError as exc:
        raise BenchError(f"{kind}: {exc} (give it in GPU_CHOSEN)") from None
    return {name: value for name, value in checked.items() if value is not None}


def _gpu_trial(kind: str) -> Callable[[Lab], Trial]:
    metrics = gpu_metrics(kind)
    if not metrics:
        raise BenchError(f"{kind}: its catalogue entry names no DCGM series it is seen "
                         f"through")
    params = gpu_params(kind)

    def prepare(lab: Lab) -> Trial:
        node, gpu = lab.spare_gpu()

        def now() -> dict[str, float | None]:
            return {metric: lab.series(metric, node, gpu) for metric in metrics}

        baseline = now()
        if all(value is None for value in baseline.values()):
            raise BenchError(f"none of {', '.join(metrics)} of {gpu_label(node, gpu)} is "
                             f"in Prometheus")
        return Trial(node, {"gpu": gpu}, params, seen=lambda _f: now() != baseline,
                     gone=lambda _f: now() == baseline)

    return prepare


PREDICT_CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "net.link_flap": ("node-1", {"link": "uplink"}, {"down_s": 30.0, "count": 1}),
    "net.loss": ("node-1", {"link": "uplink"}, {"percent": 100.0}),
    "net.partition": ("node-1", {"link": "uplink"}, {}),
    "net.latency": ("node-1", {"link": "uplink"}, {"delay_ms": 200.0}),
    "service.latency": ("node-0", {"name": "router"}, {"delay_ms": 200.0}),
    "service.timeout": ("node-0", {"name": "router"}, {"hang_s": 0.3}),
}


def _predict_trial(kind: str) -> Callable[[Lab], Trial]:
    node, target, params = PREDICT_CASES[kind]

    def prepare(lab: Lab) -> Trial:
        def clean() -> bool:
            return all(lab.predict_ok() for _ in range(3))

        return Trial(node, target, params, seen=lambda _f: not lab.predict_ok(),
                     gone=lambda _f: clean(), ready=clean)

    return prepare


STORAGE_PARAMS: dict[str, dict[str, Any]] = {
    "storage.stall": {"ops": ["all"]}, "storage.errors": {"errno": "EIO", "percent": 100.0},
    "storage.slow": {"latency_ms": 200.0}}


def _read_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.read(fd, 4096)
    finally:
        os.close(fd)


def _read_fails(path: Path) -> bool:
    """Whether a read of ``path`` errors or is not done within the probe timeout (the
    thread of a hung read is left to finish when the fault is reverted)."""
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            _read_file(path)
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=read, name="store-probe", daemon=True)
    thread.start()
    thread.join(PROBE_TIMEOUT_S)
    return not outcome or outcome[0] is not None


def _weights_file(lab: Lab) -> Path:
    store = Path(lab.info["dir"]) / "store"
    backing = Path(lab.info["dir"]) / "store.backing"
    for path in sorted(backing.rglob("*")):
        if path.is_file() and path.stat().st_size > 0 and "checkpoint" not in str(path):
            return store / path.relative_to(backing)
    raise BenchError(f"no file to read in {backing}")


def _storage_trial(kind: str) -> Callable[[Lab], Trial]:
    def prepare(lab: Lab) -> Trial:
        path = _weights_file(lab)

        def clean() -> bool:
            return not any(_read_fails(path) for _ in range(3))

        return Trial("node-0", {"mount": "store"}, STORAGE_PARAMS[kind],
                     seen=lambda _f: _read_fails(path), gone=lambda _f: clean(), ready=clean)

    return prepare


def proc_state(pid: int) -> str | None:
    """The state letter of ``/proc/PID/stat``; ``None`` when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()[0]


def _process_trial(kind: str) -> Callable[[Lab], Trial]:
    def prepare(lab: Lab) -> Trial:
        pid = lab.shard_pid(0)
        if kind == "process.kill":
            return Trial("node-0", {"pid": pid}, {},
                         seen=lambda _f: proc_state(pid) in (None, "Z", "X"),
                         gone=lambda _f: lab.settled())
        return Trial("node-0", {"pid": pid}, {},
                     seen=lambda _f: proc_state(pid) == "T",
                     gone=lambda _f: proc_state(pid) not in ("T", "t"))

    return prepare


def _memory_bytes(fault: dict[str, Any]) -> int:
    """Memory charged to the hog's cgroup (v1 ``memory.usage_in_bytes``, v2
    ``memory.current``)."""
    for directory in map(Path, fault["details"]["cgroup_paths"]):
        for name in ("memory.usage_in_bytes", "memory.current"):
            if (directory / name).exists():
                return _read_int(directory / name)
    return 0


def _cpu_ns(fault: dict[str, Any]) -> int:
    """CPU time charged to the hog's cgroup, in ns (v1 ``cpuacct.usage``, v2 ``cpu.stat``
    ``usage_usec``)."""
    for directory in map(Path, fault["details"]["cgroup_paths"]):
        if (directory / "cpuacct.usage").exists():
            return _read_int(directory / "cpuacct.usage")
        if (directory / "cgroup.controllers").exists():  # v2
            stat = _read_text(directory / "cpu.stat").split()
            return int(stat[stat.index("usage_usec") + 1]) * 1000 if stat else 0
    return 0


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # the group went away
        return ""


def _read_int(path: Path) -> int:
    return int(_read_text(path) or 0)


def _cgroups_gone(fault: dict[str, Any]) -> bool:
    return not any(Path(p).exists() for p in fault["details"]["cgroup_paths"])


def _hog_trial(kind: str) -> Callable[[Lab], Trial]:
    def prepare(_lab: Lab) -> Trial:
        if kind == "node.cpu_hog":
            return Trial("node-0", {}, {"workers": 1, "cpu_percent": 50.0, "duration_s": 30},
                         seen=lambda f: _cpu_ns(f) >= HOG_CPU_SEEN_NS,
                         gone=_cgroups_gone)
        held = HOG_MEMORY_MIB * 1024 * 1024
        return Trial("node-0", {}, {"memory_mib": HOG_MEMORY_MIB, "duration_s": 30},
                     seen=lambda f: _memory_bytes(f) >= held,
                     gone=_cgroups_gone)

    return prepare


def case_for(kind: str) -> Case | None:
    area = kind.partition(".")[0]
    if area == "gpu":
        return Case(kind, "prometheus", METRIC_GOAL_MS, PROMETHEUS_POLL_S, _gpu_trial(kind),
                    phase_s=SCRAPE_INTERVAL_MS / 1000)
    if area in ("net", "service"):
        return Case(kind, "predict*", DIRECT_GOAL_MS, 0.0, _predict_trial(kind))
    if area == "storage":
        return Case(kind, "store read" + ("" if kind == "storage.errors" else "*"),
                    DIRECT_GOAL_MS, 0.0, _storage_trial(kind))
    if area == "process":
        return Case(kind, "/proc", DIRECT_GOAL_MS, LOCAL_POLL_S, _process_trial(kind))
    if area == "node":
        return Case(kind, "cgroup", DIRECT_GOAL_MS, LOCAL_POLL_S, _hog_trial(kind))
    return None
