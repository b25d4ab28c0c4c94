"""The worked example of docs/extending.md: a fault kind and a verifier of your own.

The system: a service whose health check answers ``503`` while a *maintenance file*
exists on its node (a load balancer then drains the node), ``200`` otherwise.

- :class:`MaintenanceBackend` is an agent backend with one fault kind,
  ``example.maintenance``: applying it writes the maintenance file, reverting it removes
  the file. Run it in a real agent with
  ``gameday agent serve --backend maintenance_example:backend`` (the file's path in
  ``$MAINTENANCE_FILE``), or in a test with ``gameday.testing.agent(MaintenanceBackend(path))``.
- :data:`MAINTENANCE` declares the kind once (its typed parameters); it is registered,
  so the agent checks every request for it and the backend reads typed parameters.
- :func:`maintenance_on` is the fault action experiments call: it parses its
  arguments with :data:`MAINTENANCE` and injects through the run's session
  (:mod:`gameday.activity`), so the fault goes through the agent under a lease, lands in
  the ledger and is reverted by the run.
- :func:`health_is` is the verifier: it measures the health check's status, records it
  in the run (journal, verdict table) and fails the run with one line when it is not
  the expected one. It never injects.
- :class:`HealthService` is the service itself, for the test and the demo.

``maintenance.yaml`` next to this file is the experiment; ``tests/docs`` runs it.
"""

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from gameday import activity, kinds
from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected

__all__ = ["health_is", "maintenance_off", "maintenance_on"]

KIND = "example.maintenance"

@dataclass(frozen=True, kw_only=True)
class MaintenanceParams(kinds.KindParams):
    """``example.maintenance``'s typed parameters."""

    reason: str = kinds.param("why, written into the maintenance file",
                              default="gameday experiment")


#: The kind, declared once and registered: the action parses its arguments with it, and
#: the agent (which imports this module for its backend) checks every request against it.
MAINTENANCE = kinds.register(kinds.KindSpec(
    name=KIND,
    summary="the node's service is put in maintenance: its health check answers 503",
    module="maintenance_example",
    func="maintenance_on",
    coverage_layer="service",
    injected_at={"host": "process"},
    params_type=MaintenanceParams,
    seen_through="the service's health check (503 while the file exists)",
    selects=kinds.Selector(argument="node", doc="which node", name_form=True,
                           mapping_form=False),
))


# -- the agent side: a backend with one kind ---------------------------------------------

class MaintenanceBackend:
    """Applies ``example.maintenance`` by writing ``path``; reverting removes it."""

    name = "maintenance"

    def __init__(self, path: Path, node: str = "node-0") -> None:
        self.path = path
        self.node = node
        self._holder: str | None = None  # the fault id that wrote the file
        self._lock = threading.Lock()

    def inventory(self) -> dict[str, Any]:
        return {"node": self.node, "gpus": [], "links": [], "mounts": []}

    def kinds(self) -> Mapping[str, str]:
        return {KIND: "process"}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        with self._lock:
            if self._holder is not None:
                raise FaultRejected(f"{self.path} is already held by fault {self._holder}")
            params = MAINTENANCE.parse(request.params)
            self.path.write_text(params.reason + "\n")
            self._holder = fault_id
        return {"file": str(self.path)}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        with self._lock:
            if self._holder == fault_id:
                self.path.unlink(missing_ok=True)
                self._holder = None


def backend(node: str) -> MaintenanceBackend:
    """``gameday agent serve --backend maintenance_example:backend``."""
    return MaintenanceBackend(Path(os.environ["MAINTENANCE_FILE"]), node=node)


# -- the orchestrator side: a fault action and a verifier ------------------------------

def maintenance_on(node: str | None = None, reason: str = "gameday experiment",
                   lease_s: float | None = None) -> dict[str, Any]:
    """Put the service of ``node`` (or of the only node offering the kind) in maintenance
    until reverted or until the lease (``lease_s``, default the experiment's) lapses."""
    with activity.failing():
        params = MAINTENANCE.parse({"reason": reason}, path="arguments")
        entry = activity.inject_on_node(KIND, node=node, target={"service": "health"},
                                        params=params.to_json(), action="maintenance_on",
                                        lease_s=lease_s)
    return activity.applied([entry])


def maintenance_off() -> dict[str, Any]:
    """Revert every fault of the run (idempotent)."""
    return activity.revert_all()


def health_is(url: str, status: int = 200, timeout_s: float = 5.0) -> bool:
    """GET ``url``; its status must be ``status``. Records ``{"url", "status",
    "expected"}``; returns True, or fails the run with one line."""
    verifier = "example.health_is"
    measurement: dict[str, Any] = {"url": url, "expected": status}
    try:
        measurement["status"] = requests.get(url, timeout=timeout_s).status_code
    except requests.RequestException as exc:
        activity.fail(verifier, f"{url} did not answer: {exc}", measurement)
    if measurement["status"] != status:
        activity.fail(verifier, f"{url} answered {measurement['status']}, expected {status}",
                      measurement)
    activity.record(verifier, True, measurement, f"{url} answered {status}")
    return True


# -- the system under test -------------------------------------------------------------

class HealthService:
    """``GET /healthz`` on loopback: 503 (with the file's reason) while ``maintenance_file``
    exists and ``honours_maintenance`` is true, else 200."""

    def __init__(self, maintenance_file: Path, *, honours_maintenance: bool = True) -> None:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    reason = (maintenance_file.read_bytes() if service.honours_maintenance
                              else None)
                except FileNotFoundError:
                    reason = None
                body = reason if reason is not None else b"ok\n"
                self.send_response(200 if reason is None else 503)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.honours_maintenance = honours_maintenance
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> "HealthService":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
