"""A Hugging Face ``transformers.TrainerCallback`` that reports the job's progress for
gameday (:mod:`gameday.integrations.progress`): ``Trainer(..., callbacks=
[GamedayProgressCallback()])`` and nothing else.

It reports the step the ``Trainer`` resumed from when training begins (after the
checkpoint is loaded: ``state.global_step``, 0 for a fresh start), each optimizer step
as it ends, and each checkpoint once ``Trainer`` has written it whole (its
``trainer_state.json`` included; ``on_save`` comes after the save). Needs the ``hf``
extra (``transformers``).
"""

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from gameday.integrations.progress import ProgressReporter

__all__ = ["GamedayProgressCallback"]


class GamedayProgressCallback(TrainerCallback):  # type: ignore[misc,unused-ignore]
    """Report step, durable checkpoint step and resumed-from step of a ``Trainer``.

    ``reporter`` defaults to a :class:`ProgressReporter` configured from the
    environment (``GAMEDAY_PROGRESS_LOG``, ...); other keyword arguments go to it."""

    def __init__(self, reporter: ProgressReporter | None = None, **settings: Any) -> None:
        self.reporter = reporter or ProgressReporter(**settings)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, **kwargs: Any) -> None:
        self.reporter.resumed(int(state.global_step))

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        self.reporter.step(int(state.global_step))

    def on_save(self, args: TrainingArguments, state: TrainerState,
                control: TrainerControl, **kwargs: Any) -> None:
        self.reporter.checkpointed(int(state.global_step))

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        self.reporter.close()
