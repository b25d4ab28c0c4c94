"""A real Lightning job for the workload tests: a 2-layer MLP on random tensors on the
CPU, ``ModelCheckpoint(every_n_train_steps=N, save_last=True, save_top_k=1)`` (each save
prunes the one before), resumed with ``ckpt_path="last"``. The only gameday code in it
is the integration's callback (``GamedayProgressCallback``, set up from
``GAMEDAY_PROGRESS_LOG``).

Its ground truth goes to ``--dir``/truth.jsonl from a callback of the test's own
reading the trainer's state: ``{"event": "begin"|"step", "step", "attempt", "t"}`` at
the start of training (after any restore) and at the end of each batch.
"""

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from gameday.integrations.lightning import GamedayProgressCallback
from tests.workloads.job_truth import TruthLog, job_arguments


class Mlp(pl.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss: torch.Tensor = torch.nn.functional.mse_loss(self.net(inputs), targets)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Truth(pl.Callback):  # type: ignore[misc]
    def __init__(self, truth: TruthLog) -> None:
        self.truth = truth

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self.truth.begin(trainer.global_step)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.truth.step(trainer.global_step)


def main() -> None:
    args = job_arguments()
    root = Path(args.dir)
    store = root / "checkpoints"
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(40_000, 8), torch.randn(40_000, 1))
    trainer = pl.Trainer(
        max_steps=100_000, accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[GamedayProgressCallback(), Truth(TruthLog(root, args.step_s)),
                   ModelCheckpoint(dirpath=str(store), every_n_train_steps=args.every,
                                   save_last=True, save_top_k=1)])
    trainer.fit(Mlp(), torch.utils.data.DataLoader(data, batch_size=4),
                ckpt_path="last" if (store / "last.ckpt").exists() else None)


if __name__ == "__main__":
    main()
