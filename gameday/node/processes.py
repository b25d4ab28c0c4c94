"""``process.kill`` and ``process.pause`` as signals to real processes.

:class:`SignalFault` sends SIGKILL (kill: nothing to revert) or SIGSTOP (pause: revert,
or ``duration_s`` later, sends SIGCONT) to the processes a resolver picks. Each process
is remembered with its start time, so a revert never signals a process that reused the
pid. Processes are found through ``/proc`` (:func:`find_processes`, like ``pgrep``; and
:func:`select_processes`, by environment, parent and cgroup as well, for "rank 1 of
this job" among workers with identical command lines).
"""

import contextlib
import os
import re
import signal
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gameday.agent.backend import FaultRequest
from gameday.errors import FaultRejected

__all__ = ["PROCESS_KINDS", "ProcessRef", "Resolver", "SignalFault", "find_processes",
           "parent_pid", "process_cgroup", "process_environ", "process_ref", "process_state",
           "select_processes"]

PROCESS_KINDS = ("process.kill", "process.pause")


@dataclass(frozen=True)
class ProcessRef:
    """A process, told apart from a later one with the same pid by its start time."""

    pid: int
    start_ticks: int
    name: str

    def current(self) -> bool:
        ref = process_ref(self.pid)
        return ref is not None and ref.start_ticks == self.start_ticks

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name}


def _stat(pid: int) -> tuple[str, list[str]] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.find("(") + 1:raw.rfind(")")], raw[raw.rfind(")") + 2:].split()


def process_ref(pid: int) -> ProcessRef | None:
    """The live process ``pid`` (None if gone or a zombie)."""
    stat = _stat(pid)
    if stat is None or stat[1][0] in ("Z", "X"):
        return None
    return ProcessRef(pid, int(stat[1][19]), stat[0])


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` (``R``, ``S``, ``T`` when stopped...) or None."""
    stat = _stat(pid)
    return stat[1][0] if stat is not None else None


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def find_processes(*, name: str | None = None, cmdline: str | None = None) -> list[int]:
    """Pids whose command name (or argv[0]'s basename) is ``name`` and/or whose command
    line matches the regular expression ``cmdline``; never this process."""
    pattern = re.compile(cmdline) if cmdline else None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        ref = process_ref(pid)
        if ref is None:
            continue
        argv = _cmdline(pid)
        if name is not None and name not in (ref.name, Path(argv[0]).name if argv else ""):
            continue
        if pattern is not None and not pattern.search(" ".join(argv)):
            continue
        found.append(pid)
    return sorted(found)


Resolver = Callable[[Mapping[str, Any], Mapping[str, Any]], list[int]]


class SignalFault:
    """``process.kill`` or ``process.pause`` on the pids ``resolve(target, params)`` gives."""

    injected_at = "process"

    def __init__(self, kind: str, resolve: Resolver) -> None:
        if kind not in PROCESS_KINDS:
            raise ValueError(f"not a process kind: {kind}")
        self.kind = kind
        self.resolve = resolve
        self._paused: dict[str, list[ProcessRef]] = {}
        self._timers: dict[str, threading.Timer] = {}

    def _refs(self, request: FaultRequest) -> list[ProcessRef]:
        pids = self.resolve(request.target, request.params)
        refs = []
        for pid in pids:
            if pid <= 1 or pid == os.getpid():
                raise FaultRejected(f"target: refusing to signal pid {pid} (init or the agent)")
            ref = process_ref(pid)
            if ref is None:
                raise FaultRejected(f"target: no live process {pid}")
            refs.append(ref)
        if not refs:
            raise FaultRejected(f"target: {dict(request.target)} matches no process")
        limit = int(request.params.get("max_processes") or 1)
        if len(refs) > limit:
            raise FaultRejected(f"target: {dict(request.target)} matches {len(refs)} processes, "
                                f"params.max_processes is {limit}; nothing signalled")
        return refs

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        refs = self._refs(request)
        sig = signal.SIGKILL if self.kind == "process.kill" else signal.SIGSTOP
        for ref in refs:
            try:
                os.kill(ref.pid, sig)
            except ProcessLookupError:
                raise FaultRejected(f"target: process {ref.pid} exited") from None
            except PermissionError:
                raise FaultRejected(f"target: not allowed to signal process {ref.pid}") from None
        if self.kind == "process.pause":
            self._paused[fault_id] = refs
            duration = request.params.get("duration_s")
            if duration:
                timer = threading.Timer(float(duration), _continue, args=(refs,))
                timer.daemon = True
                self._timers[fault_id] = timer
                timer.start()
        return {"signal": sig.name, "processes": [r.to_json() for r in refs]}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        if self.kind == "process.kill":
            return  # a killed process stays killed: its supervisor (if any) restarts it
        timer = self._timers.pop(fault_id, None)
        if timer is not None:
            timer.cancel()
        refs = self._paused.pop(fault_id, None)
        if refs is None:  # after an agent restart: continue whatever the target names now
            pids: list[int] = []
            with contextlib.suppress(FaultRejected, ValueError, OSError):
                pids = self.resolve(request.target, request.params)
            refs = [r for r in map(process_ref, pids) if r is not None]
        _continue(refs)


def _continue(refs: list[ProcessRef]) -> None:
    """SIGCONT each process that is still the one that was stopped."""
    for ref in refs:
        if ref.current():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(ref.pid, signal.SIGCONT)


def process_environ(pid: int) -> dict[str, str]:
    """The environment ``pid`` started with (``/proc/PID/environ``; empty if unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (part.decode("utf-8", "replace").partition("=") for part in raw.split(b"\0")
             if b"=" in part)
    return {key: value for key, _, value in pairs}


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (None if gone)."""
    stat = _stat(pid)
    return int(stat[1][1]) if stat is not None else None


def process_cgroup(pid: int) -> str:
    """``/proc/PID/cgroup`` as text (one ``id:controllers:path`` line per hierarchy)."""
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def select_processes(*, name: str | None = None, cmdline: str | None = None,
                     env: Mapping[str, str] | None = None,
                     parents: Collection[int] | None = None,
                     cgroup: str | None = None) -> list[int]:
    """Pids that pass every filter given: ``name``/``cmdline`` as :func:`find_processes`,
    ``env`` (each variable set to exactly that value in the process's environment, e.g.
    ``{"RANK": "1", "TORCHELASTIC_RUN_ID": "job-7"}``), ``parents`` (a child of one of
    these pids, e.g. the workers of a ``torchrun`` agent) and ``cgroup`` (a regular
    expression searched in ``/proc/PID/cgroup``, one line per hierarchy, e.g. a
    container id); never this
    process."""
    pattern = re.compile(cgroup, re.MULTILINE) if cgroup else None
    candidates = (find_processes(name=name, cmdline=cmdline) if name or cmdline else
                  find_processes(cmdline=""))
    found = []
    for pid in candidates:
        if parents is not None and parent_pid(pid) not in parents:
            continue
        if env:
            environ = process_environ(pid)
            if any(environ.get(key) != str(value) for key, value in env.items()):
                continue
        if pattern is not None and not pattern.search(process_cgroup(pid)):
            continue
        found.append(pid)
    return found
