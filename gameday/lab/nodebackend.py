"""The node's virtual backend: GPU kinds on its virtual GPUs, every other kind by handler.

A lab node applies GPU faults to its :class:`VirtualGpuBackend`; node-level kinds
(links, storage, processes, hogs, services) are small :class:`NodeFault` handlers built
from a :class:`NodeContext`. Add a kind by adding its handler to ``node_handlers``.
"""

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from gameday.contract.backend import FaultRequest, backend_check
from gameday.errors import FaultRejected
from gameday.lab.devices import VirtualGpuBackend
from gameday.lab.hostfaults import hog_handlers, process_handlers
from gameday.lab.layout import LabPaths
from gameday.lab.link import LabLink, link_handlers
from gameday.lab.servicefaults import head_node_service_handlers
from gameday.lab.storage import store_handlers


@dataclass(frozen=True)
class NodeContext:
    """What a node-level handler may need to know about its node."""

    node: str
    paths: LabPaths
    link: LabLink | None = None  # the node's network link (net.* kinds)


class NodeFault(Protocol):
    kind: str
    injected_at: str

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        """Apply it; raise FaultRejected (one line naming the parameter) if invalid."""
        ...

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        """Undo it (idempotent)."""
        ...


def node_handlers(context: NodeContext) -> list[NodeFault]:
    """The node-level fault handlers of a lab node."""
    handlers: list[NodeFault] = []
    if context.link is not None:
        handlers += link_handlers(context.link)
    handlers += head_node_service_handlers(context.node, context.paths)
    handlers += [*store_handlers(context.paths), *process_handlers(context.paths),
                 *hog_handlers(context.paths)]
    return handlers


class NodeBackend:
    """Dispatches GPU kinds to the virtual GPUs and other kinds to their handlers."""

    name = "virtual"

    def __init__(self, gpus: VirtualGpuBackend, handlers: list[NodeFault]) -> None:
        self.gpus = gpus
        self.handlers = {handler.kind: handler for handler in handlers}

    def inventory(self) -> dict[str, Any]:
        """The GPUs, plus what handlers with an ``inventory()`` add (``links``...), by name."""
        inventory = self.gpus.inventory()
        for handler in self.handlers.values():
            extra = getattr(handler, "inventory", None)
            for key, items in (extra() if callable(extra) else {}).items():
                listed = inventory.setdefault(key, [])
                names = {item.get("name") for item in listed}
                listed.extend(item for item in items if item.get("name") not in names)
        return inventory

    def batch(self) -> AbstractContextManager[None]:
        """The virtual GPUs' batch (:meth:`VirtualGpuBackend.batch`)."""
        return self.gpus.batch()

    def kinds(self) -> Mapping[str, str]:
        return {**self.gpus.kinds(),
                **{kind: handler.injected_at for kind, handler in self.handlers.items()}}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        handler = self.handlers.get(request.kind)
        if handler is not None:
            return handler.apply(fault_id, request)
        if request.kind in self.gpus.kinds():
            return self.gpus.apply(fault_id, request)
        raise FaultRejected(f"fault kind {request.kind!r} is not supported by the lab node; "
                            f"supported: {', '.join(sorted(self.kinds()))}")

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """What :meth:`apply` would refuse (it raises the same) or hit, read-only."""
        handler = self.handlers.get(request.kind)
        if handler is not None:
            return backend_check(handler, request)
        if request.kind in self.gpus.kinds():
            return self.gpus.check(request)
        raise FaultRejected(f"fault kind {request.kind!r} is not supported by the lab node; "
                            f"supported: {', '.join(sorted(self.kinds()))}")

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        handler = self.handlers.get(request.kind)
        if handler is not None:
            handler.revert(fault_id, request)
        else:
            self.gpus.revert(fault_id, request)
