"""A verified index: what verification already read, so each run reads only what is new.

Checking 10,000 journals' hashes and signatures on every ``coverage``, ``gate`` and
``score`` costs seconds; the index (``--index FILE``) keeps, per trusted key fingerprint
(or ``none``), for every journal file it read: the file's identity and change stamps
(device, inode, size, mtime and ctime in nanoseconds, and the same of its ``.sig``),
its digest, its chain link and sequence number, its signature's verdict, and its
summary. A run then re-reads a journal only when its stamps differ; everything else
verification does is still done every time, from the index's facts: the head is read
and its signature checked, every link is followed and compared, sequence numbers are
compared, journals outside the chain are found. So an edit, a deletion, a rename or a
reordering of indexed journals is caught as it is without the index, while only new or
changed files are hashed.

Why the stamps suffice: the kernel sets ctime on every write, rename, link or metadata
change, and no system call sets it to a chosen value, so a changed file has another
ctime even when its size and mtime were put back (``touch -d``); a file replaced by
another that reuses the inode number has another ctime too. What defeats the stamps is
an attacker who moves the system clock or writes the block device (root): for them run
``gameday audit verify``, which never uses the index. Entries whose ctime is within
:data:`RACY_S` of the moment they were read are not kept (a write in the same clock tick
as the read would leave the stamps alike), as git does for its index.

The index is the verifier's own record: keep it where the writers of the journals
cannot write (the auditor's home, a CI cache), since whoever can edit it can make an
edited journal pass. It is written atomically; one it cannot read is started afresh.
"""

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gameday.atomic import replace_file
from gameday.bounded import no_cyclic_gc
from gameday.errors import InvalidInput
from gameday.evidence import signing
from gameday.evidence.audit import JournalFacts, read_facts
from gameday.evidence.summary import (
    JournalSummary,
    read_summary,
    summarize,
    summary_from_json,
)

#: Bumped whenever what a summary holds changes, so a warm index never serves a summary
#: made by older rules (2: a throughput degradation's lost work is no longer an RPO).
VERSION = 2
#: Files changed this recently (seconds, by ctime) are read but not indexed.
RACY_S = 2.0

Stamp = tuple[int, int, int, int, int]  # dev, ino, size, mtime_ns, ctime_ns


def fingerprint(trusted: Ed25519PublicKey | None) -> str:
    """The key an index section belongs to: SHA-256 of the raw public key, or ``none``."""
    if trusted is None:
        return "none"
    return hashlib.sha256(signing.raw_public(trusted).encode()).hexdigest()[:32]


def _stamp(path: Path | str) -> Stamp | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _Entry:
    """One indexed file: its JSON form as the index file holds it, decoded on demand."""

    __slots__ = ("_facts", "_summary", "raw")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self._facts: JournalFacts | None = None
        self._summary: JournalSummary | None = None

    @classmethod
    def new(cls, stamp: Stamp, sig_stamp: Stamp | None) -> "_Entry":
        return cls({"stamp": list(stamp), "sig_stamp": list(sig_stamp) if sig_stamp else None,
                    "facts": None, "summary": None, "not_a_journal": None})

    def matches(self, stamp: Stamp | None, sig_stamp: Stamp | None) -> bool:
        return (stamp is not None and self.raw["stamp"] == list(stamp)
                and self.raw["sig_stamp"] == (list(sig_stamp) if sig_stamp else None))

    @property
    def facts(self) -> JournalFacts | None:
        if self._facts is None and isinstance(self.raw["facts"], dict):
            try:
                self._facts = JournalFacts.from_json(self.raw["facts"])
            except (KeyError, TypeError, ValueError):
                return None  # an index entry this version cannot read: read the file
        return self._facts

    @facts.setter
    def facts(self, value: JournalFacts) -> None:
        self._facts, self.raw["facts"] = value, value.to_json()

    @property
    def summary(self) -> JournalSummary | None:
        if self._summary is None and isinstance(self.raw["summary"], dict):
            try:
                self._summary = summary_from_json(self.raw["summary"])
            except (AttributeError, TypeError, ValueError):
                return None
        return self._summary

    @summary.setter
    def summary(self, value: JournalSummary) -> None:
        self._summary, self.raw["summary"] = value, value.to_json()

    @property
    def not_a_journal(self) -> str | None:
        value = self.raw["not_a_journal"]
        return value if isinstance(value, str) else None

    @not_a_journal.setter
    def not_a_journal(self, value: str) -> None:
        self.raw["not_a_journal"] = value


_ENTRY_KEYS = frozenset({"stamp", "sig_stamp", "facts", "summary", "not_a_journal"})


@dataclass
class VerifiedIndex:
    """The index of one trusted key (``fingerprint``) in the index file ``path``.

    :meth:`facts` is a :data:`gameday.evidence.audit.FactsSource`; :meth:`summary` is
    :func:`gameday.evidence.summary.read_summary` for files the index knows unchanged.
    """

    path: Path
    fingerprint: str
    clock: Callable[[], float] = time.time
    entries: dict[str, _Entry] = field(default_factory=dict)
    other_keys: dict[str, Any] = field(default_factory=dict)  # sections of other keys
    read: int = 0  # journal files read this run (the rest came from the index)
    reused: int = 0
    changed: bool = False  # whether :meth:`save` has anything to write
    _stamps: dict[str, tuple[Stamp | None, Stamp | None]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path, trusted: Ed25519PublicKey | None,
             clock: Callable[[], float] = time.time) -> "VerifiedIndex":
        """The index at ``path`` for ``trusted`` (empty when there is none, or it is not
        one this version wrote)."""
        index = cls(path, fingerprint(trusted), clock)
        try:
            with no_cyclic_gc():  # millions of objects that form no cycles
                document = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError):
            return index
        if not isinstance(document, dict) or document.get("version") != VERSION:
            return index
        sections = document.get("keys")
        if not isinstance(sections, dict):
            return index
        index.other_keys = {k: v for k, v in sections.items() if k != index.fingerprint}
        mine = sections.get(index.fingerprint)
        if isinstance(mine, dict):
            index.entries = {key: _Entry(raw) for key, raw in mine.items()
                             if isinstance(raw, dict) and raw.keys() == _ENTRY_KEYS
                             and isinstance(raw["stamp"], list)}
        return index

    def _current(self, path: Path) -> tuple[str, Stamp | None, Stamp | None, _Entry | None]:
        text = os.fspath(path)
        key = text if text.startswith("/") else os.path.abspath(text)
        stamps = self._stamps.get(key)
        if stamps is None:  # once a run: a file read after its stat is stamped by then
            stamps = self._stamps[key] = (_stamp(key), _stamp(key + signing.SUFFIX))
        stamp, sig_stamp = stamps
        entry = self.entries.get(key)
        if entry is not None and not entry.matches(stamp, sig_stamp):
            del self.entries[key]
            self.changed = True
            entry = None
        return key, stamp, sig_stamp, entry

    def _keep(self, key: str, stamp: Stamp | None, sig_stamp: Stamp | None) -> _Entry | None:
        """The entry to fill for a file just read, or None when it is too fresh to keep."""
        if stamp is None:
            return None
        newest = max(stamp[4], sig_stamp[4] if sig_stamp else 0)
        if self.clock() * 1e9 - newest < RACY_S * 1e9:
            return None
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry.new(stamp, sig_stamp)
        self.changed = True
        return entry

    def facts(self, path: Path, trusted: Ed25519PublicKey | None) -> JournalFacts:
        key, stamp, sig_stamp, entry = self._current(path)
        known = entry.facts if entry is not None else None
        if known is not None:
            self.reused += 1
            return known
        found, document = read_facts(path, trusted)
        self.read += 1
        kept = self._keep(key, stamp, sig_stamp)
        if kept is not None:
            kept.facts = found
            if document is not None and kept.summary is None:  # from the same read
                try:
                    kept.summary = summarize(document, path=str(path), sha256=found.sha256)
                except InvalidInput as exc:
                    kept.not_a_journal = str(exc)
        return found

    def summary(self, path: Path) -> JournalSummary:
        key, stamp, sig_stamp, entry = self._current(path)
        if entry is not None and entry.not_a_journal is not None:
            raise InvalidInput(entry.not_a_journal)
        known = entry.summary if entry is not None else None
        if known is not None:
            self.reused += 1
            return known if known.path == str(path) else dataclasses.replace(known,
                                                                             path=str(path))
        try:
            found = read_summary(path)
        except InvalidInput as exc:
            kept = self._keep(key, stamp, sig_stamp)
            if kept is not None:
                kept.not_a_journal = str(exc)
            raise
        kept = self._keep(key, stamp, sig_stamp)
        if kept is not None:
            kept.summary = found
        return found

    def save(self) -> None:
        """Write the index (atomically) when this run changed it, dropping entries of
        files that are gone or changed."""
        if not self.changed:
            return
        live = {key: entry.raw for key, entry in self.entries.items()
                if entry.matches(*self._stamps.get(key) or
                                 (_stamp(key), _stamp(key + signing.SUFFIX)))}
        document = {"version": VERSION, "keys": {**self.other_keys, self.fingerprint: live}}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(self.path, json.dumps(document, separators=(",", ":")).encode(),
                         mode=0o600, durable=True)
        except OSError as exc:
            raise InvalidInput(f"cannot write the verified index: {exc.strerror or exc}",
                               file=str(self.path)) from None
        self.changed = False


def open_index(path: Path | None, trusted: Ed25519PublicKey | None) -> VerifiedIndex | None:
    """The index ``--index`` names (or ``$GAMEDAY_EVIDENCE_INDEX``), or None for none."""
    chosen = path or (Path(os.environ["GAMEDAY_EVIDENCE_INDEX"])
                      if os.environ.get("GAMEDAY_EVIDENCE_INDEX") else None)
    return VerifiedIndex.open(chosen, trusted) if chosen is not None else None
