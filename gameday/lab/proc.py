"""Process helpers for the lab: tie a child's life to its parent, find a process group's
members, stop processes politely then firmly.

Every lab process lives in the supervisor's process group, so ``gameday lab down`` can
find (and as a last resort kill) all of them, even when the supervisor is gone.
"""

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType

from gameday.clock import SYSTEM_CLOCK, Clock

__all__ = [
    "group_members",
    "parent_death_preexec",
    "pid_alive",
    "process_cmdline",
    "python_argv",
    "spawn",
    "stop_process",
    "stop_processes",
    "tie_to_parent",
]

_PR_SET_PDEATHSIG = 1


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def tie_to_parent(parent_pid: int | None) -> None:
    """Ask the kernel to send SIGTERM to this process when its parent dies.

    Call it first thing in a lab process, from the main thread. ``parent_pid`` (the pid
    the parent passed on the command line) closes the race where the parent died before
    this call: then the process exits at once.
    """
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        raise SystemExit(0)


def parent_death_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` that ties a (non-Python) child to the calling process.

    Only for single-threaded callers (the supervisor): ``preexec_fn`` is unsafe in a
    process with threads.
    """
    libc = _LIBC
    if libc is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(0)

    return preexec


def spawn(argv: Sequence[str], *, log_path: Path, env: dict[str, str] | None = None,
          preexec: Callable[[], None] | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` in the caller's process group, stdout and stderr appended to
    ``log_path``, stdin from ``/dev/null``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, close_fds=True,
                                preexec_fn=preexec)


def python_argv(module: str, *args: str) -> list[str]:
    """``[sys.executable, "-m", module, *args]``."""
    return [sys.executable, "-m", module, *args]


def stop_process(proc: subprocess.Popen[bytes], *, timeout_s: float = 3.0) -> int | None:
    """SIGTERM ``proc``, wait up to ``timeout_s``, then SIGKILL it; return its exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
    return proc.returncode


def stop_processes(procs: Iterable[subprocess.Popen[bytes]], *, timeout_s: float = 3.0,
                   clock: Clock = SYSTEM_CLOCK) -> None:
    """SIGTERM all of ``procs`` at once, wait for them together, SIGKILL stragglers."""
    live = [p for p in procs if p.poll() is None]
    for proc in live:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = clock.monotonic() + timeout_s
    while any(p.poll() is None for p in live) and clock.monotonic() < deadline:
        clock.sleep(0.02)
    for proc in live:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces.
    return raw[raw.rfind(")") + 2:].split()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as dead)."""
    if pid <= 0:
        return False
    fields = _stat_fields(pid)
    if fields is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not Path("/proc").is_dir()
    return fields[0] not in ("Z", "X")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or fields[0] in ("Z", "X"):
            continue
        if int(fields[2]) == pgid:
            members.append(int(entry.name))
    return sorted(members)


def process_cmdline(pid: int) -> str:
    """The command line of ``pid`` (arguments joined by spaces); ``""`` if unknown."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT, for a lab process's main thread to wait on."""
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop


def lab_parser(module: str) -> argparse.ArgumentParser:
    """The command line every lab process shares: its lab directory and its parent."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--parent-pid", type=int)
    return parser
