"""Real process faults on a host: ``process.kill`` (SIGKILL) and ``process.pause``
(SIGSTOP, SIGCONT on revert or after ``duration_s``).

Target ``{"pid": N}``, ``{"name": COMM}`` (command name or argv[0]'s basename, like
``pgrep -x``) or ``{"cmdline": REGEX}`` (like ``pgrep -f``), narrowed (or selected
alone) by ``{"env": {VAR: VALUE}}`` (``/proc/PID/environ``: ``RANK``, ``LOCAL_RANK``,
``TORCHELASTIC_RUN_ID``), ``{"parent": {"name"|"cmdline"|"pid": ...}}`` (children of
the matching processes, e.g. a ``torchrun`` agent's workers) and ``{"cgroup": REGEX}``
(``/proc/PID/cgroup``, e.g. a container id), found through ``/proc``;
more matches than ``params.max_processes`` is refused (naming every match), and so is
a selector that matches a protected process
(:func:`gameday.node.processes.protected_processes`: PID 1, the agent and its
ancestors, gameday orchestrators and their ancestors, agents, fault filesystems, the
lab supervisor) or anything the fixed denylist (:func:`gameday.node.processes.refusal`)
names.
"""

from collections.abc import Mapping
from typing import Any

from gameday.errors import FaultRejected
from gameday.node.host.base import HostFault
from gameday.node.processes import PROCESS_KINDS, SignalFault, find_processes, select_processes

__all__ = ["HostSignalFault", "handlers", "resolve_host_process"]


def resolve_host_process(target: Mapping[str, Any], params: Mapping[str, Any]) -> list[int]:
    """The pids ``target`` names (checked first by
    :func:`gameday.node.processes.check_signal_request`)."""
    pid = target.get("pid")
    if pid is not None:
        return [int(pid)]
    name, cmdline = target.get("name"), target.get("cmdline")
    if any(key in target for key in ("env", "parent", "cgroup")):
        return _select_host_processes(target)
    if not name and not cmdline:
        raise FaultRejected("target: needs pid, name, cmdline, env, parent or cgroup")
    try:
        return find_processes(name=name or None, cmdline=cmdline or None)
    except Exception as exc:  # a bad regular expression
        raise FaultRejected(f"target.cmdline: {exc}") from None


def _select_host_processes(target: Mapping[str, Any]) -> list[int]:
    """The processes a selector with ``env``, ``parent`` or ``cgroup`` names."""
    env = target.get("env")
    if env is not None and (not isinstance(env, Mapping) or not env):
        raise FaultRejected(f"target.env: must be a mapping VAR: VALUE, got {env!r}")
    parents: list[int] | None = None
    parent = target.get("parent")
    if parent is not None:
        if not isinstance(parent, Mapping) or not parent:
            raise FaultRejected(f"target.parent: must be a process selector, got {parent!r}")
        parents = resolve_host_process(parent, {})
    try:
        return select_processes(name=target.get("name") or None,
                                cmdline=target.get("cmdline") or None,
                                env={str(k): str(v) for k, v in (env or {}).items()},
                                parents=parents, cgroup=target.get("cgroup") or None)
    except Exception as exc:  # a bad regular expression
        raise FaultRejected(f"target: {exc}") from None


class HostSignalFault(SignalFault):
    """:class:`SignalFault` with the host's resolver, usable wherever ``/proc`` is."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind, resolve_host_process)

    def unavailable(self) -> str | None:
        return None

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        return {}


def handlers() -> list[HostFault]:
    return [HostSignalFault(kind) for kind in PROCESS_KINDS]
