"""The router: ``/predict`` fans out to every shard and adds the partials in shard order.

``python -m gameday.lab.router --dir DIR --port P [--parent-pid PID]``

``POST /predict {"inputs": [[d_in floats], ...]}`` -> ``{"outputs": [[d_out floats], ...]}``;
any shard failing -> ``503 {"error": "shard 0 (node-0/gpu0): ..."}``. ``GET /healthz``,
``GET /routes``, ``GET /metrics`` (``gameday_router_request_duration_seconds``,
``gameday_router_requests_total{code}``, ``gameday_router_errors_total{shard}``).
Routes come from the controller: pushed to ``POST /admin/routes`` (lab token) and
polled from its ``/placement`` every second. A shard is reached through its node's link
(:mod:`gameday.lab.link`); ``POST|DELETE|GET /admin/faults`` (lab token) hold the
``service.*`` faults (:mod:`gameday.lab.servicefaults`).
"""

import json
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gameday.contract.gpus import gpu_label
from gameday.lab.httpjson import (
    ConnectionPool,
    JsonServer,
    Request,
    Response,
    bearer_ok,
    error_response,
    fetch_json,
    json_response,
)
from gameday.lab.layout import LabLayout, LabPaths
from gameday.lab.logs import configure_logging
from gameday.lab.model import Array, ModelSpec, combine, load_bias, load_spec
from gameday.lab.proc import lab_parser, stop_on_signals, tie_to_parent
from gameday.lab.routes import Route, RouteTable, routes_from_json
from gameday.lab.servicefaults import RouterFaults

__all__ = ["Router", "main"]

log = structlog.get_logger("gameday.lab.router")

MAX_BATCH = 4096
SHARD_TIMEOUT_S = 5.0
PLACEMENT_POLL_S = 1.0


class ShardFailed(Exception):
    """One shard did not answer a partial."""


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.duration = Histogram(
            "gameday_router_request_duration_seconds", "Time to answer /predict.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=self.registry)
        self.requests = Counter("gameday_router_requests", "/predict answers, by HTTP code.",
                                ["code"], registry=self.registry)
        self.errors = Counter("gameday_router_errors", "Failed shard calls, by shard.",
                              ["shard"], registry=self.registry)


class Router:
    """Fans a batch out to every shard and combines the partials."""

    def __init__(self, spec: ModelSpec, b2: Array, token: str) -> None:
        self.spec = spec
        self.b2 = b2
        self.token = token
        self.table = RouteTable()
        self.metrics = RouterMetrics()
        self._executor = ThreadPoolExecutor(max_workers=min(64, 2 * spec.shards + 4),
                                            thread_name_prefix="fanout")
        self._pools: dict[str, ConnectionPool] = {}
        self.links: dict[str, str] = {}  # node -> its link (host:port), to reach its shards
        self.service_faults = RouterFaults(token)
        self._pools_lock = threading.Lock()

    def _pool(self, url: str, via: str | None = None) -> ConnectionPool:
        with self._pools_lock:
            pool = self._pools.get(url)
            if pool is None:
                pool = self._pools[url] = ConnectionPool(url, timeout=SHARD_TIMEOUT_S, via=via)
            return pool

    def _forget_pools(self, keep: set[str]) -> None:
        with self._pools_lock:
            for url in list(self._pools):
                if url not in keep:
                    self._pools.pop(url).close()

    def set_routes(self, epoch: float, version: int, routes: list[Route]) -> bool:
        changed = self.table.update(epoch, version, routes)
        if changed:
            self._forget_pools({r.url for r in routes})
            log.info("routes_updated", epoch=epoch, version=version,
                     routes={r.shard: gpu_label(r.node, r.gpu) for r in routes})
        return changed

    def _call(self, route: Route, payload: bytes, rows: int) -> Array:
        try:
            status, raw = self._pool(route.url, self.links.get(route.node)).post("/partial",
                                                                                 payload)
        except OSError as exc:
            raise ShardFailed(str(exc)) from None
        try:
            body = json.loads(raw)
        except ValueError:
            raise ShardFailed(f"HTTP {status}, not JSON") from None
        if status != 200:
            message = body.get("error") if isinstance(body, dict) else None
            raise ShardFailed(str(message or f"HTTP {status}"))
        partial = np.asarray(body.get("partial"), dtype=np.float64)
        if partial.shape != (rows, self.spec.d_out):
            raise ShardFailed(f"partial has shape {list(partial.shape)}")
        return partial

    def predict(self, request: Request) -> Response:
        started = time.perf_counter()
        response = self.service_faults.before_request() or self._predict(request)
        self.metrics.duration.observe(time.perf_counter() - started)
        self.metrics.requests.labels(code=str(response.status)).inc()
        return response

    def _predict(self, request: Request) -> Response:
        try:
            x = np.asarray(request.json()["inputs"], dtype=np.float64)
        except (ValueError, TypeError, KeyError):
            return error_response(400, 'body must be {"inputs": [[numbers], ...]}')
        if x.ndim != 2 or x.shape[1] != self.spec.d_in or not 1 <= x.shape[0] <= MAX_BATCH:
            return error_response(400, f"inputs must be 1..{MAX_BATCH} rows of "
                                       f"{self.spec.d_in} numbers, got shape {list(x.shape)}")
        _, routes = self.table.snapshot()
        missing = [i for i in range(self.spec.shards) if i not in routes]
        if missing:
            return error_response(503, f"shard {missing[0]} has no route yet")
        payload = json.dumps({"inputs": x.tolist()}).encode("utf-8")
        ordered = [routes[i] for i in range(self.spec.shards)]
        futures = [self._executor.submit(self._call, r, payload, x.shape[0]) for r in ordered]
        partials: list[Array] = []
        first_error: str | None = None
        for route, future in zip(ordered, futures, strict=True):
            try:
                partials.append(future.result())
            except ShardFailed as exc:
                self.metrics.errors.labels(shard=str(route.shard)).inc()
                if first_error is None:
                    first_error = f"{route.where}: {exc}"
        if first_error is not None:
            return error_response(503, first_error)
        return json_response(200, {"outputs": combine(partials, self.b2).tolist()})

    def admin_routes(self, request: Request) -> Response:
        if not bearer_ok(request, self.token):
            return error_response(401, "missing or wrong bearer token")
        try:
            body = request.json()
            routes = routes_from_json(body["routes"])
            epoch, version = float(body["epoch"]), int(body["version"])
        except (ValueError, TypeError, KeyError, AttributeError):
            return error_response(400, 'body must be {"epoch", "version", "routes": [...]}')
        accepted = self.set_routes(epoch, version, routes)
        return json_response(200, {"accepted": accepted, "version": version})

    def healthz(self, _request: Request) -> Response:
        (_, version), routes = self.table.snapshot()
        return json_response(200, {"ok": True, "routes": len(routes),
                                   "shards": self.spec.shards, "version": version,
                                   "ready": len(routes) == self.spec.shards})

    def show_routes(self, _: Request) -> Response:
        (epoch, version), routes = self.table.snapshot()
        return json_response(200, {"epoch": epoch, "version": version,
                                   "routes": [routes[i].to_json() for i in sorted(routes)]})

    def metrics_text(self, _: Request) -> Response:
        return Response(200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST)

    def poll_placement(self, placement_url: str, stop: threading.Event) -> None:
        """Follow the controller's placement until ``stop`` (the push fallback)."""
        while not stop.wait(PLACEMENT_POLL_S):
            try:
                status, body = fetch_json("GET", placement_url, timeout=1.0)
                if status == 200 and isinstance(body, dict):
                    self.set_routes(float(body.get("epoch", 0.0)), int(body["version"]),
                                    routes_from_json(body["shards"]))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                log.debug("placement_poll_failed", error=str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    parser = lab_parser("gameday.lab.router")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    tie_to_parent(args.parent_pid)
    configure_logging("router")
    stop = stop_on_signals()
    paths = LabPaths(args.dir)
    layout = LabLayout.load(paths.layout)
    router = Router(load_spec(paths.store), load_bias(paths.store), paths.read_token())
    router.links = {n.name: n.link_address for n in layout.nodes if n.link_port}
    server = JsonServer({("POST", "/predict"): router.predict,
                         ("POST", "/admin/routes"): router.admin_routes,
                         ("POST", "/admin/faults"): router.service_faults.admin,
                         ("DELETE", "/admin/faults"): router.service_faults.admin,
                         ("GET", "/admin/faults"): router.service_faults.admin,
                         ("GET", "/routes"): router.show_routes,
                         ("GET", "/healthz"): router.healthz,
                         ("GET", "/metrics"): router.metrics_text},
                        port=args.port, on_error=lambda exc: log.exception("handler_error"))
    server.start()
    poller = threading.Thread(target=router.poll_placement,
                              args=(layout.controller_url + "/placement", stop),
                              name="placement-poll", daemon=True)
    poller.start()
    log.info("router_serving", url=server.url, shards=router.spec.shards)
    stop.wait()
    server.stop()
    log.info("router_stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
