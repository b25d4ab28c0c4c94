"""The agent's HTTP+JSON server: a thin layer over :class:`FaultRegistry`.

``AgentServer`` binds at construction (so :attr:`AgentServer.url` carries the real
port even for ``port=0``), serves on a background thread with the stdlib
``ThreadingHTTPServer`` once started, and runs a lease reaper thread next to it. The
API is ``docs/agent-api.md``.

Bounded work: at most ``max_connections`` connections are served at once and at most
``per_source`` from one address (more are answered ``503`` by the accepting thread,
which never reads from a client); a connection's TLS handshake and first request must
arrive within the request deadline (:data:`REQUEST_DEADLINE_S`, or the server's own)
from its accept, so a silent connection is closed then, and each later request's head
and body within it from its first byte; the lease reaper is a thread of its own that no
request holds up. Requests are framed by h11 (:mod:`gameday.agent.framing`). With
:class:`gameday.wire.tls.ServerTLS` it speaks TLS 1.3 only (mutual TLS when the TLS
has a client CA); with an :class:`gameday.agent.audit.AuditTrail` every request that
may change something is recorded before the agent acts on it, and every request when
it is answered.
"""

import contextlib
import functools
import json
import os
import pathlib
import re
import selectors
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, NamedTuple
from urllib.parse import parse_qs, unquote

import structlog

from gameday.agent import openapi
from gameday.agent.audit import AuditTrail, AuditUnavailable, Phase, shown_of
from gameday.agent.audited import AuditedBackend
from gameday.agent.framing import FramingError, RequestReader
from gameday.agent.lever import Halted, Lever, halt_path, parse_engage
from gameday.agent.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from gameday.agent.metrics import AgentMetrics
from gameday.agent.registry import (
    AgentClosing,
    BatchRejected,
    Fault,
    FaultConflict,
    FaultGone,
    FaultRegistry,
    LimitReached,
    Limits,
    RequestResolved,
    RevertFailed,
    UnknownFault,
)
from gameday.agent.response_head import CONTINUE, SERVER, HttpDate, answer_head
from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.contract.backend import Backend
from gameday.errors import (
    FaultRejected,
    GamedayError,
    InvalidInput,
    PolicyRefused,
    ProtectedTarget,
    first_line,
)
from gameday.wire.protocol import (
    MAX_BATCH_BODY_BYTES,
    MAX_BODY_BYTES,
    PREFER_MINIMAL,
    Outcome,
    RevertReason,
    decode_body,
    parse_batch_check,
    parse_batch_ids,
    parse_batch_inject,
    parse_inject,
    parse_renew,
    parse_resolve,
    prefers_minimal,
)
from gameday.wire.tls import ServerTLS, peer_identity
from gameday.wire.tokens import TokenSet

__all__ = ["AgentServer"]

_log = structlog.get_logger("gameday.agent")

#: Seconds an idle keep-alive connection is kept open by the server.
IDLE_CONNECTION_S: Final = 60.0
#: Seconds a TLS handshake, a request head (from its first byte) or a body may take.
REQUEST_DEADLINE_S: Final = 10.0
#: Connections served at once, and from one source address.
MAX_CONNECTIONS: Final = 64
PER_SOURCE_CONNECTIONS: Final = 16
#: Connections over those caps that are still read, for ``GET /healthz`` only (and from
#: one source address), each within :data:`HEALTH_SLOT_DEADLINE_S`.
HEALTH_SLOTS: Final = 4
PER_SOURCE_HEALTH_SLOTS: Final = 1
HEALTH_SLOT_DEADLINE_S: Final = 2.0

_PUBLIC_PATHS: Final = frozenset({"/healthz", "/metrics", "/openapi.json"})
_BATCH_PATHS: Final = frozenset({"/v1/faults:batch", "/v1/faults:batch-revert",
                                 "/v1/faults:batch-renew", "/v1/requests:resolve",
                                 "/v1/faults:check"})


class _HTTPFailure(FramingError):
    """An answer other than 2xx, raised inside a handler (``extra``: more fields of its
    JSON error)."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(status, message)
        self.extra = extra


class _Request(NamedTuple):
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes | None
    minimal: bool = False  # Prefer: return=minimal (honoured by the batch endpoints)
    client: str = ""  # who asks: certificate identity, else token name, else address


class _Reply(NamedTuple):
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] | None = None


#: The header of an answer that honoured ``Prefer: return=minimal``.
_MINIMAL_APPLIED: Final = {"Preference-Applied": PREFER_MINIMAL}


#: Answers are compact JSON without NaN/Infinity; stateless, so shared by threads. An
#: answer is made of the agent's own dicts and lists, never a cycle: no check for one.
_ANSWER_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False,
                                          check_circular=False)


def _json_reply(status: int, payload: object) -> _Reply:
    return _Reply(status, (_ANSWER_ENCODER.encode(payload) + "\n").encode("utf-8"))


def _fault_reply(status: int, fault: Fault) -> _Reply:
    """One fault as the answer (raises for NaN, as any answer)."""
    return _json_reply(status, fault.to_json())


def _faults_reply(status: int, faults: list[Fault], failed: list[dict[str, Any]] | None = None,
                  *, minimal: Outcome | None = None) -> _Reply:
    """``{"faults": [...]}`` (with ``"failed"`` if given); ``minimal``: each fault as a
    minimal answer shows it after that outcome (:meth:`Fault.minimal`), with
    ``Preference-Applied``. Raises for NaN, as any answer."""
    payload: dict[str, Any] = {"faults": [
        fault.to_json() if minimal is None else fault.minimal(minimal) for fault in faults]}
    if failed is not None:
        payload["failed"] = failed
    reply = _json_reply(status, payload)
    return reply if minimal is None else reply._replace(headers=_MINIMAL_APPLIED)


class AgentServer:
    """One node's agent: ``backend`` behind the agent API, guarded by ``token`` (one
    token, not checked for strength, or a :class:`TokenSet`).

    Active faults are saved in ``state_path``; leftovers from a previous run are
    reverted when the server is created (reason ``agent-restart``). ``reap_interval_s``
    is how often the lease reaper looks for expired leases. ``tls``: serve https (TLS
    1.3); ``audit``: record every request; ``limits``: the registry's caps (a policy's);
    ``request_deadline_s``: see :attr:`request_deadline_s`.
    """

    def __init__(self, backend: Backend, *, token: str | TokenSet, state_path: pathlib.Path,
                 node: str, host: str = "127.0.0.1", port: int = 0,
                 clock: Clock = SYSTEM_CLOCK, reap_interval_s: float = 0.05,
                 tls: ServerTLS | None = None, audit: AuditTrail | None = None,
                 limits: Limits | None = None, max_connections: int = MAX_CONNECTIONS,
                 per_source: int = PER_SOURCE_CONNECTIONS,
                 request_deadline_s: float | None = None) -> None:
        self._tokens = token if isinstance(token, TokenSet) else TokenSet([token], strict=False)
        #: Seconds a connection's TLS handshake and first request, or a later request's
        #: head and body, may take (:data:`REQUEST_DEADLINE_S` unless given).
        self.request_deadline_s = (REQUEST_DEADLINE_S if request_deadline_s is None
                                   else request_deadline_s)
        self.backend = backend
        self.node = node
        self.tls = tls
        self.audit = audit
        self.metrics = AgentMetrics()
        # every change the registry makes reaches the backend after its audit record
        changes: Backend = backend if audit is None else AuditedBackend(backend, audit)
        self.registry = FaultRegistry(changes, state_path=state_path, node=node, clock=clock,
                                      metrics=self.metrics, limits=limits)
        self.lever = Lever(halt_path(state_path), node, clock=clock.now)
        self.lever.revert_all = lambda: self.registry.revert_all("halted")
        self.registry.refuse = self.lever.check
        self.metrics.track_halted(lambda: self.lever.state.engaged)
        self._reap_interval_s = reap_interval_s
        self._httpd = _AgentHTTPServer(host, port, self, max_connections=max_connections,
                                       per_source=per_source)
        bound_host, bound_port = self._httpd.server_address[:2]
        if isinstance(bound_host, bytes):
            bound_host = bound_host.decode()
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.url = f"{'https' if tls is not None else 'http'}://{shown}:{bound_port}"
        self._stopping = threading.Event()
        self._stop_lock = threading.Lock()
        self._serve_thread: threading.Thread | None = None
        self._reap_thread: threading.Thread | None = None
        self._stopped = False
        self._log = _log.bind(node=node, backend=backend.name)

    def __repr__(self) -> str:
        return f"AgentServer(node={self.node!r}, url={self.url!r})"

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> "AgentServer":
        """Serve on a background thread and start the lease reaper; returns ``self``."""
        if self._serve_thread is not None:
            return self
        self._serve_thread = threading.Thread(
            target=self._httpd.serve_forever, name=f"agent-http-{self.node}", daemon=True)
        self._reap_thread = threading.Thread(
            target=self._reap_forever, name=f"agent-reaper-{self.node}", daemon=True)
        self._serve_thread.start()
        self._reap_thread.start()
        self._log.info("agent.started", url=self.url)
        return self

    def stop(self, revert: bool = True) -> list[Fault]:
        """Stop serving and return the faults reverted. With ``revert`` (the default)
        every active fault is reverted (reason ``agent-shutdown``); without it they stay
        applied and saved, and the next start on the same state file reverts them."""
        with self._stop_lock:
            if self._stopped:
                return []
            self._stopped = True
        self._stopping.set()
        if self._serve_thread is not None:
            self._httpd.shutdown()
        if revert:
            reverted = self.registry.close("agent-shutdown")
        else:
            self.registry.release()  # the faults stay applied and saved
            reverted = []
        if self._reap_thread is not None:
            self._reap_thread.join(timeout=5.0)
        self._httpd.close_connections()
        self._httpd.server_close()
        self._log.info("agent.stopped", reverted=len(reverted))
        return reverted

    def revert_all(self, reason: RevertReason) -> list[Fault]:
        """Revert every active fault now with ``reason``; the agent keeps serving."""
        return self.registry.revert_all(reason)

    def __enter__(self) -> "AgentServer":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _reap_forever(self) -> None:
        while not self._stopping.wait(self._reap_interval_s):
            try:
                self.registry.reap()
            except Exception:
                self._log.exception("agent.reap_failed")

    # -- requests --------------------------------------------------------------------

    def authorized(self, header: str | None) -> str | None:
        """The identity of the bearer token an ``Authorization`` header carries (see
        :meth:`TokenSet.match`), or None when it carries none of this agent's tokens
        (compared in constant time)."""
        if not header:
            return None
        scheme, _, credential = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self._tokens.match(credential.strip().encode("latin-1", "replace"))

    def handle(self, request: _Request) -> _Reply:
        """Answer one authorised request (the HTTP handler already checked the token)."""
        route, params = _route(request.method, request.path)
        try:
            return route(self, request, *params)
        except GamedayError as exc:
            status = _status_of(exc)
            if status is None:
                raise  # not an answer: the handler's internal error
            raise _HTTPFailure(status, str(exc), **_extra_of(exc, fault_inline=True)) from None

    def _healthz(self, request: _Request) -> _Reply:
        return _json_reply(200, {"ok": True, "node": self.node, "backend": self.backend.name})

    def _metrics(self, request: _Request) -> _Reply:
        return _Reply(200, self.metrics.render(), METRICS_CONTENT_TYPE)

    def _openapi(self, request: _Request) -> _Reply:
        return _json_reply(200, openapi.spec())

    def _inventory(self, request: _Request) -> _Reply:
        inventory = dict(self.backend.inventory())
        inventory.update(node=self.node, backend=self.backend.name,
                         kinds=self.registry.kinds())
        for key in ("gpus", "links", "mounts"):
            inventory.setdefault(key, [])
        return _json_reply(200, inventory)

    def _list(self, request: _Request) -> _Reply:
        include = request.query.get("all", ["0"])[-1].lower() in ("1", "true", "yes")
        faults = self.registry.faults(include_reverted=include)
        return _faults_reply(200, faults)

    def _inject(self, request: _Request) -> _Reply:
        if not request.body:
            raise InvalidInput("body must be a JSON object with kind, target, lease_s")
        fault_request, lease_s = parse_inject(decode_body(request.body))
        return _fault_reply(201, self.registry.apply(fault_request, lease_s))

    def _inject_batch(self, request: _Request) -> _Reply:
        items = parse_batch_inject(decode_body(request.body or b""))
        try:
            faults = self.registry.apply_many(items)
        except BatchRejected as exc:
            raise _HTTPFailure(_status_of(exc.cause) or 500, str(exc), index=exc.index,
                               rolled_back=exc.rolled_back, revert_failed=exc.revert_failed,
                               **_extra_of(exc.cause)) from None
        return _faults_reply(201, faults, minimal="applied" if request.minimal else None)

    def _revert_batch(self, request: _Request) -> _Reply:
        ids, _ = parse_batch_ids(decode_body(request.body or b""))
        return _batch_reply(ids, self.registry.revert_many(ids, "requested"),
                            minimal="reverted" if request.minimal else None)

    def _renew_batch(self, request: _Request) -> _Reply:
        ids, lease_s = parse_batch_ids(decode_body(request.body or b""), renew=True)
        return _batch_reply(ids, self.registry.renew_many(ids, lease_s),
                            minimal="renewed" if request.minimal else None)

    def _resolve(self, request: _Request) -> _Reply:
        ids = parse_resolve(decode_body(request.body or b""))
        return _json_reply(200, {"requests": [r.to_json() for r in self.registry.resolve(ids)]})

    def _check(self, request: _Request) -> _Reply:
        """``POST /v1/faults:check``: per item what an inject would answer and what its
        target would hit, read-only (:meth:`FaultRegistry.check_many`)."""
        items = parse_batch_check(decode_body(request.body or b""))
        results: list[dict[str, Any]] = []
        for index, result in enumerate(self.registry.check_many(items)):
            if isinstance(result, GamedayError):
                results.append({"index": index, "admissible": False,
                                "status": _status_of(result) or 500,
                                "error": first_line(result), "matches": {}})
            else:
                results.append({"index": index, "admissible": True, "status": 200,
                                "error": None, "matches": result})
        return _json_reply(200, {"results": results})

    def _get(self, request: _Request, fault_id: str) -> _Reply:
        return _fault_reply(200, self.registry.get(fault_id))

    def _renew(self, request: _Request, fault_id: str) -> _Reply:
        body = decode_body(request.body) if request.body else None
        return _fault_reply(200, self.registry.renew(fault_id, parse_renew(body)))

    def _revert(self, request: _Request, fault_id: str) -> _Reply:
        return _fault_reply(200, self.registry.revert(fault_id, "requested"))

    def _halt_state(self, request: _Request) -> _Reply:
        return _json_reply(200, {"node": self.node, **self.lever.state.to_json()})

    def _halt(self, request: _Request) -> _Reply:
        reason = parse_engage(decode_body(request.body) if request.body else None)
        self.lever.engage(reason, request.client)
        return _json_reply(200, {"node": self.node, **self.lever.state.to_json(),
                                 "active": self.registry.active_count()})

    def _unhalt(self, request: _Request) -> _Reply:
        return _json_reply(200, {"node": self.node,
                                 **self.lever.release(request.client).to_json()})


#: The answer status of each error a request, or one fault of a batch, can end in.
_STATUS_OF_ERROR: Final[dict[type[BaseException], int]] = {
    InvalidInput: 400, FaultRejected: 400, PolicyRefused: 403, ProtectedTarget: 403,
    UnknownFault: 404, FaultConflict: 409, RequestResolved: 409, FaultGone: 410,
    LimitReached: 429, RevertFailed: 500, AgentClosing: 503, AuditUnavailable: 503,
    Halted: 423}


def _status_of(exc: BaseException) -> int | None:
    """The status :data:`_STATUS_OF_ERROR` gives ``exc`` (or a class it derives from)."""
    for kind in type(exc).__mro__:
        status = _STATUS_OF_ERROR.get(kind)
        if status is not None:
            return status
    return None


def _extra_of(exc: BaseException, *, fault_inline: bool = False) -> dict[str, Any]:
    """The answer fields an error carries next to ``error``: a conflict its ``existing``
    fault's id; a reverted fault the whole fault (its fields, ``fault_inline``, as a
    single-fault answer has them; else under ``fault``, as a batch's)."""
    if isinstance(exc, FaultConflict):
        return {"existing": exc.existing.id}
    if isinstance(exc, FaultGone):
        fault = exc.fault.to_json()
        return {**fault} if fault_inline else {"fault": fault}
    if isinstance(exc, Halted):
        return {"code": "halted", "halt": exc.state.to_json()}
    return {}


def _batch_reply(ids: list[str], results: list[Fault | GamedayError], *,
                 minimal: Outcome | None = None) -> _Reply:
    """``200 {"faults": [done], "failed": [{"id", "status", "error", ...}]}`` (the faults
    done as ``minimal`` says, :func:`_faults_reply`)."""
    done: list[Fault] = []
    failed: list[dict[str, Any]] = []
    for fault_id, result in zip(ids, results, strict=True):
        if isinstance(result, Fault):
            done.append(result)
        else:
            failed.append({"id": fault_id, "status": _status_of(result) or 500,
                           "error": str(result), **_extra_of(result)})
    return _faults_reply(200, done, failed, minimal=minimal)


_Route = Callable[..., _Reply]

#: Endpoints without a parameter in their path, found by a dict lookup.
_FIXED_ROUTES: Final[dict[str, dict[str, _Route]]] = {
    "/healthz": {"GET": AgentServer._healthz},
    "/metrics": {"GET": AgentServer._metrics},
    "/openapi.json": {"GET": AgentServer._openapi},
    "/v1/inventory": {"GET": AgentServer._inventory},
    "/v1/faults": {"GET": AgentServer._list, "POST": AgentServer._inject},
    "/v1/faults:batch": {"POST": AgentServer._inject_batch},
    "/v1/faults:batch-revert": {"POST": AgentServer._revert_batch},
    "/v1/faults:batch-renew": {"POST": AgentServer._renew_batch},
    "/v1/requests:resolve": {"POST": AgentServer._resolve},
    "/v1/faults:check": {"POST": AgentServer._check},
    "/v1/halt": {"GET": AgentServer._halt_state, "POST": AgentServer._halt,
                 "DELETE": AgentServer._unhalt},
}
#: Endpoints with a fault id in their path (none of them is a fixed one).
_ID_ROUTES: Final[list[tuple[re.Pattern[str], dict[str, _Route]]]] = [
    (re.compile(r"/v1/faults/([^/]+)"), {"GET": AgentServer._get, "DELETE": AgentServer._revert}),
    (re.compile(r"/v1/faults/([^/]+)/renew"), {"POST": AgentServer._renew}),
]


def _route(method: str, path: str) -> tuple[_Route, tuple[str, ...]]:
    methods = _FIXED_ROUTES.get(path)
    params: tuple[str, ...] = ()
    if methods is None:
        methods, params = _id_route(path)
    route = methods.get(method)
    if route is None:
        raise _HTTPFailure(405, f"{method} is not allowed on {path}; use "
                           f"{', '.join(sorted(methods))}", allow=sorted(methods))
    return route, params


def _id_route(path: str) -> tuple[dict[str, _Route], tuple[str, ...]]:
    for pattern, methods in _ID_ROUTES:
        match = pattern.fullmatch(path)
        if match is not None:
            return methods, tuple(unquote(g) for g in match.groups())
    raise _HTTPFailure(404, f"no such endpoint {path}")


#: What a connection over the caps gets (plain HTTP only: no handshake is done for it).
_BUSY_BODY: Final = b'{"error":"agent busy: too many connections"}\n'
_BUSY_ANSWER: Final = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(_BUSY_BODY)).encode()
                       + b"\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" + _BUSY_BODY)


class _Deadlines:
    """One thread that shuts a connection whose deadline passed (a slow head or body):
    its handler's read then ends at once, whatever the client sends."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, socket.socket]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None
        self._wakes_at = 0.0  # when the watching thread wakes next, by itself

    def arm(self, conn: socket.socket, seconds: float) -> int:
        """Shut ``conn`` in ``seconds`` unless disarmed; the watching thread is woken
        only when this deadline comes before the wake-up it already has (a kept-alive
        connection arms one per request, each later than those armed before it)."""
        with self._cond:
            self._next += 1
            at = time.monotonic() + seconds
            self._armed[self._next] = (at, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="agent-deadlines",
                                                daemon=True)
                self._thread.start()
            if at < self._wakes_at:
                self._wakes_at = at
                self._cond.notify()
            return self._next

    def disarm(self, handle: int) -> None:
        with self._cond:
            self._armed.pop(handle, None)

    def retarget(self, handle: int, conn: socket.socket) -> None:
        """Shut ``conn`` instead when ``handle``'s deadline passes (a TLS socket that took
        over the accepted one's file descriptor)."""
        with self._cond:
            armed = self._armed.get(handle)
            if armed is not None:
                self._armed[handle] = (armed[0], conn)

    def _watch(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                late = [h for h, (at, _) in self._armed.items() if at <= now]
                conns = [self._armed.pop(h)[1] for h in late]
                wait = max(min((at for at, _ in self._armed.values()), default=now + 60)
                           - now, 0.01)
                self._wakes_at = 0.0 if conns else now + wait
                if not conns:
                    self._cond.wait(wait)
            for conn in conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)


class _AgentHTTPServer(ThreadingHTTPServer):
    """Tracks its open connections so that stopping closes kept-alive ones too; waits
    for connections without polling (an idle agent does not wake up)."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, host: str, port: int, agent: AgentServer, *, max_connections: int,
                 per_source: int) -> None:
        self.agent = agent
        self._connections: dict[socket.socket, str] = {}  # each served one: its source
        self._wrapped: dict[socket.socket, socket.socket] = {}  # its TLS socket, for https
        self._connections_lock = threading.Lock()
        self._max_connections = max_connections
        self._per_source = per_source
        self._sources: Counter[str] = Counter()
        self._health_slots: dict[socket.socket, str] = {}  # each over the caps: its source
        self.deadlines = _Deadlines()
        self._first = threading.local()  # each connection thread's accept-time deadline
        self._wake_r, self._wake_w = os.pipe()  # shutdown() wakes serve_forever() with it
        os.set_blocking(self._wake_r, False)
        self._stop_serving = False
        self._stopped_serving = threading.Event()
        if ":" in host:
            self.address_family = socket.AF_INET6
        try:
            super().__init__((host, port), _AgentRequestHandler)
        except BaseException:
            self._close_wake()
            raise

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accept connections until :meth:`shutdown`, blocked in ``select`` (the
        stdlib's loop wakes every ``poll_interval`` to look for a shutdown: 128 idle
        agents in one place would wake thousands of times a second); ``poll_interval``
        is ignored."""
        self._stopped_serving.clear()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self, selectors.EVENT_READ)
                selector.register(self._wake_r, selectors.EVENT_READ)
                while not self._stop_serving:
                    ready = selector.select()
                    if self._stop_serving:
                        break
                    if any(key.fileobj is self for key, _ in ready):
                        self.handle_request()  # a connection is waiting: no blocking
                    self.service_actions()
        finally:
            self._stop_serving = False
            with contextlib.suppress(OSError):
                while os.read(self._wake_r, 64):
                    pass
            self._stopped_serving.set()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` (wakes it at once) and wait until it has ended."""
        self._stop_serving = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        self._stopped_serving.wait()

    def server_close(self) -> None:
        super().server_close()
        self._close_wake()

    def _close_wake(self) -> None:
        fds, (self._wake_r, self._wake_w) = (self._wake_r, self._wake_w), (-1, -1)
        for fd in fds:
            if fd >= 0:
                os.close(fd)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own, unless :data:`MAX_CONNECTIONS`
        are served already or its source has its share: then on a health slot if one
        is free (:meth:`_serve_health_slot`), else ``503`` at once (one non-blocking
        write) and closed."""
        source = str(client_address[0])
        with self._connections_lock:
            busy = (len(self._connections) >= self._max_connections
                    or self._sources[source] >= self._per_source)
            if not busy:
                self._connections[request] = source
                self._sources[source] += 1
            health_slot = busy and self._take_health_slot(request, source)
        if health_slot:
            threading.Thread(target=self._serve_health_slot, args=(request, client_address),
                             name="agent-health-slot", daemon=True).start()
            return
        if busy:
            self.agent._log.warning("agent.busy", client=source)
            with contextlib.suppress(OSError):
                request.setblocking(False)
                if self.agent.tls is None:
                    request.send(_BUSY_ANSWER)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def _take_health_slot(self, request: Any, source: str) -> bool:
        """Under the connections lock: hold one of :data:`HEALTH_SLOTS` for ``request``
        if one is free and its source holds fewer than :data:`PER_SOURCE_HEALTH_SLOTS`."""
        if (len(self._health_slots) >= HEALTH_SLOTS
                or sum(1 for s in self._health_slots.values() if s == source)
                >= PER_SOURCE_HEALTH_SLOTS):
            return False
        self._health_slots[request] = source
        return True

    def _serve_health_slot(self, request: Any, client_address: Any) -> None:
        """One request on a connection over the caps: ``GET /healthz`` is answered, any
        other ``503`` (:class:`_HealthSlotHandler`); the handshake, the head and every
        read within :data:`HEALTH_SLOT_DEADLINE_S`; then closed."""
        try:
            self._finish(request, client_address, _HealthSlotHandler, HEALTH_SLOT_DEADLINE_S)
        except Exception:
            self.agent._log.exception("agent.health_slot_failed", client=client_address[0])
        finally:
            with self._connections_lock:
                self._health_slots.pop(request, None)
            _lingering_close(request)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Handle the connection (after a TLS handshake, for https), its handshake and
        first request within the agent's request deadline."""
        self._finish(request, client_address, self.RequestHandlerClass,
                     self.agent.request_deadline_s)

    def first_deadline(self) -> int | None:
        """The deadline armed at this thread's connection's accept, once: its first
        request's handler takes it over (None after that)."""
        handle: int | None = getattr(self._first, "handle", None)
        self._first.handle = None
        return handle

    def _finish(self, request: Any, client_address: Any, handler: Any,
                deadline_s: float) -> None:
        """Serve ``request`` with ``handler``; from now, its TLS handshake and first
        request must be done within ``deadline_s`` (then the connection is shut)."""
        self._first.handle = self.deadlines.arm(request, deadline_s)
        try:
            self._serve(request, client_address, handler, deadline_s)
        finally:
            leftover = self.first_deadline()
            if leftover is not None:
                self.deadlines.disarm(leftover)

    def _serve(self, request: Any, client_address: Any, handler: Any,
               handshake_s: float) -> None:
        tls = self.agent.tls
        if tls is None:
            handler(request, client_address, self)
            return
        try:
            request.settimeout(handshake_s)
            wrapped = tls.context().wrap_socket(request, server_side=True,
                                                do_handshake_on_connect=False)
        except OSError:
            return
        with self._connections_lock:
            self._wrapped[request] = wrapped
        try:
            wrapped.do_handshake()
            handler(wrapped, client_address, self)
        except (OSError, ssl.SSLError) as exc:
            self.agent._log.debug("agent.tls_failed", client=client_address[0], error=str(exc))
        finally:
            with self._connections_lock:
                self._wrapped.pop(request, None)
            with contextlib.suppress(OSError):
                wrapped.close()

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            source = self._connections.pop(request, None)
            if source is not None:
                self._sources[source] -= 1
                if self._sources[source] <= 0:
                    del self._sources[source]
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Shut every open client connection (their handler threads then end)."""
        with self._connections_lock:
            connections = [self._wrapped.get(conn, conn) for conn in self._connections]
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


_HTTP_DATE: Final = HttpDate()
#: The methods the agent has endpoints for; any other is answered 501.
_METHODS: Final = frozenset({"GET", "POST", "DELETE", "PUT", "PATCH"})


class _AgentRequestHandler(BaseHTTPRequestHandler):
    """Reads the request, checks the token and the body size, lets the agent answer.

    Of the stdlib's handler it keeps the set-up of a connection and the loop over its
    requests (``handle``); one request (:meth:`handle_one_request`) is read with
    h11 (:mod:`gameday.agent.framing`) and answered with one ``sendall`` of the head
    (:func:`gameday.agent.response_head.answer_head`) and the body, instead of the stdlib's
    ``send_response``/``send_header``/``end_headers`` and a buffered writer."""

    server: _AgentHTTPServer
    path = ""  # until a request line is read (one over 64 KiB is answered before)
    _fields: dict[str, str]  # the request's header fields, by lower-case name
    protocol_version = "HTTP/1.1"
    server_version = SERVER
    sys_version = ""
    timeout = IDLE_CONNECTION_S
    disable_nagle_algorithm = True  # an answer is one write; a pipelined one is not held
    wbufsize = 0  # nothing is written through wfile; the stdlib's unbuffered writer

    def setup(self) -> None:
        super().setup()
        self._reader = RequestReader(self.connection.recv)

    def handle_one_request(self) -> None:
        """Read one request (:class:`gameday.agent.framing.RequestReader`, h11) and answer
        it. A request h11 or the agent cannot frame is answered with a one-line JSON error,
        as is a method without endpoints (501), and the connection closed. The first
        request's head and body (and the TLS handshake before them) must arrive within the
        agent's request deadline from the connection's accept, so a silent connection is
        closed then; a later request's within the deadline from its first byte, after at
        most :data:`IDLE_CONNECTION_S` idle. Keep-alive as the stdlib: HTTP/1.1 unless
        ``Connection: close``, HTTP/1.0 only with ``Connection: keep-alive``;
        ``Expect: 100-continue`` (1.1) is answered before the body is read."""
        self.command, self.path = "", ""
        self.request_version = "HTTP/1.0"  # until known: errors still get a status line
        self.close_connection = True
        self._fields = {}
        self._deadline: int | None = self.server.first_deadline()
        try:
            if self._deadline is not None:
                self.server.deadlines.retarget(self._deadline, self.connection)
            else:
                if not self._reader.wait():  # idle (keep-alive) until the first byte
                    return
                self._deadline = self.server.deadlines.arm(self.connection,
                                                           self._head_deadline())
            try:
                head = self._reader.head()
            except FramingError as bad:
                self.send_error(bad.status, bad.message)
                return
            if head is None:
                return  # the client closed the connection
            self._fields = head.fields
            self.command, self.request_version = head.method, head.version
            self.path = "/" + head.target.lstrip("/") if head.target.startswith("//") \
                else head.target  # never an absolute URI without scheme (gh-87389)
            connection = self._fields.get("connection", "").lower()
            if connection in ("close", "keep-alive"):
                self.close_connection = connection == "close"
            else:
                self.close_connection = not head.keep_alive
            if (head.keep_alive and head.length
                    and self._fields.get("expect", "").lower() == "100-continue"):
                self.handle_expect_100()
            if self.command in _METHODS:
                self._dispatch()
            else:
                self.send_error(HTTPStatus.NOT_IMPLEMENTED,
                                f"Unsupported method ({self.command[:32]!r})")
        except (TimeoutError, ConnectionError, ssl.SSLError) as exc:
            self.log_error("Request timed out or broke: %r", exc)
            self.close_connection = True
        finally:
            self._end_deadline()

    def _head_deadline(self) -> float:
        """Seconds the head and body of a request may take."""
        return self.server.agent.request_deadline_s

    def _end_deadline(self) -> None:
        if self._deadline is not None:
            self.server.deadlines.disarm(self._deadline)
            self._deadline = None

    def handle_expect_100(self) -> bool:
        """Answer ``100 Continue`` at once: the client waits for it to send the body."""
        self.connection.sendall(CONTINUE)
        return True

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """Any error the stdlib's handler answers itself (a malformed head, a request line
        over 64 KiB, an unknown method) as a one-line JSON error, closing the connection."""
        self.close_connection = True
        self._send_failure(_HTTPFailure(code, message or HTTPStatus(code).phrase))

    def _dispatch(self) -> None:
        """Check the token, read the body, and (but for a read) write the request's
        ``intent`` audit record before the agent acts on it, its ``outcome`` after; a
        request without a valid token leaves only a bounded summary."""
        agent = self.server.agent
        path, _, query = self.path.partition("?")
        token: str | None = None
        body: bytes | None = None
        shown: dict[str, Any] | None = None  # what the audit keeps of the body
        try:
            if path not in _PUBLIC_PATHS:
                token = agent.authorized(self._fields.get("authorization"))
                if token is None:
                    raise _HTTPFailure(401, "missing or wrong bearer token", _headers={
                        "WWW-Authenticate": 'Bearer realm="gameday-agent"'})
            body = self._read_body(MAX_BATCH_BODY_BYTES if path in _BATCH_PATHS
                                   else MAX_BODY_BYTES)
            self._end_deadline()
            shown = self._shown(token, body)
            if self.command != "GET":
                self._record(path, token, body, shown, None, phase="intent", strict=True)
            reply = agent.handle(_Request(self.command, path,
                                          parse_qs(query) if query else {}, body,
                                          prefers_minimal(self._fields.get("prefer")),
                                          self._identity or token
                                          or str(self.client_address[0])))
        except _HTTPFailure as failure:
            self._record(path, token, body, shown, failure.status)
            self._send_failure(failure)
            return
        except Exception as exc:
            agent._log.exception("agent.request_failed", method=self.command, path=path)
            self._record(path, token, body, shown, 500)
            self._send_failure(_HTTPFailure(500, f"internal error: {type(exc).__name__}"))
            return
        self._record(path, token, body, shown, reply.status)
        self._send(reply.status, reply.body, reply.content_type, reply.headers)

    @functools.cached_property
    def _identity(self) -> str | None:
        """The client certificate's identity (mutual TLS), else None: read once per
        connection (a handler serves one), whose certificate TLS 1.3 never changes."""
        if isinstance(self.connection, ssl.SSLSocket):
            with contextlib.suppress(ValueError):
                return peer_identity(self.connection.getpeercert())
        return None

    def _record(self, path: str, token: str | None, body: bytes | None,
                shown: dict[str, Any] | None, status: int | None, *,
                phase: Phase = "outcome", strict: bool = False) -> None:
        """The request in the audit trail (but a public GET: probes) and, when it changed
        something or was refused, in the log at INFO: ``shown`` is what the trail keeps of
        its body (:meth:`_shown`). Without a valid token only a summary is kept (method,
        path, size, source). ``strict``: raise
        :class:`_HTTPFailure` (``503``) when the record cannot be written."""
        agent = self.server.agent
        if self.command == "GET" and path in _PUBLIC_PATHS:
            return
        identity = self._identity
        if agent.audit is not None:
            size: int | None = len(body) if body is not None else None
            if token is None:
                phase = "unauthenticated"
                if size is None:
                    with contextlib.suppress(ValueError):
                        size = int(self._fields.get("content-length", "0").strip() or 0)
            try:
                agent.audit.record(source=str(self.client_address[0]), identity=identity,
                                   token=token, method=self.command, path=path,
                                   status=status, shown=shown, phase=phase, size=size)
            except AuditUnavailable as exc:
                agent._log.error("agent.audit_failed", error=str(exc))
                if strict:
                    raise _HTTPFailure(503, str(exc)) from None
        if status is not None and (self.command != "GET" or status >= 400):
            agent._log.info("agent.request", method=self.command, path=path, status=status,
                            client=self.client_address[0], identity=identity, token=token)

    def _shown(self, token: str | None, body: bytes | None) -> dict[str, Any] | None:
        """What the audit trail keeps of an authenticated request's ``body``
        (:func:`gameday.agent.audit.shown_of`, of it decoded), made once for both its
        ``intent`` and ``outcome`` records; None without a trail, a valid token or a
        body (a request without a valid token leaves no part of its body)."""
        if self.server.agent.audit is None or token is None or not body:
            return None
        try:
            return shown_of(decode_body(body))
        except GamedayError:
            return {}

    def _read_body(self, limit: int) -> bytes | None:
        """The request's body (None without one); :class:`_HTTPFailure` (413 over
        ``limit``, 400 cut short), the connection then closed."""
        if "content-length" not in self._fields:
            return None
        try:
            return self._reader.body(limit)
        except FramingError as bad:
            self.close_connection = True
            raise _HTTPFailure(bad.status, bad.message) from None

    def _send_failure(self, failure: _HTTPFailure) -> None:
        extra = dict(failure.extra)
        headers: dict[str, str] = extra.pop("_headers", {})
        allow = extra.pop("allow", None)
        if allow:
            headers["Allow"] = ", ".join(allow)
        reply = _json_reply(failure.status, {"error": failure.message, **extra})
        self._send(reply.status, reply.body, reply.content_type, headers)

    def _send(self, status: int, body: bytes, content_type: str,
              headers: dict[str, str] | None = None) -> None:
        """The answer in one write: head and (but to a ``HEAD`` request) body; the
        connection is closed after it when the request's body was not read whole."""
        if not self._reader.finished:
            self.close_connection = True
        self.log_request(status)
        head = answer_head(status, content_type, len(body), _HTTP_DATE.now(), extra=headers,
                           close=self.close_connection)
        self.connection.sendall(head if self.command == "HEAD" else head + body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # Through the agent's bound logger: the module's lazy proxy would look the logger
        # up again for every answer.
        self.server.agent._log.debug("agent.request", method=self.command,
                                     path=self.path.partition("?")[0], status=code,
                                     client=self.client_address[0])

    def log_message(self, format: str, *args: Any) -> None:
        # Idle keep-alive timeouts and malformed request lines; never headers.
        self.server.agent._log.debug("agent.http", message=format % args)


def _lingering_close(conn: socket.socket) -> None:
    """Close ``conn`` after its answer without losing it: the write side is shut first
    and what the client still sends (a body the slot never read) is drained for a moment,
    since closing with unread input makes the kernel reset the connection and the client
    may lose the tail of the answer."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(0.5)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline and conn.recv(65536):
            pass
    conn.close()


class _HealthSlotHandler(_AgentRequestHandler):
    """A connection over the caps, on a health slot: one request, read within
    :data:`HEALTH_SLOT_DEADLINE_S` (each read and the whole head); ``GET /healthz`` is
    answered as always, anything else ``503``; then the connection is closed. It never
    reaches the registry, so a busy agent still says it is alive."""

    timeout = HEALTH_SLOT_DEADLINE_S

    def handle(self) -> None:
        self.handle_one_request()

    def _head_deadline(self) -> float:
        return min(self.server.agent.request_deadline_s, HEALTH_SLOT_DEADLINE_S)

    def _dispatch(self) -> None:
        self.close_connection = True
        if self.command == "GET" and self.path.partition("?")[0] == "/healthz":
            super()._dispatch()
            return
        self._send_failure(_HTTPFailure(503, "agent busy: too many connections; only "
                                             "GET /healthz is answered now",
                                        _headers={"Retry-After": "1"}))
