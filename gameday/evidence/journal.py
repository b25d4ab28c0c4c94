"""Journals: the toolkit's journal plus a ``gameday`` section, written atomically.

Each journal carries the SHA-256 of the journal written before it in the same
directory (``gameday.previous_sha256``), so an edit or a deletion breaks the chain;
``.chain-head`` names the newest journal and its digest. Writers in one directory take
an ``flock`` on ``.chain-head.lock`` so concurrent runs extend the chain one at a time.
A journal is never replaced: writing one where a file already is raises
:class:`JournalExists` (the chain is left as it was).
With a signing key (``gameday.evidence.signing``) the journal records the public key and a
detached Ed25519 signature over its exact bytes is written as ``JOURNAL.sig``.
``gameday audit verify DIR`` (``gameday.evidence.audit``) checks all of it.
"""

import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gameday.atomic import replace_file
from gameday.errors import InvalidInput

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

CHAIN_FILE = ".chain-head"
CHAIN_LOCK = ".chain-head.lock"


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
        previous, previous_name = None, None
        if head.exists():
            previous, _, previous_name = head.read_text(encoding="utf-8").strip().partition(" ")
        section = journal.setdefault("gameday", {})
        section["previous_sha256"] = previous
        section["previous_journal"] = previous_name
        if sign_key is not None:
            from gameday.evidence import signing

            section["signature"] = signing.declaration(sign_key)
        data = encode(journal)
        digest = hashlib.sha256(data).hexdigest()
        create_journal_file(path, data, mode=0o600)
        if sign_key is not None:
            replace_file(signing.signature_path(path), signing.sign(sign_key, data),
                         mode=0o600, durable=True)
        replace_file(head, f"{digest} {path.name}\n".encode(), mode=0o600, durable=True)
    finally:
        os.close(lock)
    return digest
