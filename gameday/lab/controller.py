"""The controller process: the lab's self-healing loop (:class:`Healer`) with its I/O.

``python -m gameday.lab.controller --dir DIR --port P [--parent-pid PID]``

It reaches the GPUs only through Prometheus (alerts polled every 0.25 s), owns the shard
processes (it starts them; they die with it), pushes routes to the router
(``POST /admin/routes`` with the lab token), and serves ``GET /placement``,
``GET /healthz`` and ``GET /metrics`` (``gameday_controller_detection_seconds``,
``gameday_controller_response_seconds``, ``gameday_controller_shard_moves_total``,
``gameday_controller_cordoned_gpus``).
"""

import sys
import threading
from collections.abc import Sequence
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.lab.alerts import PrometheusAlerts
from gameday.lab.gpustate import gpu_uuid
from gameday.lab.healing import Healer, HealerMetrics
from gameday.lab.httpjson import JsonServer, Request, Response, fetch_json, json_response
from gameday.lab.launcher import ProcessShardLauncher
from gameday.lab.layout import LabLayout, LabPaths
from gameday.lab.logs import configure_logging
from gameday.lab.placement import GpuSlot, initial_placement
from gameday.lab.proc import lab_parser, stop_on_signals, tie_to_parent
from gameday.lab.routes import Route

__all__ = ["Controller", "main"]

log = structlog.get_logger("gameday.lab.controller")

ALERT_POLL_S = 0.25
BUSY_TICK_S = 0.05
_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0)


class ControllerMetrics(HealerMetrics):
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._detection = Histogram(
            "gameday_controller_detection_seconds",
            "From an alert's activeAt to the controller seeing it firing.",
            buckets=_BUCKETS, registry=self.registry)
        self._response = Histogram(
            "gameday_controller_response_seconds",
            "From seeing a critical alert to the moved shard serving on its new GPU.",
            buckets=_BUCKETS, registry=self.registry)
        self._moves = Counter("gameday_controller_shard_moves", "Shards moved off a bad GPU.",
                              registry=self.registry)
        self.cordoned = Gauge("gameday_controller_cordoned_gpus", "GPUs cordoned now.",
                              registry=self.registry)

    def detected(self, seconds: float) -> None:
        self._detection.observe(seconds)

    def responded(self, seconds: float) -> None:
        self._response.observe(seconds)

    def moved(self) -> None:
        self._moves.inc()


class Controller:
    """The healer, its inputs (Prometheus), outputs (router) and HTTP face."""

    def __init__(self, layout: LabLayout, paths: LabPaths, *, clock: Clock = SYSTEM_CLOCK
                 ) -> None:
        self.layout = layout
        self.clock = clock
        self.epoch = clock.now()
        self.token = paths.read_token()
        self.metrics = ControllerMetrics()
        self.alerts = PrometheusAlerts(layout.prometheus_url)
        self._lock = threading.RLock()
        gpus = [GpuSlot(n.name, g, gpu_uuid(n.name, g), n.name, order=i * n.gpus + g)
                for i, n in enumerate(layout.nodes) for g in range(n.gpus)]
        homes = initial_placement([n.name for n in layout.nodes],
                                  layout.shape.gpus_per_node, layout.shape.shards)
        self.healer = Healer(gpus, homes, ProcessShardLauncher(paths), self._push, clock,
                             self.metrics)
        self.metrics.cordoned.set_function(
            lambda: float(sum(g.state == "cordoned" for g in gpus)))

    def _push(self, version: int, routes: list[Route]) -> None:
        body = {"epoch": self.epoch, "version": version,
                "routes": [r.to_json() for r in routes]}
        try:
            status, answer = fetch_json("POST", self.layout.router_url + "/admin/routes", body,
                                        token=self.token, timeout=1.0)
        except OSError as exc:
            log.warning("route_push_failed", error=str(exc), version=version)
            return
        if status != 200:
            log.warning("route_push_refused", status=status, answer=answer, version=version)

    def step(self, poll_alerts: bool) -> None:
        """One round: maybe read alerts, then advance the healer."""
        alerts = self.alerts.fetch() if poll_alerts else None
        with self._lock:
            if alerts is not None:
                self.healer.observe_alerts(alerts)
            self.healer.tick()

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop``; shard processes are started from this (main) thread, so
        they die with the process."""
        next_poll = 0.0
        while not stop.is_set():
            mono = self.clock.monotonic()
            poll = mono >= next_poll
            if poll:
                next_poll = mono + ALERT_POLL_S
            self.step(poll)
            pause = BUSY_TICK_S if self.healer.busy() else next_poll - self.clock.monotonic()
            stop.wait(max(0.0, min(pause, ALERT_POLL_S)))

    def stop_shards(self) -> None:
        with self._lock:
            handles = self.healer.handles()
        for handle in handles:
            handle.terminate()
        deadline = self.clock.monotonic() + 3.0
        while any(h.poll() is None for h in handles) and self.clock.monotonic() < deadline:
            self.clock.sleep(0.02)
        for handle in handles:
            if handle.poll() is None:
                handle.kill()

    # -- HTTP -------------------------------------------------------------------------

    def placement_doc(self) -> dict[str, Any]:
        with self._lock:
            doc = self.healer.placement()
        return {"time": self.clock.now(), "epoch": self.epoch, **doc}

    def placement(self, _request: Request) -> Response:
        return json_response(200, self.placement_doc())

    def healthz(self, _request: Request) -> Response:
        doc = self.placement_doc()
        serving = sum(s["status"] == "serving" for s in doc["shards"])
        return json_response(200, {"ok": True, "shards": len(doc["shards"]),
                                   "serving": serving, "version": doc["version"]})

    def metrics_text(self, _request: Request) -> Response:
        return Response(200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST)


def main(argv: Sequence[str] | None = None) -> int:
    parser = lab_parser("gameday.lab.controller")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    tie_to_parent(args.parent_pid)
    configure_logging("controller")
    stop = stop_on_signals()
    paths = LabPaths(args.dir)
    controller = Controller(LabLayout.load(paths.layout), paths)
    server = JsonServer({("GET", "/placement"): controller.placement,
                         ("GET", "/healthz"): controller.healthz,
                         ("GET", "/metrics"): controller.metrics_text},
                        port=args.port, on_error=lambda exc: log.exception("handler_error"))
    server.start()
    log.info("controller_serving", url=server.url)
    try:
        controller.run(stop)
    finally:
        controller.stop_shards()
        server.stop()
    log.info("controller_stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
