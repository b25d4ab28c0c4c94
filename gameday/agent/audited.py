"""A backend whose every apply and revert is preceded by a durable audit record.

:class:`AuditedBackend` wraps the agent's backend between the registry and the real
mechanism: whatever asks for a change (a request, a batch, the lease reaper, a
shutdown, the revert of a previous run's leftovers), the registry reaches the backend
only through it, so no change happens before its ``apply`` or ``revert`` record is on
disk. When the record cannot be written, the apply is refused
(:class:`gameday.agent.audit.AuditUnavailable`, ``503``) and the revert fails, to be
retried as any failed revert is.
"""

from collections.abc import Mapping
from typing import Any

from gameday.agent.audit import AuditTrail
from gameday.contract.backend import Backend, FaultRequest

__all__ = ["AuditedBackend"]


class AuditedBackend:
    """``backend`` with an audit record before each of its changes; every other
    attribute (its optional hooks too) is ``backend``'s own."""

    def __init__(self, backend: Backend, audit: AuditTrail) -> None:
        self._backend = backend
        self._audit = audit
        self.name = backend.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def inventory(self) -> dict[str, Any]:
        return self._backend.inventory()

    def kinds(self) -> Mapping[str, str]:
        return self._backend.kinds()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        self._audit.fault("apply", fault_id, request.kind, request.target, request.params)
        return self._backend.apply(fault_id, request)

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        self._audit.fault("revert", fault_id, request.kind, request.target, request.params)
        self._backend.revert(fault_id, request)
