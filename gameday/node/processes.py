"""``process.kill`` and ``process.pause`` as signals to real processes.

:class:`SignalFault` sends SIGKILL (kill: nothing to revert) or SIGSTOP (pause: revert,
or ``duration_s`` later, sends SIGCONT) to the processes a resolver picks. Each process
is remembered with its start time, so a revert never signals a process that reused the
pid. Processes are found through ``/proc`` (:func:`find_processes`, like ``pgrep``; and
:func:`select_processes`, by environment, parent and cgroup as well, for "rank 1 of
this job" among workers with identical command lines).
``cmdline`` patterns are matched with RE2 (linear time: no pattern can stall the agent).

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
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected

__all__ = ["DENIED_NAMES", "MAX_PROCESSES", "PROCESS_KINDS", "ProcessGuard", "ProcessRef",
           "Resolver", "SignalFault", "check_signal_request", "command_line", "compile_cmdline",
           "find_processes", "parent_pid", "process_cgroup", "process_environ", "process_ref",
           "process_state", "refusal", "select_processes", "thread_group"]

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
#: Keys that only say what a ``pid`` is (the engine resolves a lab shard or role to it).
_PID_LABELS = frozenset({"shard", "role"})
#: Filters that narrow a name/cmdline selector, or select alone.
_FILTER_KEYS = frozenset({"env", "parent", "cgroup"})
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


def compile_cmdline(pattern: str, key: str = "cmdline") -> Any:
    """``pattern`` as an RE2 expression (linear-time matching; no backreferences or
    lookaround); :class:`FaultRejected` naming ``target.KEY`` when it is too long or not
    RE2 syntax."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise FaultRejected(f"target.{key}: at most {MAX_PATTERN_CHARS} characters, "
                            f"got {len(pattern)}")
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise FaultRejected(f"target.{key}: not an RE2 pattern ({exc})") from None


def _check_selector(target: Mapping[str, Any], where: str = "target", depth: int = 0) -> None:
    """A process selector: exactly one of ``pid``, ``name``, ``cmdline``, or filters alone
    (``env``, ``parent``, ``cgroup``) that narrow a name/cmdline or stand alone."""
    labels = _PID_LABELS if "pid" in target and depth == 0 else frozenset()
    unknown = sorted(set(target) - _TARGET_KEYS - _FILTER_KEYS - labels)
    if unknown:
        raise FaultRejected(f"{where}.{unknown[0]} is unknown (known: cmdline, name, pid, env, "
                            "parent, cgroup; shard or role only alongside a pid)")
    given = [key for key in ("pid", "name", "cmdline") if key in target]
    filters = [key for key in ("env", "parent", "cgroup") if key in target]
    if len(given) > 1 or (not given and not filters) or ("pid" in target and filters):
        raise FaultRejected(f"{where}: needs exactly one of pid, name or cmdline, or the "
                            "filters env, parent, cgroup (a pid takes no filter)")
    if given:
        value = target[given[0]]
        if given[0] == "pid":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**22:
                raise FaultRejected(f"{where}.pid: must be a process id, got {value!r}")
        elif not isinstance(value, str) or not value or "\0" in value:
            raise FaultRejected(f"{where}.{given[0]}: must be a non-empty string, "
                                f"got {value!r}")
        elif given[0] == "name" and len(value) > 255:
            raise FaultRejected(f"{where}.name: at most 255 characters")
        elif given[0] == "cmdline":
            compile_cmdline(value)
    env = target.get("env")
    if "env" in target and (not isinstance(env, Mapping) or not env or not all(
            isinstance(k, str) and isinstance(v, str | int) and not isinstance(v, bool)
            for k, v in env.items())):
        raise FaultRejected(f"{where}.env: must be a mapping VAR: VALUE, got {env!r}")
    if "cgroup" in target:
        cgroup = target["cgroup"]
        if not isinstance(cgroup, str) or not cgroup:
            raise FaultRejected(f"{where}.cgroup: must be a non-empty string, got {cgroup!r}")
        compile_cmdline(cgroup, "cgroup")
    if "parent" in target:
        parent = target["parent"]
        if not isinstance(parent, Mapping) or depth >= 2:
            raise FaultRejected(f"{where}.parent: must be a process selector (at most two "
                                f"levels), got {parent!r}")
        _check_selector(parent, f"{where}.parent", depth + 1)


def check_signal_request(kind: str, request: FaultRequest, *,
                         max_processes: int = MAX_PROCESSES) -> None:
    """Refuse (:class:`FaultRejected`) an unknown target or parameter key, a bad pid,
    name or pattern, ``max_processes`` outside 1..``max_processes``, a bad
    ``duration_s``: before anything is looked up or signalled."""
    _check_selector(request.target)
    unknown = sorted(set(request.params) - _PARAM_KEYS[kind])
    if unknown:
        raise FaultRejected(f"params.{unknown[0]} is unknown for {kind} "
                            f"(known: {', '.join(sorted(_PARAM_KEYS[kind]))})")
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


def find_processes(*, name: str | None = None, cmdline: str | None = None) -> list[int]:
    """Pids whose command name (or argv[0]'s basename) is ``name`` and/or whose command
    line matches the RE2 pattern ``cmdline``; never this process."""
    pattern = compile_cmdline(cmdline) if cmdline else None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        ref = process_ref(pid)
        if ref is None:
            continue
        argv = command_line(pid)
        if name is not None and name not in (ref.name, Path(argv[0]).name if argv else ""):
            continue
        if pattern is not None and not pattern.search(" ".join(argv)):
            continue
        found.append(pid)
    return sorted(found)


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
    container id; RE2, matched line by line); never this process."""
    pattern = compile_cmdline(cgroup, "cgroup") if cgroup else None
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
        if pattern is not None and not any(pattern.search(line) for line in
                                           process_cgroup(pid).splitlines()):
            continue
        found.append(pid)
    return found
