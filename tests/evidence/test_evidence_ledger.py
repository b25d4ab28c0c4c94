"""The ledger's batch writes: a fan-out writes each landed batch at once (no fsync),
then makes them durable with one fsync; nothing is written twice, and a write that
failed is written by the next call; the file held open between writes, beside another
writer, closed and reopened at random (a property). Real files, real fsync."""

import gc
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.evidence import ledger as ledgers
from gameday.evidence.ledger import FaultEntry, Keep, Ledger, fault_events, read_ledger


def entry(n: int, **fields: Any) -> FaultEntry:
    return FaultEntry(**{"id": f"f-{n}", "kind": "gpu.ecc", "node": "node-0",
                         "agent_url": "http://127.0.0.1:9", "target": {"gpu": n}, "params": {},
                         "injected_at": "virtual", "applied_at": 1.0 + n, "expires_at": 31.0,
                         "lease_s": 30, **fields})


def events(path: Path) -> list[tuple[str, str]]:
    """``(event, fault id)`` per fault of each line (a batch's line: one per fault)."""
    return [(e["event"], e["id"]) for line in path.read_text().splitlines()
            for e in fault_events(json.loads(line))]


def test_batches_written_as_they_land_are_synced_once_and_never_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path, "run-1")
    synced: list[int] = []
    fsync = os.fsync
    monkeypatch.setattr(ledgers.os, "fsync", lambda fd: synced.append(fd) or fsync(fd))
    ledger.record_applied_many([entry(0), entry(1)], keep="written")
    ledger.record_applied_many([entry(2)], keep="written")
    assert events(path) == [("applied", "f-0"), ("applied", "f-1"), ("applied", "f-2")]
    assert synced == []  # written (a killed orchestrator's cleanup reads them), not synced
    ledger.record_applied_many([entry(0), entry(1), entry(2)])  # the fan-out's end
    assert len(synced) == 1 and len(events(path)) == 3
    ledger.record_reverted_many([("f-0", 2.0, "requested")], keep="written")
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
    ledger.record_applied_many([entry(0)], keep="written")  # not raised: the fan-out goes on
    assert [e.id for e in ledger.active()] == ["f-0"]
    assert path.read_text() == ""
    with pytest.raises(OSError, match="No space left"):
        ledger.record_applied_many([entry(0)])  # the durable write says it
    failing["on"] = False
    ledger.record_applied_many([entry(1)])
    assert events(path) == [("applied", "f-0"), ("applied", "f-1")]


def fleet() -> list[FaultEntry]:
    """Three faults of one agent's batch, then ones that cannot share its line."""
    return [entry(0, details={"uuid": "GPU-0"}), entry(1), entry(2),
            entry(3, params={"count": 2}),                            # other params
            entry(4, node="node-1", agent_url="http://127.0.0.1:8",   # another agent,
                  applied_at=7.0),                                    # one time for all
            entry(5, node="node-1", agent_url="http://127.0.0.1:8", applied_at=7.0),
            entry(6, via="kubernetes", details={"inverse": {"op": "uncordon"}})]


def test_a_batch_is_one_line_and_reads_back_as_its_faults_written_one_by_one(
        tmp_path: Path) -> None:
    batched, one_by_one = tmp_path / "batched.jsonl", tmp_path / "one-by-one.jsonl"
    batch, single = Ledger(batched, "run-3"), Ledger(one_by_one, "run-3")
    batch.record_applied_many(fleet())
    for one in fleet():
        single.record_applied(one)
    lines = [json.loads(line) for line in batched.read_text().splitlines()]
    assert [len(line.get("faults", [line])) for line in lines] == [3, 1, 2, 1]
    assert lines[0]["params"] == {} and "inverse" not in lines[0]  # stated once; rebuilt
    assert "applied_at" not in lines[0] and all("applied_at" in f for f in lines[0]["faults"])
    assert (lines[2]["applied_at"], lines[2]["expires_at"]) == (7.0, 31.0)  # the same: once
    assert not any("applied_at" in f or "expires_at" in f for f in lines[2]["faults"])
    assert read_ledger(batched) == read_ledger(one_by_one)
    assert read_ledger(batched)[1]["inverse"] == {"method": "DELETE",
                                                  "url": "http://127.0.0.1:9/v1/faults/f-1"}
    reverts = [("f-0", 9.0, "requested"), ("f-4", 9.5, "requested"), ("f-6", 9.0, "cleanup")]
    batch.record_reverted_many(reverts)
    for fault_id, at, reason in reverts:
        single.record_reverted(fault_id, at, reason)
    assert len(batched.read_text().splitlines()) == 4 + 2  # a line per reason
    assert read_ledger(batched) == read_ledger(one_by_one)
    assert [(f["id"], f["reverted_at"], f["reason"]) for f in read_ledger(batched)
            if f["reverted_at"]] == [("f-0", 9.0, "requested"), ("f-4", 9.5, "requested"),
                                     ("f-6", 9.0, "cleanup")]


def held_open(path: Path) -> int:
    """How many of this process's descriptors are open on ``path`` (the kernel's view)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            continue
    return count


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.sampled_from(["batch", "unsynced", "other", "close", "revert"]),
                      max_size=25))
def test_the_held_open_file_keeps_every_line_whole_beside_another_writer(
        steps: list[str]) -> None:
    """A ledger holds its file open between writes; another writer (cleanup appending to
    the same file) interleaves lines; the ledger is closed and written again at random.
    Every line is whole and each writer's lines are in its own order; after close, and
    once the ledger is collected, no descriptor is left open on the file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.jsonl"
        ledger = Ledger(path, "run-h")
        mine: list[str] = []
        theirs: list[int] = []
        for n, step in enumerate(steps):
            if step in ("batch", "unsynced"):
                ledger.record_applied_many([entry(n), entry(n + 1000)],
                                          keep="synced" if step == "batch" else "written")
                mine += [f"f-{n}", f"f-{n + 1000}"]
            elif step == "revert" and ledger.active():
                first = ledger.active()[0]
                ledger.record_reverted_many([(first.id, 5.0, "requested")])
                mine.append(first.id)
            elif step == "other":
                ledgers.append_event(path, "resolved", "run-cleanup", {"request_id": f"q-{n}"})
                theirs.append(n)
            elif step == "close":
                ledger.close()
                assert held_open(path) == 0
        lines = ([json.loads(line) for line in path.read_text().splitlines()]
                 if path.exists() else [])
        assert [e["id"] for line in lines if line["run"] == "run-h"
                for e in fault_events(line)] == mine
        assert [int(line["request_id"][2:]) for line in lines
                if line["run"] == "run-cleanup"] == theirs
        del ledger
        gc.collect()
        assert held_open(path) == 0


@settings(max_examples=80, deadline=None)
@given(steps=st.lists(st.tuples(
    st.sampled_from(["apply", "apply_held", "revert_many", "revert_held", "revert_one",
                     "renew_many", "renew_one", "entries", "active", "flush"]),
    st.lists(st.integers(0, 11), max_size=6), st.booleans()), max_size=30))
def test_the_view_in_memory_is_the_file_s_whatever_the_order_of_changes(
        steps: list[tuple[str, list[int], bool]]) -> None:
    """Applies, reverts (in batches, synced, written or held back until the next write or
    flush, or one by one), renewals, flushes and reads in any order:
    :meth:`Ledger.entries` and :meth:`Ledger.active` always say what a plain model of the
    rules says (a revert or renewal counts once, only while the fault is active; reverts
    are folded into entries when asked for); what is held back is not in the file until
    a write or flush; after close, what the file reads back (:func:`read_ledger`) is the
    same view."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.jsonl"
        ledger = Ledger(path, "run-m")
        model: dict[str, dict[str, Any]] = {}  # id -> expires_at, reverted_at, reason
        for t, (step, numbers, sync) in enumerate(steps, start=1):
            ids = [f"f-{n}" for n in numbers]
            if step in ("apply", "apply_held"):
                new = [entry(n) for n in dict.fromkeys(numbers)]
                ledger.record_applied_many(new, keep=keep(step == "apply", sync))
                for e in new:
                    model.setdefault(e.id, {"expires_at": e.expires_at, "reverted_at": None,
                                            "revert_reason": None})
            elif step in ("revert_many", "revert_held", "revert_one"):
                reason = f"why-{t}"
                if step != "revert_one":
                    ledger.record_reverted_many([(i, float(t), reason) for i in ids],
                                                keep=keep(step == "revert_many", sync))
                else:
                    for i in ids:
                        ledger.record_reverted(i, float(t), reason)
                for i in ids:
                    if i in model and model[i]["reverted_at"] is None:
                        model[i].update(reverted_at=float(t), revert_reason=reason)
            elif step in ("renew_many", "renew_one"):
                if step == "renew_many":
                    ledger.record_renewed_many([(i, 100.0 + t) for i in ids])
                else:
                    for i in ids:
                        ledger.record_renewed(i, 100.0 + t)
                for i in ids:
                    if i in model and model[i]["reverted_at"] is None:
                        model[i]["expires_at"] = 100.0 + t
            elif step == "flush":
                ledger.flush()
            elif step == "entries":
                assert {e.id: {"expires_at": e.expires_at, "reverted_at": e.reverted_at,
                               "revert_reason": e.revert_reason}
                        for e in ledger.entries()} == model
            assert sorted(e.id for e in ledger.active()) == sorted(
                i for i, state in model.items() if state["reverted_at"] is None)
            if step in ("apply", "revert_many", "flush"):  # a write leaves nothing held back
                assert on_file(path) == model
        ledger.close()
        seen = {e.id: {"expires_at": e.expires_at, "reverted_at": e.reverted_at,
                       "revert_reason": e.revert_reason} for e in ledger.entries()}
        assert seen == model
        assert on_file(path) == model


def keep(written: bool, synced: bool) -> Keep:
    """How a step keeps its lines: held back, or written (and synced, or not)."""
    return "held" if not written else "synced" if synced else "written"


def on_file(path: Path) -> dict[str, dict[str, Any]]:
    """Each fault's state as the ledger file reads back."""
    return {f["id"]: {"expires_at": f["expires_at"], "reverted_at": f["reverted_at"],
                      "revert_reason": f.get("reason")}  # a revert line's key
            for f in (read_ledger(path) if path.exists() else [])}


#: What ``str.splitlines`` takes for a line end and JSON writes raw in a string.
LINE_BREAKING = "\u2028\u2029\u0085"


@settings(max_examples=150)
@given(st.lists(st.tuples(st.text(alphabet=st.characters() | st.sampled_from(LINE_BREAKING),
                                  max_size=6),
                          st.text(alphabet=st.sampled_from(LINE_BREAKING + "ab\"\\"),
                                  max_size=4)), min_size=1, max_size=4))
def test_every_fault_reads_back_whatever_its_strings_hold(
        texts: list[tuple[str, str]]) -> None:
    """Targets, parameters and an agent's details holding U+2028, U+2029, U+0085 (raw in
    UTF-8 JSON, line ends to ``str.splitlines``) or any other character: every fault, in
    a batch's line or its own, reads back from the file whole and as written, so cleanup
    finds it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.jsonl"
        ledger = Ledger(path, "run-u")
        written = [entry(n, target={"process": a}, params={"note": b}, details={"name": a + b})
                   for n, (a, b) in enumerate(texts)]
        ledger.record_applied_many(written[:-1])
        ledger.record_applied(written[-1])
        ledger.close()
        found = {f["id"]: f for f in read_ledger(path)}
        assert sorted(found) == sorted(e.id for e in written)
        for e in written:
            assert (found[e.id]["target"], found[e.id]["params"], found[e.id]["details"]) == (
                e.target, e.params, e.details)
