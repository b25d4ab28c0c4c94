"""The real host backend: every :class:`HostFault` this host can apply.

Areas are modules with a ``handlers() -> list[HostFault]`` function; add an area by
adding it to ``AREAS``. ``gameday agent serve --backend host`` builds this backend.
Until it is given a policy (:meth:`HostBackend.use_policy`), it refuses every fault. A
policy is what :class:`HostPolicy` says (the agent's :class:`gameday.agent.policy.Policy`
is one): the agent hands its own in, so this node-side code never imports the agent.
"""

import contextlib
import importlib
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Protocol

from gameday.contract.backend import FaultRequest, backend_check
from gameday.errors import FaultRejected, PolicyRefused
from gameday.node.host.base import HostFault
from gameday.node.processes import SignalFault, one_scan

__all__ = ["AREAS", "NO_POLICY", "HostBackend", "HostPolicy", "host_backend"]

AREAS: tuple[str, ...] = ("gameday.node.host.gpu", "gameday.node.host.net",
                          "gameday.node.host.netdelay",
                          "gameday.node.host.proxy", "gameday.node.host.storage",
                          "gameday.node.host.process", "gameday.node.host.hogs")

#: The one line a host agent without a policy answers every fault with.
NO_POLICY: Final = ("this agent has no policy, so it refuses every target: write one "
                    "(docs/agent-api.md, 'Policy') and start it with --policy FILE")


class HostPolicy(Protocol):
    """What the host backend asks of a policy: a check of each request (raising
    :class:`gameday.errors.PolicyRefused`), a guard asked about each process before it is
    signalled, and the most processes one fault may signal."""

    @property
    def max_processes(self) -> int: ...

    def check(self, request: FaultRequest) -> None: ...

    def process_guard(self, pid: int) -> str | None: ...


class HostBackend:
    """Dispatches each fault to the handler of its kind."""

    name = "host"

    def __init__(self, node: str, handlers: list[HostFault]) -> None:
        self.node = node
        self._all = {handler.kind: handler for handler in handlers}
        self._usable = {kind: h for kind, h in self._all.items() if h.unavailable() is None}
        self.policy: HostPolicy | None = None

    def use_policy(self, policy: HostPolicy) -> None:
        """Enforce ``policy`` from now on: its kinds, paths, interfaces and device
        settings before each apply, its processes before each signal."""
        self.policy = policy
        for handler in self._all.values():
            hook = getattr(handler, "use_policy", None)
            if callable(hook):  # a handler that checks what it resolves (the freezer)
                hook(policy)
            if isinstance(handler, SignalFault):
                handler.guard = policy.process_guard
                handler.max_processes = policy.max_processes

    def use_state_dir(self, directory: Path) -> None:
        """Let the handlers that save what they change before changing it (a GPU's power
        limit) save it in ``directory``, the agent's state directory; called before the
        agent reverts its leftovers, so those reverts find what was saved."""
        for handler in self._all.values():
            hook = getattr(handler, "use_state_dir", None)
            if callable(hook):
                hook(directory, self.node)

    def capabilities(self) -> dict[str, str | None]:
        """Every known kind with None (usable) or the reason it is not usable here."""
        return {kind: handler.unavailable() for kind, handler in sorted(self._all.items())}

    def inventory(self) -> dict[str, Any]:
        merged: dict[str, Any] = {"node": self.node, "gpus": [], "links": [], "mounts": [],
                                  "unavailable": {k: r for k, r in self.capabilities().items()
                                                  if r is not None}}
        seen: set[int] = set()
        for handler in self._all.values():
            if id(type(handler)) in seen:
                continue
            seen.add(id(type(handler)))
            for key, items in handler.inventory().items():
                merged.setdefault(key, []).extend(items)
        return merged

    def kinds(self) -> Mapping[str, str]:
        return {kind: handler.injected_at for kind, handler in self._usable.items()}

    def _handler(self, kind: str) -> HostFault:
        handler = self._usable.get(kind)
        if handler is None:
            reason = self._all[kind].unavailable() if kind in self._all else "unknown kind"
            raise FaultRejected(f"{kind} cannot be applied on this host: {reason}")
        return handler

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        handler = self._handler(request.kind)
        if self.policy is None:
            raise PolicyRefused(NO_POLICY)
        self.policy.check(request)
        return handler.apply(fault_id, request)

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """What :meth:`apply` would refuse (it raises the same) or hit, read-only (the
        optional check hook of :class:`gameday.contract.backend.Backend`)."""
        handler = self._handler(request.kind)
        if self.policy is None:
            raise PolicyRefused(NO_POLICY)
        self.policy.check(request)
        return backend_check(handler, request)

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """A batch (or a check) finds its processes in one read of ``/proc``
        (:func:`gameday.node.processes.one_scan`), whatever its number of items."""
        return one_scan()

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        handler = self._all.get(request.kind)
        if handler is not None:
            handler.revert(fault_id, request)


def host_backend(node: str | None = None) -> HostBackend:
    """The backend for ``gameday agent serve --backend host``."""
    handlers: list[HostFault] = []
    for area in AREAS:
        handlers.extend(importlib.import_module(area).handlers())
    return HostBackend(node or socket.gethostname(), handlers)
