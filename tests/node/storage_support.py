"""Helpers of the storage, process and node fault tests: a cgroup prefix of our own and a
check that nothing of ours is left behind (FUSE mounts under a directory, cgroups with
our prefix, fault filesystem or hog processes)."""

import os
import time
from pathlib import Path

from gameday.node.cgroups import PREFIX_ENV, detect
from gameday.node.faultfs.mount import fuse_mounts

#: Every cgroup these tests make starts with this (unique to this test process).
PREFIX = f"gdsto{os.getpid()}"


def our_cgroups() -> list[Path]:
    hierarchies = detect()
    roots = [*hierarchies.v1.values(), *([hierarchies.v2] if hierarchies.v2 else [])]
    return sorted(entry for root in roots if root.is_dir() for entry in root.iterdir()
                  if entry.is_dir() and entry.name.startswith(PREFIX))


def our_processes(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (not this one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def assert_nothing_left(directory: Path, *, allowed_mounts: tuple[Path, ...] = ()) -> None:
    mounts = [m for m in fuse_mounts(directory) if m not in allowed_mounts]
    assert mounts == [], f"FUSE mounts left: {mounts}"
    assert our_cgroups() == [], f"cgroups left: {our_cgroups()}"
    marker = str(directory) + "/gdsto-"
    deadline = time.monotonic() + 5.0  # one still exiting on a loaded machine may go
    while (left := our_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == [], f"fault filesystem processes left: {_cmdlines(left)}"


def _cmdlines(pids: list[int]) -> list[str]:
    found = []
    for pid in pids:
        try:
            found.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes()
                         .replace(b"\0", b" ").decode(errors="replace")[:200])
        except OSError:
            found.append(f"{pid}: gone")
    return found


__all__ = ["PREFIX", "PREFIX_ENV", "assert_nothing_left", "our_cgroups", "our_processes"]
