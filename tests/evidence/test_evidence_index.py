"""The verified index: each run reads only new or changed journals, and still sees every
edit, deletion, reordering and rollback it would see reading them all.

Real files, real keys, real stat stamps. The property: for random attacks
(``tests.evidence.attacks``), plus edits that keep the size and put the mtime back,
verifying through a warm index gives exactly the verdicts and problems of verifying
every file. The clock handed to the index is ten seconds ahead, so that the files these
tests have just written are old enough to be kept (:data:`RACY_S`); one test keeps the
real clock and shows fresh files are re-read.
"""

import json
import os
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gameday.evidence import audit, checked
from gameday.evidence.index import VERSION, VerifiedIndex
from tests.evidence.attacks import ATTACKS, Chain, attack

OURS = Ed25519PrivateKey.generate()
THEIRS = Ed25519PrivateKey.generate()
TRUSTED = OURS.public_key()


def _later() -> float:
    return time.time() + 10


def _index(path: Path) -> VerifiedIndex:
    return VerifiedIndex.open(path, TRUSTED, clock=_later)


def _same_size_edit(directory: Path, pick: int) -> None:
    """Flip one byte of a journal and put its mtime back (what ``touch -d`` can do)."""
    journals = sorted(directory.glob("*.json"))
    if not journals:
        return
    target = journals[pick % len(journals)]
    st_before = target.stat()
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    os.utime(target, ns=(st_before.st_atime_ns, st_before.st_mtime_ns))
    assert target.stat().st_size == st_before.st_size


def _verdicts(directory: Path, index: VerifiedIndex | None) -> tuple[object, ...]:
    facts = index.facts if index is not None else audit.journal_facts
    result = audit.verify(directory, TRUSTED, facts=facts)
    return result.ok, result.problems, result.verdicts, result.signed


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(count=st.integers(2, 5),
       steps=st.lists(st.tuples(st.sampled_from((*ATTACKS, "same-size-edit")),
                                st.integers(0, 20), st.integers(0, 20)),
                      min_size=0, max_size=3))
def test_a_warm_index_sees_what_reading_everything_sees(
        count: int, steps: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        chain = Chain.write(Path(tmp) / "j", count, OURS)
        where = Path(tmp) / "index.json"
        cold = _index(where)
        assert _verdicts(chain.directory, cold) == _verdicts(chain.directory, None)
        cold.save()
        for name, a, b in steps:
            if name == "same-size-edit":
                _same_size_edit(chain.directory, a)
            else:
                attack(chain, name, a, b, THEIRS)
        warm = _index(where)
        assert _verdicts(chain.directory, warm) == _verdicts(chain.directory, None), steps
        if not steps:
            assert (warm.read, warm.reused) == (0, count)


def test_only_new_journals_are_read_and_the_summaries_come_from_the_index(
        tmp_path: Path) -> None:
    chain = Chain.write(tmp_path / "j", 3, OURS)
    where = tmp_path / "index.json"
    first = _index(where)
    evidence = checked.check(chain.directory, TRUSTED, first)
    assert first.read == 3 and len(evidence.verified) == 3 and where.exists()
    assert oct(where.stat().st_mode & 0o777) == "0o600"
    written = where.stat().st_mtime_ns
    second = _index(where)
    again = checked.check(chain.directory, TRUSTED, second)
    assert (second.read, second.reused) == (0, 6)  # facts and summary of each, no file read
    assert [s for _, s in again.verified] == [s for _, s in evidence.verified]
    assert where.stat().st_mtime_ns == written  # nothing changed: nothing rewritten
    from gameday.evidence.journal import write_journal

    write_journal(chain.directory / "20260109T000000Z-run.json",
                  {"status": "completed", "gameday": {"verdict": {"passed": True}}}, OURS)
    third = _index(where)
    assert len(checked.check(chain.directory, TRUSTED, third).verified) == 4
    assert third.read == 1  # the new journal only


def test_a_fresh_file_is_not_kept_and_another_key_has_its_own_entries(tmp_path: Path) -> None:
    chain = Chain.write(tmp_path / "j", 2, OURS)
    where = tmp_path / "index.json"
    real = VerifiedIndex.open(where, TRUSTED)  # the real clock: files written just now
    checked.check(chain.directory, TRUSTED, real)
    again = VerifiedIndex.open(where, TRUSTED)
    checked.check(chain.directory, TRUSTED, again)
    assert again.read == 2  # too fresh to trust their stamps: read again
    _index(where).save()
    keyless = VerifiedIndex.open(where, None, clock=_later)
    assert keyless.entries == {}  # the trusted key's facts are not the keyless ones


def test_a_broken_index_is_started_afresh(tmp_path: Path) -> None:
    chain = Chain.write(tmp_path / "j", 2, OURS)
    where = tmp_path / "index.json"
    for junk in (b"not json", b"[]", json.dumps({"version": VERSION, "keys": {"x": 1}}).encode(),
                 json.dumps({"version": VERSION - 1, "keys": {}}).encode(),  # an older one
                 json.dumps({"version": VERSION, "keys": {
                     VerifiedIndex.open(where, TRUSTED).fingerprint: {
                         str(chain.directory / "a.json"): {"stamp": "bad"}}}}).encode()):
        where.write_bytes(junk)
        index = _index(where)
        assert len(checked.check(chain.directory, TRUSTED, index).verified) == 2
        assert index.read == 2
