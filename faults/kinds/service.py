"""Service fault kinds: added latency and requests that time out."""

from faults.base import FaultKind, Param

SERVICE_SELECTOR_DOC = ("which service: {name: router} (lab) | {port: N, address: A} "
                        "(host: a TCP proxy is put in front of that port)")

_DURATION = Param("duration_s", float, "how long the fault acts before it clears by itself "
                  "(null: until reverted or its lease lapses)", default=None, minimum=0.05,
                  maximum=86400.0, nullable=True)
_PERCENT = Param("percent", float, "percent of requests affected (host proxy: 100 only)",
                 default=100.0, minimum=0.0, maximum=100.0)

SERVICE_LATENCY = FaultKind(
    name="service.latency",
    summary="a service answers late: every affected request waits delay_ms (plus jitter) "
            "before it is served",
    module="faults.service",
    func="latency",
    coverage_layer="service",
    family="Inference API latency",
    injected_at={"lab": "virtual", "host": "network"},
    selector="service",
    params=(
        Param("delay_ms", float, "added to each request", default=200.0, minimum=0.0,
              maximum=600_000.0),
        Param("jitter_ms", float, "up to this much more, uniformly (lab only)", default=0.0,
              minimum=0.0, maximum=600_000.0),
        _PERCENT, _DURATION,
    ),
    seen_through="request latency (gameday_router_request_duration_seconds, client p99)",
    tags=("service", "latency"),
)

SERVICE_TIMEOUT = FaultKind(
    name="service.timeout",
    summary="a service stops answering: affected requests hang for hang_s, then fail "
            "(lab router: 504; host proxy: connection reset)",
    module="faults.service",
    func="timeout",
    coverage_layer="service",
    family="Inference API timeout",
    injected_at={"lab": "virtual", "host": "network"},
    selector="service",
    params=(
        Param("hang_s", float, "how long a request hangs before it fails", default=30.0,
              minimum=0.05, maximum=3600.0),
        _PERCENT, _DURATION,
    ),
    seen_through="client timeouts, 504s, request latency",
    tags=("service", "timeout", "hang"),
)

KINDS: tuple[FaultKind, ...] = (SERVICE_LATENCY, SERVICE_TIMEOUT)
