"""The ledger: a durable, append-only record of every fault a run applied.

Each line of the ledger file is one JSON event (``applied``, ``renewed``, ``reverted``,
``lost``), flushed and fsync'd before the call returns, so a crash of the orchestrator
never loses what it injected. The in-memory view answers "what is still active".
"""

import json
import os
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

    @property
    def active(self) -> bool:
        return self.reverted_at is None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "node": self.node, "agent_url": self.agent_url,
            "target": self.target, "params": self.params, "injected_at": self.injected_at,
            "applied_at": self.applied_at, "expires_at": self.expires_at,
            "lease_s": self.lease_s, "action": self.action, "reverted_at": self.reverted_at,
            "revert_reason": self.revert_reason, "details": self.details,
        }


class Ledger:
    """Append-only fault ledger for one run, backed by a JSON-lines file."""

    def __init__(self, path: Path | None, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._entries: dict[str, FaultEntry] = {}
        self._lock = threading.Lock()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def _append(self, event: str, payload: dict[str, Any]) -> None:
        if self.path is None:
            return
        line = json.dumps({"event": event, "run": self.run_id, **payload}, sort_keys=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def record_applied(self, entry: FaultEntry) -> None:
        with self._lock:
            self._entries[entry.id] = entry
            self._append("applied", entry.to_json())

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
