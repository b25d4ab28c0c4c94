"""Real process faults on a host: ``process.kill`` (SIGKILL) and ``process.pause``
(SIGSTOP, SIGCONT on revert or after ``duration_s``).

Target ``{"pid": N}``, ``{"name": COMM}`` (command name or argv[0]'s basename, like
``pgrep -x``) or ``{"cmdline": REGEX}`` (like ``pgrep -f``), found through ``/proc``;
more matches than ``params.max_processes`` is refused (naming every match), and so is
a selector that matches a protected process
(:func:`gameday.node.processes.protected_processes`: PID 1, the agent and its
ancestors, gameday orchestrators and their ancestors, agents, fault filesystems, the
lab supervisor).
"""

from collections.abc import Mapping
from typing import Any

from gameday.errors import FaultRejected
from gameday.node.host.base import HostFault
from gameday.node.processes import PROCESS_KINDS, SignalFault, find_processes

__all__ = ["HostSignalFault", "handlers", "resolve_host_process"]


def resolve_host_process(target: Mapping[str, Any], params: Mapping[str, Any]) -> list[int]:
    pid = target.get("pid")
    if pid is not None:
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise FaultRejected(f"target.pid: must be an integer, got {pid!r}")
        return [pid]
    name, cmdline = target.get("name"), target.get("cmdline")
    if not name and not cmdline:
        raise FaultRejected("target: needs pid, name or cmdline")
    try:
        return find_processes(name=name or None, cmdline=cmdline or None)
    except Exception as exc:  # a bad regular expression
        raise FaultRejected(f"target.cmdline: {exc}") from None


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
