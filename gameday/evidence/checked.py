"""Verified evidence: every journal under a directory, checked, with its summary.

The one way ``coverage``, ``gate --journals`` and ``score`` read journals: each directory
is verified as its own hash chain (``gameday.evidence.audit``), through a verified index
when one is given (``gameday.evidence.index``: only new or changed files are read), and
every journal file is summarized. A journal counts only when it verified; one that did
not is kept with its reason (and its summary when it is readable, so reports can say
where it would have counted).
"""

from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gameday.bounded import no_cyclic_gc
from gameday.errors import InvalidInput
from gameday.evidence.audit import (
    AuditResult,
    JournalFacts,
    read_facts,
    verify_directories,
    verify_tree,
)
from gameday.evidence.index import VerifiedIndex
from gameday.evidence.summary import JournalSummary, is_journal_file, read_summary, summarize


@dataclass(frozen=True)
class CheckedJournal:
    """One journal file: its summary (None when it is not a gameday journal) and None when
    it verified, else the one-line reason it did not."""

    path: Path
    summary: JournalSummary | None
    problem: str | None


@dataclass
class Evidence:
    """What a directory of journals holds, checked."""

    root: Path
    journals: list[CheckedJournal] = field(default_factory=list)
    chains: dict[Path, AuditResult] = field(default_factory=dict)  # per directory
    trusted: bool = False

    @property
    def verified(self) -> list[tuple[Path, JournalSummary]]:
        return [(j.path, j.summary) for j in self.journals
                if j.problem is None and j.summary is not None]

    @property
    def rejected(self) -> list[CheckedJournal]:
        """Gameday journals that did not verify (their summary is known)."""
        return [j for j in self.journals if j.problem is not None and j.summary is not None]

    @property
    def skipped(self) -> list[Path]:
        """JSON files that are not gameday journals."""
        return [j.path for j in self.journals if j.summary is None]


def check(root: Path, trusted: Ed25519PublicKey | None = None,
          index: VerifiedIndex | None = None) -> Evidence:
    """Verify and summarize every journal under ``root`` (saving ``index`` after).

    Raises :class:`InvalidInput` when ``root`` is not a directory.
    """
    if not root.is_dir():
        raise InvalidInput("is not a directory of journals", file=str(root))
    with no_cyclic_gc():  # millions of objects that form no cycles
        return _check(root, trusted, index)


class _ReadOnce:
    """Facts and summary of each journal from one read, one parse and one hash (without
    an index, verification and summaries would each read every file)."""

    def __init__(self) -> None:
        self._summaries: dict[Path, JournalSummary | InvalidInput] = {}

    def facts(self, path: Path, trusted: Ed25519PublicKey | None) -> JournalFacts:
        found, document = read_facts(path, trusted)
        if document is not None:
            try:
                self._summaries[path] = summarize(document, path=str(path),
                                                  sha256=found.sha256)
            except InvalidInput as exc:
                self._summaries[path] = exc
        return found

    def summary(self, path: Path) -> JournalSummary:
        known = self._summaries.pop(path, None)
        if known is None:
            return read_summary(path)
        if isinstance(known, InvalidInput):
            raise known
        return known


def _check(root: Path, trusted: Ed25519PublicKey | None,
           index: VerifiedIndex | None) -> Evidence:
    once = _ReadOnce()
    facts = index.facts if index is not None else once.facts
    summarize_file = index.summary if index is not None else once.summary
    chains = verify_directories(root, trusted, is_journal=is_journal_file, facts=facts)
    verdicts = verify_tree(root, trusted, is_journal=is_journal_file, results=chains)
    evidence = Evidence(root, chains=chains, trusted=trusted is not None)
    for path, problem in verdicts.items():
        try:
            summary: JournalSummary | None = summarize_file(path)
        except InvalidInput:
            summary = None
        evidence.journals.append(CheckedJournal(path, summary, problem))
    if index is not None:
        index.save()
    return evidence
