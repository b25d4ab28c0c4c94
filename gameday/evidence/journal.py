"""Journals: the toolkit's journal plus a ``gameday`` section, written atomically.

Each journal carries the SHA-256 of the journal written before it in the same
directory (``gameday.previous_sha256``), so an edit or a deletion breaks the chain;
``.chain-head`` names the newest journal and its digest. Writers in one directory take
an ``flock`` on ``.chain-head.lock`` so concurrent runs extend the chain one at a time.
With a signing key (``gameday.evidence.signing``) the journal records the public key and a
detached Ed25519 signature over its exact bytes is written as ``JOURNAL.sig``.
``gameday audit verify DIR`` (``gameday.evidence.audit``) checks all of it.
"""

import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

CHAIN_FILE = ".chain-head"
CHAIN_LOCK = ".chain-head.lock"


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temp file in the same directory, fsync it, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def encode(journal: dict[str, Any]) -> bytes:
    return (json.dumps(journal, indent=2, sort_keys=True, default=str) + "\n").encode()


def write_journal(path: Path, journal: dict[str, Any],
                  sign_key: "Ed25519PrivateKey | None" = None) -> str:
    """Chain (and optionally sign) and write a journal; return its SHA-256."""
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
        atomic_write(path, data)
        if sign_key is not None:
            atomic_write(signing.signature_path(path), signing.sign(sign_key, data))
        atomic_write(head, f"{digest} {path.name}\n".encode())
    finally:
        os.close(lock)
    return digest
