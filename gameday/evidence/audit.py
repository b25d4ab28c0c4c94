"""``gameday audit verify DIR``: prove a directory of journals was not edited.

The newest journal is named in ``DIR/.chain-head`` with its SHA-256 and its sequence
number; every journal names its predecessor (``gameday.previous_journal``), that
journal's SHA-256 (``gameday.previous_sha256``) and its own sequence number
(``gameday.sequence``, one more than its predecessor's). Verification walks the chain
from the head back to the first journal and checks, at every link, that the
predecessor exists and hashes to the recorded digest and that the sequence numbers
follow each other; then that no journal lies outside the chain; and, for each signed
journal (or every journal, with ``--public-key``), its Ed25519 signature. With
``--public-key`` the head itself must carry a signature by that key (over digest, name
and sequence), so nobody without the key can point it at an older journal.

A head copied from an older state of the directory still verifies: only a record kept
outside the directory catches that rollback. An :class:`Anchor` is such a record: the
head hash the auditor saw (``--expect-head HASH``: the chain must still contain it)
and its sequence number (``--min-sequence N``: the head must be at least that far on).

The result is one line: ``audit: OK: N journals, chain intact[, S signed]`` (exit 0),
or ``audit: FAILED: <the first problem, oldest first>`` (exit 1), e.g.
``edited journal: 20260101T...-x.json (sha256 1a2b… != 9f8e… recorded by ...)``.
"""

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gameday.bounded import MAX_JSON_BYTES, read_limited
from gameday.errors import InvalidInput
from gameday.evidence import signing
from gameday.evidence.journal import CHAIN_FILE, ChainHead, read_head
from gameday.evidence.journal_shape import gameday_section
from gameday.stats import plural

MAX_JOURNALS = 1_000_000


@dataclass(frozen=True)
class Anchor:
    """What an auditor recorded outside the directory: a head hash the chain must still
    contain, and a sequence number the head must have reached."""

    expect_head: str | None = None
    min_sequence: int | None = None


_SHA256 = re.compile("[0-9a-f]{64}")


def anchor_from(expect_head: str | None, min_sequence: int | None) -> Anchor | None:
    """The anchor ``--expect-head``/``--min-sequence`` give, checked; None for neither."""
    if expect_head is not None and not _SHA256.fullmatch(expect_head.lower()):
        raise InvalidInput("not a SHA-256 (64 hexadecimal digits), got "
                           f"{expect_head[:80]!r}", path="--expect-head")
    if min_sequence is not None and min_sequence < 1:
        raise InvalidInput(f"must be at least 1, got {min_sequence}",
                           path="--min-sequence")
    if expect_head is None and min_sequence is None:
        return None
    return Anchor(expect_head.lower() if expect_head else None, min_sequence)


@dataclass(frozen=True)
class JournalFacts:
    """What verification needs of one journal file: its digest, its chain link, its
    sequence number and its signature's verdict (for one trusted key, or none)."""

    sha256: str
    linked: bool  # has a gameday section with a chain link
    previous_sha256: str
    previous_journal: str
    sequence: int | None
    signature_problem: str | None
    signed: bool  # a signature file is there and verified

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "linked": self.linked,
                "previous_sha256": self.previous_sha256,
                "previous_journal": self.previous_journal, "sequence": self.sequence,
                "signature_problem": self.signature_problem, "signed": self.signed}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "JournalFacts":
        sequence = data["sequence"]
        problem = data["signature_problem"]
        return cls(str(data["sha256"]), bool(data["linked"]), str(data["previous_sha256"]),
                   str(data["previous_journal"]),
                   sequence if isinstance(sequence, int) else None,
                   problem if isinstance(problem, str) else None, bool(data["signed"]))


#: How verification learns a journal's facts: read it (:func:`journal_facts`), or ask a
#: verified index that knows the file unchanged (``gameday.evidence.index``).
FactsSource = Callable[[Path, Ed25519PublicKey | None], JournalFacts]


@dataclass
class AuditResult:
    """What one directory's chain proves: problems, and a verdict for every journal."""

    journals: int = 0
    signed: int = 0
    problems: list[str] = field(default_factory=list)  # oldest link first
    #: journal file name -> None when it verified, else the one-line reason it did not
    verdicts: dict[str, str | None] = field(default_factory=dict)
    head: ChainHead | None = None
    head_signed: bool = False  # the head's signature verified

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

    def head_line(self) -> str | None:
        """What an auditor records to anchor the chain later (``--expect-head`` and
        ``--min-sequence``), or None when there is no head."""
        if self.head is None:
            return None
        sequence = "" if self.head.sequence is None else f" sequence {self.head.sequence}"
        return (f"audit: head {self.head.sha256}{sequence}"
                + (" (signed)" if self.head_signed else ""))

    def head_json(self) -> dict[str, Any] | None:
        if self.head is None:
            return None
        return {"sha256": self.head.sha256, "journal": self.head.journal,
                "sequence": self.head.sequence, "signed": self.head_signed}


def journal_facts(path: Path, trusted: Ed25519PublicKey | None) -> JournalFacts:
    """Read, hash and check one journal file (and its signature file)."""
    return read_facts(path, trusted)[0]


def read_facts(path: Path, trusted: Ed25519PublicKey | None
               ) -> tuple[JournalFacts, dict[str, Any] | None]:
    """:func:`journal_facts`, and the journal as parsed (None when it is not a JSON
    object), so that a caller can summarize it without reading the file again."""
    data = read_limited(path, MAX_JSON_BYTES, "a journal")
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        parsed = None
    document = parsed if isinstance(parsed, dict) else None
    section = gameday_section(document)
    problem = _signature_problem(path, data, document, trusted)
    sequence = section.get("sequence")
    return JournalFacts(
        sha256=hashlib.sha256(data).hexdigest(),
        linked=document is not None and "previous_sha256" in section,
        previous_sha256=str(section.get("previous_sha256") or ""),
        previous_journal=str(section.get("previous_journal") or ""),
        sequence=sequence if isinstance(sequence, int) and not isinstance(sequence, bool)
        else None,
        signature_problem=problem,
        signed=problem is None and signing.signature_path(path).exists()), document


def _head_problems(head: ChainHead, newest: JournalFacts | None,
                   trusted: Ed25519PublicKey | None) -> tuple[list[str], bool]:
    """What is wrong with the head itself (its sequence, its signature); and whether its
    signature verified."""
    problems = []
    if head.sequence is not None and head.sequence < 0:
        problems.append(f"broken link: {CHAIN_FILE} records a malformed sequence number")
    elif newest is not None and head.sequence != newest.sequence:
        problems.append(f"broken link: {CHAIN_FILE} records sequence {head.sequence} but "
                        f"{head.journal} records {newest.sequence}")
    signed = False
    if head.signature is None:
        if trusted is not None:
            problems.append(f"unsigned chain head: {CHAIN_FILE} carries no signature (a "
                            "trusted public key was given)")
    else:
        problem = signing.check(head.payload(), head.signature, None, trusted)
        if problem:
            problems.append(f"bad signature: {CHAIN_FILE}: {problem}")
        signed = problem is None
    return problems, signed


def _anchor_problems(anchor: Anchor, head: ChainHead, chain: set[str]) -> list[str]:
    problems = []
    if anchor.expect_head is not None and anchor.expect_head not in chain:
        problems.append(f"anchor: the chain no longer holds the expected head "
                        f"{anchor.expect_head[:12]}… (a journal at or before it was removed "
                        "or edited, or the directory was rolled back)")
    if anchor.min_sequence is not None and (head.sequence or 0) < anchor.min_sequence:
        problems.append(f"anchor: the chain head's sequence "
                        f"{head.sequence if head.sequence is not None else 'none'} is below "
                        f"the expected {anchor.min_sequence} (the directory was rolled back)")
    return problems


def verify(directory: Path, trusted: Ed25519PublicKey | None = None, *,
           anchor: Anchor | None = None, facts: FactsSource = journal_facts) -> AuditResult:
    """Check the chain, the head and the signatures of every journal in ``directory``
    (and, given ``anchor``, that the directory was not rolled back past it)."""
    result = AuditResult()
    newest_first: list[list[str]] = []  # per journal, newest journal first
    journals = {name: directory / name for name in json_names(directory)
                if not name.startswith(".")}
    head = read_head(directory)
    if head is None:
        result.problems.append(f"no {CHAIN_FILE} in {directory}" if journals
                               else f"no journals in {directory}")
        return result
    result.head = head
    expected, name, recorder = head.sha256, head.journal, CHAIN_FILE
    visited: set[str] = set()
    digests: set[str] = set()
    newest: JournalFacts | None = None
    successor: tuple[str, int | None] | None = None  # (name, sequence) of the one above
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
        known = facts(path, trusted)
        newest = newest or known
        digests.add(known.sha256)
        if known.sha256 != expected:
            found.append(f"edited journal: {name} (sha256 {known.sha256[:12]}… != "
                         f"{expected[:12]}… recorded by {recorder})")
        if known.signature_problem:
            found.append(f"bad signature: {name}: {known.signature_problem}")
        elif known.signed:
            result.signed += 1
        if not known.linked:
            found.append(f"edited journal: {name} has no chain link (not a gameday "
                         "journal, or its gameday section was removed)")
        if (successor is not None and successor[1] is not None and known.sequence is not None
                and successor[1] != known.sequence + 1):
            found.append(f"broken link: {successor[0]} records sequence {successor[1]} after "
                         f"{name}'s {known.sequence} (journals were removed or reordered)")
        result.verdicts[name] = (found[0] if found else
                                 None if untrusted_below is None else
                                 f"unverifiable: older than {untrusted_below}")
        if known.sha256 != expected and untrusted_below is None:
            untrusted_below = f"the edited journal {name}"
        if not known.linked:
            break
        successor = (name, known.sequence)
        expected, recorder = known.previous_sha256, name
        name = known.previous_journal if expected else ""
        if expected and not name:
            found.append(f"broken link: {recorder} records a predecessor without a name")
            untrusted_below = untrusted_below or f"the broken link in {recorder}"
            break
        if not expected and known.sequence not in (None, 1):
            found.append(f"broken link: {recorder} is the first journal of the chain but "
                         f"records sequence {known.sequence} (older journals were removed)")
    result.journals = len(visited)
    problems = [problem for group in reversed(newest_first) for problem in group]
    outside = sorted(set(journals) - visited)
    for orphan in outside:
        result.verdicts[orphan] = ("outside the chain" if untrusted_below is None else
                                   f"unverifiable: older than {untrusted_below}")
    # journals left outside a broken chain are its consequence, so they come after it
    problems += [f"journal outside the chain: {n}" for n in outside]
    head_problems, result.head_signed = _head_problems(head, newest, trusted)
    head_problems += _anchor_problems(anchor or Anchor(), head, digests)
    if head_problems:
        # a head that does not hold vouches for nothing it names
        for journal, reason in result.verdicts.items():
            result.verdicts[journal] = reason or f"unverifiable: {head_problems[0]}"
    result.problems = problems + head_problems
    return result


def json_names(directory: Path) -> list[str]:
    """The names of the ``*.json`` files in ``directory``, sorted (none if it is gone)."""
    try:
        with os.scandir(directory) as entries:
            return sorted(entry.name for entry in entries
                          if entry.name.endswith(".json") and not entry.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def verify_directories(root: Path, trusted: Ed25519PublicKey | None = None,
                       *, is_journal: Callable[[Path], bool] | None = None,
                       facts: FactsSource = journal_facts) -> dict[Path, AuditResult]:
    """Every directory under ``root`` that holds a journal, checked as its own chain."""
    pick = is_journal or (lambda path: not path.name.startswith("."))
    directories = []
    for where, _, files in os.walk(root):
        directory = Path(where)
        if any(name.endswith(".json") and pick(directory / name) for name in files):
            directories.append(directory)
    return {directory: verify(directory, trusted, facts=facts)
            for directory in sorted(directories)}


def verify_tree(root: Path, trusted: Ed25519PublicKey | None = None,
                *, is_journal: Callable[[Path], bool] | None = None,
                facts: FactsSource = journal_facts,
                results: dict[Path, AuditResult] | None = None) -> dict[Path, str | None]:
    """A verdict for every journal under ``root``, each directory checked as its own chain.

    Returns journal path -> None (verified: its chain link, its own hash, the head and,
    where it is signed or ``trusted`` is given, its signature hold) or the one-line reason
    it did not. ``is_journal`` picks which ``*.json`` files count (default: every
    non-hidden one). ``results`` (from :func:`verify_directories`) spares checking again.
    """
    pick = is_journal or (lambda path: not path.name.startswith("."))
    checked = results if results is not None else verify_directories(
        root, trusted, is_journal=pick, facts=facts)
    verdicts: dict[Path, str | None] = {}
    for directory, result in checked.items():
        for name in json_names(directory):
            path = directory / name
            if not pick(path):
                continue
            if path.name in result.verdicts:
                verdicts[path] = result.verdicts[path.name]
            else:
                verdicts[path] = result.problems[0] if result.problems else "outside the chain"
    return verdicts


def _signature_problem(path: Path, data: bytes, document: dict[str, Any] | None,
                       trusted: Ed25519PublicKey | None) -> str | None:
    declared = gameday_section(document).get("signature")
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
