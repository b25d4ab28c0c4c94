"""A job's checkpoint store, read as the training frameworks lay it out.

:func:`scan_store` lists the complete checkpoints under a checkpoint directory, each with
its step and the instant it became complete (the modification time of what marks it
complete), in every layout the common frameworks write, recognised out of the box:

==========================  ==============================================================
form                        complete when
==========================  ==============================================================
``dcp`` (PyTorch DCP)       a directory with a step in its name holds ``.metadata``
``hf`` (HF ``Trainer``)     ``checkpoint-N/`` holds ``trainer_state.json``
``lightning``               a file ``...step=N...ckpt`` (e.g. ``epoch=E-step=N.ckpt``)
``lightning-last``          ``last.ckpt`` (or ``last-vK.ckpt``): the step of the newest
                            ``step=N`` checkpoint saved with it, or of the one it links to
``deepspeed``               ``global_stepN/`` at or below the step ``latest`` names
``megatron``                ``iter_NNNNNNN/`` at or below the iteration
                            ``latest_checkpointed_iteration.txt`` names
``pointer``                 ``latest`` / ``latest_checkpointed_iteration.txt`` itself
==========================  ==============================================================

:func:`durable_at` answers the newest one complete at an instant: the durable progress
as of the fault. Frameworks prune their store (``save_total_limit``, ``save_top_k``), so
the checkpoint a job resumed from may be deleted at its next save: a
:class:`StoreHistory` keeps every checkpoint any of its scans saw, so evidence taken at
the fault and at the resume survives the pruning.

(Job logs are read by :mod:`verifiers.joblog`; ``read_log_steps`` is re-exported here.)
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

from verifiers.joblog import CheckpointStoreError, LogStep, read_log_steps

__all__ = ["Checkpoint", "CheckpointStoreError", "LogStep", "StoreHistory", "durable_at",
           "read_log_steps", "scan_store"]

POINTER_FILES = ("latest", "latest_checkpointed_iteration.txt")
_LIGHTNING = re.compile(r"step=(\d+)")
_LIGHTNING_LAST = re.compile(r"^last(-v\d+)?\.ckpt$")
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")
_DEEPSPEED = re.compile(r"^global_step(\d+)$")
_MEGATRON = re.compile(r"^iter_(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint: its step, where it is, when it became complete, its form
    (``dcp``, ``hf``, ``lightning``, ``lightning-last``, ``deepspeed``, ``megatron`` or
    ``pointer``)."""

    step: int
    path: str
    completed_at: float
    form: str


def _step_in(name: str) -> int | None:
    found = _LAST_NUMBER.search(name)
    return int(found.group(1)) if found else None


def _newest_mtime(directory: Path) -> float:
    """The newest modification time of the files under ``directory`` (its own when it
    holds none): when the last of its shards was written."""
    times = [child.stat().st_mtime for child in directory.rglob("*") if child.is_file()]
    return max(times, default=directory.stat().st_mtime)


def _pointed_steps(base: Path) -> dict[str, tuple[int, float]]:
    """``{pointer file name: (the step its text names, its mtime)}`` for the pointer
    files present (DeepSpeed's ``latest``, Megatron's tracker file)."""
    pointed: dict[str, tuple[int, float]] = {}
    for name in POINTER_FILES:
        path = base / name
        try:
            step = _step_in(path.read_text(errors="replace").strip())
            if step is not None:
                pointed[name] = (step, path.stat().st_mtime)
        except (FileNotFoundError, IsADirectoryError):
            continue
    return pointed


def _directory(entry: Path, pointed: dict[str, tuple[int, float]]) -> Checkpoint | None:
    metadata, state = entry / ".metadata", entry / "trainer_state.json"
    if (match := _DEEPSPEED.match(entry.name)) and "latest" in pointed:
        step = int(match.group(1))
        return Checkpoint(step, str(entry), _newest_mtime(entry), "deepspeed") \
            if step <= pointed["latest"][0] else None
    tracker = pointed.get("latest_checkpointed_iteration.txt")
    if (match := _MEGATRON.match(entry.name)) and tracker is not None:
        step = int(match.group(1))
        return Checkpoint(step, str(entry), _newest_mtime(entry), "megatron") \
            if step <= tracker[0] else None
    named = _step_in(entry.name)
    if named is None:
        return None
    if metadata.is_file():
        return Checkpoint(named, str(entry), metadata.stat().st_mtime, "dcp")
    if entry.name.startswith("checkpoint-") and state.is_file():
        return Checkpoint(named, str(entry), state.stat().st_mtime, "hf")
    return None


def _lightning_last(entry: Path, found: list[Checkpoint]) -> Checkpoint | None:
    """``last.ckpt``: the step of the checkpoint it links to, else of the newest
    ``step=N`` file written no later than it (Lightning saves both in the same hook);
    None when neither is there (``save_top_k=0``: its step is only inside the file)."""
    if entry.is_symlink():
        match = _LIGHTNING.search(entry.resolve().name)
        if match:
            return Checkpoint(int(match.group(1)), str(entry), entry.lstat().st_mtime,
                              "lightning-last")
    mtime = entry.stat().st_mtime
    saved = [c for c in found if c.form == "lightning" and c.completed_at <= mtime]
    if not saved:
        return None
    newest = max(saved, key=lambda checkpoint: (checkpoint.completed_at, checkpoint.step))
    return Checkpoint(newest.step, str(entry), mtime, "lightning-last")


def scan_store(root: str | Path) -> list[Checkpoint]:
    """Every complete checkpoint under ``root`` (one level deep), oldest first."""
    base = Path(root)
    if not base.is_dir():
        raise CheckpointStoreError(f"checkpoint store {base} is not a directory")
    pointed = _pointed_steps(base)
    found: list[Checkpoint] = []
    lasts: list[Path] = []
    for entry in sorted(base.iterdir()):
        try:
            if entry.is_dir():
                checkpoint = _directory(entry, pointed)
                if checkpoint is not None:
                    found.append(checkpoint)
            elif entry.name.endswith(".ckpt") and (match := _LIGHTNING.search(entry.name)):
                found.append(Checkpoint(int(match.group(1)), str(entry),
                                        entry.stat().st_mtime, "lightning"))
            elif _LIGHTNING_LAST.match(entry.name):
                lasts.append(entry)
            elif entry.name in pointed:
                step, mtime = pointed[entry.name]
                found.append(Checkpoint(step, str(entry), mtime, "pointer"))
        except FileNotFoundError:
            continue  # removed while we looked (a store pruning old checkpoints)
    for entry in lasts:
        try:
            last = _lightning_last(entry, found)
        except FileNotFoundError:
            continue
        if last is not None:
            found.append(last)
    return sorted(found, key=lambda checkpoint: (checkpoint.completed_at, checkpoint.step))


def _newest(complete: list[Checkpoint]) -> Checkpoint | None:
    """The newest of ``complete``: a pointer file, when there is one, wins (it is what
    the framework itself will load); else the highest step."""
    pointers = [checkpoint for checkpoint in complete if checkpoint.form == "pointer"]
    if pointers:
        return max(pointers, key=lambda checkpoint: checkpoint.completed_at)
    return max(complete, key=lambda checkpoint: checkpoint.step, default=None)


def durable_at(root: str | Path, t: float) -> Checkpoint | None:
    """The checkpoint with the highest step among those complete at or before ``t``;
    a pointer file, when there is one complete by then, wins over the scan."""
    return _newest([c for c in scan_store(root) if c.completed_at <= t])


@dataclass
class StoreHistory:
    """Every complete checkpoint any scan of one store saw, kept after the framework
    prunes it: what :func:`durable_at` would have answered had the store been read at
    the time, as long as some scan ran while the checkpoint existed.

    A pointer file's step changes in place: each value it held is kept as its own
    entry, complete at the modification time it had then."""

    root: str
    seen: dict[tuple[str, int, float], Checkpoint] = field(default_factory=dict)
    scans: list[float] = field(default_factory=list)

    def observe(self, now: float) -> list[Checkpoint]:
        """Scan the store now (``now``: the scan's time, kept in :attr:`scans`)."""
        current = scan_store(self.root)
        for checkpoint in current:
            self.seen.setdefault((checkpoint.path, checkpoint.step, checkpoint.completed_at),
                                 checkpoint)
        self.scans.append(now)
        return current

    def durable_at(self, t: float) -> Checkpoint | None:
        """The newest checkpoint complete at or before ``t`` among all those seen."""
        return _newest([c for c in self.seen.values() if c.completed_at <= t])
