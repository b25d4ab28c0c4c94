"""The ledger: a durable, append-only record of every fault a run applied.

Each line of the ledger file is one JSON event (``applied``, ``renewed``, ``reverted``,
``lost``), flushed and fsync'd before the call returns, so a crash of the orchestrator
never loses what it injected. The in-memory view answers "what is still active".

A fan-out records each agent's batch as its answer lands, without waiting for the
disk (``sync=False``: the lines are in the file, so a killed orchestrator's cleanup
finds them), then makes them all durable with one fsync when it ends; recording an
entry the ledger already holds only does that fsync.
"""

import json
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class FaultEntry:
    """One fault as the orchestrator knows it (mirrors the agent's fault record)."""

    id: str
    kind: str
    node: str
    agent_url: str
    target: dict[str, Any]
    params: dict[str, Any]
    injected_at: str
    applied_at: float
    expires_at: float
    lease_s: float
    action: str = ""
    reverted_at: float | None = None
    revert_reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    via: str = "agent"  # or "kubernetes": applied through the API, reverted by details.inverse

    @property
    def active(self) -> bool:
        return self.reverted_at is None

    @property
    def inverse(self) -> dict[str, str]:
        """How to undo the fault without this process: the agent call that reverts it."""
        if self.via != "agent":
            return {str(k): str(v) for k, v in (self.details.get("inverse") or {}).items()}
        return {"method": "DELETE", "url": f"{self.agent_url}/v1/faults/{self.id}"}

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "node": self.node, "agent_url": self.agent_url,
            "target": self.target, "params": self.params, "injected_at": self.injected_at,
            "applied_at": self.applied_at, "expires_at": self.expires_at,
            "lease_s": self.lease_s, "action": self.action, "reverted_at": self.reverted_at,
            "revert_reason": self.revert_reason, "details": self.details,
            "inverse": self.inverse, "via": self.via,
        }


class Ledger:
    """Append-only fault ledger for one run, backed by a JSON-lines file."""

    def __init__(self, path: Path | None, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._entries: dict[str, FaultEntry] = {}
        self._lock = threading.Lock()
        self._host = socket.gethostname()
        self._unsynced = False  # lines written without fsync since the last one
        self._unwritten: list[tuple[str, dict[str, Any]]] = []  # an unsynced write failed
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def _append(self, event: str, payload: dict[str, Any]) -> None:
        self._append_many([(event, payload)], sync=True)

    def _append_many(self, events: list[tuple[str, dict[str, Any]]], *, sync: bool) -> None:
        """Under the lock: write events (and what an earlier write could not), fsync'd
        if ``sync``. A failed write is kept for the next call (and raised if ``sync``)."""
        if self.path is None:
            return
        pending, self._unwritten = self._unwritten + events, []
        if pending:
            try:
                append_events(self.path, self.run_id, pending, sync=sync)
            except OSError:
                self._unwritten = pending
                if sync:
                    raise
                return
            self._unsynced = not sync
        elif sync and self._unsynced:
            sync_file(self.path)
            self._unsynced = False

    def record_applied(self, entry: FaultEntry) -> None:
        with self._lock:
            self._entries[entry.id] = entry
            self._append("applied", {**entry.to_json(), "pid": os.getpid(),
                                     "host": socket.gethostname()})

    def record_applied_many(self, entries: list[FaultEntry], *, sync: bool = True) -> None:
        """Record many applied faults with one write and (``sync``) one fsync; entries
        already recorded are not written again."""
        with self._lock:
            new = [e for e in entries if e.id not in self._entries]
            for entry in new:
                self._entries[entry.id] = entry
            extra = {"pid": os.getpid(), "host": self._host}
            self._append_many([("applied", {**e.to_json(), **extra}) for e in new], sync=sync)

    def record_reverted_many(self, reverted: list[tuple[str, float, str]], *,
                             sync: bool = True) -> None:
        """Record many reverts ``(id, reverted_at, reason)`` with one write and (``sync``)
        one fsync; a fault already recorded as reverted is not written again."""
        with self._lock:
            events = []
            for fault_id, reverted_at, reason in reverted:
                entry = self._entries.get(fault_id)
                if entry is None or not entry.active:
                    continue
                entry.reverted_at, entry.revert_reason = reverted_at, reason
                events.append(("reverted", {"id": fault_id, "reverted_at": reverted_at,
                                            "reason": reason}))
            self._append_many(events, sync=sync)

    def record_renewed_many(self, renewed: list[tuple[str, float]]) -> None:
        """Record many renewals ``(id, expires_at)`` with one write and one fsync."""
        with self._lock:
            events = []
            for fault_id, expires_at in renewed:
                entry = self._entries.get(fault_id)
                if entry is None or not entry.active:
                    continue
                entry.expires_at = expires_at
                events.append(("renewed", {"id": fault_id, "expires_at": expires_at}))
            if events:
                self._append_many(events, sync=True)

    def record_renewed(self, fault_id: str, expires_at: float) -> None:
        with self._lock:
            entry = self._entries.get(fault_id)
            if entry is None or not entry.active:
                return
            entry.expires_at = expires_at
            self._append("renewed", {"id": fault_id, "expires_at": expires_at})

    def record_reverted(self, fault_id: str, reverted_at: float, reason: str) -> None:
        with self._lock:
            entry = self._entries.get(fault_id)
            if entry is None or not entry.active:
                return
            entry.reverted_at = reverted_at
            entry.revert_reason = reason
            self._append("reverted", {"id": fault_id, "reverted_at": reverted_at,
                                      "reason": reason})

    def entries(self) -> list[FaultEntry]:
        with self._lock:
            return list(self._entries.values())

    def active(self) -> list[FaultEntry]:
        return [entry for entry in self.entries() if entry.active]

    def __iter__(self) -> Iterator[FaultEntry]:
        return iter(self.entries())


def append_event(path: Path, event: str, run_id: str, payload: dict[str, Any]) -> None:
    """Append one event line (O_APPEND, one write, fsync'd before returning)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"event": event, "run": run_id, **payload}, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


_ENCODER = json.JSONEncoder(sort_keys=True)  # stateless: shared by every write


def append_events(path: Path, run_id: str, events: list[tuple[str, dict[str, Any]]], *,
                  sync: bool = True) -> None:
    """Append several event lines with one write and (``sync``) one fsync."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(_ENCODER.encode({"event": event, "run": run_id, **payload}) + "\n"
                   for event, payload in events)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data.encode("utf-8"))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync_file(path: Path) -> None:
    """fsync what was written to ``path`` without it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """Replay a ledger file into the last known state of each fault (for cleanup)."""
    faults: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return []
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a torn last line after a crash
        fault_id = event.get("id")
        if not isinstance(fault_id, str):
            continue
        if event.get("event") == "applied":
            faults[fault_id] = event
        elif fault_id in faults:
            faults[fault_id].update({k: v for k, v in event.items() if k != "event"})
    return list(faults.values())
