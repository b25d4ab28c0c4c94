"""A client for one agent (``docs/agent-api.md``), over one keep-alive connection.

Every failure is a :class:`gameday.errors.AgentError` whose message is one line naming
the agent and carrying the agent's own error text; ``status`` is the HTTP status, or
``None`` when the agent could not be reached or did not answer in time. A renew of a
fault the agent already reverted raises :class:`LeaseLost`.
"""

import http.client
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from gameday.agent.protocol import MAX_BATCH_ITEMS
from gameday.errors import AgentError

__all__ = ["AgentClient", "BatchFailed", "BatchResult", "LeaseLost"]


class LeaseLost(AgentError):
    """The agent already reverted the fault (its lease ran out, or it was reverted):
    ``fault`` is the agent's record, with ``reverted_at`` and ``revert_reason``."""

    def __init__(self, message: str, *, status: int | None = 410,
                 fault: Mapping[str, Any] | None = None) -> None:
        self.fault: dict[str, Any] = dict(fault or {})
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
# one of these before the agent saw it; it is sent again once on a new connection.
_STALE_CONNECTION = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                     http.client.CannotSendRequest)


class AgentClient:
    """Talks to the agent at ``url`` (``http://host:port``) with bearer ``token``.

    Thread-safe: requests are serialised on one persistent connection, which is
    reopened when it breaks.
    """

    def __init__(self, url: str, token: str, timeout_s: float = 5.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AgentError(f"agent url {url!r} must look like http://host:port")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._parts = parts
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._conn_used = False

    def __repr__(self) -> str:
        return f"AgentClient({self.url!r})"

    def __enter__(self) -> "AgentClient":
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
               lease_s: float) -> dict[str, Any]:
        """Apply a fault under a lease of ``lease_s`` seconds; returns the fault."""
        body = {"kind": kind, "target": dict(target), "params": dict(params),
                "lease_s": lease_s}
        return self._call("POST", "/v1/faults", body)

    def renew(self, fault_id: str, lease_s: float | None = None) -> dict[str, Any]:
        """Extend the fault's lease (by its own ``lease_s`` unless given); returns the
        fault. Raises :class:`LeaseLost` if the agent already reverted it."""
        body = {} if lease_s is None else {"lease_s": lease_s}
        return self._call("POST", f"/v1/faults/{_quote(fault_id)}/renew", body)

    def revert(self, fault_id: str) -> dict[str, Any]:
        """Revert the fault (idempotent); returns it with ``reverted_at``."""
        return self._call("DELETE", f"/v1/faults/{_quote(fault_id)}")

    def inject_many(self, faults: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Apply many faults (each ``{"kind", "target", "params"?, "lease_s"}``) in one
        request, all or nothing; returns the faults in order. Raises :class:`BatchFailed`
        (which item, why) when the agent refused one: then none of them is applied.

        At most 1,024 faults (``MAX_BATCH_ITEMS``) per call."""
        _check_size(len(faults))
        body = {"faults": [{"kind": f["kind"], "target": dict(f["target"]),
                            "params": dict(f.get("params") or {}), "lease_s": f["lease_s"]}
                           for f in faults]}
        try:
            answer = self._call("POST", "/v1/faults:batch", body)
        except _Refused as refused:
            raise BatchFailed(refused.message, status=refused.status,
                              index=refused.answer.get("index"),
                              rolled_back=refused.answer.get("rolled_back") or (),
                              revert_failed=refused.answer.get("revert_failed") or ()) from None
        applied = answer.get("faults")
        if not isinstance(applied, list) or len(applied) != len(faults):
            raise AgentError(f"agent {self.url}: POST /v1/faults:batch answered "
                             f"{len(applied) if isinstance(applied, list) else 'no'} faults "
                             f"for {len(faults)}")
        return applied

    def revert_many(self, fault_ids: Sequence[str]) -> BatchResult:
        """Revert many faults in one request (idempotent, as :meth:`revert`); at most
        1,024 ids per call."""
        _check_size(len(fault_ids))
        return self._batch("/v1/faults:batch-revert", {"ids": list(fault_ids)})

    def renew_many(self, fault_ids: Sequence[str], lease_s: float | None = None) -> BatchResult:
        """Renew many leases in one request (by each fault's own ``lease_s`` unless
        given); an id the agent already reverted fails with :class:`LeaseLost`."""
        _check_size(len(fault_ids))
        body: dict[str, Any] = {"ids": list(fault_ids)}
        if lease_s is not None:
            body["lease_s"] = lease_s
        return self._batch("/v1/faults:batch-renew", body)

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

    def _batch(self, path: str, body: dict[str, Any]) -> BatchResult:
        answer = self._call("POST", path, body)
        done, failed = answer.get("faults"), answer.get("failed")
        if not isinstance(done, list) or not isinstance(failed, list):
            raise AgentError(f"agent {self.url}: POST {path} answered without faults/failed")
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

    def _call(self, method: str, path: str, body: object = None) -> dict[str, Any]:
        where = f"agent {self.url}: {method} {path.partition('?')[0]}"
        payload = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        with self._lock:
            status, raw = self._exchange(where, method, self._prefix + path, payload, headers)
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            raise AgentError(f"{where} -> {status}: answer is not JSON: {raw[:120]!r}",
                             status=status) from None
        if 200 <= status < 300:
            if not isinstance(answer, dict):
                raise AgentError(f"{where} -> {status}: answer is not a JSON object",
                                 status=status)
            return answer
        error = answer.get("error") if isinstance(answer, dict) else None
        message = f"{where} -> {status}: {error or http.client.responses.get(status, '?')}"
        if status == 410 and isinstance(answer, dict):
            raise LeaseLost(message, status=status, fault=answer)
        if path == "/v1/faults:batch" and isinstance(answer, dict) and "index" in answer:
            raise _Refused(message, status=status, answer=answer)
        raise AgentError(message, status=status)

    def _exchange(self, where: str, method: str, path: str, payload: bytes | None,
                  headers: dict[str, str]) -> tuple[int, bytes]:
        """Under the lock: send one request and read the whole answer."""
        for attempt in (1, 2):
            reused = self._conn is not None and self._conn_used
            conn = self._connection()
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                raw = response.read()
            except _STALE_CONNECTION as exc:
                self._drop()
                if reused and attempt == 1:
                    continue
                raise AgentError(f"{where}: connection failed ({_describe(exc)})") from None
            except TimeoutError:
                self._drop()
                raise AgentError(f"{where}: no answer within {self.timeout_s:g}s") from None
            except ConnectionRefusedError:
                self._drop()
                raise AgentError(f"{where}: cannot connect (connection refused)") from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                raise AgentError(f"{where}: cannot reach the agent ({_describe(exc)})") from None
            self._conn_used = True
            if response.will_close:
                self._drop()
            return response.status, raw
        raise AssertionError("unreachable")  # pragma: no cover

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = (http.client.HTTPSConnection if self._parts.scheme == "https"
                   else http.client.HTTPConnection)
            self._conn = cls(self._parts.hostname or "", self._parts.port,
                             timeout=self.timeout_s)
            self._conn_used = False
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._conn_used = False


class _Refused(AgentError):
    """A batch inject answered non-2xx with the agent's details (turned into
    :class:`BatchFailed` by :meth:`AgentClient.inject_many`)."""

    def __init__(self, message: str, *, status: int, answer: dict[str, Any]) -> None:
        self.message = message
        self.answer = answer
        super().__init__(message, status=status)


def _check_size(count: int) -> None:
    if not 1 <= count <= MAX_BATCH_ITEMS:
        raise AgentError(f"a batch holds 1 to {MAX_BATCH_ITEMS} items, got {count}")


def _quote(fault_id: str) -> str:
    return quote(fault_id, safe="")


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
