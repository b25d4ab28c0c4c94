"""Service fault kinds: added latency and requests that time out."""

from dataclasses import dataclass

from gameday.kinds.params import param
from gameday.kinds.selectors import Selector, SelectorKey
from gameday.kinds.spec import KindParams, KindSpec

__all__ = ["KINDS", "SERVICE_LATENCY", "SERVICE_SELECTOR", "SERVICE_TIMEOUT",
           "LatencyParams", "TimeoutParams"]

SERVICE_SELECTOR = Selector(
    argument="service",
    doc="which service: {name: router} (lab) | {port: N, address: A} (host: a TCP proxy "
        "is put in front of that port)",
    keys=(SelectorKey("node", (str,), "the node"),
          SelectorKey("name", (str,), "lab: the service's name"),
          SelectorKey("port", (int,), "host: the port a proxy is put in front of"),
          SelectorKey("address", (str,), "host: the address of that port")))

_DURATION_DOC = ("how long the fault acts before it clears by itself (null: until reverted "
                 "or its lease lapses)")
_PERCENT_DOC = "percent of requests affected (host proxy: 100 only)"


@dataclass(frozen=True, kw_only=True)
class LatencyParams(KindParams):
    """``service.latency``'s parameters."""

    delay_ms: float = param("added to each request", default=200.0, minimum=0.0,
                            maximum=600_000.0)
    jitter_ms: float = param("up to this much more, uniformly (lab only)", default=0.0,
                             minimum=0.0, maximum=600_000.0)
    percent: float = param(_PERCENT_DOC, default=100.0, minimum=0.0, maximum=100.0)
    duration_s: float | None = param(_DURATION_DOC, default=None, minimum=0.05,
                                     maximum=86400.0)


@dataclass(frozen=True, kw_only=True)
class TimeoutParams(KindParams):
    """``service.timeout``'s parameters."""

    hang_s: float = param("how long a request hangs before it fails", default=30.0,
                          minimum=0.05, maximum=3600.0)
    percent: float = param(_PERCENT_DOC, default=100.0, minimum=0.0, maximum=100.0)
    duration_s: float | None = param(_DURATION_DOC, default=None, minimum=0.05,
                                     maximum=86400.0)


SERVICE_LATENCY = KindSpec(
    name="service.latency",
    summary="a service answers late: every affected request waits delay_ms (plus jitter) "
            "before it is served",
    module="faults.service",
    func="latency",
    coverage_layer="service",
    family="Inference API latency",
    injected_at={"lab": "virtual", "host": "network"},
    selects=SERVICE_SELECTOR,
    params_type=LatencyParams,
    seen_through="request latency (gameday_router_request_duration_seconds, client p99)",
    tags=("service", "latency"),
)

SERVICE_TIMEOUT = KindSpec(
    name="service.timeout",
    summary="a service stops answering: affected requests hang for hang_s, then fail "
            "(lab router: 504; host proxy: connection reset)",
    module="faults.service",
    func="timeout",
    coverage_layer="service",
    family="Inference API timeout",
    injected_at={"lab": "virtual", "host": "network"},
    selects=SERVICE_SELECTOR,
    params_type=TimeoutParams,
    seen_through="client timeouts, 504s, request latency",
    tags=("service", "timeout", "hang"),
)

KINDS: tuple[KindSpec[KindParams], ...] = (SERVICE_LATENCY, SERVICE_TIMEOUT)
