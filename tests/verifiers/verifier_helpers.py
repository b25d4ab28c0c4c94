"""Helpers for the verifier tests: a run session with a recorded fault, and real HTTP
servers on 127.0.0.1 (not the lab).

- :class:`ModelServer`: a small deterministic numpy MLP behind ``POST /predict`` (and the
  TF Serving / KServe v1 and KServe v2 protocols), which can be broken (503), slowed,
  made to fail for a wall-clock window, or to corrupt one output;
- :class:`PlacementServer`: a JSON placement endpoint whose document follows a timeline;
- :class:`PrometheusUnderTest`: a real Prometheus scraping a prometheus_client exporter.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.engine.session import Session, activate, current
from gameday.engine.verifier_result import VerifierResult
from gameday.evidence.ledger import FaultEntry
from gameday.experiment.extension import Extension, Slo
from gameday.targets.base import Target

PROMETHEUS = "/usr/bin/prometheus"


def new_session(clock: Clock = SYSTEM_CLOCK, target: Target | None = None,
                rto_s: float | None = None) -> Session:
    """A fresh session, made the current one."""
    return activate(Session(clock=clock, target=target, extension=Extension(slo=Slo(rto_s=rto_s))))


def record_fault(session: Session, *, node: str = "node-0", gpu: int = 0,
                 applied_at: float | None = None, kind: str = "gpu.ecc") -> FaultEntry:
    """Record a fault in the ledger as an agent would have applied it (no agent here)."""
    applied = session.clock.now() if applied_at is None else applied_at
    entry = FaultEntry(id=f"f-{len(session.ledger.entries()) + 1}", kind=kind, node=node,
                       agent_url="http://127.0.0.1:9", target={"gpu": gpu},
                       params={"kind": "double_bit"}, injected_at="virtual",
                       applied_at=applied, expires_at=applied + 30.0, lease_s=30.0)
    session.ledger.record_applied(entry)
    return entry


FAULT_HOOKS: list[Callable[[float], None]] = []


def simulated_fault(node: str = "node-0", gpu: int = 0) -> dict[str, Any]:
    """A Chaos Toolkit action for the tests: records a fault in the current session as an
    agent would have applied it, then calls ``FAULT_HOOKS`` with the onset (they make the
    test servers misbehave as the lab would)."""
    entry = record_fault(current(), node=node, gpu=gpu)
    for hook in FAULT_HOOKS:
        hook(entry.applied_at)
    return entry.to_json()


def only_result(session: Session) -> VerifierResult:
    """The one result recorded in ``session``."""
    assert len(session.results) == 1, session.results
    return session.results[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _JsonServer:
    """A threaded HTTP server on a free port whose handler calls ``self.answer``."""

    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, payload = owner.answer(self.command, self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()

    def answer(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        raise NotImplementedError

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


class ModelServer(_JsonServer):
    """``POST /predict {"inputs": [[16 floats], ...]}`` -> ``{"outputs": [[8 floats], ...]}``."""

    def __init__(self, cols: int = 16, outputs: int = 8) -> None:
        rng = np.random.default_rng(1234)
        self.w1 = rng.standard_normal((cols, 32))
        self.w2 = rng.standard_normal((32, outputs))
        self.broken = False
        self.delay_s = 0.0
        self.fail_window: tuple[float, float] | None = None  # wall clock [start, end)
        self.corrupt: tuple[int, float] | None = None  # (flat index, added error)
        self.noise = 0.0
        self.requests: list[tuple[str, int | None]] = []  # (method, rows)
        super().__init__()

    def model(self, inputs: Any) -> Any:
        hidden = np.maximum(np.asarray(inputs, dtype=np.float64) @ self.w1, 0.0)
        return hidden @ self.w2

    def answer(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        if self.delay_s:
            time.sleep(self.delay_s)
        now = time.time()
        if path == "/healthz":
            self.requests.append((method, None))
            return 200, {"ok": True}
        styles = {"/predict": "gameday", "/v1/models/mlp:predict": "v1",
                  "/v2/models/mlp/infer": "v2"}
        style = styles.get(path)
        if style is None:
            return 404, {"error": f"no route {path}"}
        if method != "POST":
            return 405, {"error": f"POST {path}"}
        request = json.loads(body)
        if style == "v1":  # TF Serving / KServe v1: {"instances": rows}
            inputs = request["instances"]
        elif style == "v2":  # KServe v2 / Triton: flat data and a shape
            tensor = request["inputs"][0]
            inputs = np.asarray(tensor["data"], dtype=np.float64).reshape(
                tensor["shape"]).tolist()
        else:
            inputs = request["inputs"]
        self.requests.append((method, len(inputs)))
        window = self.fail_window
        if self.broken or (window is not None and window[0] <= now < window[1]):
            return 503, {"error": "shard 0 broken"}
        outputs = self.model(inputs)
        if self.noise:
            outputs = outputs + self.noise
        if self.corrupt is not None:
            flat = outputs.ravel()
            flat[self.corrupt[0]] += self.corrupt[1]
            outputs = flat.reshape(outputs.shape)
        if style == "v1":
            return 200, {"predictions": outputs.tolist()}
        if style == "v2":
            return 200, {"model_name": "mlp", "outputs": [
                {"name": "y", "shape": list(outputs.shape), "datatype": "FP64",
                 "data": outputs.ravel().tolist()}]}
        return 200, {"outputs": outputs.tolist()}


class PlacementServer(_JsonServer):
    """``GET /placement``: the latest document of a timeline ``[(at, document), ...]``."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.timeline: list[tuple[float, dict[str, Any]]] = [(0.0, document)]
        self.reads = 0
        super().__init__()
        self.placement_url = f"{self.url}/placement"

    def then(self, at: float, document: dict[str, Any]) -> None:
        self.timeline.append((at, document))
        self.timeline.sort(key=lambda item: item[0])

    def answer(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        if path != "/placement":
            return 404, {"error": f"no route {path}"}
        self.reads += 1
        now = time.time()
        document = [doc for at, doc in self.timeline if at <= now][-1]
        return 200, {**document, "time": now}


class PrometheusUnderTest:
    """A real Prometheus (1 s scrapes) and a prometheus_client exporter it scrapes (job
    ``exporter``), and ``workloads`` (``host:port``, job ``workload``) when given."""

    def __init__(self, workloads: Sequence[str] = ()) -> None:
        self.registry = CollectorRegistry()
        self.depth = Gauge("test_queue_depth", "queue depth", ["queue"],
                           registry=self.registry)
        self.depth.labels(queue="a").set(3)
        self.depth.labels(queue="b").set(7)
        self.exporter_port = free_port()
        self.exporter, self._exporter_thread = start_http_server(
            self.exporter_port, addr="127.0.0.1", registry=self.registry)
        self.dir = tempfile.mkdtemp(prefix="verifiers-prom-")
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as handle:
            handle.write(
                "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "scrape_configs:\n"
                "  - job_name: exporter\n"
                f"    static_configs: [{{targets: ['127.0.0.1:{self.exporter_port}']}}]\n"
                + ("  - job_name: workload\n"
                   f"    static_configs: [{{targets: {list(workloads)}}}]\n" if workloads
                   else ""))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(os.path.join(self.dir, "log"), "w")  # noqa: SIM115 (closed in close)
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{self.port}",
             f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
             "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=self._log,
            start_new_session=True)

    def query(self, promql: str) -> list[Any]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=2) as response:
            result: list[Any] = json.loads(response.read())["data"]["result"]
            return result

    def wait_scraped(self, timeout_s: float = 30.0) -> None:
        """Wait until both series of the exporter are queryable."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                with open(os.path.join(self.dir, "log")) as log:
                    raise RuntimeError(f"prometheus exited {self.process.returncode}: "
                                       f"{log.read()[-500:]}")
            try:
                if len(self.query("test_queue_depth")) == 2:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError("prometheus did not scrape the exporter in time")

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()
        self.exporter.shutdown()
        self.exporter.server_close()
        shutil.rmtree(self.dir, ignore_errors=True)


def gpu(node: str, index: int, domain: str, state: str = "healthy") -> dict[str, Any]:
    return {"node": node, "gpu": index, "uuid": f"GPU-{node}-{index}", "nvlink_domain": domain,
            "state": state, "shards": []}


def shard(number: int, node: str, index: int, status: str = "serving") -> dict[str, Any]:
    return {"shard": number, "node": node, "gpu": index, "uuid": f"GPU-{node}-{index}",
            "url": f"http://127.0.0.1:1/{number}", "pid": 100 + number, "status": status}


def placement_document(shards: list[dict[str, Any]], *, cordoned: tuple[str, int] | None = None,
                       events: list[dict[str, Any]] | None = None,
                       version: int = 1) -> dict[str, Any]:
    """Two nodes x two GPUs; each node is its own NVLink domain (nvl-0, nvl-1)."""
    gpus = [gpu(node, index, f"nvl-{node[-1]}",
                "cordoned" if cordoned == (node, index) else "healthy")
            for node in ("node-0", "node-1") for index in (0, 1)]
    for entry in gpus:
        entry["shards"] = [s["shard"] for s in shards
                           if (s["node"], s["gpu"]) == (entry["node"], entry["gpu"])]
    return {"time": 0.0, "version": version, "shards": shards, "gpus": gpus,
            "events": events or []}
