"""Journals: the toolkit's journal plus a ``gameday`` section, written atomically.

Each journal carries the SHA-256 of the journal written before it in the same
directory (``gameday.previous_sha256``), so an edit or a deletion breaks the chain.
"""

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

CHAIN_FILE = ".chain-head"


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


def write_journal(path: Path, journal: dict[str, Any]) -> str:
    """Chain and write a journal; return its SHA-256."""
    head = path.parent / CHAIN_FILE
    previous = head.read_text(encoding="utf-8").split()[0] if head.exists() else None
    journal.setdefault("gameday", {})["previous_sha256"] = previous
    data = encode(journal)
    digest = hashlib.sha256(data).hexdigest()
    atomic_write(path, data)
    atomic_write(head, f"{digest} {path.name}\n".encode())
    return digest
