"""A real Hugging Face ``Trainer`` job for the workload tests: a tiny GPT-2 built from
a config in code (no download) trained on random tokens on the CPU, a checkpoint every
``--every`` steps with ``save_total_limit=1`` (each save prunes the one before),
resumed with ``resume_from_checkpoint=True`` when a checkpoint is there. The only
gameday code in it is the integration's callback (``GamedayProgressCallback``, set up
from ``GAMEDAY_PROGRESS_LOG``).

Its ground truth goes to ``--dir``/truth.jsonl from a callback of the test's own
reading the ``Trainer``'s state: ``{"event": "begin"|"step", "step", "attempt", "t"}``
at the start of training (after any resume) and at the end of each step.
"""

from pathlib import Path
from typing import Any

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint

from gameday.integrations.hf import GamedayProgressCallback
from tests.workloads.job_truth import TruthLog, job_arguments


class RandomTokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, size: int, length: int, vocab: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, vocab, (size, length), generator=generator)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


class Truth(TrainerCallback):  # type: ignore[misc]
    def __init__(self, truth: TruthLog) -> None:
        self.truth = truth

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.truth.begin(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.truth.step(state.global_step)


def main() -> None:
    args = job_arguments()
    root = Path(args.dir)
    output = root / "checkpoints"
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=str(output), max_steps=100_000, per_device_train_batch_size=2,
        save_strategy="steps", save_steps=args.every, save_total_limit=1,
        logging_strategy="no", report_to=[], use_cpu=True, dataloader_num_workers=0,
        disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=training,
                      train_dataset=RandomTokens(4096, 16, config.vocab_size),
                      callbacks=[GamedayProgressCallback(),
                                 Truth(TruthLog(root, args.step_s))])
    resume = output.is_dir() and get_last_checkpoint(str(output)) is not None
    trainer.train(resume_from_checkpoint=True if resume else None)


if __name__ == "__main__":
    main()
