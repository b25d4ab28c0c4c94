"""Service faults on a host: a TCP proxy put in front of a service port.

Target ``{"port": 8080, "address": "127.0.0.1"}`` (address defaults to 127.0.0.1). The
agent starts a :class:`gameday.node.tcprelay.Relay` to ``address:port`` and installs a
redirect of its own (nftables table or iptables ``nat`` chains named after the fault,
:mod:`gameday.node.host.netrules`) that sends *new* TCP connections for that port
through the relay; the relay's own upstream connections carry a socket mark the
redirect skips. The connections open to the service when the redirect is installed are
reset then (``ss -K``, the service's end of each: a client kept alive from before, local
or not, reconnects through the proxy): without it, whether such a connection kept
bypassing the proxy or was cut by the redirect depended on whether the host had any NAT
rule when it was opened. A connection made through the proxy in the milliseconds between
is reset too. Where the kernel cannot destroy sockets (no ``INET_DIAG_DESTROY``) the
fault's details say how many were left open.

- ``service.latency`` (``delay_ms``): each request waits that long in the proxy (the
  first chunk towards the service after an answer came back);
- ``service.timeout`` (``hang_s``): nothing passes; a connection held ``hang_s`` is
  reset.

``duration_s`` lifts the impairment early (the proxy then passes traffic untouched
until reverted). Revert drains the proxy, then removes the redirect: the impairment is
lifted, requests in flight get their answer, each connection through the proxy is
closed once answered (what is still busy after ``DRAIN_S`` is reset), and new
connections go straight to the service again. ``percent`` must be 100 and ``jitter_ms``
0 here (the lab's router does both).
"""

import ipaddress
from typing import Any

import structlog

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.kinds.service import (
    SERVICE_LATENCY,
    SERVICE_TIMEOUT,
    LatencyParams,
    TimeoutParams,
)
from gameday.node.host.base import HostFault
from gameday.node.host.netrules import RedirectSpec, all_mechanisms, mechanism, rule_name, run
from gameday.node.phases import PhaseRunner, hold_phases
from gameday.node.tcprelay import Impairment, Relay

__all__ = ["PROXY_MARK", "ServiceProxyFault", "handlers"]

log = structlog.get_logger("gameday.node.host.proxy")

PROXY_MARK = 0x67646E  # "gdn": the proxy's upstream sockets skip the redirect
DRAIN_S = 5.0  # how long a revert lets requests in flight through the proxy finish
DEFAULT_PREFIX = "gameday"


class ServiceProxyFault:
    """``service.latency`` or ``service.timeout`` through a transparent TCP proxy."""

    injected_at = "network"

    def __init__(self, kind: str, prefix: str = DEFAULT_PREFIX) -> None:
        self.kind = kind
        self.prefix = prefix
        self._relays: dict[str, Relay] = {}
        self._runners: dict[str, PhaseRunner] = {}

    def unavailable(self) -> str | None:
        try:
            mechanism("auto", allowed=("nftables", "iptables"))
        except FaultRejected as exc:
            return f"no way to redirect connections to the proxy: {exc}"
        return None

    def _impairment(self, params: LatencyParams | TimeoutParams) -> Impairment:
        if params.percent != 100.0:
            raise FaultRejected("params.percent must be 100 on a host: the proxy impairs "
                                "every request")
        if isinstance(params, LatencyParams):
            if params.jitter_ms != 0.0:
                raise FaultRejected("params.jitter_ms must be 0 on a host")
            return Impairment(delay_s=params.delay_ms / 1000.0)
        return Impairment(hold=True, hold_s=params.hang_s)

    @staticmethod
    def _service(request: FaultRequest) -> tuple[str, int]:
        unknown = set(request.target) - {"port", "address", "name"}
        if unknown:
            raise FaultRejected(f"target.{sorted(unknown)[0]} is unknown (known: port, address)")
        port = request.target.get("port")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise FaultRejected(f"target.port must be the service's TCP port, got {port!r}")
        address = str(request.target.get("address") or "127.0.0.1")
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise FaultRejected(f"target.address must be an IP address, got {address!r}"
                                ) from None
        return address, port

    def _checked(self, request: FaultRequest
                 ) -> tuple[str, int, Impairment, float | None, Any]:
        """The service, impairment, duration and redirect mechanism of ``request``,
        every parameter checked; :class:`FaultRejected` otherwise. Changes nothing."""
        params = (SERVICE_LATENCY if self.kind == SERVICE_LATENCY.name else
                  SERVICE_TIMEOUT).backend_params(request.params)
        address, port = self._service(request)
        impairment = self._impairment(params)
        duration = params.duration_s
        mech = mechanism("auto", allowed=("nftables", "iptables"))
        return address, port, impairment, duration, mech

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """The service whose connections :meth:`apply` would relay, read-only."""
        address, port, _, _, mech = self._checked(request)
        return {"service": f"{address}:{port}", "port": port, "mechanism": mech.name}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        address, port, impairment, duration, mech = self._checked(request)
        listen = "127.0.0.1" if ipaddress.ip_address(address).is_loopback else "0.0.0.0"
        relay = Relay(host=listen, upstream=(address, port), name=f"{self.kind}-{fault_id}",
                      mark=PROXY_MARK)
        relay.impair(fault_id, impairment)
        relay.start()
        name = rule_name(self.prefix, fault_id)
        try:
            mech.add_redirect(name, RedirectSpec(address, port, relay.port, PROXY_MARK), None)
        except FaultRejected:
            relay.stop()
            raise
        self._relays[fault_id] = relay
        reset = _reset_open_connections(address, port)
        if duration is not None:
            self._runners[fault_id] = PhaseRunner(
                f"{self.kind}-{fault_id}", hold_phases(duration), on=lambda: None,
                off=lambda: relay.lift(fault_id)).start()
        log.info("service_proxy_started", kind=self.kind, service=f"{address}:{port}",
                 proxy_port=relay.port, mechanism=mech.name, **reset)
        return {"service": f"{address}:{port}", "proxy_port": relay.port,
                "mechanism": mech.name, "rules": name, **reset}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        runner = self._runners.pop(fault_id, None)
        if runner is not None:
            runner.cancel()
        name = rule_name(self.prefix, fault_id)

        def remove_redirect() -> None:
            for mech in all_mechanisms():
                if mech.name != "netem" and mech.unavailable() is None:
                    mech.remove(name, None)
        relay = self._relays.pop(fault_id, None)
        if relay is None:
            remove_redirect()
            return
        # the redirect stays while the relay drains: removing the last NAT chain also
        # ends the translation of connections already redirected, cutting them
        relay.drain(DRAIN_S, before_stop=remove_redirect)

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        return {}


def _reset_open_connections(address: str, port: int) -> dict[str, Any]:
    """Destroy the service's end of every connection open to ``address:port`` (``ss -K``),
    then count what is still open: ``{"connections_reset", "connections_left"}``, and
    ``"connections_note"`` when they could not be reset (no ``ss``, or a kernel without
    socket destruction). The service's listening socket is not a connection, and is
    left alone."""
    ip = ipaddress.ip_address(address)
    where = ["state", "established", f"( sport = :{port} )"]
    if not ip.is_unspecified:
        where += ["src", f"[{ip}]" if ip.version == 6 else str(ip)]
    try:
        killed = run(["ss", "-K", "-tnH", *where]).stdout.strip().splitlines()
        left = run(["ss", "-tnH", *where]).stdout.strip().splitlines()
    except FaultRejected as exc:
        return {"connections_reset": 0, "connections_left": None,
                "connections_note": f"open connections not reset: {exc}"}
    found: dict[str, Any] = {"connections_reset": max(0, len(killed) - len(left)),
                             "connections_left": len(left)}
    if left:
        found["connections_note"] = ("the kernel did not destroy them (ss -K needs "
                                     "CONFIG_INET_DIAG_DESTROY): they may bypass the proxy")
    return found


def handlers(prefix: str = DEFAULT_PREFIX) -> list[HostFault]:
    return [ServiceProxyFault("service.latency", prefix),
            ServiceProxyFault("service.timeout", prefix)]
