"""Control groups, v1 or v2, whichever the host really has for a controller.

:func:`detect` reads the mount table: a v1 hierarchy per controller (``cpu``,
``memory``, ``freezer``, ``blkio``, ``cpuacct``), or the v2 unified hierarchy when its
root offers the controller. :class:`BoundedGroup` is one group made by gameday, across
the hierarchies it needs, with a CPU quota and a memory limit; :meth:`BoundedGroup.remove`
kills what is left in it and removes it everywhere.
"""

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BoundedGroup", "CgroupError", "Hierarchies", "detect", "group_prefix",
           "remove_groups"]

PREFIX_ENV = "GAMEDAY_CGROUP_PREFIX"
CPU_PERIOD_US = 100_000


class CgroupError(Exception):
    """A cgroup operation failed (one line)."""


def group_prefix() -> str:
    """The prefix of every cgroup gameday makes (``$GAMEDAY_CGROUP_PREFIX``, else
    ``gameday``), so leftovers are easy to find and never someone else's."""
    return os.environ.get(PREFIX_ENV) or "gameday"


@dataclass(frozen=True)
class Hierarchies:
    """Where each controller lives: ``v1`` directories by controller, and the v2 root
    with the controllers it offers."""

    v1: dict[str, Path] = field(default_factory=dict)
    v2: Path | None = None
    v2_controllers: frozenset[str] = frozenset()

    def version(self, controller: str) -> int | None:
        """1 or 2 for the hierarchy that really has ``controller``; None if none has it."""
        if controller in self.v1:
            return 1
        # every non-root v2 group can freeze (cgroup.freeze); other controllers only
        # when the root offers them
        if self.v2 is not None and (controller in self.v2_controllers
                                    or controller == "freezer"):
            return 2
        return None

    def describe(self) -> str:
        parts = [f"{c}=v1" for c in sorted(self.v1)]
        if self.v2 is not None:
            parts.append(f"v2({' '.join(sorted(self.v2_controllers)) or 'freeze/kill only'})")
        return ", ".join(parts) or "none"


def detect(mountinfo: Path = Path("/proc/self/mountinfo")) -> Hierarchies:
    """The cgroup hierarchies this host mounts."""
    v1: dict[str, Path] = {}
    v2: Path | None = None
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return Hierarchies()
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup":
            for option in tail[2].split(","):
                if option in ("cpu", "cpuacct", "memory", "freezer", "blkio", "pids"):
                    v1.setdefault(option, Path(fields[4]))
        elif tail[0] == "cgroup2" and v2 is None:
            v2 = Path(fields[4])
    controllers: frozenset[str] = frozenset()
    if v2 is not None:
        with contextlib.suppress(OSError):
            controllers = frozenset((v2 / "cgroup.controllers").read_text().split())
    return Hierarchies(v1, v2, controllers)


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value.strip()!r} to {path}: "
                          f"{exc.strerror or exc}") from None


class BoundedGroup:
    """One cgroup named ``name`` in the hierarchies of ``controllers``."""

    def __init__(self, name: str, controllers: tuple[str, ...],
                 hierarchies: Hierarchies | None = None) -> None:
        self.name = name
        self.hierarchies = hierarchies or detect()
        self.dirs: dict[str, Path] = {}
        for controller in controllers:
            version = self.hierarchies.version(controller)
            if version == 1:
                self.dirs[controller] = self.hierarchies.v1[controller] / name
            elif version == 2 and self.hierarchies.v2 is not None:
                self.dirs[controller] = self.hierarchies.v2 / name
            else:
                raise CgroupError(f"this host has no cgroup {controller} controller "
                                  f"({self.hierarchies.describe()})")

    def paths(self) -> list[Path]:
        return sorted(set(self.dirs.values()))

    def exists(self) -> bool:
        return any(path.is_dir() for path in self.paths())

    def create(self, *, cpu_percent: float | None = None,
               memory_bytes: int | None = None) -> None:
        """Make the group and set its bounds (quota in percent of one CPU)."""
        for path in self.paths():
            if path.parent == self.hierarchies.v2:
                wanted = [c for c in ("cpu", "memory") if c in self.dirs and
                          c in self.hierarchies.v2_controllers]
                if wanted:
                    _write(path.parent / "cgroup.subtree_control",
                           " ".join("+" + c for c in wanted))
            path.mkdir(exist_ok=True)
        if cpu_percent is not None:
            quota = max(1000, int(CPU_PERIOD_US * cpu_percent / 100.0))
            cpu = self.dirs["cpu"]
            if (cpu / "cpu.max").exists():
                _write(cpu / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            else:
                _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                _write(cpu / "cpu.cfs_quota_us", str(quota))
        if memory_bytes is not None:
            memory = self.dirs["memory"]
            if (memory / "memory.max").exists():
                _write(memory / "memory.max", str(memory_bytes))
                if (memory / "memory.swap.max").exists():
                    _write(memory / "memory.swap.max", "0")
            else:
                _write(memory / "memory.limit_in_bytes", str(memory_bytes))
                if (memory / "memory.memsw.limit_in_bytes").exists():
                    _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))

    def procs_files(self) -> list[Path]:
        return [path / "cgroup.procs" for path in self.paths()]

    def pids(self) -> list[int]:
        found: set[int] = set()
        for procs in self.procs_files():
            with contextlib.suppress(OSError):
                found.update(int(p) for p in procs.read_text().split())
        return sorted(found)

    def add(self, pid: int) -> None:
        for procs in self.procs_files():
            _write(procs, str(pid))

    def memory_limit(self) -> int | None:
        memory = self.dirs.get("memory")
        for name in ("memory.max", "memory.limit_in_bytes"):
            if memory is not None and (memory / name).exists():
                text = (memory / name).read_text().strip()
                return None if text == "max" else int(text)
        return None

    def memory_peak(self) -> int | None:
        """The most memory the group ever used, in bytes (None if unknown)."""
        memory = self.dirs.get("memory")
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            if memory is not None and (memory / name).exists():
                return int((memory / name).read_text().strip())
        return None

    def cpu_throttled(self) -> int:
        """How many CPU periods the quota held the group back (``nr_throttled``)."""
        cpu = self.dirs.get("cpu")
        if cpu is None:
            return 0
        with contextlib.suppress(OSError):
            for line in (cpu / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "nr_throttled":
                    return int(value)
        return 0

    def kill_all(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process in the group until it is empty."""
        deadline = time.monotonic() + timeout_s
        for path in self.paths():
            if (path / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (path / "cgroup.kill").write_text("1")
        while True:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise CgroupError(f"cgroup {self.name} still holds {pids} after SIGKILL")
            time.sleep(0.02)

    def remove(self, timeout_s: float = 5.0) -> None:
        """Kill what is left and remove the group from every hierarchy (idempotent)."""
        if not self.exists():
            return
        self.kill_all(timeout_s)
        deadline = time.monotonic() + timeout_s
        for path in self.paths():
            while path.is_dir():
                try:
                    path.rmdir()
                except OSError as exc:  # EBUSY while the last exits are accounted
                    if time.monotonic() > deadline:
                        raise CgroupError(f"cannot remove {path}: {exc.strerror}") from None
                    time.sleep(0.02)


def remove_groups(marker: str, hierarchies: Hierarchies | None = None) -> list[str]:
    """Kill and remove every top-level group whose name starts with ``marker`` (a
    prefix gameday made them with); return one line per group that could not go."""
    hierarchies = hierarchies or detect()
    roots = [*hierarchies.v1.values(), *([hierarchies.v2] if hierarchies.v2 else [])]
    names = {entry.name for root in roots if root.is_dir() for entry in root.iterdir()
             if entry.is_dir() and entry.name.startswith(marker)}
    failures = []
    for name in sorted(names):
        controllers = tuple(c for c, root in hierarchies.v1.items() if (root / name).is_dir())
        if hierarchies.v2 is not None and (hierarchies.v2 / name).is_dir():
            controllers += ("freezer",) if "freezer" not in hierarchies.v1 else ()
        try:
            BoundedGroup(name, controllers, hierarchies).remove()
        except CgroupError as exc:
            failures.append(str(exc))
    return failures
