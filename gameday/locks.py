"""Target locks: two runs never fault the same GPU, link, path or pod at once.

Each target has a lock file under ``$GAMEDAY_HOME/locks`` (one file per target key,
e.g. ``node-0.gpu-2.lock``). A run takes the lock with ``flock(LOCK_EX | LOCK_NB)``
*before* it injects and writes who holds it (run id, pid, host, since) into the file.
The kernel drops an ``flock`` when its holder dies, however it dies (SIGKILL, OOM,
power loss of a process), so a lock can never outlive a dead run: the next run simply
takes it, and the stale text in the file is overwritten. A second run that finds the
lock taken is refused with :class:`TargetLocked`, whose message names the holder.

Lock files are never deleted (deleting a lock file while another process waits on it
would let two holders exist); an unheld file is harmless and a few bytes long.

Scope: the locks are per ``$GAMEDAY_HOME`` on one machine (runs sharing a home on one
host). Runs started from different machines are kept apart by the agents' own
conflict check (``409`` for a second fault of the same kind on the same target).
"""

import contextlib
import datetime
import fcntl
import json
import os
import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gameday.errors import GamedayError

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class TargetLocked(GamedayError):
    """Another live run holds the lock of a target; nothing was injected."""

    exit_code = 2


@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as written in its file."""

    run_id: str
    pid: int
    host: str
    since: str
    target: str

    def describe(self) -> str:
        return f"run {self.run_id} (pid {self.pid} on {self.host}) since {self.since}"


def target_key(node: str, target: Mapping[str, Any]) -> str:
    """The lock key of one fault target: ``node-0.gpu-2``, ``node-1.link-eth0``, ..."""
    parts = [node] + [f"{key}-{target[key]}" for key in sorted(target)]
    return ".".join(_UNSAFE.sub("_", str(part)) for part in parts) or "_"


def read_holder(path: Path) -> Holder | None:
    """The holder recorded in a lock file (may be stale), or None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return Holder(run_id=str(data.get("run_id", "?")), pid=int(data.get("pid", 0) or 0),
                  host=str(data.get("host", "?")), since=str(data.get("since", "?")),
                  target=str(data.get("target", path.stem)))


class TargetLocks:
    """The locks one run holds; :meth:`acquire` is idempotent per key."""

    def __init__(self, directory: Path | None, run_id: str) -> None:
        self.directory = directory
        self.run_id = run_id
        self._held: dict[str, int] = {}
        self._guard = threading.Lock()
        self._made = False  # the directory exists (made once, not per lock)
        self._host = socket.gethostname()

    def path(self, key: str) -> Path:
        assert self.directory is not None
        return self.directory / f"{key}.lock"

    def held(self) -> list[str]:
        with self._guard:
            return sorted(self._held)

    def acquire(self, key: str) -> None:
        """Take the lock of ``key`` or raise :class:`TargetLocked` naming its holder."""
        if self.directory is None:
            return
        with self._guard:
            if key in self._held:
                return
            if not self._made:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._made = True
            path = self.path(key)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                holder = read_holder(path)
                who = holder.describe() if holder else "another run"
                raise TargetLocked(f"target {key} is locked by {who}; nothing injected "
                                   f"(lock file {path})") from None
            stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            record = {"run_id": self.run_id, "pid": os.getpid(), "host": self._host,
                      "since": stamp, "target": key}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
            self._held[key] = fd

    def release_all(self) -> None:
        """Drop every lock this run holds (the file stays, emptied)."""
        with self._guard:
            held, self._held = self._held, {}
        for fd in held.values():
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def live_holder(path: Path) -> Holder | None:
    """The holder of a lock file if some live process holds it now, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_holder(path) or Holder("?", 0, "?", "?", path.stem)
    finally:
        os.close(fd)
    return None


def runs_holding_locks(directory: Path) -> dict[str, Holder]:
    """Run id -> holder, for every run that holds at least one live lock."""
    found: dict[str, Holder] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.lock")):
        holder = live_holder(path)
        if holder is not None:
            found.setdefault(holder.run_id, holder)
    return found
