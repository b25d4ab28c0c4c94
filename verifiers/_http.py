"""Plain HTTP requests for probes: one request, its status, latency and a one-line error."""

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gameday.errors import InvalidInput
from verifiers._results import one_line
from verifiers.inputs import golden_inputs

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@dataclass(frozen=True)
class HttpRequest:
    """What a probe sends: method, URL, optional JSON body, headers, timeout."""

    url: str
    method: str = "GET"
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 5.0

    def describe(self) -> str:
        return f"{self.method} {self.url}"


@dataclass(frozen=True)
class HttpAnswer:
    """One request's outcome; ``status`` is None when no HTTP answer came back."""

    status: int | None
    body: bytes
    latency_s: float
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body)


def is_predict_url(url: str) -> bool:
    return urlsplit(url).path.rstrip("/").endswith("/predict")


def build_request(url: str, *, method: str | None = None, json_body: Any = None,
                  predict_rows: int = 1, predict_cols: int = 16, seed: int = 0,
                  timeout_s: float = 5.0, headers: Mapping[str, str] | None = None,
                  where: str = "url") -> HttpRequest:
    """The request a probe sends to ``url``.

    A ``json_body`` is POSTed as JSON. Without one, a URL whose path ends in ``/predict``
    gets ``{"inputs": golden_inputs(predict_rows, predict_cols, seed)}`` POSTed; any other
    URL is fetched with GET. ``method`` overrides the method in every case.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInput(f"must be an http(s) URL, got {url!r}", path=where)
    if timeout_s <= 0:
        raise InvalidInput(f"request timeout must be > 0 s, got {timeout_s}", path=where)
    all_headers = {"Accept": "application/json", **dict(headers or {})}
    body: bytes | None = None
    if json_body is not None:
        payload: Any = json_body
    elif is_predict_url(url) and (method is None or method.upper() != "GET"):
        payload = {"inputs": golden_inputs(predict_rows, predict_cols, seed)}
    else:
        payload = None
    if payload is not None:
        body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        all_headers.setdefault("Content-Type", "application/json")
    verb = (method or ("POST" if body is not None else "GET")).upper()
    if verb not in _METHODS:
        raise InvalidInput(f"unknown HTTP method {method!r}", path=where)
    return HttpRequest(url=url, method=verb, body=body, headers=all_headers,
                       timeout_s=timeout_s)


def _error_text(status: int, body: bytes) -> str:
    """A server's error answer as short text: its JSON ``error`` field, else the body."""
    try:
        decoded: Any = json.loads(body)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
        detail = decoded["error"]
    else:
        detail = body.decode("utf-8", "replace")
    return one_line(f"answered {status}" + (f": {detail}" if detail.strip() else ""), 200)


def send(request: HttpRequest) -> HttpAnswer:
    """Send ``request`` once; never raises for network or HTTP errors."""
    raw = urllib.request.Request(request.url, data=request.body, method=request.method,
                                 headers=dict(request.headers))
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(raw, timeout=request.timeout_s) as response:
            body = response.read()
            status = int(response.status)
        elapsed = time.perf_counter() - started
        error = "" if 200 <= status < 300 else _error_text(status, body)
        return HttpAnswer(status, body, elapsed, error)
    except urllib.error.HTTPError as exc:
        elapsed = time.perf_counter() - started
        try:
            body = exc.read()
        except (OSError, http.client.HTTPException):
            body = b""
        return HttpAnswer(exc.code, body, elapsed, _error_text(exc.code, body))
    except TimeoutError:
        return HttpAnswer(None, b"", time.perf_counter() - started,
                          f"no answer within {request.timeout_s:g} s")
    except urllib.error.URLError as exc:
        reason = exc.reason
        text = ("no answer within " f"{request.timeout_s:g} s"
                if isinstance(reason, TimeoutError) else f"failed: {reason}")
        return HttpAnswer(None, b"", time.perf_counter() - started, one_line(text, 200))
    except (OSError, http.client.HTTPException) as exc:
        return HttpAnswer(None, b"", time.perf_counter() - started,
                          one_line(f"failed: {type(exc).__name__}: {exc}", 200))
