"""The ledger: a durable, append-only record of every fault a run applied.

Each line of the ledger file is one JSON event (``intent``, ``applied``,
``not_applied``, ``resolved``, ``renewed``, ``reverted``, ``lost``), flushed and fsync'd
before the call returns, so a crash of the orchestrator never loses what it injected.
The in-memory view answers "what is still active".

The ledger is written ahead: a request's ``intent`` (run, agent, node, kind, target,
its request id, lease) is durable before the request leaves, so a request whose
answer the orchestrator never read (it died, or the agent answered too late) is still
known; its outcome comes as ``applied`` (the fault carries its ``request_id``),
``not_applied`` (the agent refused it) or ``resolved`` (cleanup asked the agent:
``reverted`` or ``never_applied``). :func:`open_intents` lists those without one.

The faults of one agent's batch share one ``applied`` event (:func:`applied_events`:
their common fields once, a ``faults`` list of their own), and reverts with one reason
one ``reverted`` event; :func:`read_ledger` gives one record per fault either way.

A fan-out records each agent's batch as its answer lands, and writes the lines of all
the answers one wake-up read in one write before it sends another request, without
waiting for the disk (``keep="held"``, then :meth:`Ledger.flush`: the lines are in the
file, so a killed orchestrator's cleanup finds them; killed before that write, cleanup
resolves those requests' intents through their agents), then makes them all durable with
one fsync when it ends; recording an entry the ledger already holds only does that
fsync. :meth:`Ledger.close` writes (and syncs) whatever is still held back.
"""

import json
import os
import socket
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from operator import attrgetter
from pathlib import Path
from typing import Any, Final, Literal

from gameday import jsonbytes
from gameday.wire.fault_record import FaultRecord, FaultRecordJSON


class FaultEntryJSON(FaultRecordJSON):
    """A ledger entry's JSON (:meth:`FaultEntry.to_json`): a fault's, with what only the
    ledger knows, and how to undo the fault without this process (``inverse``)."""

    node: str
    agent_url: str
    action: str
    inverse: dict[str, str]
    via: str
    request_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultEntry(FaultRecord):
    """One fault as the orchestrator knows it: the agent's record
    (:class:`~gameday.wire.fault_record.FaultRecord`) and what only the ledger knows:
    the node and agent it was applied through, the action that applied it, the route
    (``via``) and the idempotency key its request carried. Frozen: the ledger holds the
    newest copy (:meth:`Ledger.entries`)."""

    node: str
    agent_url: str
    action: str = ""
    via: str = "agent"  # or "kubernetes": applied through the API, reverted by details.inverse
    request_id: str = ""  # the idempotency key its request carried (its intent's)

    @property
    def inverse(self) -> dict[str, str]:
        """How to undo the fault without this process: the agent call that reverts it."""
        if self.via != "agent":
            return {str(k): str(v) for k, v in (self.details.get("inverse") or {}).items()}
        return agent_inverse(self.agent_url, self.id)

    def to_json(self) -> FaultEntryJSON:
        """The entry as a ledger line and a journal hold it, in the order they write it."""
        return {
            "id": self.id, "kind": self.kind, "node": self.node, "agent_url": self.agent_url,
            "target": self.target, "params": self.params, "injected_at": self.injected_at,
            "applied_at": self.applied_at, "expires_at": self.expires_at,
            "lease_s": self.lease_s, "action": self.action, "reverted_at": self.reverted_at,
            "revert_reason": self.revert_reason, "details": self.details,
            "inverse": self.inverse, "via": self.via, "request_id": self.request_id,
        }


def agent_inverse(agent_url: str, fault_id: str) -> dict[str, str]:
    """The agent call that reverts fault ``fault_id`` of the agent at ``agent_url``."""
    return {"method": "DELETE", "url": f"{agent_url}/v1/faults/{fault_id}"}


#: The fields that the faults of one ``applied`` event of a batch share, stated once.
_SHARED: Final = ("kind", "node", "agent_url", "params", "injected_at", "lease_s", "action",
                  "via")
#: How the lines of a record are kept: ``"synced"`` written and fsync'd before the call
#: returns; ``"written"`` written, made durable by the next fsync (a later synced record,
#: or :meth:`Ledger.close`); ``"held"`` kept back until the next write or
#: :meth:`Ledger.flush` (a fan-out's batches, written once per wake-up).
Keep = Literal["synced", "written", "held"]

#: The fields each fault of it states in its ``faults`` list.
_OWN: Final = ("id", "target", "applied_at", "expires_at", "details", "request_id")
#: Its lease times, stated once too when every fault of it has the same (an agent times
#: the faults of a batch together).
_TIMES: Final = ("applied_at", "expires_at")
_OWN_BUT_TIMES: Final = tuple(name for name in _OWN if name not in _TIMES)


def _same_batch(first: FaultEntry, other: FaultEntry) -> bool:
    """Whether ``other`` can share ``first``'s ``applied`` event (agent faults only: their
    inverse is the agent call, rebuilt on reading)."""
    return (other.via == first.via == "agent" and other.node == first.node
            and other.kind == first.kind and other.agent_url == first.agent_url
            and other.injected_at == first.injected_at and other.lease_s == first.lease_s
            and other.action == first.action and other.params == first.params
            and other.reverted_at is None and first.reverted_at is None)


def applied_events(entries: list[FaultEntry], extra: dict[str, Any]
                   ) -> list[tuple[str, dict[str, Any]]]:
    """The ``applied`` events of ``entries`` (each with ``extra``): one event per run of
    consecutive agent faults that share :data:`_SHARED` (an agent's batch), with those
    stated once (and their lease times, if the same: :data:`_TIMES`) and a ``faults``
    list of each one's own fields (:data:`_OWN`); any other fault as one flat event
    (:meth:`FaultEntry.to_json`). :func:`read_ledger` reads both."""
    events: list[tuple[str, dict[str, Any]]] = []
    start = 0
    for end in range(1, len(entries) + 1):
        if end < len(entries) and _same_batch(entries[start], entries[end]):
            continue
        group = entries[start:end]
        if len(group) == 1:
            events.append(("applied", {**group[0].to_json(), **extra}))
        else:
            first = group[0]
            shared: tuple[str, ...] = _SHARED
            own: tuple[str, ...] = _OWN
            if all(e.applied_at == first.applied_at and e.expires_at == first.expires_at
                   for e in group):
                shared, own = _SHARED + _TIMES, _OWN_BUT_TIMES
            fields = attrgetter(*own)
            events.append(("applied", {
                **dict(zip(shared, attrgetter(*shared)(first), strict=True)), **extra,
                "faults": [dict(zip(own, fields(e), strict=True)) for e in group]}))
        start = end
    return events


@dataclass(frozen=True, slots=True)
class Intent:
    """A fault request about to be sent: recorded before it leaves (write-ahead)."""

    request_id: str
    kind: str
    node: str
    agent_url: str
    target: dict[str, Any]
    params: dict[str, Any]
    lease_s: float
    action: str = ""
    via: str = "agent"  # or "kubernetes": then ``request_id`` is the mark's id
    inverse: dict[str, Any] = field(default_factory=dict)  # how to undo it (not via agent)

    def entry(self, now: float) -> FaultEntry:
        """The fault this intent would have made (what a route reverts), as of ``now``."""
        return FaultEntry(id=self.request_id, kind=self.kind, node=self.node,
                          agent_url=self.agent_url, target=self.target, params=self.params,
                          injected_at=self.via, applied_at=now, expires_at=now,
                          lease_s=self.lease_s, action=self.action,
                          details={"inverse": self.inverse}, via=self.via,
                          request_id=self.request_id)


#: The fields the intents of one ``intent`` event share when they are alike, stated once.
_INTENT_SHARED: Final = ("kind", "node", "agent_url", "params", "lease_s", "action", "via")
_intent_shared: Final = attrgetter(*_INTENT_SHARED)


def new_request_ids(count: int) -> list[str]:
    """``count`` new request ids (idempotency keys): ``r-`` and 32 random hex digits,
    128 random bits each, drawn from the system's source in one call (a uuid4 each
    was 2 % of a 16,384-GPU fan-out)."""
    digits = os.urandom(16 * count).hex()
    return [f"r-{digits[start:start + 32]}" for start in range(0, 32 * count, 32)]


class Ledger:
    """Append-only fault ledger for one run, backed by a JSON-lines file."""

    def __init__(self, path: Path | None, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._entries: dict[str, FaultEntry] = {}
        #: reverts not yet folded into their entries, by fault id: ``(reverted_at,
        #: reason)`` (a fleet's revert records one pair per fault, not a copy of its entry;
        #: :meth:`entries` makes the copies, once)
        self._ends: dict[str, tuple[float, str]] = {}
        self._intents: dict[str, Intent] = {}  # by request id, while without an outcome
        self._lock = threading.Lock()
        self._host = socket.gethostname()
        self._unsynced = False  # lines written without fsync since the last one
        #: lines not yet in the file: held until the next write (``keep="held"``), or
        #: an unsynced write that failed
        self._unwritten: list[tuple[str, dict[str, Any]]] = []
        #: the file, open for appending from the first write until :meth:`close` (a
        #: fan-out writes a line per agent batch: an open and a close each were 3 % of
        #: it at 16,384 GPUs); closed with the ledger if never closed
        self._file = _AppendFile(path) if path is not None else None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        """Write what is held back (and fsync what is not yet), then close the file until
        the next write (which opens it again)."""
        with self._lock:
            if self._file is not None:
                try:
                    self._append_many([], keep="synced")
                finally:
                    self._file.close()

    def _append(self, event: str, payload: dict[str, Any]) -> None:
        self._append_many([(event, payload)], keep="synced")

    def flush(self) -> None:
        """Write the lines held back (``keep="held"``) in one write, without fsync; one
        that fails is kept for the next write."""
        with self._lock:
            self._append_many([], keep="written")

    def _append_many(self, events: list[tuple[str, dict[str, Any]]], *, keep: Keep) -> None:
        """Under the lock: keep events as ``keep`` says, with what an earlier write could
        not write or held back. A failed write is kept for the next call (and raised if
        ``"synced"``)."""
        if self._file is None:
            return
        if keep == "held":
            self._unwritten.extend(events)
            return
        sync = keep == "synced"
        pending, self._unwritten = self._unwritten + events, []
        if pending:
            try:
                self._file.append(_lines(self.run_id, pending), sync=sync)
            except OSError:
                self._unwritten = pending
                if sync:
                    raise
                return
            self._unsynced = not sync
        elif sync and self._unsynced:
            self._file.sync()
            self._unsynced = False

    def record_intents(self, intents: list[Intent]) -> None:
        """Record requests about to be sent (one write, fsync'd before returning): one
        ``intent`` event per run of intents alike in :data:`_INTENT_SHARED`."""
        if not intents:
            return
        with self._lock:
            events: list[tuple[str, dict[str, Any]]] = []
            last: tuple[Any, ...] | None = None
            for intent in intents:
                self._intents[intent.request_id] = intent
                own: dict[str, Any] = {"request_id": intent.request_id,
                                       "target": intent.target}
                if intent.inverse:
                    own["inverse"] = intent.inverse
                shared = _intent_shared(intent)
                if shared == last:
                    events[-1][1]["requests"].append(own)
                    continue
                last = shared
                events.append(("intent", {**dict(zip(_INTENT_SHARED, shared, strict=True)),
                                          "pid": os.getpid(), "host": self._host,
                                          "requests": [own]}))
            self._append_many(events, keep="synced")

    def record_not_applied(self, refused: list[tuple[str, str]]) -> None:
        """Record requests ``(request_id, why)`` the agent answered without applying
        (one write, fsync'd); a request without an open intent is skipped."""
        with self._lock:
            events = [("not_applied", {"request_id": request_id, "reason": why})
                      for request_id, why in refused
                      if self._intents.pop(request_id, None) is not None]
            if events:
                self._append_many(events, keep="synced")

    def record_resolved(self, request_id: str, outcome: str, fault_id: str | None = None,
                        reverted_at: float | None = None) -> None:
        """Record what the agent said became of a request without an answer
        (``reverted``: it was applied as ``fault_id`` and reverted at ``reverted_at``;
        ``never_applied``)."""
        with self._lock:
            self._intents.pop(request_id, None)
            self._append("resolved", {"request_id": request_id, "outcome": outcome,
                                      "fault_id": fault_id, "reverted_at": reverted_at})

    def open_intents(self) -> list[Intent]:
        """This run's requests sent without an outcome recorded (their answer unread)."""
        with self._lock:
            return list(self._intents.values())

    def _close_intents(self, entries: list[FaultEntry]) -> None:
        for entry in entries:
            if entry.request_id:
                self._intents.pop(entry.request_id, None)

    def record_applied(self, entry: FaultEntry) -> None:
        with self._lock:
            self._close_intents([entry])
            self._entries[entry.id] = entry
            self._append("applied", {**entry.to_json(), "pid": os.getpid(),
                                     "host": socket.gethostname()})

    def record_applied_many(self, entries: list[FaultEntry], *,
                            keep: Keep = "synced") -> None:
        """Record many applied faults in one write, kept as ``keep`` says; entries already
        recorded are not written again."""
        with self._lock:
            new = [e for e in entries if e.id not in self._entries]
            self._close_intents(new)
            for entry in new:
                self._entries[entry.id] = entry
            extra = {"pid": os.getpid(), "host": self._host}
            self._append_many(applied_events(new, extra), keep=keep)

    def record_reverted_many(self, reverted: list[tuple[str, float, str]], *,
                             keep: Keep = "synced") -> None:
        """Record many reverts ``(id, reverted_at, reason)`` in one write, kept as
        ``keep`` says; a fault already recorded as reverted is not written again."""
        with self._lock:
            by_reason: dict[str, list[dict[str, Any]]] = {}
            ends, entries = self._ends, self._entries
            for fault_id, reverted_at, reason in reverted:
                if fault_id in ends:  # (a fan-out's batches recorded theirs as they landed)
                    continue
                entry = entries.get(fault_id)
                if entry is None or not entry.active:
                    continue
                ends[fault_id] = (reverted_at, reason)
                by_reason.setdefault(reason, []).append({"id": fault_id,
                                                         "reverted_at": reverted_at})
            self._append_many([("reverted", {**faults[0], "reason": reason} if len(faults) == 1
                                else {"reason": reason, "faults": faults})
                               for reason, faults in by_reason.items()], keep=keep)

    def record_renewed_many(self, renewed: list[tuple[str, float]]) -> None:
        """Record many renewals ``(id, expires_at)`` with one write and one fsync."""
        with self._lock:
            events = []
            for fault_id, expires_at in renewed:
                if not self._active(fault_id):
                    continue
                self._entries[fault_id] = replace(self._entries[fault_id],
                                                  expires_at=expires_at)
                events.append(("renewed", {"id": fault_id, "expires_at": expires_at}))
            if events:
                self._append_many(events, keep="synced")

    def record_renewed(self, fault_id: str, expires_at: float) -> None:
        with self._lock:
            if not self._active(fault_id):
                return
            self._entries[fault_id] = replace(self._entries[fault_id], expires_at=expires_at)
            self._append("renewed", {"id": fault_id, "expires_at": expires_at})

    def record_reverted(self, fault_id: str, reverted_at: float, reason: str) -> None:
        with self._lock:
            if not self._active(fault_id):
                return
            self._ends[fault_id] = (reverted_at, reason)
            self._append("reverted", {"id": fault_id, "reverted_at": reverted_at,
                                      "reason": reason})

    def record_silence(self, alertmanager: str, silence_id: str, ends_at: float) -> None:
        """An Alertmanager silence this run created (``gameday cleanup`` expires it if the
        run dies before it does)."""
        self._append("silence-created", {"silence_id": silence_id,
                                         "alertmanager": alertmanager, "ends_at": ends_at})

    def record_silence_expired(self, silence_id: str, expired_at: float, reason: str) -> None:
        self._append("silence-expired", {"silence_id": silence_id, "expired_at": expired_at,
                                         "reason": reason})

    def _active(self, fault_id: str) -> bool:
        """Under the lock: whether ``fault_id`` is recorded and not reverted."""
        if fault_id in self._ends:
            return False
        entry = self._entries.get(fault_id)
        return entry is not None and entry.active

    def entries(self) -> list[FaultEntry]:
        """Every fault recorded, as of now (the newest copy of each)."""
        with self._lock:
            for fault_id, (reverted_at, reason) in self._ends.items():
                self._entries[fault_id] = replace(self._entries[fault_id],
                                                  reverted_at=reverted_at, revert_reason=reason)
            self._ends.clear()
            return list(self._entries.values())

    def active(self) -> list[FaultEntry]:
        """The faults recorded and not reverted."""
        with self._lock:
            return [entry for entry in self._entries.values()
                    if entry.active and entry.id not in self._ends]

    def __iter__(self) -> Iterator[FaultEntry]:
        return iter(self.entries())


def append_event(path: Path, event: str, run_id: str, payload: dict[str, Any]) -> None:
    """Append one event line (O_APPEND, one write, fsync'd before returning)."""
    append_events(path, run_id, [(event, payload)])


def append_events(path: Path, run_id: str, events: list[tuple[str, dict[str, Any]]], *,
                  sync: bool = True) -> None:
    """Append several event lines with one write and (``sync``) one fsync; the file
    (and its directory) is created on first use."""
    fd = _open_for_append(path)
    try:
        os.write(fd, _lines(run_id, events))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _lines(run_id: str, events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(jsonbytes.dumps({"event": event, "run": run_id, **payload}) + b"\n"
                    for event, payload in events)


class _AppendFile:
    """A ledger file held open for appending (``O_APPEND``: every write lands whole at
    the end, beside any other writer's, as :func:`append_events` writes): opened at the
    first write, again after :meth:`close`, and closed when collected."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._closer: weakref.finalize[[int], _AppendFile] | None = None

    def append(self, data: bytes, *, sync: bool) -> None:
        if self._fd is None:
            self._fd = _open_for_append(self.path)
            self._closer = weakref.finalize(self, os.close, self._fd)
        os.write(self._fd, data)
        if sync:
            os.fsync(self._fd)

    def sync(self) -> None:
        if self._fd is None:
            sync_file(self.path)
        else:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._closer is not None:
            self._closer()  # closes the descriptor once
        self._fd = self._closer = None


def _open_for_append(path: Path) -> int:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:  # no directory yet (checked only then: a syscall saved)
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o600)


def sync_file(path: Path) -> None:
    """fsync what was written to ``path`` without it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _events(path: Path) -> Iterator[Any]:
    """The decoded lines of a ledger file (none if there is no file); a line that does
    not decode (a torn last line after a crash) is skipped. Lines end at ``\n`` only:
    the lines are written as UTF-8 (:mod:`gameday.jsonbytes`), so a string in a target,
    parameter or agent's detail may hold U+2028, U+2029 or U+0085, at which
    ``str.splitlines`` would cut the fault's line in two, and the fault would be lost
    to cleanup."""
    if not path.exists():
        return
    for raw in path.read_text(encoding="utf-8").split("\n"):
        try:
            yield json.loads(raw)
        except (ValueError, RecursionError):  # a torn line, or not ours
            continue


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """Replay a ledger file into the last known state of each fault (for cleanup): one
    flat ``applied`` record per fault, whether it was written alone or in a batch's event
    (then with its ``inverse`` rebuilt, and ``reverted_at``/``revert_reason`` empty)."""
    faults: dict[str, dict[str, Any]] = {}
    for event in _events(path):
        for one in fault_events(event):
            fault_id = one.get("id")
            if not isinstance(fault_id, str):
                continue
            if one.get("event") == "applied":
                faults[fault_id] = one
            elif fault_id in faults:
                faults[fault_id].update({k: v for k, v in one.items() if k != "event"})
    return list(faults.values())


def read_silences(path: Path) -> list[dict[str, Any]]:
    """The silences a ledger file records as created and not (yet) expired, each
    ``{"run", "silence_id", "alertmanager", "ends_at"}``."""
    silences: dict[str, dict[str, Any]] = {}
    for event in _events(path):
        if not isinstance(event, dict) or not isinstance(event.get("silence_id"), str):
            continue
        if event.get("event") == "silence-created":
            silences[event["silence_id"]] = {k: v for k, v in event.items() if k != "event"}
        elif event.get("event") == "silence-expired":
            silences.pop(event["silence_id"], None)
    return list(silences.values())


def open_intents(path: Path) -> list[dict[str, Any]]:
    """The intents of a ledger file without an outcome (for cleanup): one flat record
    per request (``request_id``, ``run``, ``kind``, ``node``, ``agent_url``, ``target``,
    ``params``, ``lease_s``, ``action``, ``via``), in the order written."""
    intents: dict[str, dict[str, Any]] = {}
    for event in _events(path):
        if not isinstance(event, dict):
            continue
        kind = event.get("event")
        if kind == "intent" and isinstance(event.get("requests"), list):
            common = {k: v for k, v in event.items() if k not in ("requests", "event")}
            for one in event["requests"]:
                if isinstance(one, dict) and isinstance(one.get("request_id"), str):
                    intents[one["request_id"]] = {**common, **one}
        elif kind in ("not_applied", "resolved", "forgotten"):
            intents.pop(str(event.get("request_id")), None)
        elif kind == "applied":
            for one in fault_events(event):
                intents.pop(str(one.get("request_id")), None)
    return list(intents.values())


def fault_events(event: Any) -> list[dict[str, Any]]:
    """A ledger event as one event per fault (a batch's event has a ``faults`` list)."""
    if not isinstance(event, dict):
        return []
    batch = event.get("faults")
    if not isinstance(batch, list):
        return [event]
    common = {k: v for k, v in event.items() if k != "faults"}
    ones = [{**common, **item} for item in batch if isinstance(item, dict)]
    if event.get("event") == "applied":
        for one in ones:
            one.update(reverted_at=None, revert_reason=None,
                       inverse=agent_inverse(str(one.get("agent_url")), str(one.get("id"))))
    return ones
