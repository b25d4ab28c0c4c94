"""The seam for one real fault kind on a host.

A host backend is composed of :class:`HostFault` handlers, one per kind, each saying
whether this host can apply it (and why not), so the agent advertises only what is
really possible here and a user sees the reason for what is not.
"""

from typing import Any, Protocol

from gameday.contract.backend import FaultRequest


class HostFault(Protocol):
    kind: str
    injected_at: str

    def unavailable(self) -> str | None:
        """None when this host can apply the fault, else a one-line reason."""
        ...

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        """Apply it; raise ``gameday.errors.FaultRejected`` with one line if it cannot."""
        ...

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        """Undo it (idempotent)."""
        ...

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        """What this handler sees on the host (``{"gpus": [...]}``, ``{"links": [...]}``...)."""
        ...
