"""Progress sources with the resolution to be exact: a job's checkpoint store and its log.

- :func:`scan_store` lists the complete checkpoints under a checkpoint directory, each
  with its step and the instant it became complete (the modification time of what marks
  it complete): PyTorch DCP directories (complete once their ``.metadata`` exists),
  Hugging Face Trainer ``checkpoint-N`` directories (complete once
  ``trainer_state.json`` exists), Lightning ``...step=N...ckpt`` files, and
  ``latest``-style pointer files (``latest``, ``latest_checkpointed_iteration.txt``)
  whose text names a step. :func:`durable_at` answers the newest one complete at an
  instant: the durable progress as of the fault.
- :func:`read_log_steps` reads a job's own log: timestamped lines matched by a regular
  expression with a ``step`` group and a ``t`` group (Unix seconds, or ISO 8601; a naive
  ISO time is taken as UTC).
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gameday.errors import GamedayError

__all__ = ["Checkpoint", "CheckpointStoreError", "LogStep", "durable_at", "read_log_steps",
           "scan_store"]

POINTER_FILES = ("latest", "latest_checkpointed_iteration.txt")
_LIGHTNING = re.compile(r"step=(\d+)")
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


class CheckpointStoreError(GamedayError):
    """A checkpoint store or job log could not be read, or a pattern is unusable."""


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint: its step, where it is, when it became complete, its form
    (``dcp``, ``hf``, ``lightning`` or ``pointer``)."""

    step: int
    path: str
    completed_at: float
    form: str


def _step_in(name: str) -> int | None:
    found = _LAST_NUMBER.search(name)
    return int(found.group(1)) if found else None


def scan_store(root: str | Path) -> list[Checkpoint]:
    """Every complete checkpoint under ``root`` (one level deep), oldest first."""
    base = Path(root)
    if not base.is_dir():
        raise CheckpointStoreError(f"checkpoint store {base} is not a directory")
    found: list[Checkpoint] = []
    for entry in sorted(base.iterdir()):
        try:
            if entry.is_dir():
                metadata = entry / ".metadata"
                state = entry / "trainer_state.json"
                step = _step_in(entry.name)
                if step is None:
                    continue
                if metadata.is_file():
                    found.append(Checkpoint(step, str(entry), metadata.stat().st_mtime, "dcp"))
                elif entry.name.startswith("checkpoint-") and state.is_file():
                    found.append(Checkpoint(step, str(entry), state.stat().st_mtime, "hf"))
            elif entry.name.endswith(".ckpt") and (match := _LIGHTNING.search(entry.name)):
                found.append(Checkpoint(int(match.group(1)), str(entry),
                                        entry.stat().st_mtime, "lightning"))
            elif entry.name in POINTER_FILES:
                step = _step_in(entry.read_text(errors="replace").strip())
                if step is not None:
                    found.append(Checkpoint(step, str(entry), entry.stat().st_mtime,
                                            "pointer"))
        except FileNotFoundError:
            continue  # removed while we looked (a store pruning old checkpoints)
    return sorted(found, key=lambda checkpoint: (checkpoint.completed_at, checkpoint.step))


def durable_at(root: str | Path, t: float) -> Checkpoint | None:
    """The checkpoint with the highest step among those complete at or before ``t``;
    a pointer file, when there is one complete by then, wins over the scan."""
    complete = [checkpoint for checkpoint in scan_store(root) if checkpoint.completed_at <= t]
    pointers = [checkpoint for checkpoint in complete if checkpoint.form == "pointer"]
    if pointers:
        return pointers[-1]
    return max(complete, key=lambda checkpoint: checkpoint.step, default=None)


@dataclass(frozen=True)
class LogStep:
    """One matching log line: its time, its step, and where it was."""

    t: float
    step: int
    line: int


def _timestamp(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    moment = datetime.fromisoformat(text.replace(",", "."))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def read_log_steps(path: str | Path, pattern: str) -> list[LogStep]:
    """The lines of ``path`` matching ``pattern`` (groups ``t`` and ``step``), in order."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise CheckpointStoreError(f"log pattern {pattern!r}: {exc}") from None
    if not {"t", "step"} <= set(compiled.groupindex):
        raise CheckpointStoreError(f"log pattern {pattern!r} needs the named groups "
                                   f"(?P<t>...) and (?P<step>...)")
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise CheckpointStoreError(f"cannot read job log {path}: {exc.strerror}") from None
    steps = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = compiled.search(line)
        if match is None:
            continue
        try:
            steps.append(LogStep(_timestamp(match.group("t")), int(match.group("step")),
                                 number))
        except ValueError:
            raise CheckpointStoreError(f"{path}:{number}: cannot read the time "
                                       f"{match.group('t')!r} or step "
                                       f"{match.group('step')!r}") from None
    return steps
