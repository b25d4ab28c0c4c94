"""Real process faults on a host: ``process.kill`` (SIGKILL) and ``process.pause``
(SIGSTOP, SIGCONT on revert or after ``duration_s``).

Target ``{"pid": N}``, ``{"name": COMM}`` (command name or argv[0]'s basename, like
``pgrep -x``) or ``{"cmdline": REGEX}`` (like ``pgrep -f``), found through ``/proc``;
more matches than ``params.max_processes`` (1..64) is refused, and the fixed denylist
(:func:`gameday.node.processes.refusal`) is never signalled.
"""

from collections.abc import Mapping
from typing import Any

from gameday.errors import FaultRejected
from gameday.node.host.base import HostFault
from gameday.node.processes import PROCESS_KINDS, SignalFault, find_processes

__all__ = ["HostSignalFault", "handlers", "resolve_host_process"]


def resolve_host_process(target: Mapping[str, Any], params: Mapping[str, Any]) -> list[int]:
    """The pids ``target`` names (checked first by
    :func:`gameday.node.processes.check_signal_request`)."""
    pid = target.get("pid")
    if pid is not None:
        return [int(pid)]
    name, cmdline = target.get("name"), target.get("cmdline")
    if not name and not cmdline:
        raise FaultRejected("target: needs pid, name or cmdline")
    return find_processes(name=name or None, cmdline=cmdline or None)


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
