"""``process.kill`` and ``process.pause`` as signals to real processes.

:class:`SignalFault` sends SIGKILL (kill: nothing to revert) or SIGSTOP (pause: revert,
or ``duration_s`` later, sends SIGCONT) to the processes a resolver picks. Each process
is held by a pidfd (:class:`PinnedProcess`) from before it is checked until its revert,
so neither the signal nor the revert reaches a process that reused the pid. Processes
are found through ``/proc`` (:func:`find_processes`, like ``pgrep``; and
:func:`select_processes`, by environment, parent and cgroup as well, for "rank 1 of
this job" among workers with identical command lines).
``cmdline`` patterns are matched with RE2 (linear time: no pattern can stall the agent).
Inside :func:`one_scan` (a batch, a check) every lookup filters one snapshot of ``/proc``
(:class:`ProcessSnapshot`) instead of reading it again.

Every parameter and target key is checked before anything is signalled
(:func:`check_signal_request`), and :func:`refusal` (a fixed denylist: init, the node's
kubelet, container runtimes, sshd, journald, this agent's whole thread group and
the fault filesystems) is asked about every process before it is.

:func:`protected_processes` names the processes gameday never signals, whoever asks
(the agent before it signals, the orchestrator when it plans): PID 1, the asking
process and its ancestors, every gameday orchestrator (``gameday run``/``play``/
``gate``) and its ancestors, gameday agents (``gameday agent serve``, the lab's node
processes), fault-filesystem processes and the lab supervisor.
"""

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import re2

from gameday.contract.backend import FaultRequest
from gameday.contract.pick import Pick, parse_pick
from gameday.errors import FaultRejected, PolicyRefused, ProtectedTarget
from gameday.kinds.process import PROCESS_KILL, PROCESS_PAUSE, KillParams, PauseParams

__all__ = ["DENIED_NAMES", "MAX_PROCESSES", "NO_ALLOWED_MATCH", "PROCESS_KINDS",
           "PinnedProcess", "ProcessGuard", "ProcessRef",
           "ProcessSnapshot", "ProtectedProcess", "Resolver", "SignalFault",
           "check_signal_request", "command_line", "command_text", "compile_cmdline",
           "current_processes", "find_processes", "gameday_role", "one_scan", "parent_pid",
           "pin_processes", "process_cgroup", "process_environ", "process_ref",
           "process_state", "protected_processes", "refusal", "refuse_protected", "release",
           "select_processes", "selector_pick", "thread_group"]

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
#: Keys that only say whose a ``cgroup`` is (the engine resolves a Kubernetes pod's
#: container to its container ID).
_CGROUP_LABELS = frozenset({"pod", "container"})
#: Filters that narrow a name/cmdline selector, or select alone.
_FILTER_KEYS = frozenset({"env", "parent", "cgroup"})


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
    labels = (_PID_LABELS if "pid" in target else
              _CGROUP_LABELS if "cgroup" in target else frozenset()) if depth == 0 \
        else frozenset()
    if depth == 0 and "pick" in target:
        if "pid" in target:
            raise FaultRejected(f"{where}.pick: a pid names one process; pick takes some of "
                                "the matches of a name, cmdline, env, parent or cgroup")
        selector_pick(target, where)
        labels |= {"pick"}
    unknown = sorted(set(target) - _TARGET_KEYS - _FILTER_KEYS - labels)
    if unknown:
        raise FaultRejected(f"{where}.{unknown[0]} is unknown (known: cmdline, name, pid, env, "
                            "parent, cgroup, pick; shard or role only alongside a pid, pod "
                            "or container only alongside a cgroup)")
    for label in (labels - {"pick"}) & set(target):
        if not isinstance(target[label], str | int) or isinstance(target[label], bool):
            raise FaultRejected(f"{where}.{label}: must be a name, got {target[label]!r}")
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


def selector_pick(target: Mapping[str, Any], where: str = "target") -> Pick | None:
    """The seeded pick a selector asks for (``pick``), None without one;
    :class:`FaultRejected` naming ``target.pick.KEY`` when it is malformed."""
    if "pick" not in target:
        return None
    try:
        return parse_pick(target["pick"])
    except ValueError as exc:
        raise FaultRejected(f"{where}.pick: {exc}") from None


def check_signal_request(kind: str, request: FaultRequest, *,
                         max_processes: int = MAX_PROCESSES) -> KillParams | PauseParams:
    """The request's parameters, parsed by the kind's declaration
    (:mod:`gameday.kinds.process`), or :class:`FaultRejected` for an unknown target key,
    a bad pid, name or pattern, parameters the declaration refuses, or
    ``max_processes`` over this agent's ``max_processes``: before anything is looked up
    or signalled."""
    _check_selector(request.target)
    params = (PROCESS_KILL if kind == PROCESS_KILL.name else PROCESS_PAUSE).backend_params(
        request.params)
    if params.max_processes > max_processes:
        raise FaultRejected(f"params.max_processes must be an integer between 1 and "
                            f"{max_processes}, got {params.max_processes}")
    return params


def command_text(pid: int) -> str:
    """The command line of ``pid`` as one string (its command name if it has none)."""
    argv = command_line(pid)
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
        """One line naming the process by pid and why: never its command line, which
        may carry secrets and belongs to a process nobody may touch."""
        return f"pid {self.pid}: {self.why}"


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
    own = gameday_role(command_line(me))
    reasons: dict[int, str] = {1: "PID 1 (init)",
                               me: f"this process itself ({own})" if own else "this process"}
    for pid in _ancestors(me):
        reasons.setdefault(pid, f"an ancestor of this process (pid {me})")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        role = gameday_role(command_line(pid))
        if role is None:
            continue
        reasons.setdefault(pid, role)
        if "orchestrator" in role:
            for parent in _ancestors(pid):
                reasons.setdefault(parent, f"an ancestor of {role.removeprefix('a ')} "
                                           f"pid {pid}")
    return [ProtectedProcess(pid, command_text(pid), reasons[pid])
            for pid in wanted if pid in reasons]


def refuse_protected(pids: Iterable[int], where: str) -> None:
    """Raise :class:`ProtectedTarget` naming each protected process among ``pids``
    (``where``: what selected them); nothing is signalled."""
    protected = protected_processes(pids)
    if protected:
        raise ProtectedTarget(f"{where} matches {len(protected)} protected process"
                              f"{'es' if len(protected) > 1 else ''}, nothing signalled: "
                              + "; ".join(p.line() for p in protected))


class ProcessSnapshot:
    """The live processes of ``/proc`` at one moment (this one too), each read
    once (its ``stat`` and ``cmdline``), for selectors to filter without reading
    ``/proc`` again. :meth:`matching` is the name and command-line selector; others
    filter :attr:`entries` themselves."""

    def __init__(self, entries: list[tuple[ProcessRef, tuple[str, ...]]]) -> None:
        #: ``(process, argv)`` per live process, by pid.
        self.entries = entries

    @classmethod
    def scan(cls) -> "ProcessSnapshot":
        """Read ``/proc`` now."""
        entries = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
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
    line matches the RE2 pattern ``cmdline``, this process among them if it matches (so
    that a selector matching it is refused by :func:`refuse_protected` rather than quietly
    narrowed to the others). Inside :func:`one_scan`, from its snapshot."""
    pattern = compile_cmdline(cmdline) if cmdline else None
    return current_processes().matching(name=name, pattern=pattern)


Resolver = Callable[[Mapping[str, Any], Mapping[str, Any]], list[int]]
#: Asked about each process before it is signalled: None, or why it must not be.
ProcessGuard = Callable[[int], str | None]


class SignalFault:
    """``process.kill`` or ``process.pause`` on the pids ``resolve(target, params)`` gives.

    Every pid is taken to its thread group (a thread's id names its whole process) and a
    pidfd is opened on that process before anything about it is checked; after the checks
    the pidfd is asked whether its process is still alive, so the process checked is the
    process signalled (a pid reused in between is never signalled). A process the policy
    (``guard``) does not allow is invisible: a selector that matches only such processes
    is answered exactly as one that matches nothing (:data:`NO_ALLOWED_MATCH`)."""

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
        self._paused: dict[str, list[PinnedProcess]] = {}
        self._timers: dict[str, threading.Timer] = {}

    def _pinned(self, request: FaultRequest) -> list["PinnedProcess"]:
        params = check_signal_request(self.kind, request, max_processes=self.max_processes)
        pids = self.resolve(request.target, request.params)
        if any(pid <= 0 for pid in pids):  # 0 and -1 would signal groups, or everything
            raise FaultRejected(f"target: pids must be > 0, got {sorted(pids)[0]}")
        where = f"target {_compact(request.target)}"
        pinned = pin_processes(pids, self.guard, where)  # every match checked
        try:
            if not pinned:
                raise _no_match(where, self.guard)
            pick = selector_pick(request.target)
            if pick is not None:  # a seeded pick of the matches, each checked above
                chosen = set(pick.choose([p.ref.pid for p in pinned]))
                release([p for p in pinned if p.ref.pid not in chosen])
                pinned = [p for p in pinned if p.ref.pid in chosen]
            limit = params.max_processes
            if len(pinned) > limit:
                matched = "; ".join(f"pid {p.ref.pid} ({command_text(p.ref.pid)[:120]})"
                                    for p in pinned)
                raise FaultRejected(f"{where} matches {len(pinned)} processes, "
                                    f"params.max_processes is {limit}; nothing signalled: "
                                    f"{matched}")
        except BaseException:
            release(pinned)
            raise
        return pinned

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """What :meth:`apply` would signal, read-only: ``{"processes": [{"pid",
        "command"}]}`` (and the ``pick`` when the selector has one), or the error it
        would raise."""
        pinned = self._pinned(request)
        release(pinned)
        return {"processes": [{"pid": p.ref.pid, "command": " ".join(command_line(p.ref.pid))
                               or p.ref.name} for p in pinned], **self._picked(request)}

    @staticmethod
    def _picked(request: FaultRequest) -> dict[str, Any]:
        pick = selector_pick(request.target)
        return {} if pick is None else {"pick": pick.to_json()}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        pinned = self._pinned(request)
        sig = signal.SIGKILL if self.kind == "process.kill" else signal.SIGSTOP
        try:
            for process in pinned:
                process.send(sig)
        except BaseException:
            release(pinned)
            raise
        if self.kind == "process.kill":
            release(pinned)
        else:
            self._paused[fault_id] = pinned
            duration = PROCESS_PAUSE.backend_params(request.params).duration_s
            if duration:
                timer = threading.Timer(duration, _continue, args=(pinned,))
                timer.daemon = True
                self._timers[fault_id] = timer
                timer.start()
        return {"signal": sig.name, "processes": [p.ref.to_json() for p in pinned],
                **self._picked(request)}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        if self.kind == "process.kill":
            return  # a killed process stays killed: its supervisor (if any) restarts it
        timer = self._timers.pop(fault_id, None)
        if timer is not None:
            timer.cancel()
        pinned = self._paused.pop(fault_id, None)
        if pinned is None:  # after an agent restart: continue whatever the target names now
            pids: list[int] = []
            with contextlib.suppress(FaultRejected, ValueError, OSError):
                pids = self.resolve(request.target, request.params)
            pinned = [p for p in map(PinnedProcess.open, _groups(pids)) if p is not None]
        _continue(pinned)
        release(pinned)


#: What a process selector that matches no process the policy allows is answered.
NO_ALLOWED_MATCH: Final = "matches no live process the agent's policy allows"


def _no_match(where: str, guard: ProcessGuard | None) -> FaultRejected:
    """The one answer to "matches nothing" and "matches only what the policy does not
    allow" (``403`` under a policy, so both read the same)."""
    if guard is None:
        return FaultRejected(f"{where} matches no process")
    return PolicyRefused(f"{where} {NO_ALLOWED_MATCH}")


class PinnedProcess:
    """A live process held by a pidfd (``os.pidfd_open``): a signal sent through it
    reaches that process or none, never a later one that reused its pid."""

    def __init__(self, ref: ProcessRef, fd: int) -> None:
        self.ref = ref
        self._fd = fd
        self._lock = threading.Lock()

    @classmethod
    def open(cls, pid: int) -> "PinnedProcess | None":
        """The process ``pid`` now (None if gone or a zombie)."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return None
        ref = process_ref(pid)  # read after the pidfd: it is the pidfd's, or gone
        if ref is None or not _alive(fd):
            os.close(fd)
            return None
        return cls(ref, fd)

    def alive(self) -> bool:
        """Whether the pinned process still runs (not reaped)."""
        with self._lock:
            return self._fd >= 0 and _alive(self._fd)

    def send(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the pinned process; :class:`FaultRejected` if it exited."""
        with self._lock:
            try:
                if self._fd < 0:
                    raise ProcessLookupError
                signal.pidfd_send_signal(self._fd, sig)
            except ProcessLookupError:
                raise FaultRejected(f"target: process {self.ref.pid} exited") from None
            except PermissionError:
                raise FaultRejected(f"target: not allowed to signal process "
                                    f"{self.ref.pid}") from None

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _alive(fd: int) -> bool:
    try:
        signal.pidfd_send_signal(fd, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release(pinned: Iterable[PinnedProcess]) -> None:
    """Close the pidfds of ``pinned``."""
    for process in pinned:
        process.close()


def _groups(pids: Iterable[int]) -> list[int]:
    """The thread groups (processes) of ``pids`` (a tid names its process), in order,
    each once; gone ones left out."""
    return list(dict.fromkeys(g for g in map(thread_group, pids) if g is not None))


def pin_processes(pids: Iterable[int], guard: ProcessGuard | None,
                  where: str) -> list[PinnedProcess]:
    """The processes of ``pids`` (their thread groups) that ``guard`` allows, each pinned
    by a pidfd opened before it was checked and found alive after; the others are left
    out, unnamed. Raises :class:`ProtectedTarget` (``403``; nothing pinned) when one
    that is allowed is protected (:func:`protected_processes`) or denied
    (:func:`refusal`): the answer names its pid and why, never its command line."""
    pinned: list[PinnedProcess] = []
    try:
        for group in _groups(pids):
            process = PinnedProcess.open(group)
            if process is None:
                continue
            if guard is not None and guard(group) is not None:
                process.close()
                continue
            pinned.append(process)
        refuse_protected([p.ref.pid for p in pinned], where)
        for process in pinned:
            reason = refusal(process.ref.pid)
            if reason is not None:
                raise ProtectedTarget(f"{where}: refusing to signal: {reason}; "
                                      f"nothing signalled")
        gone = [p for p in pinned if not p.alive()]  # checked another process: drop it
        for process in gone:
            pinned.remove(process)
            process.close()
    except BaseException:
        release(pinned)
        raise
    return pinned


def _compact(target: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in target.items()) + "}"


def _continue(pinned: list[PinnedProcess]) -> None:
    """SIGCONT each pinned process that still runs."""
    for process in pinned:
        with contextlib.suppress(FaultRejected):
            process.send(signal.SIGCONT)


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
