"""``process.kill`` and ``process.pause`` as signals to real processes.

:class:`SignalFault` sends SIGKILL (kill: nothing to revert) or SIGSTOP (pause: revert,
or ``duration_s`` later, sends SIGCONT) to the processes a resolver picks. Each process
is remembered with its start time, so a revert never signals a process that reused the
pid. Processes are found through ``/proc`` (:func:`find_processes`, like ``pgrep``).

:func:`protected_processes` names the processes gameday never signals, whoever asks
(the agent before it signals, the orchestrator when it plans): PID 1, the asking
process and its ancestors, every gameday orchestrator (``gameday run``/``play``/
``gate``) and its ancestors, gameday agents (``gameday agent serve``, the lab's node
processes), fault-filesystem processes and the lab supervisor.
"""

import contextlib
import os
import re
import signal
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gameday.agent.backend import FaultRequest
from gameday.errors import FaultRejected, ProtectedTarget

__all__ = ["PROCESS_KINDS", "ProcessRef", "ProtectedProcess", "Resolver", "SignalFault",
           "command_line", "find_processes", "gameday_role", "process_ref", "process_state",
           "protected_processes", "refuse_protected"]

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


def command_line(pid: int) -> str:
    """The command line of ``pid`` as one string (its command name if it has none)."""
    argv = _cmdline(pid)
    if argv:
        return " ".join(argv)
    stat = _stat(pid)
    return f"[{stat[0]}]" if stat is not None else "?"


#: gameday's own processes, by the module a ``python -m`` runs.
_MODULE_ROLES: Final = {
    "gameday.lab.supervisor": "the lab supervisor",
    "gameday.lab.node": "a gameday agent (a lab node)",
    "gameday.node.faultfs": "a fault-filesystem process",
    "gameday.agent.serve": "a gameday agent",
}
#: gameday commands, by their first words.
_COMMAND_ROLES: Final = {
    ("run",): "a gameday orchestrator (gameday run)",
    ("play",): "a gameday orchestrator (gameday play)",
    ("gate",): "a gameday orchestrator (gameday gate)",
    ("agent", "serve"): "a gameday agent",
    ("lab", "up"): "the lab supervisor",
}


def gameday_role(argv: list[str]) -> str | None:
    """What a command line is of gameday's own (``a gameday agent``...), else ``None``:
    a ``gameday`` console command (``gameday run ...``), or ``python -m`` of gameday's
    command line or of one of its process modules."""
    for index, word in enumerate(argv[:3]):
        rest: list[str] | None = None
        if Path(word).name == "gameday":
            rest = argv[index + 1:]
        elif word == "-m" and index + 1 < len(argv):
            module = argv[index + 1]
            if module in _MODULE_ROLES:
                return _MODULE_ROLES[module]
            if module in ("gameday", "gameday.cli", "gameday.cli.main"):
                rest = argv[index + 2:]
        if rest is not None:
            words = [w for w in rest if not w.startswith("-")][:2]
            for command, role in _COMMAND_ROLES.items():
                if tuple(words[:len(command)]) == command:
                    return role
            return None
    return None


@dataclass(frozen=True)
class ProtectedProcess:
    """A process gameday must never signal: its pid, command line, and why."""

    pid: int
    command: str
    why: str

    def line(self) -> str:
        return f"pid {self.pid} ({self.command[:120]}): {self.why}"


def _parent(pid: int) -> int:
    stat = _stat(pid)
    try:
        return int(stat[1][1]) if stat is not None else 0
    except (IndexError, ValueError):
        return 0


def _ancestors(pid: int) -> list[int]:
    chain: list[int] = []
    parent = _parent(pid)
    while parent > 0 and parent not in chain:
        chain.append(parent)
        parent = _parent(parent)
    return chain


def protected_processes(pids: Iterable[int]) -> list[ProtectedProcess]:
    """Those of ``pids`` that gameday must never signal, each with why (in the order of
    ``pids``): PID 1; the calling process and its ancestors; gameday's own processes
    (:func:`gameday_role`: orchestrators, agents, fault filesystems, the lab supervisor);
    and the ancestors of every gameday orchestrator on this host."""
    wanted = list(dict.fromkeys(pids))
    if not wanted:
        return []
    me = os.getpid()
    own = gameday_role(_cmdline(me))
    reasons: dict[int, str] = {1: "PID 1 (init)",
                               me: f"this process itself ({own})" if own else "this process"}
    for pid in _ancestors(me):
        reasons.setdefault(pid, f"an ancestor of this process (pid {me})")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        role = gameday_role(_cmdline(pid))
        if role is None:
            continue
        reasons.setdefault(pid, role)
        if "orchestrator" in role:
            for parent in _ancestors(pid):
                reasons.setdefault(parent, f"an ancestor of {role.removeprefix('a ')} "
                                           f"pid {pid}")
    return [ProtectedProcess(pid, command_line(pid), reasons[pid])
            for pid in wanted if pid in reasons]


def refuse_protected(pids: Iterable[int], where: str) -> None:
    """Raise :class:`ProtectedTarget` naming each protected process among ``pids``
    (``where``: what selected them); nothing is signalled."""
    protected = protected_processes(pids)
    if protected:
        raise ProtectedTarget(f"{where} matches {len(protected)} protected process"
                              f"{'es' if len(protected) > 1 else ''}, nothing signalled: "
                              + "; ".join(p.line() for p in protected))


def find_processes(*, name: str | None = None, cmdline: str | None = None) -> list[int]:
    """Pids whose command name (or argv[0]'s basename) is ``name`` and/or whose command
    line matches the regular expression ``cmdline``, this process among them if it
    matches (so that a selector matching it is refused by :func:`refuse_protected`
    rather than quietly narrowed to the others)."""
    pattern = re.compile(cmdline) if cmdline else None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
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
        if any(pid <= 0 for pid in pids):  # 0 and -1 would signal groups, or everything
            raise FaultRejected(f"target: pids must be > 0, got {sorted(pids)[0]}")
        refuse_protected(pids, f"target {_compact(request.target)}")
        refs = []
        for pid in pids:
            ref = process_ref(pid)
            if ref is None:
                raise FaultRejected(f"target: no live process {pid}")
            refs.append(ref)
        if not refs:
            raise FaultRejected(f"target: {_compact(request.target)} matches no process")
        limit = int(request.params.get("max_processes") or 1)
        if len(refs) > limit:
            matched = "; ".join(f"pid {r.pid} ({command_line(r.pid)[:120]})" for r in refs)
            raise FaultRejected(f"target: {_compact(request.target)} matches {len(refs)} "
                                f"processes, params.max_processes is {limit}; nothing "
                                f"signalled: {matched}")
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


def _compact(target: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in target.items()) + "}"


def _continue(refs: list[ProcessRef]) -> None:
    """SIGCONT each process that is still the one that was stopped."""
    for ref in refs:
        if ref.current():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(ref.pid, signal.SIGCONT)
