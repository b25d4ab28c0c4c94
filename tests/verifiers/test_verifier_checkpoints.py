"""verifiers.checkpoints: a checkpoint store on disk in each real layout (DCP directories,
Hugging Face ``checkpoint-N``, Lightning ``step=N.ckpt``, a ``latest`` pointer) and a job
log, read as of an instant."""

import os
from pathlib import Path

import pytest

from verifiers.checkpoints import CheckpointStoreError, durable_at, read_log_steps, scan_store


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
    steps = read_log_steps(log, r"^(?P<t>\S+) step (?P<step>\d+)")
    assert [(s.step, s.line) for s in steps] == [(1, 1), (2, 3)]
    assert steps[0].t == 1700000000.25 and steps[1].t == pytest.approx(1700000001.5)
    with pytest.raises(CheckpointStoreError, match="needs the named groups"):
        read_log_steps(log, r"step (\d+)")
    with pytest.raises(CheckpointStoreError, match="is not a directory"):
        scan_store(tmp_path / "absent")
