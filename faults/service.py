"""Service fault actions (Chaos Toolkit activities): added latency, requests that hang.

``service`` selects the service: ``{name: router}`` in the lab (the router; its head
node's agent, ``node-0``, owns the service kinds); on a host ``{port: 8080}`` (and
``address``, default ``127.0.0.1``): the agent puts a TCP proxy in front of that port
(new connections to it are redirected through the proxy by an nftables/iptables rule
of its own) and impairs what crosses it. ``node`` names the agent when several can.
"""

from collections.abc import Callable
from typing import Any

from faults._nodes import inject_on_node, selector_mapping
from gameday import activity
from gameday.activity import AgentClient
from gameday.kinds import KindParams, KindSpec
from gameday.kinds.service import SERVICE_LATENCY, SERVICE_SELECTOR, SERVICE_TIMEOUT

__all__ = ["latency", "revert", "timeout"]



def latency(service: dict[str, Any] | None = None, delay_ms: float = 200.0,
            jitter_ms: float = 0.0, percent: float = 100.0, duration_s: float | None = None,
            lease_s: float | None = None) -> dict[str, Any]:
    """Make ``percent`` of the service's requests wait ``delay_ms`` (plus up to
    ``jitter_ms``) before they are served, for ``duration_s`` (or until reverted).

    Lab: at the router, before each ``/predict`` is handled (its latency histogram
    includes the delay). Host: the proxy holds each request that long before passing it.

    Returns ``{"faults": [{"id", "node", "target", "injected_at", "applied_at",
    "expires_at", "details"}]}``.
    """
    params = activity.validated(SERVICE_LATENCY, {"delay_ms": delay_ms, "jitter_ms": jitter_ms,
                                         "percent": percent, "duration_s": duration_s})
    return _inject(SERVICE_LATENCY, "latency", service, params, lease_s)


def timeout(service: dict[str, Any] | None = None, hang_s: float = 30.0,
            percent: float = 100.0, duration_s: float | None = None,
            lease_s: float | None = None) -> dict[str, Any]:
    """Make ``percent`` of the service's requests hang: no answer for ``hang_s``, then a
    failure (lab router: ``504``; host proxy: the connection is reset). Requests held
    when the fault clears are served at once.
    """
    params = activity.validated(SERVICE_TIMEOUT, {"hang_s": hang_s, "percent": percent,
                                         "duration_s": duration_s})
    return _inject(SERVICE_TIMEOUT, "timeout", service, params, lease_s)


def revert() -> dict[str, Any]:
    """Revert every fault this run applied (idempotent); fails if any could not be reverted."""
    return activity.revert_all()



def _service_target(selector: dict[str, Any]) -> Callable[[AgentClient], dict[str, Any]]:
    def build(_client: AgentClient) -> dict[str, Any]:
        return {key: selector[key] for key in ("name", "port", "address") if key in selector}
    return build


def _inject(kind: KindSpec[KindParams], action: str, service: Any, params: dict[str, Any],
            lease_s: float | None) -> dict[str, Any]:
    with activity.failing():
        selector = selector_mapping(service, SERVICE_SELECTOR)
        return inject_on_node(kind.name, action, selector.get("node"), "service",
                              _service_target(selector), params, lease_s)
