"""A Lightning ``Callback`` that reports the job's progress for gameday
(:mod:`gameday.integrations.progress`): ``Trainer(callbacks=[GamedayProgressCallback(),
ModelCheckpoint(...)])`` and nothing else.

It reports the step Lightning restored when training starts (``trainer.global_step``
once ``ckpt_path`` is loaded, 0 for a fresh start), each optimizer step at the end of
its batch, and each checkpoint once it is written: Lightning calls
``on_save_checkpoint`` while it builds the checkpoint, before the file is written, so
the step is reported at the next hook that runs after the save (the next batch's
start, validation, the end of training). That holds for Lightning's default,
synchronous checkpoint I/O; with ``AsyncCheckpointIO`` a save may still be in flight
then. Needs the ``lightning`` extra.
"""

from typing import Any

import lightning.pytorch as pl

from gameday.integrations.progress import ProgressReporter

__all__ = ["GamedayProgressCallback"]


class GamedayProgressCallback(pl.Callback):  # type: ignore[misc,unused-ignore]
    """Report step, durable checkpoint step and resumed-from step of a Lightning
    ``Trainer``. ``reporter`` defaults to a :class:`ProgressReporter` configured from
    the environment; other keyword arguments go to it."""

    def __init__(self, reporter: ProgressReporter | None = None, **settings: Any) -> None:
        self.reporter = reporter or ProgressReporter(**settings)
        self._saving: int | None = None

    def _saved(self) -> None:
        if self._saving is not None:
            self.reporter.checkpointed(self._saving)
            self._saving = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.reporter.resumed(int(trainer.global_step))

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        self._saved()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        self._saved()
        self.reporter.step(int(trainer.global_step))

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        self._saving = int(checkpoint.get("global_step", trainer.global_step))

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._saved()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._saved()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._saved()
        self.reporter.close()
