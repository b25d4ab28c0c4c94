"""Verified evidence: every journal under a directory, checked, with its summary.

The one way ``coverage``, ``gate --journals`` and ``score`` read journals: each directory
is verified as its own hash chain (``gameday.evidence.audit``), through a verified index
when one is given (``gameday.evidence.index``: only new or changed files are read), and
every journal file is summarized. A journal counts only when it verified; one that did
not is kept with its reason (and its summary when it is readable, so reports can say
where it would have counted).
"""

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gameday.errors import InvalidInput
from gameday.evidence.audit import AuditResult, journal_facts, verify_directories, verify_tree
from gameday.evidence.index import VerifiedIndex
from gameday.evidence.summary import JournalSummary, is_journal_file, read_summary


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
    with _no_cyclic_gc():
        return _check(root, trusted, index)


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Reading 10,000 journals' facts and summaries allocates millions of objects that
    form no cycles; the cyclic collector would walk them over and over (a third of the
    time in bench/report_scale.py), so it waits until the reading is done."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check(root: Path, trusted: Ed25519PublicKey | None,
           index: VerifiedIndex | None) -> Evidence:
    facts = index.facts if index is not None else journal_facts
    summarize = index.summary if index is not None else read_summary
    chains = verify_directories(root, trusted, is_journal=is_journal_file, facts=facts)
    verdicts = verify_tree(root, trusted, is_journal=is_journal_file, results=chains)
    evidence = Evidence(root, chains=chains, trusted=trusted is not None)
    for path, problem in verdicts.items():
        try:
            summary: JournalSummary | None = summarize(path)
        except InvalidInput:
            summary = None
        evidence.journals.append(CheckedJournal(path, summary, problem))
    if index is not None:
        index.save()
    return evidence
