"""verifiers.checkpoints and verifiers.joblog: a checkpoint store on disk in each real
layout (DCP directories, Hugging Face ``checkpoint-N``, Lightning ``step=N.ckpt`` and
``last.ckpt``, DeepSpeed ``global_stepN`` + ``latest``, Megatron ``iter_N`` + its tracker
file), a store the framework prunes, and a job log in UTC and local time."""

import os
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verifiers.checkpoints import (
    CheckpointStoreError,
    StoreHistory,
    durable_at,
    read_log_steps,
    scan_store,
)
from verifiers.joblog import read_log_lines


def touch(path: Path, at: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    os.utime(path, (at, at))


def test_a_dcp_directory_counts_once_its_metadata_exists(tmp_path: Path) -> None:
    touch(tmp_path / "step_10" / "__0_0.distcp", 100)
    touch(tmp_path / "step_10" / ".metadata", 101)
    touch(tmp_path / "step_20" / "__0_0.distcp", 110)  # torn: no .metadata yet
    touch(tmp_path / "step_30" / ".metadata", 120)
    assert [(c.step, c.form) for c in scan_store(tmp_path)] == [(10, "dcp"), (30, "dcp")]
    assert durable_at(tmp_path, 115).step == 10  # type: ignore[union-attr]
    assert durable_at(tmp_path, 120).step == 30  # type: ignore[union-attr]
    assert durable_at(tmp_path, 100) is None


def test_trainer_layouts_and_a_pointer(tmp_path: Path) -> None:
    touch(tmp_path / "checkpoint-500" / "trainer_state.json", 200)
    touch(tmp_path / "checkpoint-600" / "model.safetensors", 210)  # no state: incomplete
    touch(tmp_path / "epoch=0-step=700.ckpt", 220)
    assert [(c.step, c.form) for c in scan_store(tmp_path)] == [(500, "hf"), (700, "lightning")]
    (tmp_path / "latest").write_text("global_step500\n")
    os.utime(tmp_path / "latest", (230, 230))
    pointed = durable_at(tmp_path, 240)
    assert pointed is not None and (pointed.step, pointed.form) == (500, "pointer")
    assert durable_at(tmp_path, 225).step == 700  # type: ignore[union-attr]


def test_log_steps_with_unix_and_iso_times(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("1700000000.25 step 1 loss 0.9\nnoise\n"
                   "2023-11-14T22:13:21.5 step 2 loss 0.8\n")
    steps = read_log_steps(log, r"^(?P<t>\S+) step (?P<step>\d+)", tz="UTC")
    assert [(s.step, s.line) for s in steps] == [(1, 1), (2, 3)]
    assert steps[0].t == 1700000000.25 and steps[1].t == pytest.approx(1700000001.5)
    with pytest.raises(CheckpointStoreError, match="needs the named groups"):
        read_log_steps(log, r"step (\d+)")
    with pytest.raises(CheckpointStoreError, match="is not a directory"):
        scan_store(tmp_path / "absent")


def test_lightning_last_ckpt_takes_the_step_saved_with_it(tmp_path: Path) -> None:
    touch(tmp_path / "epoch=0-step=20.ckpt", 300)
    touch(tmp_path / "epoch=1-step=40.ckpt", 310)
    touch(tmp_path / "last.ckpt", 310.01)
    assert [(c.step, c.form) for c in scan_store(tmp_path)] == [
        (20, "lightning"), (40, "lightning"), (40, "lightning-last")]
    linked = tmp_path / "linked"
    touch(linked / "epoch=2-step=60.ckpt", 320)
    (linked / "last.ckpt").symlink_to(linked / "epoch=2-step=60.ckpt")
    assert [(c.step, c.form) for c in scan_store(linked)][-1] == (60, "lightning-last")
    alone = tmp_path / "alone"  # save_top_k=0: the step is only inside the file
    touch(alone / "last.ckpt", 330)
    assert scan_store(alone) == []


def test_deepspeed_and_megatron_directories_count_up_to_their_pointer(tmp_path: Path) -> None:
    deepspeed = tmp_path / "ds"
    touch(deepspeed / "global_step100" / "mp_rank_00_model_states.pt", 400)
    touch(deepspeed / "global_step200" / "mp_rank_00_model_states.pt", 410)  # torn
    assert scan_store(deepspeed) == []  # no latest: nothing is known complete
    (deepspeed / "latest").write_text("global_step100")
    os.utime(deepspeed / "latest", (401, 401))
    assert [(c.step, c.form) for c in scan_store(deepspeed)] == [
        (100, "deepspeed"), (100, "pointer")]
    megatron = tmp_path / "megatron"
    touch(megatron / "iter_0000050" / "mp_rank_00" / "model_optim_rng.pt", 500)
    (megatron / "iter_0000050" / "done").write_text("")
    os.utime(megatron / "iter_0000050" / "done", (500, 500))
    touch(megatron / "iter_0000100" / "mp_rank_00" / "model_optim_rng.pt", 510)
    (megatron / "latest_checkpointed_iteration.txt").write_text("50")
    os.utime(megatron / "latest_checkpointed_iteration.txt", (502, 502))
    found = [(c.step, c.form) for c in scan_store(megatron)]
    assert (50, "megatron") in found and (50, "pointer") in found
    assert all(step == 50 for step, _ in found)
    assert durable_at(megatron, 505).step == 50  # type: ignore[union-attr]


def test_a_pruned_checkpoint_stays_in_the_history(tmp_path: Path) -> None:
    """save_total_limit=1: the checkpoint the job resumed from is deleted at its next
    save; the history that scanned the store at the fault still answers it."""
    touch(tmp_path / "checkpoint-40" / "trainer_state.json", 600)
    history = StoreHistory(str(tmp_path))
    history.observe(601)
    touch(tmp_path / "checkpoint-60" / "trainer_state.json", 620)
    (tmp_path / "checkpoint-40" / "trainer_state.json").unlink()
    (tmp_path / "checkpoint-40").rmdir()
    history.observe(621)
    assert durable_at(tmp_path, 610) is None  # the store alone has lost it
    assert history.durable_at(610).step == 40  # type: ignore[union-attr]
    assert history.durable_at(620).step == 60  # type: ignore[union-attr]
    assert history.scans == [601, 621]


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.integers(1, 10_000), min_size=1, max_size=6, unique=True),
       limit=st.integers(1, 3))
def test_pruning_never_erases_what_a_scan_saw(tmp_path_factory: pytest.TempPathFactory,
                                              steps: list[int], limit: int) -> None:
    """Property: checkpoints saved at rising steps (any spacing), a framework keeping
    only the newest ``limit`` (deleting the oldest at each save), a scan after each
    save: the history answers, at each save's time and ever after, the newest
    checkpoint complete then, as a scan at that time did."""
    steps = sorted(steps)
    root = tmp_path_factory.mktemp("pruned")
    history = StoreHistory(str(root))
    kept: list[Path] = []
    for index, step in enumerate(steps):
        touch(root / f"checkpoint-{step}" / "trainer_state.json", 1000 + index)
        kept.append(root / f"checkpoint-{step}")
        history.observe(1000 + index)
        answered = durable_at(root, 1000 + index)
        assert history.durable_at(1000 + index) == answered
        while len(kept) > limit:
            gone = kept.pop(0)
            (gone / "trainer_state.json").unlink()
            gone.rmdir()
    for index in range(len(steps)):
        best = max(steps[:index + 1])
        assert history.durable_at(1000 + index).step == best  # type: ignore[union-attr]


@pytest.fixture
def berlin() -> Iterator[None]:
    """The host's local zone set to Europe/Berlin for the test (TZ and tzset)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_naive_log_times_are_the_hosts_local_time_unless_tz_says(tmp_path: Path,
                                                                 berlin: None) -> None:
    """Python logging's asctime (what HF and Lightning users log) is local time."""
    log = tmp_path / "train.log"
    log.write_text("2026-07-01 12:00:00,250 step 1\n2026-07-01T12:00:01+00:00 step 2\n")
    pattern = r"^(?P<t>\S+[ T]\S+) step (?P<step>\d+)"
    local, utc = read_log_steps(log, pattern), read_log_steps(log, pattern, tz="UTC")
    summer = datetime.fromisoformat("2026-07-01T10:00:00.25+00:00").timestamp()
    assert local[0].t == pytest.approx(summer)  # Berlin is UTC+2 in July
    assert utc[0].t == pytest.approx(summer + 7200)
    assert local[1].t == utc[1].t  # an explicit zone is never reinterpreted
    with pytest.raises(CheckpointStoreError, match="'Mars/Olympus' is not a time zone"):
        read_log_steps(log, pattern, tz="Mars/Olympus")


@pytest.mark.parametrize("odd", ["\f", "\v", "\x1c", "\x85", "\u2028", "\u2029"])
@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_log_lines_are_numbered_as_grep_numbers_them(tmp_path: Path, odd: str,
                                                     end: str) -> None:
    """A line holding a character ``str.splitlines`` cuts at (a form feed, U+2028, ...)
    is one line, as ``grep -n`` and an editor count; \\r\\n and \\r end lines too."""
    log = tmp_path / "train.log"
    text = end.join(["1700000000.5 step 1", f"1700000001.0 note{odd}x step 2",
                     "1700000002.0 step 3"]) + end
    log.write_bytes(text.encode())
    lines = read_log_lines(log, r"^(?P<t>\S+) .*step (?P<step>\d+)$", step_required=True)
    assert [(line.t, line.step, line.line) for line in lines] == [
        (1700000000.5, 1, 1), (1700000001.0, 2, 2), (1700000002.0, 3, 3)]
    grep = subprocess.run(["grep", "-c", ""], input=text.replace(end, "\n").encode(),
                          capture_output=True, check=True)
    assert int(grep.stdout) == 3


def test_a_restart_line_needs_only_a_time(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("1700000000.5 gameday-progress start pid=12\n1700000001.0 step 3\n")
    lines = read_log_lines(log, r"^(?P<t>\S+) gameday-progress start")
    assert [(line.t, line.step, line.line) for line in lines] == [(1700000000.5, None, 1)]
    with pytest.raises(CheckpointStoreError, match=r"needs the named group \(\?P<t>"):
        read_log_lines(log, r"start")
