"""A client for one agent (``docs/agent-api.md``), over one keep-alive connection.

Every failure is a :class:`gameday.errors.AgentError` whose message is one line naming
the agent and carrying the agent's own error text; ``status`` is the HTTP status, or
``None`` when the agent could not be reached or did not answer in time. A renew of a
fault the agent already reverted raises :class:`LeaseLost`.
"""

import http.client
import json
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from gameday.errors import AgentError

__all__ = ["AgentClient", "LeaseLost"]


class LeaseLost(AgentError):
    """The agent already reverted the fault (its lease ran out, or it was reverted):
    ``fault`` is the agent's record, with ``reverted_at`` and ``revert_reason``."""

    def __init__(self, message: str, *, status: int | None = 410,
                 fault: Mapping[str, Any] | None = None) -> None:
        self.fault: dict[str, Any] = dict(fault or {})
        super().__init__(message, status=status)


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


def _quote(fault_id: str) -> str:
    return quote(fault_id, safe="")


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
