"""The agent's audit trail: one JSON line per request that reached the handler.

Every request the agent read a head of, answered 2xx or 4xx or 5xx, gets a record of
time, source address, identity (the client certificate's, and the token's fingerprint),
method, path, fault kind, target, parameters (values of secret-looking keys redacted)
and status. The file is opened for appending only and each record is flushed and
``fsync``'d before the answer is sent, so a record outlives a crash of the agent.
"""

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gameday.errors import InvalidInput
from gameday.logs import SECRET_WORDS

__all__ = ["AuditTrail", "redact"]


#: How deep :func:`redact` copies a value; deeper is recorded as ``"[too deep]"`` (a
#: refused request 500 levels deep still gets its record, without recursing that far).
REDACT_DEPTH = 32


def redact(value: Any, depth: int = REDACT_DEPTH) -> Any:
    """``value`` with the value of every key that names a secret
    (:data:`gameday.logs.SECRET_WORDS`) replaced by ``"[redacted]"``, down to ``depth``
    levels; what lies deeper is replaced by ``"[too deep]"``."""
    if isinstance(value, Mapping | list) and depth <= 0:
        return "[too deep]"
    if isinstance(value, Mapping):
        return {str(k): "[redacted]" if any(w in str(k).lower() for w in SECRET_WORDS)
                else redact(v, depth - 1) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(item, depth - 1) for item in value]
    return value


class AuditTrail:
    """Appends records to ``path`` (created mode 0600; its directory is made)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                               0o600)
        except OSError as exc:
            raise InvalidInput(f"--audit-log {path}: cannot open it "
                               f"({exc.strerror or exc})") from None
        self._lock = threading.Lock()

    def record(self, *, source: str, identity: str | None, token: str | None, method: str,
               path: str, status: int, body: object = None) -> None:
        """Append one request's record (``body``: the decoded request, if any; only its
        kind, target and params, redacted, are kept, or each fault's of a batch)."""
        entry: dict[str, Any] = {"time": time.time(), "source": source, "identity": identity,
                                 "token": token, "method": method, "path": path,
                                 "status": status}
        if isinstance(body, Mapping):
            if isinstance(body.get("faults"), list):
                entry["faults"] = [_fault_fields(item) for item in body["faults"][:1024]]
            else:
                entry.update(_fault_fields(body))
            if isinstance(body.get("ids"), list):
                entry["ids"] = body["ids"][:1024]
        line = (json.dumps(entry, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)
            os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _fault_fields(item: object) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        return {}
    return {key: redact(item[key]) for key in ("kind", "target", "params", "lease_s")
            if key in item}
