"""The lab's trainer: a small numpy training loop that checkpoints into the store.

``python -m gameday.lab.trainer --dir DIR --port P [--every 10] [--step-s 0.25]
[--parent-pid PID]`` (started, and restarted when it exits, by the supervisor).

It fits a linear model by SGD on a deterministic stream of mini-batches, one step every
``step_s`` seconds (4 steps/s by default: light on CPU). Every ``every`` steps it hands a
copy of its state to a background writer (*asynchronous* checkpointing, as large
training jobs do), which writes ``DIR/store/checkpoints/ckpt-<step>.npz`` durably: a
temporary file, ``fsync``, ``rename``, ``fsync`` of the directory. Training does not
wait for the write; a checkpoint that falls due while the previous one is still being
written is skipped (counted). So when the store stalls, training goes on but nothing new
becomes durable, and a crash then loses every step since the last durable checkpoint.

On start it resumes from the newest checkpoint that reads back whole (temporary files
are leftovers of a crash and are removed) — or from step 0 when there is none.

``GET /metrics`` (Prometheus text; scraped by the lab's Prometheus, job
``gameday-trainer``):

- ``gameday_trainer_step``: the last completed step;
- ``gameday_trainer_checkpoint_step``: the step of the last durable checkpoint;
- ``gameday_trainer_resumed_from_step``: the step this process resumed from;
- ``gameday_trainer_started_at_seconds``: when this process started (Unix time);
- ``gameday_trainer_step_seconds``: the configured time per step;
- ``gameday_trainer_checkpoint_duration_seconds`` (summary: ``_sum``, ``_count``) and
  ``gameday_trainer_last_checkpoint_duration_seconds``: durable writes;
- ``gameday_trainer_checkpoint_inflight_seconds``: age of the write in progress (0 when
  none; it grows while the store stalls);
- ``gameday_trainer_checkpoints_total{result="ok|error|skipped"}``;
- ``gameday_trainer_loss``.

``GET /healthz``: ``{"ok", "step", "checkpoint_step", "resumed_from_step"}``.
SIGTERM or SIGINT: stop after the current step (the writer finishes its write) and exit 0.
"""

import io
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import numpy as np
import numpy.typing as npt
import structlog

from gameday.atomic import replace_file
from gameday.lab.httpjson import Handler, JsonServer, Request, Response, json_response
from gameday.lab.layout import LabPaths
from gameday.lab.logs import configure_logging
from gameday.lab.proc import lab_parser, tie_to_parent

__all__ = ["CHECKPOINT_DIR", "Checkpoint", "CheckpointStore", "Trainer", "main"]

log = structlog.get_logger("gameday.lab.trainer")

CHECKPOINT_DIR = "checkpoints"
KEEP = 3
FEATURES = 64
BATCH = 32
LEARNING_RATE = 0.01
_NAME = re.compile(r"^ckpt-(\d{8})\.npz$")
_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Vector = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Checkpoint:
    step: int
    weights: Vector


class CheckpointStore:
    """Durable checkpoints in one directory: write (temp, fsync, rename), load the newest."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, step: int) -> Path:
        return self.directory / f"ckpt-{step:08d}.npz"

    def write(self, checkpoint: Checkpoint) -> None:
        """Write ``checkpoint`` durably; older ones beyond the newest ``KEEP`` are removed."""
        self.directory.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(buffer, step=np.int64(checkpoint.step), weights=checkpoint.weights)
        replace_file(self.path(checkpoint.step), buffer.getvalue(), durable=True)
        for old in self.steps()[KEEP:]:
            self.path(old).unlink(missing_ok=True)

    def steps(self) -> list[int]:
        """Steps of the renamed (complete) checkpoints, newest first."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        found = [int(match.group(1)) for name in names if (match := _NAME.match(name))]
        return sorted(found, reverse=True)

    def newest(self) -> Checkpoint | None:
        """The newest checkpoint that reads back whole; removes leftover temporary files."""
        if self.directory.is_dir():
            for leftover in self.directory.glob("*.tmp"):
                leftover.unlink(missing_ok=True)
        for step in self.steps():
            try:
                with np.load(self.path(step)) as data:
                    weights = np.array(data["weights"], dtype=np.float64)
                    stored = int(data["step"])
            except (OSError, ValueError, KeyError) as exc:
                log.warning("checkpoint_unreadable", step=step, error=str(exc))
                continue
            if stored == step and weights.shape == (FEATURES,):
                return Checkpoint(step, weights)
        return None


class Trainer:
    """The training loop, its asynchronous checkpoint writer and its metrics."""

    def __init__(self, store: CheckpointStore, *, every: int, step_s: float) -> None:
        self.store = store
        self.every = every
        self.step_s = step_s
        self.started_at = time.time()
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._pending: Checkpoint | None = None
        self._wake = threading.Condition(self._lock)
        self._writing_since: float | None = None
        self.true_weights = np.random.default_rng(7).standard_normal(FEATURES)
        resumed = store.newest()
        self.weights: Vector = resumed.weights if resumed else np.zeros(FEATURES)
        self.step = resumed.step if resumed else 0
        self.resumed_from = self.step
        self.checkpoint_step = self.step
        self.loss = float("nan")
        self.results = {"ok": 0, "error": 0, "skipped": 0}
        self.duration_sum = 0.0
        self.last_duration = 0.0
        log.info("trainer_resumed", step=self.step, every=every, step_s=step_s)

    # -- training ---------------------------------------------------------------------

    def train_step(self) -> None:
        rng = np.random.default_rng(self.step + 1)
        x = rng.standard_normal((BATCH, FEATURES))
        y = x @ self.true_weights + 0.01 * rng.standard_normal(BATCH)
        error = x @ self.weights - y
        self.weights = self.weights - LEARNING_RATE * (x.T @ error) / BATCH
        with self._lock:
            self.step += 1
            self.loss = float(np.mean(error * error))
            if self.step % self.every == 0:
                self._offer(Checkpoint(self.step, self.weights.copy()))

    def _offer(self, checkpoint: Checkpoint) -> None:
        """Hand ``checkpoint`` to the writer, or skip it while a write is in flight."""
        if self._pending is not None or self._writing_since is not None:
            self.results["skipped"] += 1
            log.warning("checkpoint_skipped", step=checkpoint.step,
                        writing_for_s=round(time.monotonic() - (self._writing_since or 0), 3))
            return
        self._pending = checkpoint
        self._wake.notify()

    def run(self) -> None:
        """Train until stopped, one step every ``step_s`` seconds (on a fixed cadence)."""
        next_at = time.monotonic()
        while not self.stop.is_set():
            self.train_step()
            next_at += self.step_s
            self.stop.wait(max(0.0, next_at - time.monotonic()))

    # -- checkpoint writer ------------------------------------------------------------

    def write_loop(self) -> None:
        while True:
            with self._lock:
                while self._pending is None and not self.stop.is_set():
                    self._wake.wait(0.5)
                if self._pending is None:
                    return
                checkpoint, self._pending = self._pending, None
                self._writing_since = time.monotonic()
            started = time.monotonic()
            try:
                self.store.write(checkpoint)
            except OSError as exc:
                with self._lock:
                    self.results["error"] += 1
                    self._writing_since = None
                log.warning("checkpoint_failed", step=checkpoint.step, error=str(exc))
                continue
            duration = time.monotonic() - started
            with self._lock:
                self.results["ok"] += 1
                self.duration_sum += duration
                self.last_duration = duration
                self.checkpoint_step = max(self.checkpoint_step, checkpoint.step)
                self._writing_since = None
            log.info("checkpoint_durable", step=checkpoint.step, seconds=round(duration, 4))

    # -- what it shows ----------------------------------------------------------------

    def metrics_text(self) -> str:
        with self._lock:
            inflight = (time.monotonic() - self._writing_since
                        if self._writing_since is not None else 0.0)
            gauges = (
                ("gameday_trainer_step", "The last completed training step.", self.step),
                ("gameday_trainer_checkpoint_step", "The step of the last durable checkpoint.",
                 self.checkpoint_step),
                ("gameday_trainer_resumed_from_step",
                 "The checkpoint step this process resumed from.", self.resumed_from),
                ("gameday_trainer_started_at_seconds", "When this process started.",
                 self.started_at),
                ("gameday_trainer_step_seconds", "Configured seconds per step.", self.step_s),
                ("gameday_trainer_last_checkpoint_duration_seconds",
                 "Duration of the last durable checkpoint write.", self.last_duration),
                ("gameday_trainer_checkpoint_inflight_seconds",
                 "Age of the checkpoint write in progress (0 when none).", inflight),
                ("gameday_trainer_loss", "Mean squared error of the last step.", self.loss),
            )
            lines: list[str] = []
            for name, text, value in gauges:
                lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge",
                          f"{name} {_number(value)}"]
            name = "gameday_trainer_checkpoint_duration_seconds"
            lines += [f"# HELP {name} Durable checkpoint writes.", f"# TYPE {name} summary",
                      f"{name}_sum {self.duration_sum!r}", f"{name}_count {self.results['ok']}"]
            name = "gameday_trainer_checkpoints_total"
            lines += [f"# HELP {name} Checkpoints by result.", f"# TYPE {name} counter"]
            lines += [f'{name}{{result="{result}"}} {count}'
                      for result, count in sorted(self.results.items())]
        return "\n".join(lines) + "\n"

    def health(self) -> dict[str, object]:
        with self._lock:
            return {"ok": True, "step": self.step, "checkpoint_step": self.checkpoint_step,
                    "resumed_from_step": self.resumed_from}


def _number(value: float) -> str:
    return "NaN" if value != value else repr(float(value))


def routes(trainer: Trainer) -> dict[tuple[str, str], Handler]:
    """``/metrics`` and ``/healthz``."""

    def metrics(_: Request) -> Response:
        return Response(200, trainer.metrics_text().encode(), _CONTENT_TYPE)

    def healthz(_: Request) -> Response:
        return json_response(200, trainer.health())

    return {("GET", "/metrics"): metrics, ("GET", "/healthz"): healthz}


def main(argv: Sequence[str] | None = None) -> int:
    parser = lab_parser("gameday.lab.trainer")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
    parser.add_argument("--step-s", type=float, default=0.25, help="seconds per step")
    args = parser.parse_args(argv)
    tie_to_parent(args.parent_pid)
    configure_logging("trainer")
    store = CheckpointStore(LabPaths(args.dir).store / CHECKPOINT_DIR)
    trainer = Trainer(store, every=max(1, args.every), step_s=max(0.01, args.step_s))

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        trainer.stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    server = JsonServer(routes(trainer), port=args.port,
                        on_error=lambda exc: log.exception("trainer_http_error"))
    writer = threading.Thread(target=trainer.write_loop, name="checkpoint-writer", daemon=True)
    server.start()
    writer.start()
    log.info("trainer_ready", url=server.url, step=trainer.step)
    trainer.run()
    writer.join(timeout=5)
    server.stop()
    log.info("trainer_stopped", step=trainer.step, checkpoint_step=trainer.checkpoint_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
