"""Target locks: two runs never fault the same GPU, link, path or pod at once.

Under ``$GAMEDAY_HOME/locks`` each target key (``node-0.gpu-2``, ``node-1.link-eth0``,
...) is one byte of one of 64 lock files, ``targets-00.lock`` to ``targets-63.lock``. A
GPU's byte is its index in a range of 1,024 bytes of its node's (placed by 52 bits of the
SHA-256 of the node's name, which also picks the file); any other key's byte is placed
by 62 bits of the key's SHA-256 (two keys sharing a byte is not a practical concern). A
run takes a target's byte with an open-file-description lock (``F_OFD_SETLK``, write,
non-blocking) *before* it injects; a byte already locked refuses the run with
:class:`TargetLocked`. Taking a lock is a system call on a file the run opened once, not
a file per target, and a node's GPUs taken together are ONE call for their adjacent
bytes, which the kernel keeps as one lock. (The kernel keeps a file's locks in a list
that each new lock is checked against: with a byte per GPU at a hashed offset, 131,072
GPUs took 10.8 s to lock, the lists 2,048 long and out of the CPU's caches; a lock per
node, 0.35 s.)

Who holds what: each run that holds locks keeps ``runs/<run id>.held``, whose first line
is the holder (run id, pid, host, since) and each further line a target key it locked,
and holds an ``flock`` on it for as long as it holds locks. A refused run names the
holder by finding the key in a live holder file.

The kernel drops both kinds of lock when their holder dies, however it dies (SIGKILL,
OOM, power loss of a process), so a lock can never outlive a dead run: the next run
simply takes it. A dead run's holder file stays, unlocked, and is ignored (and removed
by the next scan); a holder file appears under its final name only once it is locked.

Scope: the locks are per ``$GAMEDAY_HOME`` on one machine (runs sharing a home on one
host). Runs started from different machines are kept apart by the agents' own
conflict check (``409`` for a second fault of the same kind on the same target). Where
the platform has no open-file-description locks (not Linux), POSIX record locks are
used: then two sessions in ONE process do not exclude each other.
"""

import contextlib
import datetime
import fcntl
import functools
import hashlib
import json
import os
import re
import socket
import struct
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gameday.errors import GamedayError

__all__ = ["Holder", "TargetLocked", "TargetLocks", "live_holders", "runs_holding_locks",
           "target_key"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
LOCK_FILES = 64  # targets-00.lock .. targets-63.lock
RUNS_DIR = "runs"
_HELD_SUFFIX = ".held"
_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)


class TargetLocked(GamedayError):
    """Another live run holds the lock of a target; nothing was injected (``index``:
    the target's position among those locked at once)."""

    exit_code = 2

    def __init__(self, message: str, *, index: int = 0) -> None:
        super().__init__(message)
        self.index = index


@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as written in its holder file."""

    run_id: str
    pid: int
    host: str
    since: str
    target: str

    def describe(self) -> str:
        return f"run {self.run_id} (pid {self.pid} on {self.host}) since {self.since}"


def target_key(node: str, target: Mapping[str, Any]) -> str:
    """The lock key of one fault target: ``node-0.gpu-2``, ``node-1.link-eth0``, ..."""
    if len(target) == 1 and node:  # the common shape (a GPU, a link): without the sort
        for key, value in target.items():
            return f"{_safe(node)}.{_safe(f'{key}-{value}')}"
    parts = [node, *(f"{key}-{target[key]}" for key in sorted(target))]
    return ".".join(map(_safe, parts)) or "_"


@functools.lru_cache(maxsize=4096)
def _safe(part: str) -> str:
    """``part`` with each run of characters outside ``[A-Za-z0-9_.-]`` made one ``_``
    (cached: a fleet's keys repeat their node names and target parts)."""
    return _UNSAFE.sub("_", part)


#: A GPU's key (``node-0.gpu-2``): its node and its index.
_GPU_KEY: Final = re.compile(r"(.+)\.gpu-(\d{1,3})")
#: Bytes of a node's GPU range (GPU indexes 0 to 999).
_GPU_SLOTS: Final = 1024


def _offset(key: str) -> int:
    """The byte that stands for ``key``: a GPU's is its index in a range of its node's
    (so that the locks of a node's GPUs are adjacent, which the kernel keeps as one
    lock); any other key's is its hash. The lock file is :func:`_file_number`'s."""
    gpu = _GPU_KEY.fullmatch(key)
    if gpu is None:
        return _hash(key, 62)
    return _gpu_range(gpu[1]) + int(gpu[2])


@functools.lru_cache(maxsize=4096)
def _gpu_range(node: str) -> int:
    """The first byte of ``node``'s GPU range (cached: a fan-out locks a node's GPUs
    together, and each would hash its node again)."""
    return _hash(node, 52) * _GPU_SLOTS


def _file_number(offset: int) -> int:
    """The lock file of a byte: all of one node's GPU range in one file."""
    return offset // _GPU_SLOTS % LOCK_FILES


def _hash(text: str, bits: int) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> (64 - bits)


#: ``struct flock`` (type, whence, start, length, pid) as ``F_OFD_SETLK`` reads it.
_FLOCK: Final = struct.Struct("hhqqi4x")


def _lock_bytes(fd: int, offset: int, length: int = 1) -> bool:
    """Take the write lock of ``length`` bytes from ``offset`` without waiting; False if
    someone else holds any of them."""
    try:
        if _OFD_SETLK is not None:
            fcntl.fcntl(fd, _OFD_SETLK,
                        _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, offset, length, 0))
        else:  # pragma: no cover - not Linux
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, offset, os.SEEK_SET)
    except (BlockingIOError, PermissionError):
        return False
    return True


def _runs(pending: list[tuple[int, str, int]]) -> Iterator[list[tuple[int, str, int]]]:
    """``(index, key, offset)`` in runs of adjacent bytes of one node's GPU range (a
    node's GPUs in order: one run), each locked with one call."""
    start = 0
    while start < len(pending):
        end = start + 1
        while (end < len(pending) and pending[end][2] == pending[end - 1][2] + 1
               and pending[end][2] % _GPU_SLOTS):
            end += 1
        yield pending[start:end]
        start = end


class TargetLocks:
    """The locks one run holds; :meth:`acquire` is idempotent per key."""

    def __init__(self, directory: Path | None, run_id: str) -> None:
        self.directory = directory
        self.run_id = run_id
        self._held: set[str] = set()
        self._guard = threading.Lock()
        self._files: dict[int, int] = {}  # lock file number -> its fd
        self._record: int | None = None   # fd of this run's holder file (flock'd)
        self._record_path: Path | None = None

    def held(self) -> list[str]:
        with self._guard:
            return sorted(self._held)

    def acquire(self, key: str) -> None:
        """Take the lock of ``key`` or raise :class:`TargetLocked` naming its holder."""
        self.acquire_many([key])

    def acquire_many(self, keys: Sequence[str]) -> None:
        """Take the locks of ``keys`` in order, naming them in the holder file with one
        write; at the first one another run holds, raise :class:`TargetLocked` naming its
        holder (``index``: its position; the keys before it stay locked and named)."""
        if self.directory is None:
            return
        with self._guard:
            taken: list[str] = []
            held, files, seen = self._held, self._files, set()
            pending = []
            for index, key in enumerate(keys):
                if key not in held and key not in seen:
                    seen.add(key)
                    pending.append((index, key, _offset(key)))
            try:
                for run in _runs(pending):
                    number = _file_number(run[0][2])
                    fd = files.get(number)
                    if fd is None:
                        fd = self._open(self.directory, number)
                    if not _lock_bytes(fd, run[0][2], len(run)):
                        for index, key, offset in run:  # which one: byte by byte
                            if not _lock_bytes(fd, offset):
                                raise self._refusal(self.directory, key, number, index)
                            held.add(key)
                            taken.append(key)
                        continue
                    for _, key, _ in run:
                        held.add(key)
                        taken.append(key)
            finally:
                if taken:
                    assert self._record is not None
                    os.write(self._record, "".join(f"{key}\n" for key in taken).encode())

    @staticmethod
    def _refusal(directory: Path, key: str, number: int, index: int) -> "TargetLocked":
        holder = next((h for h in live_holders(directory) if h.target == key), None)
        who = holder.describe() if holder else "another run"
        return TargetLocked(f"target {key} is locked by {who}; nothing injected "
                            f"(lock file {directory / _lock_file(number)})", index=index)

    def release_all(self) -> None:
        """Drop every lock this run holds, and its holder file."""
        with self._guard:
            files, record, path = self._files, self._record, self._record_path
            self._files, self._record, self._record_path = {}, None, None
            self._held = set()
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
        for fd in [*files.values(), *([record] if record is not None else [])]:
            os.close(fd)  # drops the byte locks, then the holder's flock

    def _open(self, directory: Path, number: int) -> int:
        """Under the guard: lock file ``number`` (and, the first time, this run's holder
        file), opened once."""
        if self._record is None:
            self._record, self._record_path = self._hold(directory)
        if number not in self._files:
            self._files[number] = os.open(directory / _lock_file(number),
                                          os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        return self._files[number]

    def _hold(self, directory: Path) -> tuple[int, Path]:
        """This run's holder file, flock'd, with its first line written: its fd and path."""
        runs = directory / RUNS_DIR
        runs.mkdir(parents=True, exist_ok=True)
        final = runs / f"{_UNSAFE.sub('_', self.run_id)}{_HELD_SUFFIX}"
        temporary = runs / f".{final.name}.{os.getpid()}.tmp"
        record = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
                         | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(record, fcntl.LOCK_EX | fcntl.LOCK_NB)
            stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            os.write(record, (json.dumps({"run_id": self.run_id, "pid": os.getpid(),
                                          "host": socket.gethostname(), "since": stamp})
                              + "\n").encode())
            os.replace(temporary, final)  # seen by others only once locked
        except BaseException:
            os.close(record)
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
        return record, final


def _lock_file(number: int) -> str:
    return f"targets-{number:02d}.lock"


def _read_holder(path: Path) -> list[Holder]:
    """One :class:`Holder` per target key in a holder file (none if it is unreadable)."""
    try:
        first, *keys = path.read_text(encoding="utf-8").splitlines()
        data = json.loads(first)
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict):
        return []
    return [Holder(run_id=str(data.get("run_id", "?")), pid=int(data.get("pid", 0) or 0),
                   host=str(data.get("host", "?")), since=str(data.get("since", "?")),
                   target=key) for key in keys if key]


def live_holders(directory: Path) -> list[Holder]:
    """Every target lock held by a live run, as a :class:`Holder` each (holder files of
    dead runs are removed on the way)."""
    found: list[Holder] = []
    runs = directory / RUNS_DIR
    if not runs.is_dir():
        return found
    for path in sorted(runs.glob(f"*{_HELD_SUFFIX}")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            found += _read_holder(path)  # its run is alive
        else:
            with contextlib.suppress(OSError):
                path.unlink()  # a dead run's: it can never be locked again
        finally:
            os.close(fd)
    return found


def runs_holding_locks(directory: Path) -> dict[str, Holder]:
    """Run id -> holder, for every run that holds at least one live lock."""
    found: dict[str, Holder] = {}
    for holder in live_holders(directory):
        found.setdefault(holder.run_id, holder)
    return found
