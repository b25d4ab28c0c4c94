"""Service-level indicators as samplers: an HTTP probe of the service, a PromQL expression.

An SLI is given as a mapping, in a verifier's ``sli`` argument or in the ``gameday``
control's ``sli`` argument (then the run's recorder samples it for the whole method)::

    sli:
      http: "${service_url}/predict"   # OK when it answers 2xx within timeout_s
      interval_s: 0.1                  # HTTP cadence (default 0.1 s)
      timeout_s: 1                     # per request (default 1 s)
      promql: 'sum(up{job="gameday-router"}) == 1'   # optional: OK while it returns a
      promql_interval_s: 0.5                         # non-empty result with no zero value
      prometheus_url: ...              # default: the run target's Prometheus

A URL whose path ends in ``/predict`` is POSTed ``{"inputs": [...]}`` with
``predict_rows`` (default 1) golden rows of ``predict_cols`` (default 16) values;
other URLs are fetched with GET; ``method``, ``json_body``, ``seed`` and ``headers``
override. With both ``http`` and ``promql``, an HTTP sample counts as OK only while
the latest PromQL sample was OK too.
"""

from collections.abc import Mapping
from typing import Any

from gameday.clock import Clock
from gameday.engine.recorder import Channel, Recorder, Sampler, Transition
from gameday.errors import GamedayError
from gameday.httpclient import HttpRequest, send
from gameday.promql import PromQL
from verifiers._promql import prometheus_url_of
from verifiers.inputs import build_request

__all__ = ["SLI_KEYS", "http_sampler", "promql_sampler", "recorder_for", "sli_channels",
           "sli_request"]

_HTTP_KEYS = ("http", "method", "json_body", "predict_rows", "predict_cols", "seed",
              "timeout_s", "headers")
SLI_KEYS = (*_HTTP_KEYS, "interval_s", "promql", "promql_interval_s", "prometheus_url")
DEFAULT_REQUEST_TIMEOUT_S = 1.0
DEFAULT_INTERVAL_S = 0.1
DEFAULT_PROMQL_INTERVAL_S = 0.5


def _check_keys(sli: Any) -> Mapping[str, Any]:
    if not isinstance(sli, Mapping) or not (sli.get("http") or sli.get("promql")):
        raise GamedayError('sli must be a mapping with an "http" URL and/or a "promql" '
                           'expression, e.g. {"http": "${service_url}/predict"}')
    unknown = sorted(set(sli) - set(SLI_KEYS))
    if unknown:
        raise GamedayError(f"sli has unknown key {unknown[0]!r} (known: {', '.join(SLI_KEYS)})")
    return sli


def sli_request(sli: Mapping[str, Any]) -> HttpRequest:
    """The HTTP request of the ``http`` part of an SLI mapping."""
    _check_keys(sli)
    return build_request(
        str(sli["http"]), method=sli.get("method"), json_body=sli.get("json_body"),
        predict_rows=int(sli.get("predict_rows", 1)),
        predict_cols=int(sli.get("predict_cols", 16)), seed=int(sli.get("seed", 0)),
        timeout_s=float(sli.get("timeout_s", DEFAULT_REQUEST_TIMEOUT_S)),
        headers=sli.get("headers"), where="sli.http")


def http_sampler(request: HttpRequest) -> Sampler:
    """OK when ``request`` is answered 2xx (within its timeout)."""
    def sample() -> tuple[bool, str]:
        answer = send(request)
        return answer.ok, "" if answer.ok else answer.error
    return sample


def promql_sampler(client: PromQL, query: str) -> Sampler:
    """OK when ``query`` returns at least one sample and none of them is 0."""
    def sample() -> tuple[bool, str]:
        try:
            values = client.instant(query)
        except GamedayError as exc:
            return False, str(exc)
        if not values:
            return False, "promql returned no series"
        zero = [labels for labels, value in values if value == 0]
        return (not zero), (f"promql returned 0 for {len(zero)} series" if zero else "")
    return sample


def _positive(sli: Mapping[str, Any], key: str, default: float) -> float:
    value = float(sli.get(key, default))
    if value <= 0:
        raise GamedayError(f"sli.{key} must be > 0, got {value:g}")
    return value


def sli_channels(sli: Any) -> list[Channel]:
    """The recorder channels of an SLI mapping: ``http`` first, then ``promql``."""
    spec = _check_keys(sli)
    channels = []
    try:
        if spec.get("http"):
            request = sli_request(spec)
            channels.append(Channel("http", request.describe(), http_sampler(request),
                                    _positive(spec, "interval_s", DEFAULT_INTERVAL_S)))
        if spec.get("promql"):
            query = str(spec["promql"])
            client = PromQL(prometheus_url_of(spec.get("prometheus_url")),
                            timeout_s=float(spec.get("timeout_s", DEFAULT_REQUEST_TIMEOUT_S)))
            interval_key = "promql_interval_s" if spec.get("http") else "interval_s"
            default = DEFAULT_PROMQL_INTERVAL_S if spec.get("http") else DEFAULT_INTERVAL_S
            channels.append(Channel("promql", f"promql {query}", promql_sampler(client, query),
                                    _positive(spec, interval_key, default)))
    except (TypeError, ValueError) as exc:
        raise GamedayError(f"sli: {exc}") from None
    return channels


def recorder_for(sli: Any, clock: Clock, on_transition: Transition | None = None) -> Recorder:
    """A (not yet started) recorder for an SLI mapping."""
    return Recorder(sli_channels(sli), clock=clock, on_transition=on_transition)
