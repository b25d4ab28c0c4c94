"""Minimal HTTP+JSON plumbing for lab processes (standard library only, fast to import).

A :class:`JsonServer` maps ``(method, path)`` to a handler returning a :class:`Response`;
it speaks HTTP/1.1 keep-alive with Nagle disabled, on a background thread.
:func:`fetch_json` is a one-shot client; :class:`ConnectionPool` keeps connections to
one server alive between requests (the router's fan-out).
"""

import contextlib
import hmac
import http.client
import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "ConnectionPool",
    "Handler",
    "JsonServer",
    "Request",
    "Response",
    "bearer_ok",
    "error_response",
    "fetch_json",
    "json_response",
]

MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON (``ValueError`` if it is not)."""
        return json.loads(self.body.decode("utf-8")) if self.body else None


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Response]


def json_response(status: int, obj: Any) -> Response:
    return Response(status, json.dumps(obj).encode("utf-8"))


def error_response(status: int, message: str) -> Response:
    return json_response(status, {"error": message})


def bearer_ok(request: Request, token: str) -> bool:
    """Whether ``request`` carries ``Authorization: Bearer <token>``."""
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


#: Seconds a lab server keeps an idle keep-alive connection open.
SERVER_IDLE_S = 60.0
#: Seconds a :class:`ConnectionPool` reuses an idle connection: well inside the above.
POOL_IDLE_S = SERVER_IDLE_S / 2


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = SERVER_IDLE_S
    server: "_Server"

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._send(error_response(413, "request body too large"))
            self.close_connection = True
            return
        body = self.rfile.read(length) if length else b""
        handler = self.server.routes.get((self.command, parts.path))
        if handler is None:
            known = any(path == parts.path for _, path in self.server.routes)
            response = (error_response(405, f"{self.command} not allowed on {parts.path}")
                        if known else error_response(404, f"no such endpoint {parts.path}"))
        else:
            request = Request(self.command, parts.path, parse_qs(parts.query),
                              {k: v for k, v in self.headers.items()}, body)
            try:
                response = handler(request)
            except Exception as exc:  # a handler bug must not kill the connection silently
                self.server.on_error(exc)
                response = error_response(500, f"internal error: {type(exc).__name__}: {exc}")
        self._send(response)

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)

    do_GET = do_POST = do_DELETE = do_PUT = _dispatch

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    routes: Mapping[tuple[str, str], Handler]
    on_error: Callable[[Exception], None]


class JsonServer:
    """An HTTP server on ``host:port`` (0 picks a free port) serving ``routes``."""

    def __init__(self, routes: Mapping[tuple[str, str], Handler], *, host: str = "127.0.0.1",
                 port: int = 0, on_error: Callable[[Exception], None] | None = None) -> None:
        self._host = host
        self._server = _Server((host, port), _Handler)
        self._server.routes = routes
        self._server.on_error = on_error or (lambda exc: None)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1}, daemon=True,
                                        name=f"http-{self.port}")
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http URL: {url!r}")
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return conn, path


def fetch_json(method: str, url: str, body: Any = None, *, token: str | None = None,
               timeout: float = 2.0) -> tuple[int, Any]:
    """One request; returns ``(status, decoded JSON or None)``. Raises ``OSError`` when the
    server cannot be reached or answers garbage."""
    conn, path = _connection(url, timeout)
    headers = {"Connection": "close"}
    payload = None
    if body is not None:
        payload = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        status = response.status
    except (http.client.HTTPException, ValueError) as exc:
        raise OSError(f"{method} {url}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    try:
        return status, (json.loads(raw) if raw else None)
    except ValueError:
        return status, None


class ConnectionPool:
    """Keep-alive connections to one server, shared by threads.

    ``via`` (``host:port``): reach the server through an HTTP ``CONNECT`` tunnel there
    (a lab node's link)."""

    def __init__(self, base_url: str, *, timeout: float = 5.0, via: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout
        self._via = via
        self._idle: queue.LifoQueue[tuple[http.client.HTTPConnection, float]] = \
            queue.LifoQueue()

    def post(self, path: str, payload: bytes) -> tuple[int, bytes]:
        """POST ``payload`` (JSON bytes) to ``path``; when a kept-alive connection turns
        out closed by the server, once more on a new connection (not on another idle one:
        after a quiet spell they were all closed together)."""
        for attempt in (0, 1):
            conn, reused = self._take(fresh=attempt > 0)
            try:
                conn.request("POST", path, body=payload,
                             headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError) as exc:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise OSError(f"{type(exc).__name__}: {exc}") from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise OSError(str(exc) or type(exc).__name__) from None
            if response.will_close:
                conn.close()
            else:
                self._idle.put((conn, time.monotonic()))
            return response.status, data
        raise AssertionError("unreachable")

    def _take(self, *, fresh: bool = False) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection (``True``) unless ``fresh``, else a new one (``False``).
        Connections idle longer than :data:`POOL_IDLE_S` are closed, not used: the
        servers close theirs after ``_Handler.timeout``."""
        while not fresh:
            try:
                conn, since = self._idle.get_nowait()
            except queue.Empty:
                break
            if time.monotonic() - since < POOL_IDLE_S:
                return conn, True
            conn.close()
        conn, _ = _connection(self.base_url, self._timeout)
        if self._via is not None:
            host, _, port = self._via.rpartition(":")
            conn.set_tunnel(conn.host, conn.port)
            conn.host, conn.port = host, int(port)
        conn.connect()
        if conn.sock is not None:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, False

    def close(self) -> None:
        while True:
            try:
                conn, _ = self._idle.get_nowait()
            except queue.Empty:
                return
            with contextlib.suppress(OSError):
                conn.close()
