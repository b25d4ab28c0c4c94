"""An attacker who can write a directory of journals but does not hold the signing key.

Each attack is what such a person can really do with files: delete journals, rewrite or
replay the chain head (from copies of the directory they kept), edit journals and
re-sign them with a key of their own, recompute the chain forward over an edit, swap
journals. Shared by the rollback property tests and the verified-index tests.
"""

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gameday.evidence import signing
from gameday.evidence.journal import (
    CHAIN_FILE,
    CHAIN_LOCK,
    ChainHead,
    encode,
    read_head,
    write_journal,
)

ATTACKS = ("delete", "delete-newest-rehead", "replay-head", "resign", "recompute-forward",
           "swap", "head-garbage", "flip-byte")

#: file name -> bytes of every file of a directory but the lock
State = dict[str, bytes]


def state(directory: Path) -> State:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.name != CHAIN_LOCK and p.is_file()}


@dataclass
class Chain:
    """A directory of ``count`` journals signed by ``key``, and every state it went
    through (the attacker may have copied any of them)."""

    directory: Path
    key: Ed25519PrivateKey
    snapshots: list[State] = field(default_factory=list)

    @classmethod
    def write(cls, directory: Path, count: int, key: Ed25519PrivateKey) -> "Chain":
        chain = cls(directory, key)
        for n in range(count):
            write_journal(directory / f"2026010{n}T000000Z-run.json",
                          {"status": "completed", "run": [{"n": n}],
                           "gameday": {"verdict": {"passed": n % 2 == 0, "exit_code": 0}}},
                          key)
            chain.snapshots.append(state(directory))
        return chain

    @property
    def honest(self) -> State:
        return self.snapshots[-1]


def _journals(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.json"))


def _resign(path: Path, document: dict[str, Any], key: Ed25519PrivateKey) -> bytes:
    document["gameday"]["signature"] = signing.declaration(key)
    data = encode(document)
    path.write_bytes(data)
    signing.signature_path(path).write_bytes(signing.sign(key, data))
    return data


def _write_head(directory: Path, head: ChainHead, key: Ed25519PrivateKey | None) -> None:
    signature = signing.sign(key, head.payload()) if key is not None else None
    (directory / CHAIN_FILE).write_bytes(
        ChainHead(head.sha256, head.journal, head.sequence, signature).encode())


def attack(chain: Chain, name: str, a: int, b: int, theirs: Ed25519PrivateKey) -> None:
    """Apply attack ``name`` (with ``a``, ``b`` picking journals and variants); a step an
    earlier one made impossible (a journal no longer JSON) is left out."""
    with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
        _attack(chain, name, a, b, theirs)


def _attack(chain: Chain, name: str, a: int, b: int, theirs: Ed25519PrivateKey) -> None:
    directory = chain.directory
    journals = _journals(directory)
    if name == "replay-head":
        (directory / CHAIN_FILE).write_bytes(chain.snapshots[a % len(chain.snapshots)][CHAIN_FILE])
        return
    if name == "head-garbage":
        (directory / CHAIN_FILE).write_bytes(hashlib.sha256(bytes([a, b])).hexdigest().encode()
                                             + b" " + (journals[0].name.encode() if journals
                                                       else b"x.json") + b"\n")
        return
    if not journals:
        return
    target = journals[a % len(journals)]
    if name == "delete":
        target.unlink()
        signing.signature_path(target).unlink(missing_ok=True)
    elif name == "delete-newest-rehead":
        head = read_head(directory)
        newest = directory / head.journal if head else journals[-1]
        if not newest.exists():
            return
        document = json.loads(newest.read_bytes())
        newest.unlink()
        signing.signature_path(newest).unlink(missing_ok=True)
        previous = str(document["gameday"].get("previous_journal") or "")
        if previous and (directory / previous).exists():
            data = (directory / previous).read_bytes()
            sequence = json.loads(data)["gameday"].get("sequence")
            _write_head(directory, ChainHead(hashlib.sha256(data).hexdigest(), previous,
                                             sequence), theirs if b % 2 else None)
        else:
            (directory / CHAIN_FILE).unlink(missing_ok=True)
    elif name == "resign":
        document = json.loads(target.read_bytes())
        document["gameday"]["verdict"]["passed"] = not document["gameday"]["verdict"]["passed"]
        _resign(target, document, theirs)
    elif name == "recompute-forward":
        # edit one journal, then rewrite every later link and the head, signed with theirs
        index = journals.index(target)
        document = json.loads(target.read_bytes())
        document["gameday"]["verdict"]["passed"] = True
        data = _resign(target, document, theirs)
        for later in journals[index + 1:]:
            document = json.loads(later.read_bytes())
            document["gameday"]["previous_sha256"] = hashlib.sha256(data).hexdigest()
            data = _resign(later, document, theirs)
        last = journals[-1]
        sequence = json.loads(last.read_bytes())["gameday"].get("sequence")
        _write_head(directory, ChainHead(hashlib.sha256(last.read_bytes()).hexdigest(),
                                         last.name, sequence), theirs)
    elif name == "swap":
        other = journals[b % len(journals)]
        if other == target:
            return
        for first, second in ((target, other),
                              (signing.signature_path(target), signing.signature_path(other))):
            one, two = first.read_bytes(), second.read_bytes()
            first.write_bytes(two)
            second.write_bytes(one)
    elif name == "flip-byte":
        data = bytearray(target.read_bytes())
        at = (a * 7919 + b) % len(data)
        data[at] ^= 1 << (b % 7)
        target.write_bytes(bytes(data))
    else:
        raise AssertionError(name)
