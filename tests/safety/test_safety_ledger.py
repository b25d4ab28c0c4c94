"""The ledger's batch writes: a fan-out writes each landed batch at once (no fsync),
then makes them durable with one fsync; nothing is written twice, and a write that
failed is written by the next call. Real files, real fsync."""

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gameday import ledger as ledgers
from gameday.ledger import FaultEntry, Ledger, read_ledger


def entry(n: int) -> FaultEntry:
    return FaultEntry(id=f"f-{n}", kind="gpu.ecc", node="node-0",
                      agent_url="http://127.0.0.1:9", target={"gpu": n}, params={},
                      injected_at="virtual", applied_at=1.0, expires_at=31.0, lease_s=30)


def events(path: Path) -> list[tuple[str, str]]:
    return [(e["event"], e["id"]) for e in map(json.loads, path.read_text().splitlines())]


def test_batches_written_as_they_land_are_synced_once_and_never_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path, "run-1")
    synced: list[int] = []
    fsync = os.fsync
    monkeypatch.setattr(ledgers.os, "fsync", lambda fd: synced.append(fd) or fsync(fd))
    ledger.record_applied_many([entry(0), entry(1)], sync=False)
    ledger.record_applied_many([entry(2)], sync=False)
    assert events(path) == [("applied", "f-0"), ("applied", "f-1"), ("applied", "f-2")]
    assert synced == []  # written (a killed orchestrator's cleanup reads them), not synced
    ledger.record_applied_many([entry(0), entry(1), entry(2)])  # the fan-out's end
    assert len(synced) == 1 and len(events(path)) == 3
    ledger.record_reverted_many([("f-0", 2.0, "requested")], sync=False)
    ledger.record_reverted_many([("f-0", 2.0, "requested"), ("f-1", 2.0, "requested"),
                                 ("f-2", 2.0, "requested")])
    assert len(synced) == 2
    assert events(path)[3:] == [("reverted", "f-0"), ("reverted", "f-1"), ("reverted", "f-2")]
    assert [f["reverted_at"] for f in read_ledger(path)] == [2.0, 2.0, 2.0]
    ledger.record_reverted_many([("f-1", 3.0, "requested")])  # nothing new, nothing to sync
    assert len(synced) == 2 and ledger.active() == []


def test_an_unsynced_write_that_failed_is_written_by_the_next_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path, "run-2")
    write = ledgers.os.write
    failing = {"on": True}

    def flaky_write(fd: int, data: Any) -> int:
        if failing["on"]:
            raise OSError(28, "No space left on device")
        return write(fd, data)

    monkeypatch.setattr(ledgers.os, "write", flaky_write)
    ledger.record_applied_many([entry(0)], sync=False)  # not raised: the fan-out goes on
    assert [e.id for e in ledger.active()] == ["f-0"]
    assert path.read_text() == ""
    with pytest.raises(OSError, match="No space left"):
        ledger.record_applied_many([entry(0)])  # the durable write says it
    failing["on"] = False
    ledger.record_applied_many([entry(1)])
    assert events(path) == [("applied", "f-0"), ("applied", "f-1")]
