"""Journals: the toolkit's journal plus a ``gameday`` section, written atomically.

Each journal carries the SHA-256 of the journal written before it in the same
directory (``gameday.previous_sha256``), so an edit or a deletion breaks the chain;
``.chain-head`` names the newest journal, its digest and its sequence number (each
journal records ``gameday.sequence``, one more than its predecessor's). Writers in one
directory take an ``flock`` on ``.chain-head.lock`` so concurrent runs extend the chain
one at a time.
A journal is never replaced: writing one where a file already is raises
:class:`JournalExists` (the chain is left as it was).
With a signing key (``gameday.evidence.signing``) the journal records the public key and a
detached Ed25519 signature over its exact bytes is written as ``JOURNAL.sig``, and the
head is signed too (a ``signature`` line in ``.chain-head`` over its digest, name and
sequence, so head and signature are replaced together): pointing the head at an older
journal then needs the key, or a copy of an older signed head, which only an anchor kept
outside the directory catches (``gameday audit verify --expect-head/--min-sequence``).
``gameday audit verify DIR`` (``gameday.evidence.audit``) checks all of it.
"""

import fcntl
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gameday.atomic import replace_file
from gameday.errors import InvalidInput
from gameday.evidence.journal_shape import GamedaySection

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

CHAIN_FILE = ".chain-head"
CHAIN_LOCK = ".chain-head.lock"
SIGNATURE_LINE = "signature "


@dataclass(frozen=True)
class ChainHead:
    """What ``.chain-head`` says: the newest journal, its SHA-256 and its sequence number
    (None in a chain written before sequences were recorded); ``signature`` is the
    signature document over :meth:`payload` when the head was signed, and ``payload``
    the exact bytes it covers."""

    sha256: str
    journal: str
    sequence: int | None
    signature: bytes | None = None

    def payload(self) -> bytes:
        sequence = "" if self.sequence is None else f"sequence {self.sequence}\n"
        return f"{self.sha256} {self.journal}\n{sequence}".encode()

    def encode(self) -> bytes:
        """The head file: the payload, then (when signed) one ``signature {...}`` line."""
        signed = b"" if self.signature is None else SIGNATURE_LINE.encode() + self.signature
        return self.payload() + signed


def parse_head(data: bytes) -> ChainHead:
    """The head a ``.chain-head`` file's bytes name (``sequence N`` and the signature line
    are optional); a malformed sequence reads as None, which verification reports."""
    lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
    sha, _, name = (lines[0].strip() if lines else "").partition(" ")
    sequence, signature = None, None
    for line in lines[1:]:
        if line.startswith("sequence "):
            value = line.removeprefix("sequence ").strip()
            sequence = int(value) if value.isdigit() and len(value) < 19 else -1
        elif line.startswith(SIGNATURE_LINE):
            signature = line.removeprefix(SIGNATURE_LINE).encode()
    return ChainHead(sha, name, sequence, signature)


def read_head(directory: Path) -> ChainHead | None:
    """The head of the chain in ``directory``, or None when it has none."""
    try:
        return parse_head((directory / CHAIN_FILE).read_bytes())
    except FileNotFoundError:
        return None


class JournalExists(InvalidInput):
    """A journal (or any file) is already where one was to be written; nothing was
    replaced."""


def create_journal_file(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` as a new file ``path``, durable, whole or not at all, never over an
    existing file (:class:`JournalExists`)."""
    try:
        replace_file(path, data, mode=mode, durable=True, exclusive=True)
    except FileExistsError:
        raise JournalExists(f"{path} already exists; journals are never replaced "
                            "(pass another --journal-path)") from None


def encode(journal: dict[str, Any]) -> bytes:
    return (json.dumps(journal, indent=2, sort_keys=True, default=str) + "\n").encode()


def write_journal(path: Path, journal: dict[str, Any],
                  sign_key: "Ed25519PrivateKey | None" = None) -> str:
    """Chain (and optionally sign) and write a journal as a new file; return its
    SHA-256. Raises :class:`JournalExists` (and leaves the chain as it was) if ``path``
    already exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path.parent / CHAIN_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        head = path.parent / CHAIN_FILE
        previous = read_head(path.parent)
        section: GamedaySection = journal.setdefault("gameday", {})
        section["previous_sha256"] = previous.sha256 if previous else None
        section["previous_journal"] = previous.journal if previous else None
        section["sequence"] = max(previous.sequence or 0, 0) + 1 if previous else 1
        if sign_key is not None:
            from gameday.evidence import signing

            section["signature"] = signing.declaration(sign_key)
        data = encode(journal)
        digest = hashlib.sha256(data).hexdigest()
        create_journal_file(path, data, mode=0o600)
        if sign_key is not None:
            replace_file(signing.signature_path(path), signing.sign(sign_key, data),
                         mode=0o600, durable=True)
        new_head = ChainHead(digest, path.name, section["sequence"])
        if sign_key is not None:
            new_head = ChainHead(digest, path.name, section["sequence"],
                                 signing.sign(sign_key, new_head.payload()))
        replace_file(head, new_head.encode(), mode=0o600, durable=True)
    finally:
        os.close(lock)
    return digest
