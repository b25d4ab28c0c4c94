"""A backend whose every apply and revert is preceded by a durable audit record.

:class:`AuditedBackend` wraps the agent's backend between the registry and the real
mechanism: whatever asks for a change (a request, a batch, the lease reaper, a
shutdown, the revert of a previous run's leftovers), the registry reaches the backend
only through it, so no change happens before its ``apply`` or ``revert`` record is on
disk. When the record cannot be written, the apply is refused
(:class:`gameday.agent.audit.AuditUnavailable`, ``503``) and the revert fails, to be
retried as any failed revert is.
"""

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from gameday.agent.audit import AuditTrail, AuditUnavailable
from gameday.contract.backend import Backend, FaultRequest

__all__ = ["AuditedBackend"]


class AuditedBackend:
    """``backend`` with an audit record before each of its changes; every other
    attribute (its optional hooks too) is ``backend``'s own.

    A batch's records are one write and one ``fsync`` (:meth:`ahead`, entered by the
    registry before the batch's first change): each record is still on disk before its
    change; a change of the batch the registry does not reach (an earlier one failed)
    keeps its record, and the batch's ``outcome`` record says what became of it."""

    def __init__(self, backend: Backend, audit: AuditTrail) -> None:
        self._backend = backend
        self._audit = audit
        self.name = backend.name
        self._recorded: dict[str, set[str]] = {"apply": set(), "revert": set()}

    @contextlib.contextmanager
    def ahead(self, change: Literal["apply", "revert"],
              items: Sequence[tuple[str, FaultRequest]]) -> Iterator[None]:
        """Record every change of a batch before its first, durable together; inside,
        :meth:`apply`/:meth:`revert` of those faults write no record of their own. When
        the records cannot be written, each change writes (and fails on) its own."""
        ids = [fault_id for fault_id, _ in items]
        try:
            self._audit.faults(change, [(fault_id, request.kind, request.target,
                                         request.params) for fault_id, request in items])
        except AuditUnavailable:
            ids = []
        recorded = self._recorded[change]
        recorded.update(ids)
        try:
            yield
        finally:
            recorded.difference_update(ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def inventory(self) -> dict[str, Any]:
        return self._backend.inventory()

    def kinds(self) -> Mapping[str, str]:
        return self._backend.kinds()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        if fault_id not in self._recorded["apply"]:
            self._audit.fault("apply", fault_id, request.kind, request.target, request.params)
        return self._backend.apply(fault_id, request)

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        if fault_id not in self._recorded["revert"]:
            self._audit.fault("revert", fault_id, request.kind, request.target,
                              request.params)
        self._backend.revert(fault_id, request)
