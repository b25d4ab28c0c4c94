"""``process.kill`` and ``process.pause`` as signals to real processes.

:class:`SignalFault` sends SIGKILL (kill: nothing to revert) or SIGSTOP (pause: revert,
or ``duration_s`` later, sends SIGCONT) to the processes a resolver picks. Each process
is remembered with its start time, so a revert never signals a process that reused the
pid. Processes are found through ``/proc`` (:func:`find_processes`, like ``pgrep``);
``cmdline`` patterns are matched with RE2 (linear time: no pattern can stall the agent).
Inside :func:`one_scan` (a batch, a check) every lookup filters one snapshot of ``/proc``
(:class:`ProcessSnapshot`) instead of reading it again.

Every parameter and target key is checked before anything is signalled
(:func:`check_signal_request`), and :func:`refusal` (a fixed denylist: init, the node's
kubelet, container runtimes, sshd, journald, this agent's whole thread group and
the fault filesystems) is asked about every process before it is.
"""

import contextlib
import math
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2

from gameday.agent.backend import FaultRequest
from gameday.errors import FaultRejected

__all__ = ["DENIED_NAMES", "MAX_PROCESSES", "PROCESS_KINDS", "ProcessGuard", "ProcessRef",
           "ProcessSnapshot", "Resolver", "SignalFault", "check_signal_request",
           "command_line", "compile_cmdline", "current_processes", "find_processes",
           "one_scan", "process_ref", "process_state", "refusal", "thread_group"]

PROCESS_KINDS = ("process.kill", "process.pause")

#: The most processes one fault may signal (``params.max_processes``); a policy may
#: lower it.
MAX_PROCESSES = 64

#: Longest ``cmdline`` pattern accepted, in characters.
MAX_PATTERN_CHARS = 256

#: Command names never signalled, whatever a request or a policy says.
DENIED_NAMES = frozenset({"systemd", "init", "kubelet", "containerd", "containerd-shim",
                          "containerd-shim-runc-v2", "dockerd", "crio", "conmon", "sshd",
                          "systemd-journald", "systemd-udevd", "systemd-logind", "dbus-daemon"})

#: A command line holding this runs one of the agent's fault filesystems.
_FAULTFS_MODULE = "gameday.node.faultfs"

_TARGET_KEYS = frozenset({"pid", "name", "cmdline"})
_PARAM_KEYS = {"process.kill": frozenset({"max_processes"}),
               "process.pause": frozenset({"max_processes", "duration_s"})}


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


def command_line(pid: int) -> list[str]:
    """The argv of ``pid`` (empty when gone or a kernel thread)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def thread_group(pid: int) -> int | None:
    """The thread-group id (the process) of ``pid``, which may be a thread's id."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def refusal(pid: int) -> str | None:
    """Why ``pid`` must never be signalled (None: it may be): init, a thread of this
    agent, a fault filesystem, or a name of :data:`DENIED_NAMES`."""
    group = thread_group(pid)
    if group is None:
        return None  # gone: the caller finds no live process
    me = os.getpid()
    if pid <= 1 or group <= 1:
        return f"pid {pid} is init"
    if group == me:
        return f"pid {pid} is a thread of this agent"
    argv = command_line(group)
    if any(_FAULTFS_MODULE in part for part in argv):
        return f"pid {pid} is a fault filesystem"
    ref = process_ref(group)
    names = {ref.name if ref else "", Path(argv[0]).name if argv else ""}
    denied = sorted(names & DENIED_NAMES)
    if denied:
        return f"pid {pid} is {denied[0]}, which gameday never signals"
    return None


def compile_cmdline(pattern: str) -> Any:
    """``pattern`` as an RE2 expression (linear-time matching; no backreferences or
    lookaround); :class:`FaultRejected` when it is too long or not RE2 syntax."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise FaultRejected(f"target.cmdline: at most {MAX_PATTERN_CHARS} characters, "
                            f"got {len(pattern)}")
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise FaultRejected(f"target.cmdline: not an RE2 pattern ({exc})") from None


def check_signal_request(kind: str, request: FaultRequest, *,
                         max_processes: int = MAX_PROCESSES) -> None:
    """Refuse (:class:`FaultRejected`) an unknown target or parameter key, a bad pid,
    name or pattern, ``max_processes`` outside 1..``max_processes``, a bad
    ``duration_s``: before anything is looked up or signalled."""
    unknown = sorted(set(request.target) - _TARGET_KEYS)
    if unknown:
        raise FaultRejected(f"target.{unknown[0]} is unknown (known: cmdline, name, pid)")
    unknown = sorted(set(request.params) - _PARAM_KEYS[kind])
    if unknown:
        raise FaultRejected(f"params.{unknown[0]} is unknown for {kind} "
                            f"(known: {', '.join(sorted(_PARAM_KEYS[kind]))})")
    given = [key for key in ("pid", "name", "cmdline") if key in request.target]
    if len(given) != 1:
        raise FaultRejected("target: needs exactly one of pid, name or cmdline")
    value = request.target[given[0]]
    if given[0] == "pid":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**22:
            raise FaultRejected(f"target.pid: must be a process id, got {value!r}")
    elif not isinstance(value, str) or not value or "\0" in value:
        raise FaultRejected(f"target.{given[0]}: must be a non-empty string, got {value!r}")
    elif given[0] == "name" and len(value) > 255:
        raise FaultRejected("target.name: at most 255 characters")
    elif given[0] == "cmdline":
        compile_cmdline(value)
    limit = request.params.get("max_processes", 1)
    if (isinstance(limit, bool) or not isinstance(limit, int)
            or not 1 <= limit <= max_processes):
        raise FaultRejected(f"params.max_processes must be an integer between 1 and "
                            f"{max_processes}, got {limit!r}")
    duration = request.params.get("duration_s")
    if duration is not None and (isinstance(duration, bool)
                                 or not isinstance(duration, int | float)
                                 or not math.isfinite(duration)
                                 or not 0.05 <= duration <= 86400):
        raise FaultRejected(f"params.duration_s must be a number of seconds between 0.05 "
                            f"and 86400, got {duration!r}")


class ProcessSnapshot:
    """The live processes of ``/proc`` at one moment (never this process), each read
    once (its ``stat`` and ``cmdline``), for selectors to filter without reading
    ``/proc`` again. :meth:`matching` is the name and command-line selector; others
    filter :attr:`entries` themselves."""

    def __init__(self, entries: list[tuple[ProcessRef, tuple[str, ...]]]) -> None:
        #: ``(process, argv)`` per live process, by pid.
        self.entries = entries

    @classmethod
    def scan(cls) -> "ProcessSnapshot":
        """Read ``/proc`` now."""
        me = os.getpid()
        entries = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            ref = process_ref(int(entry.name))
            if ref is not None:
                entries.append((ref, tuple(command_line(ref.pid))))
        entries.sort(key=lambda item: item[0].pid)
        return cls(entries)

    def matching(self, *, name: str | None = None, pattern: Any = None) -> list[int]:
        """Pids whose command name (or argv[0]'s basename) is ``name`` and/or whose
        command line the compiled RE2 ``pattern`` finds a match in, ascending."""
        found = []
        for ref, argv in self.entries:
            if name is not None and name not in (ref.name, Path(argv[0]).name if argv else ""):
                continue
            if pattern is not None and not pattern.search(" ".join(argv)):
                continue
            found.append(ref.pid)
        return found


class _Scans(threading.local):
    """This thread's open :func:`one_scan` (its depth) and the snapshot it read."""

    depth = 0
    snapshot: ProcessSnapshot | None = None


_SCANS = _Scans()


@contextlib.contextmanager
def one_scan() -> Iterator[None]:
    """Inside, this thread's :func:`find_processes` and :func:`current_processes` read
    ``/proc`` once (at the first lookup) and filter that snapshot: a batch of many
    process targets costs one scan, not one per item. Re-entrant."""
    _SCANS.depth += 1
    try:
        yield
    finally:
        _SCANS.depth -= 1
        if not _SCANS.depth:
            _SCANS.snapshot = None


def current_processes() -> ProcessSnapshot:
    """The snapshot of this thread's :func:`one_scan` (read now if it has none yet), or
    outside one a fresh scan."""
    if not _SCANS.depth:
        return ProcessSnapshot.scan()
    if _SCANS.snapshot is None:
        _SCANS.snapshot = ProcessSnapshot.scan()
    return _SCANS.snapshot


def find_processes(*, name: str | None = None, cmdline: str | None = None) -> list[int]:
    """Pids whose command name (or argv[0]'s basename) is ``name`` and/or whose command
    line matches the RE2 pattern ``cmdline``; never this process. Inside
    :func:`one_scan`, from its snapshot."""
    pattern = compile_cmdline(cmdline) if cmdline else None
    return current_processes().matching(name=name, pattern=pattern)


Resolver = Callable[[Mapping[str, Any], Mapping[str, Any]], list[int]]
#: Asked about each process before it is signalled: None, or why it must not be.
ProcessGuard = Callable[[int], str | None]


class SignalFault:
    """``process.kill`` or ``process.pause`` on the pids ``resolve(target, params)`` gives."""

    injected_at = "process"

    def __init__(self, kind: str, resolve: Resolver, *,
                 guard: ProcessGuard | None = None,
                 max_processes: int = MAX_PROCESSES) -> None:
        if kind not in PROCESS_KINDS:
            raise ValueError(f"not a process kind: {kind}")
        self.kind = kind
        self.resolve = resolve
        #: A policy's own check, asked after :func:`refusal` (which is always asked).
        self.guard = guard
        self.max_processes = max_processes
        self._paused: dict[str, list[ProcessRef]] = {}
        self._timers: dict[str, threading.Timer] = {}

    def _refs(self, request: FaultRequest) -> list[ProcessRef]:
        check_signal_request(self.kind, request, max_processes=self.max_processes)
        pids = self.resolve(request.target, request.params)
        refs = []
        for pid in pids:
            reason = refusal(pid) or (self.guard(pid) if self.guard is not None else None)
            if reason is not None:
                raise FaultRejected(f"target: refusing to signal: {reason}; nothing signalled")
            ref = process_ref(pid)
            if ref is None:
                raise FaultRejected(f"target: no live process {pid}")
            refs.append(ref)
        if not refs:
            raise FaultRejected(f"target: {dict(request.target)} matches no process")
        limit = int(request.params.get("max_processes", 1))
        if len(refs) > limit:
            raise FaultRejected(f"target: {dict(request.target)} matches {len(refs)} processes, "
                                f"params.max_processes is {limit}; nothing signalled")
        return refs

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """What :meth:`apply` would signal, read-only: ``{"processes": [{"pid",
        "command"}]}``, or the :class:`FaultRejected` it would raise."""
        return {"processes": [{"pid": ref.pid, "command": " ".join(command_line(ref.pid))
                               or ref.name} for ref in self._refs(request)]}

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
