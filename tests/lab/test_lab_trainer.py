"""The lab trainer's checkpointing, in process: durable writes (temp, fsync, rename),
resume from the newest whole checkpoint, and asynchronous writes that skip while one is
in flight. Real files and threads; the FUSE stall itself is exercised on the lab by
tests/verifiers/test_verifier_lab.py."""

import threading
from pathlib import Path

import numpy as np

from gameday.lab.trainer import FEATURES, KEEP, Checkpoint, CheckpointStore, Trainer


def test_writes_are_durable_renamed_and_pruned(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    for step in (10, 20, 30, 40, 50):
        store.write(Checkpoint(step, np.full(FEATURES, float(step))))
    assert store.steps() == [50, 40, 30][:KEEP]
    assert sorted(p.name for p in store.directory.iterdir()) == [
        "ckpt-00000030.npz", "ckpt-00000040.npz", "ckpt-00000050.npz"]
    newest = store.newest()
    assert newest is not None and newest.step == 50 and newest.weights[0] == 50.0


def test_resume_skips_torn_and_temporary_files(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    store.write(Checkpoint(10, np.ones(FEATURES)))
    store.path(20).write_bytes(b"torn")  # a checkpoint that did not read back whole
    (store.directory / "ckpt-00000030.npz.tmp").write_bytes(b"half")
    trainer = Trainer(store, every=10, step_s=0.01)
    assert trainer.step == trainer.resumed_from == trainer.checkpoint_step == 10
    assert not list(store.directory.glob("*.tmp"))
    assert 'gameday_trainer_resumed_from_step 10.0' in trainer.metrics_text()


class BlockingStore(CheckpointStore):
    """A store whose writes hang until released, like a stalled filesystem."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.release = threading.Event()

    def write(self, checkpoint: Checkpoint) -> None:
        self.release.wait(10)
        super().write(checkpoint)


def test_training_goes_on_while_a_write_hangs_and_skips_checkpoints(tmp_path: Path) -> None:
    store = BlockingStore(tmp_path / "checkpoints")
    trainer = Trainer(store, every=2, step_s=0.01)
    writer = threading.Thread(target=trainer.write_loop)
    writer.start()
    try:
        for _ in range(9):
            trainer.train_step()
        assert trainer.step == 9 and trainer.checkpoint_step == 0
        assert trainer.results["skipped"] >= 2  # steps 6, 8 came due while 2 (or 4) hung
        text = trainer.metrics_text()
        assert "gameday_trainer_step 9.0" in text and "gameday_trainer_checkpoint_step 0.0" in text
        store.release.set()
    finally:
        store.release.set()
        trainer.stop.set()
        writer.join(timeout=10)
    assert trainer.checkpoint_step in (2, 4) and store.steps()[0] == trainer.checkpoint_step
