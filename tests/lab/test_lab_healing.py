"""The controller's self-healing logic, driven by hand: a fake clock, fake shard
processes (a stand-in for ``python -m gameday.lab.shard``) and alerts as Prometheus
would report them. The real loop runs against real Prometheus in test_lab_cluster."""

from dataclasses import dataclass, field

import pytest

from gameday.clock import FakeClock
from gameday.lab.alerts import Alert, parse_alerts
from gameday.lab.healing import START_TIMEOUT_S, Healer, HealerMetrics
from gameday.lab.placement import GpuSlot, initial_placement
from gameday.lab.routes import Route


@dataclass
class FakeShard:
    pid: int
    shard: int
    node: str
    gpu: int
    code: int | None = None
    ready: bool = False
    signals: list[str] = field(default_factory=list)

    def poll(self) -> int | None:
        return self.code

    def ready_url(self) -> str | None:
        return f"http://shard-{self.pid}" if self.ready and self.code is None else None

    def terminate(self) -> None:
        self.signals.append("TERM")
        self.code = -15

    def kill(self) -> None:
        self.signals.append("KILL")
        self.code = -9


class FakeLauncher:
    def __init__(self) -> None:
        self.started: list[FakeShard] = []

    def launch(self, shard: int, node: str, gpu: int) -> FakeShard:
        handle = FakeShard(1000 + len(self.started), shard, node, gpu)
        self.started.append(handle)
        return handle

    def ready_all(self) -> None:
        for handle in self.started:
            handle.ready = True


class Recorder(HealerMetrics):
    def __init__(self) -> None:
        self.detections: list[float] = []
        self.responses: list[float] = []
        self.moves = 0

    def detected(self, seconds: float) -> None:
        self.detections.append(seconds)

    def responded(self, seconds: float) -> None:
        self.responses.append(seconds)

    def moved(self) -> None:
        self.moves += 1


@dataclass
class World:
    healer: Healer
    clock: FakeClock
    launcher: FakeLauncher
    metrics: Recorder
    pushes: list[tuple[int, list[Route]]]

    def alert(self, name: str, node: str, gpu: int, *, ago: float = 0.5,
              severity: str = "critical") -> Alert:
        return Alert(name, "firing", node, gpu, f"uuid-{node}-{gpu}", severity,
                     self.clock.now() - ago, "1", "")

    def shard_on(self, shard: int) -> tuple[str, int]:
        entry = self.healer.placement()["shards"][shard]
        return entry["node"], entry["gpu"]

    def events(self) -> list[str]:
        return [e["type"] for e in self.healer.placement()["events"]]


@pytest.fixture
def world() -> World:
    clock = FakeClock()
    launcher = FakeLauncher()
    metrics = Recorder()
    pushes: list[tuple[int, list[Route]]] = []
    nodes = ["node-0", "node-1"]
    gpus = [GpuSlot(n, g, f"uuid-{n}-{g}", n, order=i * 4 + g)
            for i, n in enumerate(nodes) for g in range(4)]
    healer = Healer(gpus, initial_placement(nodes, 4, 6), launcher,
                    lambda version, routes: pushes.append((version, routes)), clock, metrics)
    w = World(healer, clock, launcher, metrics, pushes)
    healer.tick()
    launcher.ready_all()
    healer.tick()
    return w


def test_initial_start_serves_every_shard_once_ready(world: World) -> None:
    doc = world.healer.placement()
    assert [s["status"] for s in doc["shards"]] == ["serving"] * 6
    assert [(s["node"], s["gpu"]) for s in doc["shards"]] == initial_placement(
        ["node-0", "node-1"], 4, 6)
    version, routes = world.pushes[-1]
    assert version == 6 and [r.shard for r in routes] == list(range(6))
    assert world.events() == []


def test_a_critical_alert_cordons_and_moves_the_shard_within_the_node(world: World) -> None:
    old = world.launcher.started[0]
    world.healer.observe_alerts([world.alert("GpuDoubleBitEcc", "node-0", 0, ago=0.7)])
    assert world.metrics.detections == [pytest.approx(0.7)]
    world.healer.tick()
    replacement = world.launcher.started[-1]
    assert (replacement.shard, replacement.node, replacement.gpu) == (0, "node-0", 3)
    doc = world.healer.placement()
    assert doc["shards"][0]["status"] == "starting"
    assert doc["shards"][0]["url"] == "http://shard-1000"  # still routed to the old one
    assert doc["gpus"][0]["state"] == "cordoned"
    world.clock.advance(0.4)
    replacement.ready = True
    world.healer.tick()
    assert world.shard_on(0) == ("node-0", 3)
    assert world.pushes[-1][1][0].url == replacement.ready_url()
    assert old.signals == ["TERM"]  # stopped only after the routes moved
    assert world.metrics.responses == [pytest.approx(0.4)] and world.metrics.moves == 1
    assert world.events() == ["alert_firing", "gpu_cordoned", "shard_moved"]
    moved = world.healer.placement()["events"][-1]
    assert moved["shard"] == 0 and moved["to"] == {"node": "node-0", "gpu": 3}
    assert world.healer.placement()["gpus"][0]["shards"] == []


def test_the_gpu_is_uncordoned_when_its_alert_resolves(world: World) -> None:
    world.healer.observe_alerts([world.alert("GpuCriticalXid", "node-0", 1)])
    world.healer.tick()
    world.launcher.ready_all()
    world.healer.tick()
    world.healer.observe_alerts([])
    doc = world.healer.placement()
    assert doc["gpus"][1]["state"] == "healthy" and doc["gpus"][1]["shards"] == []
    assert world.events()[-2:] == ["alert_resolved", "gpu_uncordoned"]
    assert world.shard_on(1) == ("node-0", 3)  # a spare now, nothing moves back


def test_a_single_bit_warning_only_records(world: World) -> None:
    started = len(world.launcher.started)
    world.healer.observe_alerts([world.alert("GpuSingleBitEcc", "node-1", 0,
                                             severity="warning")])
    world.healer.tick()
    assert len(world.launcher.started) == started
    assert world.healer.placement()["gpus"][4]["state"] == "healthy"
    assert world.events() == ["alert_firing"]


def test_a_crashed_shard_restarts_on_the_same_gpu(world: World) -> None:
    world.launcher.started[4].code = -9
    assert world.healer.placement()["shards"][4]["status"] == "failed"
    world.healer.tick()
    replacement = world.launcher.started[-1]
    assert (replacement.shard, replacement.node, replacement.gpu) == (4, "node-1", 1)
    replacement.ready = True
    world.healer.tick()
    assert world.events() == ["shard_restarted"]
    assert world.healer.placement()["shards"][4]["status"] == "serving"
    assert world.metrics.moves == 0


def test_a_replacement_that_never_gets_ready_is_replaced(world: World) -> None:
    world.healer.observe_alerts([world.alert("GpuDoubleBitEcc", "node-0", 0)])
    world.healer.tick()
    stuck = world.launcher.started[-1]
    world.clock.advance(START_TIMEOUT_S + 1)
    world.healer.tick()
    assert stuck.signals == ["TERM"]
    world.clock.advance(5)
    world.healer.tick()
    retry = world.launcher.started[-1]
    assert retry is not stuck and retry.shard == 0 and retry.gpu == 3


def test_with_every_local_spare_cordoned_the_shard_leaves_the_node(world: World) -> None:
    world.healer.observe_alerts([world.alert("GpuDoubleBitEcc", "node-0", 3),
                                 world.alert("GpuDoubleBitEcc", "node-0", 0)])
    world.healer.tick()
    replacement = world.launcher.started[-1]
    assert (replacement.shard, replacement.node, replacement.gpu) == (0, "node-1", 3)


def test_alerts_are_parsed_from_the_prometheus_api() -> None:
    [alert] = parse_alerts([
        {"labels": {"alertname": "GpuDoubleBitEcc", "Hostname": "node-0", "gpu": "2",
                    "UUID": "GPU-1", "severity": "critical"},
         "annotations": {"summary": "s"}, "state": "firing",
         "activeAt": "2026-01-02T03:04:05.123456789Z", "value": "1e+00"},
        {"labels": {"alertname": "Watchdog"}, "state": "firing",
         "activeAt": "2026-01-02T03:04:05Z"},
    ])
    assert (alert.name, alert.node, alert.gpu, alert.critical) == (
        "GpuDoubleBitEcc", "node-0", 2, True)
    assert alert.active_at == pytest.approx(1767323045.123456)
