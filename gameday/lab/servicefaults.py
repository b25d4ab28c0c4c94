"""Service faults at the lab's router: added latency, and requests that hang (timeouts).

The router has no agent of its own. It runs on the lab's head node, ``node-0``, and that
node's agent owns the ``service.*`` kinds (target ``{"name": "router"}``): its
:class:`ServiceFault` handler sets and clears the fault through the router's
authenticated admin API, so the fault lives under the agent's lease like every other
(lease lapse, revert and agent shutdown all clear it; a restarted router starts clean).

Router admin API (lab token):

- ``POST /admin/faults {"id", "kind": "latency"|"timeout", "delay_ms", "jitter_ms",
  "hang_s", "percent"}`` sets (or replaces) a fault;
- ``DELETE /admin/faults {"id"}`` clears it (idempotent; ``{"removed": bool}``);
- ``GET /admin/faults`` lists them.

Each ``/predict`` request is picked with probability ``percent``/100 per fault:
``latency`` waits ``delay_ms`` (plus up to ``jitter_ms``) before answering; ``timeout``
holds the request without an answer for ``hang_s``, then answers ``504``. Clearing a
fault releases the requests it holds at once (they are then served normally).
"""

import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected, LabError
from gameday.kinds.service import SERVICE_LATENCY, SERVICE_TIMEOUT
from gameday.lab.httpjson import (
    Request,
    Response,
    bearer_ok,
    error_response,
    fetch_json,
    json_response,
)
from gameday.lab.layout import LabLayout, LabPaths
from gameday.node.phases import PhaseRunner, hold_phases

__all__ = ["RouterFaults", "ServiceFault", "head_node_service_handlers", "service_handlers"]

log = structlog.get_logger("gameday.lab.servicefaults")

SERVICE_NAME = "router"
SERVICE_KINDS = {"service.latency": "latency", "service.timeout": "timeout"}


@dataclass(frozen=True)
class _RouterFault:
    id: str
    kind: str  # latency | timeout
    delay_s: float = 0.0
    jitter_s: float = 0.0
    hang_s: float = 0.0
    percent: float = 100.0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "delay_ms": self.delay_s * 1000,
                "jitter_ms": self.jitter_s * 1000, "hang_s": self.hang_s,
                "percent": self.percent}


def _field(body: Mapping[str, Any], name: str, default: float, low: float, high: float
           ) -> float:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{name} must be a number between {low:g} and {high:g}")
    return float(value)


class RouterFaults:
    """The router's active service faults and its admin endpoints."""

    def __init__(self, token: str, rng: random.Random | None = None) -> None:
        self.token = token
        self._rng = rng or random.Random()
        self._cond = threading.Condition()
        self._faults: dict[str, _RouterFault] = {}

    def before_request(self) -> Response | None:
        """Apply the active faults to one request: maybe wait; maybe answer 504."""
        with self._cond:
            faults = list(self._faults.values())
            picked = [f for f in faults if self._rng.random() * 100.0 < f.percent]
            delay = sum(f.delay_s + self._rng.random() * f.jitter_s
                        for f in picked if f.kind == "latency")
            hang = [f for f in picked if f.kind == "timeout"]
            if delay > 0:
                self._wait(delay, {f.id for f in picked if f.kind == "latency"})
            if hang:
                hang_s = max(f.hang_s for f in hang)
                if not self._wait(hang_s, {f.id for f in hang}):
                    return error_response(504, f"router did not answer within {hang_s:g}s "
                                               f"(service.timeout fault)")
        return None

    def _wait(self, seconds: float, ids: set[str]) -> bool:
        """(Under the lock) wait ``seconds`` unless every fault in ``ids`` is cleared first;
        True when cleared early."""
        deadline = time.monotonic() + seconds
        while ids & self._faults.keys():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._cond.wait(remaining)
        return True

    # -- admin API --------------------------------------------------------------------

    def admin(self, request: Request) -> Response:
        if not bearer_ok(request, self.token):
            return error_response(401, "missing or wrong bearer token")
        if request.method == "GET":
            with self._cond:
                return json_response(200, {"faults": [f.to_json()
                                                      for f in self._faults.values()]})
        try:
            body = request.json()
            fault_id = str(body["id"])
            if request.method == "DELETE":
                with self._cond:
                    removed = self._faults.pop(fault_id, None) is not None
                    self._cond.notify_all()
                log.info("service_fault_cleared", id=fault_id, removed=removed)
                return json_response(200, {"removed": removed})
            fault = self._parse(fault_id, body)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return error_response(400, f"bad fault: {exc}")
        with self._cond:
            self._faults[fault_id] = fault
            self._cond.notify_all()
        log.info("service_fault_set", **fault.to_json())
        return json_response(200, fault.to_json())

    @staticmethod
    def _parse(fault_id: str, body: Mapping[str, Any]) -> _RouterFault:
        kind = body.get("kind")
        percent = _field(body, "percent", 100.0, 0.0, 100.0)
        if kind == "latency":
            return _RouterFault(fault_id, "latency",
                                delay_s=_field(body, "delay_ms", 0.0, 0.0, 600_000.0) / 1000,
                                jitter_s=_field(body, "jitter_ms", 0.0, 0.0, 600_000.0) / 1000,
                                percent=percent)
        if kind == "timeout":
            return _RouterFault(fault_id, "timeout", hang_s=_field(body, "hang_s", 30.0,
                                                                   0.0, 3600.0),
                                percent=percent)
        raise ValueError(f"kind must be latency or timeout, got {kind!r}")


class ServiceFault:
    """A service.* kind on the router, applied through its admin API."""

    injected_at = "virtual"

    def __init__(self, kind: str, router_url: str, token: str) -> None:
        self.kind = kind
        self.spec = SERVICE_LATENCY if kind == SERVICE_LATENCY.name else SERVICE_TIMEOUT
        self.router_url = router_url
        self.token = token
        self._runners: dict[str, PhaseRunner] = {}

    def _call(self, method: str, body: dict[str, Any]) -> Any:
        status, answer = fetch_json(method, self.router_url + "/admin/faults", body,
                                    token=self.token, timeout=2.0)
        if status != 200:
            error = answer.get("error") if isinstance(answer, dict) else answer
            raise FaultRejected(f"router refused the {self.kind} fault: {error}")
        return answer

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        service = request.target.get("name", SERVICE_NAME)
        if service != SERVICE_NAME or set(request.target) - {"name"}:
            raise FaultRejected(f"target {dict(request.target)}: the lab has one service, "
                                f"{SERVICE_NAME!r}")
        params = self.spec.backend_params(request.params).to_json()
        duration = params.pop("duration_s")
        body = {"id": fault_id, "kind": SERVICE_KINDS[self.kind], **params}
        try:
            answer = self._call("POST", body)
        except OSError as exc:
            raise FaultRejected(f"router unreachable at {self.router_url}: {exc}") from None
        if duration is not None:
            self._runners[fault_id] = PhaseRunner(
                f"{self.kind}-{fault_id}", hold_phases(float(duration)), on=lambda: None,
                off=lambda: self._clear(fault_id)).start()
        return {"service": SERVICE_NAME, "url": self.router_url, "fault": answer}

    def _clear(self, fault_id: str) -> None:
        self._call("DELETE", {"id": fault_id})

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        runner = self._runners.pop(fault_id, None)
        if runner is not None:
            runner.cancel()
        self._clear(fault_id)  # raises OSError when the router is unreachable: retried


def service_handlers(router_url: str, token: str) -> list[ServiceFault]:
    return [ServiceFault(kind, router_url, token) for kind in SERVICE_KINDS]


def head_node_service_handlers(node: str, paths: LabPaths) -> list[ServiceFault]:
    """The service.* handlers if ``node`` is the lab's head node (the router's), else none."""
    try:
        layout = LabLayout.load(paths.layout)
    except LabError:
        return []
    if not layout.nodes or layout.nodes[0].name != node:
        return []
    return service_handlers(layout.router_url, paths.read_token())
