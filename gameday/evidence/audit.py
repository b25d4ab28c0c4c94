"""``gameday audit verify DIR``: prove a directory of journals was not edited.

The newest journal is named in ``DIR/.chain-head`` with its SHA-256; every journal
names its predecessor (``gameday.previous_journal``) and that journal's SHA-256
(``gameday.previous_sha256``). Verification walks the chain from the head back to the
first journal and checks, at every link, that the predecessor exists and hashes to the
recorded digest; then that no journal lies outside the chain; and, for each signed
journal (or every journal, with ``--public-key``), its Ed25519 signature.

The result is one line: ``audit: OK: N journals, chain intact[, S signed]`` (exit 0),
or ``audit: FAILED: <the first problem, oldest first>`` (exit 1), e.g.
``edited journal: 20260101T...-x.json (sha256 1a2b… != 9f8e… recorded by ...)``.
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gameday.bounded import MAX_JSON_BYTES, read_limited
from gameday.errors import InvalidInput
from gameday.evidence import signing
from gameday.evidence.journal import CHAIN_FILE
from gameday.stats import plural

MAX_JOURNALS = 1_000_000


@dataclass
class AuditResult:
    """What one directory's chain proves: problems, and a verdict for every journal."""

    journals: int = 0
    signed: int = 0
    problems: list[str] = field(default_factory=list)  # oldest link first
    #: journal file name -> None when it verified, else the one-line reason it did not
    verdicts: dict[str, str | None] = field(default_factory=dict)

    @property
    def verified(self) -> list[str]:
        return sorted(name for name, reason in self.verdicts.items() if reason is None)

    @property
    def rejected(self) -> dict[str, str]:
        return {name: reason for name, reason in sorted(self.verdicts.items())
                if reason is not None}

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        if self.ok:
            signed = f", {self.signed} signed" if self.signed else ""
            return f"audit: OK: {plural(self.journals, 'journal')}, chain intact{signed}"
        more = len(self.problems) - 1
        extra = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        return f"audit: FAILED: {self.problems[0]}{extra}"


def _read(path: Path) -> tuple[bytes, dict[str, Any] | None]:
    data = read_limited(path, MAX_JSON_BYTES, "a journal")
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return data, None
    return data, document if isinstance(document, dict) else None


def _section(document: dict[str, Any] | None) -> dict[str, Any]:
    section = (document or {}).get("gameday")
    return section if isinstance(section, dict) else {}


def verify(directory: Path, trusted: Ed25519PublicKey | None = None) -> AuditResult:
    """Check the chain and the signatures of every journal in ``directory``."""
    result = AuditResult()
    newest_first: list[list[str]] = []  # per journal, newest journal first
    journals = {p.name: p for p in sorted(directory.glob("*.json")) if not p.name.startswith(".")}
    head = directory / CHAIN_FILE
    if not head.exists():
        result.problems.append(f"no {CHAIN_FILE} in {directory}" if journals
                               else f"no journals in {directory}")
        return result
    expected, _, name = head.read_text(encoding="utf-8").strip().partition(" ")
    recorder = CHAIN_FILE
    visited: set[str] = set()
    # Once a journal's bytes differ from what its successor recorded, what it records of
    # its own predecessor proves nothing: every older journal is unverifiable.
    untrusted_below: str | None = None
    while name:
        if name in visited or len(visited) > MAX_JOURNALS:
            newest_first.append([f"broken link: the chain loops at {name}"])
            break
        path = journals.get(name)
        if path is None:
            newest_first.append([f"broken link: {name} (recorded by {recorder}) is missing"])
            untrusted_below = untrusted_below or f"{name} is missing"
            break
        visited.add(name)
        found: list[str] = []
        newest_first.append(found)
        data, document = _read(path)
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected:
            found.append(f"edited journal: {name} (sha256 {digest[:12]}… != "
                         f"{expected[:12]}… recorded by {recorder})")
        problem = _signature_problem(path, data, document, trusted)
        if problem:
            found.append(f"bad signature: {name}: {problem}")
        elif signing.signature_path(path).exists():
            result.signed += 1
        section = _section(document)
        if document is None or "previous_sha256" not in section:
            found.append(f"edited journal: {name} has no chain link (not a gameday "
                         "journal, or its gameday section was removed)")
        result.verdicts[name] = (found[0] if found else
                                 None if untrusted_below is None else
                                 f"unverifiable: older than {untrusted_below}")
        if digest != expected and untrusted_below is None:
            untrusted_below = f"the edited journal {name}"
        if document is None or "previous_sha256" not in section:
            break
        expected, recorder = str(section.get("previous_sha256") or ""), name
        name = str(section.get("previous_journal") or "") if expected else ""
        if expected and not name:
            found.append(f"broken link: {recorder} records a predecessor without a name")
            untrusted_below = untrusted_below or f"the broken link in {recorder}"
            break
    result.journals = len(visited)
    problems = [problem for group in reversed(newest_first) for problem in group]
    outside = sorted(set(journals) - visited)
    for orphan in outside:
        result.verdicts[orphan] = ("outside the chain" if untrusted_below is None else
                                   f"unverifiable: older than {untrusted_below}")
    # journals left outside a broken chain are its consequence, so they come after it
    result.problems = problems + [f"journal outside the chain: {n}" for n in outside]
    return result


def verify_tree(root: Path, trusted: Ed25519PublicKey | None = None,
                *, is_journal: Callable[[Path], bool] | None = None
                ) -> dict[Path, str | None]:
    """A verdict for every journal under ``root``, each directory checked as its own chain.

    Returns journal path -> None (verified: its chain link, its own hash and, where it is
    signed or ``trusted`` is given, its signature hold) or the one-line reason it did not.
    ``is_journal`` picks which ``*.json`` files count (default: every non-hidden one).
    """
    pick = is_journal or (lambda path: not path.name.startswith("."))
    directories = sorted({path.parent for path in root.rglob("*.json") if pick(path)})
    verdicts: dict[Path, str | None] = {}
    for directory in directories:
        result = verify(directory, trusted)
        for path in sorted(directory.glob("*.json")):
            if not pick(path):
                continue
            if path.name in result.verdicts:
                verdicts[path] = result.verdicts[path.name]
            else:
                verdicts[path] = result.problems[0] if result.problems else "outside the chain"
    return verdicts


def _signature_problem(path: Path, data: bytes, document: dict[str, Any] | None,
                       trusted: Ed25519PublicKey | None) -> str | None:
    declared = _section(document).get("signature")
    sig_path = signing.signature_path(path)
    if not sig_path.exists():
        if declared is not None:
            return f"{sig_path.name} is missing"
        if trusted is not None:
            return "not signed (a trusted public key was given)"
        return None
    try:
        signature = read_limited(sig_path, 65_536, "a signature file")
    except InvalidInput as exc:
        return str(exc)
    return signing.check(data, signature,
                         declared if isinstance(declared, dict) else None, trusted)
