"""Service-level indicators as samplers: an HTTP probe of the service, a PromQL expression.

An SLI is given as a mapping, in a verifier's ``sli`` argument or in the ``gameday``
control's ``sli`` argument (then the run's recorder samples it for the whole method)::

    sli:
      http: "${service_url}/predict"   # OK when it answers 2xx within timeout_s
      interval_s: 0.1                  # HTTP cadence (default 0.1 s)
      timeout_s: 1                     # per request (default 1 s)
      expect_body: '"outputs"'         # optional: OK only when the answer holds this text
      promql: 'sum(up{job="gameday-router"}) == 1'   # optional: OK while it returns a
      promql_interval_s: 0.5                         # non-empty result with no zero value
      prometheus_url: ...              # default: the run target's Prometheus
      progress:                        # optional: a job's own progress endpoint, read
        url: "http://trainer:8080/progress"   # on its own cadence as a value channel
        field: step                    # JSON path to the number ("status.step", "ranks.0")
        interval_s: 0.25               # (default 0.25 s; timeout_s default 1 s)

A URL whose path ends in ``/predict`` is POSTed ``{"inputs": [...]}`` with
``predict_rows`` (default 1) golden rows of ``predict_cols`` (default 16) values; other
URLs are fetched with GET; ``method``, ``json_body``, ``seed`` and ``headers`` override.
HTTP samples keep their cadence while the server holds requests: up to ``timeout_s /
interval_s + 1`` are in flight at once, each stamped when sent and when answered
(``verifiers.rto`` places recovery from both). With both ``http`` and ``promql``, an
HTTP sample counts as OK only while the latest PromQL sample was OK too. The
``progress`` channel (named ``progress``) keeps the number it read with each reading; a
reading is OK when the endpoint answered 2xx with a number at ``field``; it does not
gate the SLI timeline that ``verifiers.rto`` reads. ``verifiers.rpo.checkpoint_loss``
reads a job's progress from it (``progress_http``).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from gameday.activity import Channel, Recorder, Sampler, Transition, in_flight_for
from gameday.clock import Clock
from gameday.errors import GamedayError
from gameday.httpclient import HttpRequest, send
from gameday.promql import PromQL
from verifiers._promql import prometheus_url_of
from verifiers.inputs import build_request

__all__ = ["PROGRESS_CHANNEL", "PROGRESS_KEYS", "SLI_KEYS", "ProgressSpec", "http_sampler",
           "json_field", "progress_sampler", "progress_spec", "promql_sampler", "recorder_for",
           "sli_channels", "sli_request"]

_HTTP_KEYS = ("http", "method", "json_body", "predict_rows", "predict_cols", "seed",
              "timeout_s", "headers", "expect_body")
SLI_KEYS = (*_HTTP_KEYS, "interval_s", "promql", "promql_interval_s", "prometheus_url",
            "progress")
PROGRESS_KEYS = ("url", "field", "interval_s", "timeout_s", "headers")
DEFAULT_REQUEST_TIMEOUT_S = 1.0
DEFAULT_INTERVAL_S = 0.1
DEFAULT_PROMQL_INTERVAL_S = 0.5
DEFAULT_PROGRESS_INTERVAL_S = 0.25
#: The recorder channel that samples a job's progress endpoint.
PROGRESS_CHANNEL = "progress"


@dataclass(frozen=True)
class ProgressSpec:
    """A job's HTTP/JSON progress endpoint: where, which field, how often."""

    url: str
    field: str
    interval_s: float = DEFAULT_PROGRESS_INTERVAL_S
    timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    headers: Mapping[str, str] = dataclass_field(default_factory=dict)

    def describe(self) -> str:
        return f"progress {self.url} {self.field}"


def progress_spec(spec: Any, where: str = "sli.progress") -> ProgressSpec:
    """The :class:`ProgressSpec` of a ``{"url", "field", ...}`` mapping; a one-line
    :class:`GamedayError` naming ``where`` when it is not one."""
    if not isinstance(spec, Mapping) or not spec.get("url") or not spec.get("field"):
        raise GamedayError(f'{where} must be {{"url": URL, "field": JSON_PATH}}, e.g. '
                           f'{{"url": "http://trainer:8080/progress", "field": "step"}}')
    unknown = sorted(set(spec) - set(PROGRESS_KEYS))
    if unknown:
        raise GamedayError(f"{where} has unknown key {unknown[0]!r} "
                           f"(known: {', '.join(PROGRESS_KEYS)})")
    try:
        found = ProgressSpec(str(spec["url"]), str(spec["field"]),
                             float(spec.get("interval_s", DEFAULT_PROGRESS_INTERVAL_S)),
                             float(spec.get("timeout_s", DEFAULT_REQUEST_TIMEOUT_S)),
                             {str(k): str(v) for k, v in dict(spec.get("headers") or {}).items()})
    except (TypeError, ValueError) as exc:
        raise GamedayError(f"{where}: {exc}") from None
    if min(found.interval_s, found.timeout_s) <= 0:
        raise GamedayError(f"{where}: interval_s and timeout_s must be > 0")
    return found


def json_field(document: Any, path: str) -> float:
    """The number at ``path`` (dot-separated keys, integer list indices) in a decoded
    JSON document; ValueError saying where it stopped otherwise."""
    found = document
    for part in path.split("."):
        if isinstance(found, Mapping) and part in found:
            found = found[part]
        elif isinstance(found, list) and part.lstrip("-").isdigit() and \
                -len(found) <= int(part) < len(found):
            found = found[int(part)]
        else:
            raise ValueError(f"no {part!r} at {path!r}")
    if isinstance(found, bool) or not isinstance(found, int | float):
        raise ValueError(f"{path!r} is {type(found).__name__}, not a number")
    return float(found)


def progress_sampler(spec: ProgressSpec) -> Sampler:
    """Reads the number at ``spec.field`` of ``spec.url``'s JSON answer; OK when read."""
    request = HttpRequest(spec.url, headers=spec.headers, timeout_s=spec.timeout_s)

    def sample() -> tuple[bool, str, float | None]:
        answer = send(request)
        if not answer.ok:
            return False, answer.error, None
        try:
            return True, "", json_field(answer.json(), spec.field)
        except ValueError as exc:  # (json.JSONDecodeError is a ValueError)
            return False, f"{spec.url}: {exc}", None
    return sample


def _check_keys(sli: Any) -> Mapping[str, Any]:
    if not isinstance(sli, Mapping) or not (sli.get("http") or sli.get("promql")
                                            or sli.get("progress")):
        raise GamedayError('sli must be a mapping with an "http" URL, a "promql" '
                           'expression and/or a "progress" endpoint, e.g. '
                           '{"http": "${service_url}/predict"}')
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


def http_sampler(request: HttpRequest, expect_body: str | None = None) -> Sampler:
    """OK when ``request`` is answered 2xx, the whole answer within its timeout (a server
    that trickles its answer past it fails), and the body holds ``expect_body`` when
    given (a wrong answer fails)."""
    def sample() -> tuple[bool, str]:
        answer = send(request)
        if not answer.ok:
            return False, answer.error
        if answer.latency_s > request.timeout_s:
            return False, (f"answered after {answer.latency_s:.3f} s, past timeout_s "
                           f"{request.timeout_s:g}")
        if expect_body is not None and expect_body.encode() not in answer.body:
            return False, f"answered {answer.status} without the expected body"
        return True, ""
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
    """The recorder channels of an SLI mapping: ``http`` first, then ``promql``, then
    ``progress``."""
    spec = _check_keys(sli)
    channels = []
    try:
        if spec.get("http"):
            request = sli_request(spec)
            interval = _positive(spec, "interval_s", DEFAULT_INTERVAL_S)
            expect = spec.get("expect_body")
            channels.append(Channel("http", request.describe(),
                                    http_sampler(request, None if expect is None
                                                 else str(expect)),
                                    interval,
                                    in_flight=in_flight_for(request.timeout_s, interval)))
        if spec.get("promql"):
            query = str(spec["promql"])
            client = PromQL(prometheus_url_of(spec.get("prometheus_url")),
                            timeout_s=float(spec.get("timeout_s", DEFAULT_REQUEST_TIMEOUT_S)))
            interval_key = "promql_interval_s" if spec.get("http") else "interval_s"
            default = DEFAULT_PROMQL_INTERVAL_S if spec.get("http") else DEFAULT_INTERVAL_S
            channels.append(Channel("promql", f"promql {query}", promql_sampler(client, query),
                                    _positive(spec, interval_key, default)))
        if spec.get("progress"):
            progress = progress_spec(spec["progress"])
            channels.append(Channel(PROGRESS_CHANNEL, progress.describe(),
                                    progress_sampler(progress), progress.interval_s,
                                    gates=False))
    except (TypeError, ValueError) as exc:
        raise GamedayError(f"sli: {exc}") from None
    return channels


def recorder_for(sli: Any, clock: Clock, on_transition: Transition | None = None) -> Recorder:
    """A (not yet started) recorder for an SLI mapping."""
    return Recorder(sli_channels(sli), clock=clock, on_transition=on_transition)
