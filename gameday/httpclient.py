"""HTTP for the engine and the verifiers, on ``requests``: JSON reads and probe requests.

Every request goes through :func:`session`, the calling thread's own
:class:`requests.Session` (a Session per thread: a Session's cookie jar and adapters are
not safe to share between threads, its connection pool is). A thread's Session keeps
its connections open between requests, so a probe sent every 100 ms (the SLI
recorder's) reuses one connection instead of connecting each time. A forked child
starts with no Session (it never uses its parent's connections).

Reads (:func:`get_json`, and the PromQL client's queries through :data:`retry_reads`)
are retried when the connection failed, with a short back-off; a probe
(:func:`send`) is sent once, because its latency and its failure are what it measures.
"""

import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import requests
import tenacity

from gameday.errors import TargetUnavailable, one_line

__all__ = ["HttpAnswer", "HttpRequest", "failure_text", "get_json", "retry_reads", "send",
           "session"]

#: How many times a read is tried when its connection fails.
READ_ATTEMPTS: Final = 3


class _Sessions(threading.local):
    """This thread's Session, made on first use."""

    session: requests.Session | None = None


_sessions = _Sessions()


def _forget_sessions() -> None:
    global _sessions
    _sessions = _Sessions()


os.register_at_fork(after_in_child=_forget_sessions)


def session() -> requests.Session:
    """The calling thread's Session (made on its first request, kept for the thread)."""
    current = _sessions.session
    if current is None:
        current = _sessions.session = requests.Session()
    return current


def _connection_failed(exc: BaseException) -> bool:
    """A connection that could not be made or broke: worth another try. A timeout is
    not (it already spent the time the caller allowed)."""
    return (isinstance(exc, requests.ConnectionError)
            and not isinstance(exc, requests.Timeout))


#: Retries a read whose connection failed: :data:`READ_ATTEMPTS` tries in all, 50 ms
#: then 100 ms apart; the last failure is raised as it was.
retry_reads = tenacity.retry(
    retry=tenacity.retry_if_exception(_connection_failed),
    stop=tenacity.stop_after_attempt(READ_ATTEMPTS),
    wait=tenacity.wait_exponential(multiplier=0.05, max=0.5),
    reraise=True,
)


def failure_text(exc: BaseException, timeout_s: float) -> str:
    """Why a request got no HTTP answer, in one line: ``no answer within 5 s``, or
    ``failed: [Errno 111] Connection refused`` (the innermost cause, not urllib3's
    wrapping)."""
    if isinstance(exc, requests.Timeout):
        return f"no answer within {timeout_s:g} s"
    cause: BaseException = exc
    seen = {id(cause)}
    while True:
        inner = getattr(cause, "reason", None) or cause.__cause__ or next(
            (arg for arg in cause.args if isinstance(arg, BaseException)), None)
        if not isinstance(inner, BaseException) or id(inner) in seen:
            break
        seen.add(id(inner))
        cause = inner
    if isinstance(cause, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(cause, OSError) and cause.strerror:
        text = str(cause)
    elif cause is exc:
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = f"{type(cause).__name__}: {cause}"
    return one_line(f"failed: {text}", 200)


def get_json(url: str, *, timeout_s: float = 5.0,
             headers: Mapping[str, str] | None = None) -> Any:
    """GET ``url`` and decode its JSON body (retried when the connection fails); a
    one-line :class:`TargetUnavailable` on any failure, an HTTP error status included."""
    @retry_reads
    def read() -> requests.Response:
        return session().get(url, headers=dict(headers or {}), timeout=timeout_s)

    try:
        response = read()
    except requests.RequestException as exc:
        raise TargetUnavailable(f"cannot read {url}: {failure_text(exc, timeout_s)}") from None
    if not response.ok:
        raise TargetUnavailable(
            f"cannot read {url}: {error_text(response.status_code, response.content)}")
    try:
        return response.json()
    except ValueError:
        raise TargetUnavailable(f"cannot read {url}: the answer is not JSON") from None


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


def error_text(status: int, body: bytes) -> str:
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
    """Send ``request`` once (never retried), timing it from the call to the whole body
    read; never raises for network or HTTP errors."""
    started = time.perf_counter()
    try:
        response = session().request(request.method, request.url, data=request.body,
                                     headers=dict(request.headers),
                                     timeout=request.timeout_s)
    except requests.RequestException as exc:
        return HttpAnswer(None, b"", time.perf_counter() - started,
                          failure_text(exc, request.timeout_s))
    elapsed = time.perf_counter() - started
    status, body = response.status_code, response.content
    return HttpAnswer(status, body, elapsed,
                      "" if 200 <= status < 300 else error_text(status, body))
