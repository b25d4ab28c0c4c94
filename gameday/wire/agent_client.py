"""A client for one agent (``docs/agent-api.md``), over one keep-alive connection.

Every failure is a :class:`gameday.errors.AgentError` whose message is one line naming
the agent and carrying the agent's own error text; ``status`` is the HTTP status, or
``None`` when the agent could not be reached or did not answer in time. A renew of a
fault the agent already reverted raises :class:`LeaseLost`.

The connection is :class:`gameday.wire.http1.Connection` (TLS for an ``https`` agent),
kept alive between requests: each request written whole, each answer read strictly and
within bounds (that module says why not :mod:`http.client`). Every request is an
:class:`Exchange`:
sent, then its answer read. The plain methods do both at once; the ``start_*`` methods
return the exchange once the request is sent, so that one thread can have a request in
flight to many agents and read each answer when its socket becomes readable
(:mod:`gameday.engine.fanout`).

The batch calls take ``minimal=True`` to ask for minimal faults in the answer
(``Prefer: return=minimal``): each fault then carries only what the agent set
(:data:`gameday.wire.protocol.MINIMAL_FIELDS`), which is what a caller that knows what
it sent needs, at a fraction of the bytes to encode, send and decode. An agent that
ignores the preference answers whole faults, which hold those fields too.
"""

from __future__ import annotations  # closures made per agent batch: annotations not evaluated

import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Generic, TypeVar
from urllib.parse import quote, urlsplit

from gameday import jsonbytes
from gameday.errors import AgentError
from gameday.wire.http1 import Connection, MalformedAnswer, request_bytes
from gameday.wire.protocol import MAX_BATCH_ITEMS, PREFER_MINIMAL

__all__ = ["MAX_ANSWER_BYTES", "AgentClient", "AgentHalted", "BatchFailed", "BatchResult",
           "Exchange", "LeaseLost"]

T = TypeVar("T")

#: The largest answer body the client reads; a larger one is a malformed answer.
MAX_ANSWER_BYTES = 64 * 1024 * 1024

class LeaseLost(AgentError):
    """The agent already reverted the fault (its lease ran out, or it was reverted):
    ``fault`` is the agent's record, with ``reverted_at`` and ``revert_reason``."""

    def __init__(self, message: str, *, status: int | None = 410,
                 fault: Mapping[str, Any] | None = None) -> None:
        self.fault: dict[str, Any] = dict(fault or {})
        super().__init__(message, status=status)


class AgentHalted(AgentError):
    """The agent's safety lever is engaged (``423``, code ``halted``): it applies and renews
    nothing; ``halt`` is its lever (engaged_by, engaged_at, reason, source)."""

    def __init__(self, message: str, *, status: int | None = 423,
                 halt: Mapping[str, Any] | None = None) -> None:
        self.halt: dict[str, Any] = dict(halt or {})
        super().__init__(message, status=status)


class BatchFailed(AgentError):
    """The agent refused a batch inject: item ``index`` failed (``status`` is that item's
    status), and the agent reverted the items it had applied before it; nothing of the
    batch stays applied (ids in ``revert_failed`` are being retried by the agent)."""

    def __init__(self, message: str, *, status: int | None, index: int | None,
                 rolled_back: Sequence[str] = (), revert_failed: Sequence[str] = ()) -> None:
        self.index = index
        self.rolled_back = list(rolled_back)
        self.revert_failed = list(revert_failed)
        super().__init__(message, status=status)


@dataclass
class BatchResult:
    """A batch revert or renew: the faults done (by id), and the ids that failed, each
    with its error (``status`` is that id's status: ``404`` unknown, ``410`` already
    reverted on renew (a :class:`LeaseLost`), ``500`` the backend failed to revert)."""

    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, AgentError] = field(default_factory=dict)


# A request on a kept-alive connection that the agent had already closed fails with
# one of these before the agent saw it (a connection closed before an answer began is a
# ConnectionResetError); it is sent again once on a new connection.
_STALE_CONNECTION = (BrokenPipeError, ConnectionResetError)


class AgentClient:
    """Talks to the agent at ``url`` (``http://host:port`` or ``https://``) with bearer
    ``token``; ``tls`` is the context for https (:func:`gameday.wire.tls.client_context`:
    the agents' CA, and a client certificate for mutual TLS; default: the system's CAs);
    ``server_name`` is the name the agent's certificate must carry (default: the URL's
    host; agents reached by pod IP share one name).

    Thread-safe: requests are serialised on one persistent connection, which is
    reopened when it breaks.
    """

    def __init__(self, url: str, token: str, timeout_s: float = 5.0, *,
                 tls: ssl.SSLContext | None = None, server_name: str | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AgentError(f"agent url {url!r} must look like http://host:port")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise AgentError(f"agent url {url!r} has no valid port") from None
        try:  # what every request will carry, checked once
            request_bytes("GET", "/", parts.netloc, {"Authorization": f"Bearer {token}"}, None)
        except ValueError:
            raise AgentError(f"agent url {url!r} or its token holds a character a request "
                             "cannot carry") from None
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._parts = parts
        self._host, self._port = parts.hostname, port
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self._tls = tls
        self._server_name = server_name or parts.hostname
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._conn_used = False  # an answer was read on the connection's socket

    def __repr__(self) -> str:
        return f"AgentClient({self.url!r})"

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        with self._lock:
            self._drop()

    # -- the API ---------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``{"ok": true, "node", "backend"}``."""
        return self._call("GET", "/healthz")

    def inventory(self) -> dict[str, Any]:
        """The node's GPUs, links and mounts, and the fault kinds it can apply."""
        return self._call("GET", "/v1/inventory")

    def inject(self, kind: str, target: Mapping[str, Any], params: Mapping[str, Any],
               lease_s: float, *, run: str = "", request_id: str = "") -> dict[str, Any]:
        """Apply a fault under a lease of ``lease_s`` seconds for run ``run`` (named in
        the agent's fault-window metric); returns the fault. ``request_id`` is the
        idempotency key: the agent applies it at most once. A batch of one
        (:meth:`inject_many`): a refusal raises :class:`BatchFailed` with the item's
        status and error."""
        [fault] = self.inject_many([{"kind": kind, "target": target, "params": params,
                                     "lease_s": lease_s, "run": run,
                                     "request_id": request_id}])
        return fault

    def resolve_requests(self, request_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Settle requests whose answers were never read: the agent reverts what it
        applied of them and refuses the others from now on; one
        ``{"request_id", "outcome": "reverted"|"never_applied", "fault"}`` per id."""
        _check_size(len(request_ids))
        answer = self._call("POST", "/v1/requests:resolve", {"request_ids": list(request_ids)})
        results = answer.get("requests")
        if not isinstance(results, list) or len(results) != len(request_ids):
            raise AgentError(f"agent {self.url}: POST /v1/requests:resolve answered "
                             f"without an outcome per request id")
        return results

    def renew(self, fault_id: str, lease_s: float | None = None) -> dict[str, Any]:
        """Extend the fault's lease (by its own ``lease_s`` unless given); returns the
        fault. Raises :class:`LeaseLost` if the agent already reverted it."""
        body = {} if lease_s is None else {"lease_s": lease_s}
        return self._call("POST", f"/v1/faults/{_quote(fault_id)}/renew", body)

    def revert(self, fault_id: str) -> dict[str, Any]:
        """Revert the fault (idempotent); returns it with ``reverted_at``."""
        return self._call("DELETE", f"/v1/faults/{_quote(fault_id)}")

    def halt(self, reason: str = "") -> dict[str, Any]:
        """Engage the agent's lever (``POST /v1/halt``): it reverts every fault it holds
        and refuses new ones; returns the lever (and ``active``, the faults still held)."""
        return self._call("POST", "/v1/halt", {"reason": reason})

    def release_halt(self) -> dict[str, Any]:
        """Release the agent's lever (``DELETE /v1/halt``); returns the lever."""
        return self._call("DELETE", "/v1/halt")

    def halt_state(self) -> dict[str, Any]:
        """The agent's lever (``GET /v1/halt``)."""
        return self._call("GET", "/v1/halt")

    def inject_many(self, faults: Sequence[Mapping[str, Any]], *, minimal: bool = False
                    ) -> list[dict[str, Any]]:
        """Apply many faults (each ``{"kind", "target", "params"?, "lease_s", "run"?,
        "request_id"?}``) in one request, all or nothing; returns the faults in order
        (``minimal``: at least their ``id``, ``injected_at``, ``applied_at``,
        ``expires_at`` and ``details``). Raises
        :class:`BatchFailed` (which item, why) when the agent refused one: then none of
        them is applied.

        At most 1,024 faults (``MAX_BATCH_ITEMS``) per call."""
        return self.start_inject_many(faults, minimal=minimal).result()

    def start_inject_many(self, faults: Sequence[Mapping[str, Any]], *, minimal: bool = False
                          ) -> Exchange[list[dict[str, Any]]]:
        """:meth:`inject_many`, sent: its answer is the exchange's :meth:`Exchange.result`."""
        _check_size(len(faults))
        body = {"faults": [_inject_item(f) for f in faults]}

        def decode(answer: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
            try:
                applied = answer().get("faults")
            except _Refused as refused:
                details = refused.answer
                raise BatchFailed(refused.message, status=refused.status,
                                  index=details.get("index"),
                                  rolled_back=details.get("rolled_back") or (),
                                  revert_failed=details.get("revert_failed") or ()) from None
            if not isinstance(applied, list) or len(applied) != len(faults):
                raise AgentError(f"agent {self.url}: POST /v1/faults:batch answered "
                                 f"{len(applied) if isinstance(applied, list) else 'no'} "
                                 f"faults for {len(faults)}")
            return applied

        return self._start("POST", "/v1/faults:batch", body, decode, minimal=minimal)

    def revert_many(self, fault_ids: Sequence[str], *, minimal: bool = False) -> BatchResult:
        """Revert many faults in one request (idempotent, as :meth:`revert`); at most
        1,024 ids per call. ``minimal``: each fault done has at least its ``id``,
        ``reverted_at`` and ``revert_reason``."""
        return self.start_revert_many(fault_ids, minimal=minimal).result()

    def start_revert_many(self, fault_ids: Sequence[str], *, minimal: bool = False
                          ) -> Exchange[BatchResult]:
        """:meth:`revert_many`, sent: its answer is the exchange's :meth:`Exchange.result`."""
        _check_size(len(fault_ids))
        return self._batch("/v1/faults:batch-revert", {"ids": list(fault_ids)}, minimal)

    def renew_many(self, fault_ids: Sequence[str], lease_s: float | None = None, *,
                   minimal: bool = False) -> BatchResult:
        """Renew many leases in one request (by each fault's own ``lease_s`` unless
        given); an id the agent already reverted fails with :class:`LeaseLost`.
        ``minimal``: each fault done has at least its ``id``, ``lease_s`` and
        ``expires_at``."""
        _check_size(len(fault_ids))
        body: dict[str, Any] = {"ids": list(fault_ids)}
        if lease_s is not None:
            body["lease_s"] = lease_s
        return self._batch("/v1/faults:batch-renew", body, minimal).result()

    def check_many(self, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """What injecting each item (``{"kind", "target", "params"?, "lease_s"}``) would
        answer, asked without injecting anything: per item, in order, ``{"index",
        "admissible", "status", "error", "matches"}`` (``POST /v1/faults:check``). At
        most 1,024 items per call; :class:`AgentError` with status 404 from an agent
        older than the check endpoint."""
        _check_size(len(items))
        body = {"faults": [_inject_item(item, run=False) for item in items]}
        results = self._call("POST", "/v1/faults:check", body).get("results")
        if not isinstance(results, list) or len(results) != len(items):
            raise AgentError(f"agent {self.url}: POST /v1/faults:check answered "
                             f"{len(results) if isinstance(results, list) else 'no'} "
                             f"results for {len(items)} items")
        return results

    def faults(self, include_reverted: bool = False) -> list[dict[str, Any]]:
        """Active faults; with ``include_reverted``, the recently reverted ones too."""
        path = "/v1/faults?all=1" if include_reverted else "/v1/faults"
        faults = self._call("GET", path).get("faults")
        if not isinstance(faults, list):
            raise AgentError(f"agent {self.url}: GET /v1/faults answered without a faults list")
        return faults

    def get(self, fault_id: str) -> dict[str, Any]:
        """One fault, active or recently reverted."""
        return self._call("GET", f"/v1/faults/{_quote(fault_id)}")

    # -- transport -------------------------------------------------------------------

    def _batch(self, path: str, body: dict[str, Any], minimal: bool
               ) -> Exchange[BatchResult]:
        def decode(answer: Callable[[], dict[str, Any]]) -> BatchResult:
            got = answer()
            done, failed = got.get("faults"), got.get("failed")
            if not isinstance(done, list) or not isinstance(failed, list):
                raise AgentError(f"agent {self.url}: POST {path} answered without "
                                 "faults/failed")
            result = BatchResult(done={str(f["id"]): f for f in done})
            for item in failed:
                where = f"agent {self.url}: POST {path}: {item.get('id')} -> {item.get('status')}"
                message = f"{where}: {item.get('error')}"
                status = item.get("status") if isinstance(item.get("status"), int) else None
                if status == 410:
                    result.failed[str(item["id"])] = LeaseLost(message, status=status,
                                                               fault=item.get("fault"))
                else:
                    result.failed[str(item["id"])] = AgentError(message, status=status)
            return result

        return self._start("POST", path, body, decode, minimal=minimal)

    def _call(self, method: str, path: str, body: object = None) -> dict[str, Any]:
        return self._start(method, path, body, lambda answer: answer()).result()

    def _start(self, method: str, path: str, body: object,
               decode: Callable[[Callable[[], dict[str, Any]]], T], *,
               minimal: bool = False) -> Exchange[T]:
        """Send one request; ``decode`` turns the answer (a callable that returns the
        JSON object or raises the agent's error) into the exchange's result; ``minimal``:
        ask for a minimal answer."""
        payload = None if body is None else jsonbytes.dumps(body)
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if minimal:
            headers["Prefer"] = PREFER_MINIMAL
        try:
            data = request_bytes(method, self._prefix + path, self._parts.netloc, headers,
                                 payload)
        except ValueError as exc:
            raise AgentError(f"agent {self.url}: {exc}") from None
        exchange = Exchange(self, method, self._prefix + path, data, decode)
        exchange.send()
        return exchange

    def _answer(self, where: str, path: str, status: int, raw: bytes) -> dict[str, Any]:
        """The JSON object of a 2xx answer; otherwise the agent's error, raised."""
        try:
            answer = jsonbytes.loads(raw) if raw else None
        except ValueError:
            raise AgentError(f"{where} -> {status}: answer is not JSON: {raw[:120]!r}",
                             status=status) from None
        if 200 <= status < 300:
            if not isinstance(answer, dict):
                raise AgentError(f"{where} -> {status}: answer is not a JSON object",
                                 status=status)
            return answer
        error = answer.get("error") if isinstance(answer, dict) else None
        message = f"{where} -> {status}: {error or _phrase(status)}"
        if status == 410 and isinstance(answer, dict):
            raise LeaseLost(message, status=status, fault=answer)
        if status == 423 and isinstance(answer, dict) and answer.get("code") == "halted":
            halt = answer.get("halt")
            raise AgentHalted(message, status=status, halt=halt if isinstance(halt, dict) else {})
        if path == "/v1/faults:batch" and isinstance(answer, dict) and "index" in answer:
            raise _Refused(message, status=status, answer=answer)
        raise AgentError(message, status=status)

    def _connection(self) -> Connection:
        """The kept-alive connection (its socket is opened by the request that finds it
        closed); for an ``https`` agent, TLS with the client's ``ssl.SSLContext``, the
        certificate checked for the server name (an agent reached by pod IP presents
        its Service name)."""
        if self._conn is None:
            tls = None
            if self._parts.scheme == "https":  # (the system's CAs, made when first needed)
                tls = self._tls or ssl.create_default_context()
            self._conn = Connection(self._host or "", self._port, timeout_s=self.timeout_s,
                                    tls=tls, server_name=self._server_name,
                                    max_body=MAX_ANSWER_BYTES)
        return self._conn

    def _socket_open(self) -> bool:
        return self._conn is not None and self._conn.is_open

    def _drop(self) -> None:
        """Close the connection's socket (the next request opens a new one)."""
        if self._conn is not None:
            self._conn.close()
        self._conn_used = False


class Exchange(Generic[T]):
    """One request to an agent: sent on the client's kept-alive connection, then its
    answer read by :meth:`result`. The client's lock is held from :meth:`send` until the
    answer is read or the exchange is :meth:`cancel`-led, so requests on one connection
    never interleave; one thread must not start a second exchange on a client whose
    exchange it has not finished.

    A request on a kept-alive connection that the agent had already closed fails before
    the agent saw it; it is sent once more on a new connection.
    """

    def __init__(self, client: AgentClient, method: str, path: str, data: bytes,
                 decode: Callable[[Callable[[], dict[str, Any]]], T]) -> None:
        self.client = client
        self.where = f"agent {client.url}: {method} {path.partition('?')[0]}"
        self.deadline = 0.0  # time.monotonic() by which the answer is due
        self.state = "new"   # new, sending, sent, reading, done
        self._path = path
        self._data = data  # the request, head and body
        self._decode = decode
        self._reused = False
        self._locked = False
        self._outcome: tuple[T | None, BaseException | None] | None = None

    def __repr__(self) -> str:
        return f"Exchange({self.where!r}, {self.state})"

    def fileno(self) -> int:
        """The socket the answer arrives on (for ``selectors``), or -1 if there is none."""
        conn = self.client._conn
        return -1 if conn is None else conn.fileno()

    def send(self) -> None:
        """Take the client's connection and send the request (connecting if needed)."""
        if self.state != "new":
            raise RuntimeError(f"{self!r} was already sent")
        self.client._lock.acquire()
        self._locked = True
        self.state = "sending"
        try:
            self._send_once()
        except BaseException:
            self._release()
            self.state = "done"
            raise
        self.state = "sent"

    def result(self) -> T:
        """Read the answer (waiting for it at most the client's timeout), give the
        connection back and return the decoded answer, or raise the agent's error.
        Asked again, it returns (or raises) the same."""
        if self._outcome is None:
            self._outcome = self._finish()
        value, error = self._outcome
        if error is not None:
            raise error
        return value  # type: ignore[return-value]

    def cancel(self, reason: str = "interrupted before the answer was read") -> None:
        """Stop waiting for the answer, which :meth:`result` then raises as an
        :class:`AgentError` with ``reason`` (without a status: it may pass): the
        connection is closed (the agent may still have done what was asked) and given
        back."""
        if self._outcome is None:
            self._outcome = (None, AgentError(f"{self.where}: {reason}"))
        if self._locked:
            self.client._drop()
        self._release()
        self.state = "done"

    # -- internals ---------------------------------------------------------------------

    def _send_once(self) -> None:
        client = self.client
        for attempt in (1, 2):
            self._reused = client._socket_open() and client._conn_used
            try:
                client._connection().send(self._data)
            except _STALE_CONNECTION as exc:
                client._drop()
                if self._reused and attempt == 1:
                    continue
                raise self._failure(exc) from None
            except BaseException as exc:
                client._drop()
                if isinstance(exc, OSError):
                    raise self._failure(exc) from None
                raise
            self.deadline = time.monotonic() + client.timeout_s
            return

    def _finish(self) -> tuple[T | None, BaseException | None]:
        if self.state != "sent":  # its sending or a read was cut short (interrupted)
            self.cancel()
            assert self._outcome is not None
            return self._outcome
        self.state = "reading"
        try:
            status, raw = self._read()
        except AgentError as exc:
            return None, exc
        except BaseException:
            self.client._drop()  # cut mid-answer: the connection is unusable
            raise
        finally:
            self._release()
            self.state = "done"
        try:
            return self._decode(lambda: self.client._answer(self.where, self._path,
                                                             status, raw)), None
        except AgentError as exc:
            return None, exc

    def _read(self) -> tuple[int, bytes]:
        client = self.client
        retry = self._reused  # a kept-alive connection the agent had closed: once, anew
        while True:
            try:
                answer = client._connection().read_answer(self.deadline)  # closes as it must
            except _STALE_CONNECTION as exc:
                client._drop()
                if not retry:
                    raise self._failure(exc) from None
                retry = False
                self._send_once()  # on a new connection
                continue
            except (OSError, MalformedAnswer) as exc:
                client._drop()
                raise self._failure(exc) from None
            client._conn_used = True
            return answer.status, answer.body

    def _failure(self, exc: BaseException) -> AgentError:
        if isinstance(exc, TimeoutError):
            return AgentError(f"{self.where}: no answer within {self.client.timeout_s:g}s")
        if isinstance(exc, ConnectionRefusedError):
            return AgentError(f"{self.where}: cannot connect (connection refused)")
        if isinstance(exc, _STALE_CONNECTION):
            return AgentError(f"{self.where}: connection failed ({_describe(exc)})")
        if isinstance(exc, MalformedAnswer):
            return AgentError(f"{self.where}: malformed answer ({_describe(exc)})")
        return AgentError(f"{self.where}: cannot reach the agent ({_describe(exc)})")

    def _release(self) -> None:
        if self._locked:
            self._locked = False
            self.client._lock.release()


class _Refused(AgentError):
    """A batch inject answered non-2xx with the agent's details (turned into
    :class:`BatchFailed` by :meth:`AgentClient.inject_many`)."""

    def __init__(self, message: str, *, status: int, answer: dict[str, Any]) -> None:
        self.message = message
        self.answer = answer
        super().__init__(message, status=status)


def _inject_item(fault: Mapping[str, Any], *, run: bool = True) -> dict[str, Any]:
    """One item of a batch body: the fault's kind, target, params, lease (and run)."""
    item = {"kind": fault["kind"], "target": dict(fault["target"]),
            "params": dict(fault.get("params") or {}), "lease_s": fault["lease_s"]}
    if run and fault.get("run"):
        item["run"] = fault["run"]
    if fault.get("request_id"):
        item["request_id"] = fault["request_id"]
    return item


def _check_size(count: int) -> None:
    if not 1 <= count <= MAX_BATCH_ITEMS:
        raise AgentError(f"a batch holds 1 to {MAX_BATCH_ITEMS} items, got {count}")


def _quote(fault_id: str) -> str:
    return quote(fault_id, safe="")


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "?"


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
