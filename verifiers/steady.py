"""Steady-state probes: an HTTP endpoint within a latency bound, a PromQL value in bounds.

Use them in a steady-state hypothesis with ``tolerance: true``: each returns ``True``
when its objective is met and otherwise raises ``ActivityFailed`` with one line saying
what missed and by how much. Both record their measurement in the run session.
"""

import math
from typing import Any

from gameday.activity import current, fail, record
from gameday.errors import GamedayError, one_line
from gameday.httpclient import send
from gameday.promql import PromQL, PromQLError
from gameday.stats import percentile
from verifiers.inputs import build_request

__all__ = ["http_latency_ok", "prometheus_query_ok"]

_MAX_VALUES_RECORDED = 20


def http_latency_ok(url: str, p99_ms: float = 250.0, samples: int = 20,
                    method: str | None = None,
                    json_body: dict[str, Any] | list[Any] | None = None,
                    predict_rows: int = 1, predict_cols: int = 16,
                    timeout_s: float = 5.0, interval_s: float = 0.0,
                    headers: dict[str, str] | None = None) -> bool:
    """Send ``samples`` requests to ``url``; every one must answer 2xx, and the p99 of
    their latencies must be at most ``p99_ms`` milliseconds.

    What is sent: ``json_body`` if given (POST, as JSON); else, for a URL whose path ends
    in ``/predict``, a POST of ``{"inputs": [...]}`` with ``predict_rows`` golden rows of
    ``predict_cols`` values (see ``verifiers.inputs.golden_inputs``); else a GET.
    ``method`` overrides the HTTP method. Each request may take ``timeout_s`` seconds;
    ``interval_s`` is the pause between requests. The p99 is nearest-rank: with 20
    samples it is the slowest one.

    Stops at the first request that fails. Returns ``True``; raises ``ActivityFailed``
    (e.g. ``p99 latency 312.4 ms > 250 ms (missed by 62.4 ms, 20 samples) ...``).
    Records ``{"url", "method", "samples", "p50_ms", "p99_ms", "max_ms", "bound_ms"}``.
    """
    verifier = "steady.http_latency_ok"
    measurement: dict[str, Any] = {"url": url, "bound_ms": p99_ms, "samples": 0}
    try:
        if samples < 1:
            raise GamedayError(f"samples must be >= 1, got {samples}")
        if p99_ms <= 0:
            raise GamedayError(f"p99_ms must be > 0, got {p99_ms}")
        request = build_request(url, method=method, json_body=json_body,
                                predict_rows=predict_rows, predict_cols=predict_cols,
                                timeout_s=timeout_s, headers=headers)
    except GamedayError as exc:
        fail(verifier, f"http_latency_ok: {exc}", measurement)
    measurement["method"] = request.method
    clock = current().clock
    latencies_ms: list[float] = []
    for number in range(1, samples + 1):
        if number > 1 and interval_s > 0:
            clock.sleep(interval_s)
        answer = send(request)
        if not answer.ok:
            measurement.update(samples=number, status=answer.status, error=answer.error)
            fail(verifier, f"{request.describe()} {answer.error} "
                           f"(sample {number} of {samples})", measurement)
        latencies_ms.append(answer.latency_s * 1000.0)
    p99 = percentile(latencies_ms, 0.99, nearest_rank=True)
    p50 = percentile(latencies_ms, 0.5, nearest_rank=True)
    measurement.update(samples=samples, p50_ms=round(p50, 3),
                       p99_ms=round(p99, 3), max_ms=round(max(latencies_ms), 3))
    if p99 > p99_ms:
        fail(verifier, f"p99 latency {p99:.1f} ms > {p99_ms:g} ms (missed by "
                       f"{p99 - p99_ms:.1f} ms, {samples} samples) for {request.describe()}",
             measurement)
    record(verifier, True, measurement,
           f"p99 latency {p99:.1f} ms <= {p99_ms:g} ms ({samples} samples)")
    return True


def _labels(metric: dict[str, Any]) -> str:
    name = str(metric.get("__name__", ""))
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(metric.items())
                     if key != "__name__")
    return f"{name}{{{inner}}}" if inner or not name else name


def _as_samples(result: Any) -> list[tuple[str, float]]:
    """The query result as ``(labels, value)`` pairs; a scalar is one unlabelled sample."""
    if (isinstance(result, list) and len(result) == 2
            and not isinstance(result[0], dict)):  # scalar / string: [t, "v"]
        return [("scalar", float(result[1]))]
    if not isinstance(result, list):
        raise ValueError(f"unexpected result {one_line(repr(result), 80)}")
    samples: list[tuple[str, float]] = []
    for series in result:
        if not isinstance(series, dict):
            raise ValueError(f"unexpected series {one_line(repr(series), 80)}")
        if "value" not in series:
            raise ValueError("the query returns a range vector; query an instant vector")
        samples.append((_labels(series.get("metric") or {}), float(series["value"][1])))
    return samples


def _violation(value: float, min_value: float | None, max_value: float | None,
               equals: float | None) -> str:
    """Why ``value`` is out of bounds ("" if it is within them)."""
    if math.isnan(value) and (min_value, max_value, equals) != (None, None, None):
        return "NaN"
    if min_value is not None and value < min_value:
        return f"below min {min_value:g} by {min_value - value:g}"
    if max_value is not None and value > max_value:
        return f"above max {max_value:g} by {value - max_value:g}"
    if equals is not None and not math.isclose(value, equals, rel_tol=1e-9, abs_tol=1e-12):
        return f"not equal to {equals:g}"
    return ""


def _bounds_text(min_value: float | None, max_value: float | None,
                 equals: float | None) -> str:
    parts = []
    if min_value is not None:
        parts.append(f">= {min_value:g}")
    if max_value is not None:
        parts.append(f"<= {max_value:g}")
    if equals is not None:
        parts.append(f"== {equals:g}")
    return " and ".join(parts) or "present"


def prometheus_query_ok(query: str, prometheus_url: str | None = None,
                        min_value: float | None = None, max_value: float | None = None,
                        equals: float | None = None, allow_empty: bool = False,
                        timeout_s: float = 5.0) -> bool:
    """Run the instant PromQL ``query``; every sample of the result must be within bounds.

    ``prometheus_url`` defaults to the run target's Prometheus. Bounds are inclusive:
    ``min_value <= v <= max_value``, and ``v == equals`` (to 1e-9 relative) when given;
    with no bound the query only has to return something. A NaN sample is out of any
    bound. An empty result fails unless ``allow_empty`` is true (then it passes).

    Returns ``True``; raises ``ActivityFailed`` with one line, e.g.
    ``prometheus query 'up' : 1 of 3 series out of bounds (>= 1): up{job="x"} = 0 (below
    min 1 by 1)``. Records ``{"query", "prometheus_url", "series", "out_of_bounds",
    "values"}`` (the first 20 values).
    """
    verifier = "steady.prometheus_query_ok"
    measurement: dict[str, Any] = {"query": query, "min_value": min_value,
                                   "max_value": max_value, "equals": equals}
    target = current().target
    url = prometheus_url or (target.prometheus_url if target is not None else None)
    if not url:
        fail(verifier, "prometheus_query_ok needs prometheus_url: pass it, or run with a "
                       "target that has Prometheus", measurement)
    measurement["prometheus_url"] = url
    if min_value is not None and max_value is not None and min_value > max_value:
        fail(verifier, f"prometheus_query_ok: min_value {min_value:g} > max_value "
                       f"{max_value:g}", measurement)
    label = f"prometheus query {one_line(query, 120)!r}"
    client = PromQL(url, timeout_s=timeout_s)
    try:
        samples = _as_samples(client.instant_result(query))
    except PromQLError as exc:
        fail(verifier, f"prometheus {exc}", measurement)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        fail(verifier, f"{label} at {url}: {exc}", measurement)
    bounds = _bounds_text(min_value, max_value, equals)
    values = [{"labels": labels, "value": value} for labels, value in samples]
    bad = [(labels, value, why) for labels, value in samples
           if (why := _violation(value, min_value, max_value, equals))]
    measurement.update(series=len(samples), out_of_bounds=len(bad),
                       values=values[:_MAX_VALUES_RECORDED])
    if not samples:
        if allow_empty:
            record(verifier, True, measurement, f"{label} returned no series (allowed)")
            return True
        fail(verifier, f"{label} returned no series (expected {bounds})", measurement)
    if bad:
        labels, value, why = bad[0]
        fail(verifier, f"{label}: {len(bad)} of {len(samples)} series out of bounds "
                       f"({bounds}): {labels} = {value:g} ({why})", measurement)
    record(verifier, True, measurement,
           f"{label}: {len(samples)} series within bounds ({bounds})")
    return True

