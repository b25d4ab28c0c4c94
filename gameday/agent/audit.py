"""The agent's audit trail: JSON lines, each written and ``fsync``'d before what it
records happens.

Every request that reaches the handler leaves a record of time, source address,
identity (the client certificate's, and the token's fingerprint), method, path, fault
kind, target, parameters (redacted, :func:`gameday.agent.redaction.redact`) and status.
A request that may change something leaves two: an ``intent`` record before the agent
acts on it, then its ``outcome``; and every apply and revert of a fault, whoever asks
for it (a request, the lease reaper, a shutdown), is preceded by an ``apply`` or
``revert`` record (:class:`gameday.agent.audited.AuditedBackend`; a batch's records
are written together, with one ``fsync``, before its first change). A request without a
valid token leaves only a bounded summary (method, path, body size, source; never its
body). When a record cannot be written, the caller learns it (:class:`AuditUnavailable`)
before acting.

The file is opened for appending only (mode 0600). It is reopened when its path no
longer names the open file (deleted, or moved by ``logrotate``: checked before each
record) and on :meth:`AuditTrail.reopen` (the agent's ``SIGHUP``).
"""

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson

from gameday.agent.redaction import redact
from gameday.errors import GamedayError, InvalidInput

__all__ = ["AuditTrail", "AuditUnavailable", "Phase", "redact", "shown_of"]

#: What a record is of: a request before it is acted on, its outcome, a summary of a
#: request without a valid token, or a fault's apply or revert about to happen.
Phase = Literal["intent", "outcome", "unauthenticated", "apply", "revert"]


#: A record's line where orjson's would not do: compact JSON, every character beyond
#: ASCII escaped, anything else by its ``str``; made once (``json.dumps`` with arguments
#: makes one per line).
_LINE_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)


def _line(entry: Mapping[str, Any]) -> bytes:
    """One record as its line: compact JSON in ASCII, so that no character in a value
    (a bidirectional override, U+2028) changes how the trail reads in a terminal or
    splits into lines. orjson writes it (a fifth of the standard encoder's time) when
    its text is ASCII, which a record's is unless a value holds more; the standard
    encoder, escaping, writes the rest (and an integer beyond 64 bits). The values are
    :func:`redact`'s and the agent's own: plain JSON, NaN and the infinities as words."""
    try:
        text = orjson.dumps(entry, default=str)
    except orjson.JSONEncodeError:
        text = b""
    if not text or not text.isascii():
        text = _LINE_ENCODER.encode(dict(entry)).encode()
    return text + b"\n"


class AuditUnavailable(GamedayError):
    """The audit record could not be written, so nothing was done (``503``)."""


class AuditTrail:
    """Appends records to ``path`` (created mode 0600; its directory is made)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fd = -1
        self._id: tuple[int, int] | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._open()
        except OSError as exc:
            raise InvalidInput(f"--audit-log {path}: cannot open it "
                               f"({exc.strerror or exc})") from None

    def _open(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                     | os.O_NOFOLLOW, 0o600)
        st = os.fstat(fd)
        old, self._fd, self._id = self._fd, fd, (st.st_dev, st.st_ino)
        if old >= 0:
            os.close(old)

    def reopen(self) -> None:
        """Open ``path`` anew (after ``logrotate`` moved it: its ``postrotate`` sends the
        agent ``SIGHUP``); records go to the new file from now."""
        with self._lock:
            self._open()

    def _current(self) -> None:
        """Under the lock: reopen when ``path`` is no longer the open file."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
            same = (st.st_dev, st.st_ino) == self._id
        except OSError:
            same = False
        if not same or self._fd < 0:
            self._open()

    def write(self, entry: Mapping[str, Any]) -> None:
        """Append ``entry`` as one line, durable on return; :class:`AuditUnavailable`
        if it cannot be."""
        self.write_many([entry])

    def write_many(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Append ``entries``, a line each, with one write and one ``fsync``: all durable
        on return; :class:`AuditUnavailable` if they cannot be."""
        lines = b"".join(map(_line, entries))
        with self._lock:
            try:
                self._current()
                os.write(self._fd, lines)
                os.fsync(self._fd)
            except OSError as exc:
                raise AuditUnavailable(f"the audit trail {self.path} cannot be written "
                                       f"({exc.strerror or exc}); nothing was done") from None

    def record(self, *, source: str, identity: str | None, token: str | None, method: str,
               path: str, status: int | None, shown: Mapping[str, Any] | None = None,
               phase: Phase = "outcome", size: int | None = None) -> None:
        """Append one request's record: ``shown`` is what it keeps of the request's body
        (:func:`shown_of`, made once for a request's ``intent`` and ``outcome``; none
        for ``unauthenticated``, which keeps ``size`` instead), and a halt's reason."""
        entry: dict[str, Any] = {"time": time.time(), "phase": phase, "source": source,
                                 "identity": identity, "token": token, "method": method[:16],
                                 "path": path[:256], "status": status}
        if phase == "unauthenticated":
            entry["size"] = size
        elif shown:
            entry.update(shown)
        self.write(entry)

    def fault(self, phase: Literal["apply", "revert"], fault_id: str, kind: str,
              target: Mapping[str, Any], params: Mapping[str, Any]) -> None:
        """Append that fault ``fault_id`` is about to be applied or reverted."""
        self.faults(phase, [(fault_id, kind, target, params)])

    def faults(self, phase: Literal["apply", "revert"],
               faults: Sequence[tuple[str, str, Mapping[str, Any], Mapping[str, Any]]]) -> None:
        """Append that each ``(fault_id, kind, target, params)`` is about to be applied or
        reverted: a record each, durable together (one ``fsync``)."""
        now = time.time()
        self.write_many([{"time": now, "phase": phase, "fault_id": fault_id, "kind": kind,
                          "target": redact(dict(target)), "params": redact(dict(params))}
                         for fault_id, kind, target, params in faults])

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def shown_of(body: object) -> dict[str, Any]:
    """What a request's records keep of its decoded ``body``: its kind, target, params and
    lease, or each fault's of a batch, the ids it names and a halt's reason, redacted
    (:func:`redact`); nothing of a body that is not an object."""
    shown: dict[str, Any] = {}
    if isinstance(body, Mapping):
        if isinstance(body.get("faults"), list):
            shown["faults"] = [_fault_fields(item) for item in body["faults"][:1024]]
        else:
            shown.update(_fault_fields(body))
        if isinstance(body.get("ids"), list):
            shown["ids"] = redact(body["ids"][:1024])
        if isinstance(body.get("reason"), str):  # POST /v1/halt
            shown["reason"] = redact(body["reason"][:300])
    return shown


def _fault_fields(item: object) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        return {}
    return {key: redact(item[key]) for key in ("kind", "target", "params", "lease_s")
            if key in item}
