"""The orchestrator's own refusal to signal itself, at planning, before anything runs.

A ``process.kill`` / ``process.pause`` whose selector is resolved by an agent on this
host is resolved here too, whole (``pid``, ``name``, ``cmdline`` and the ``env``,
``parent``, ``cgroup`` filters) and the way that agent resolves it
(:func:`gameday.node.host.process.resolve_host_process`), and refused
(:class:`gameday.errors.ProtectedTarget`, exit 2) when it matches a process gameday
never signals (:func:`gameday.node.processes.protected_processes`: this run, its
ancestors, agents, fault filesystems, the lab supervisor, PID 1). The agent checks again
before it signals, on any host. The host's process reading (and its regular expressions'
engine) is imported for such a fault only.
"""

import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from gameday.errors import FaultRejected
from gameday.targets.base import Target

__all__ = ["refuse_self_signal"]

_SIGNAL_KINDS = ("process.kill", "process.pause")
_LOOPBACK = ("localhost", "127.0.0.1", "::1")


def refuse_self_signal(kind: str, arguments: Mapping[str, Any], target: Target,
                       where: str) -> None:
    """Raise :class:`gameday.errors.ProtectedTarget` (naming each match: pid, command,
    why) if the signal fault ``kind`` with ``arguments`` would signal a protected process
    of this host; ``where`` names the activity. Selectors this host cannot resolve (an
    agent elsewhere, a lab role or shard) are left to the agent's own check."""
    selector = arguments.get("process")
    if kind not in _SIGNAL_KINDS or not isinstance(selector, Mapping):
        return
    node = selector.get("node")
    clients = [c for name, c in target.agents.items() if node is None or name == node]
    if not clients or not all(_on_this_host(client.url) for client in clients):
        return
    host_selector = {key: value for key, value in selector.items()
                     if key in ("pid", "name", "cmdline", "env", "parent", "cgroup")}
    if "pod" in selector or not host_selector:
        return  # a container's cgroup, a lab shard or role: the agent's own check
    from gameday.node.host.process import resolve_host_process
    from gameday.node.processes import refuse_protected

    try:
        pids = resolve_host_process(host_selector, {})
    except (FaultRejected, TypeError, ValueError):
        return  # the agent refuses the malformed selector, naming it
    refuse_protected(pids, f"{where}: process selector {dict(selector)}")


def _on_this_host(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host in _LOOPBACK or host.startswith("127.") or host == socket.gethostname()
