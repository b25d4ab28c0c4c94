"""One applied fault as both ends record it (:class:`FaultRecord`), and its JSON.

The agent's fault (:class:`gameday.agent.fault.Fault`) is one, and the orchestrator's
ledger entry (:class:`gameday.evidence.ledger.FaultEntry`) is one with what only the
ledger knows added. :class:`FaultRecordJSON` is the object the agent API answers with
(docs/agent-api.md), the agent saves in its state file, and the ledger's lines and the
journals extend.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self, TypedDict

__all__ = ["FaultRecord", "FaultRecordJSON"]


class FaultRecordJSON(TypedDict):
    """A fault's JSON object: :meth:`FaultRecord.to_json`, read by
    :meth:`FaultRecord.from_json`."""

    id: str
    kind: str
    target: dict[str, Any]
    params: dict[str, Any]
    lease_s: float
    injected_at: str
    applied_at: float
    expires_at: float
    reverted_at: float | None
    revert_reason: str | None
    details: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """One applied fault: what (``kind``, ``params``), where (``target``), how far it
    reached (``injected_at``: the layer), its lease and its end.

    Times are Unix epoch seconds. ``reverted_at`` and ``revert_reason`` are ``None``
    while the fault is active. ``details`` is what the backend that applied it
    returned (plain JSON). Frozen: a change is a new record
    (:func:`dataclasses.replace`).
    """

    id: str
    kind: str
    target: dict[str, Any]
    params: dict[str, Any]
    lease_s: float
    injected_at: str
    applied_at: float
    expires_at: float
    reverted_at: float | None = None
    revert_reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.reverted_at is None

    def to_json(self) -> FaultRecordJSON:
        """The record as the agent API shows it, in the order the agent writes it."""
        return {
            "id": self.id, "kind": self.kind, "target": self.target, "params": self.params,
            "lease_s": self.lease_s, "injected_at": self.injected_at,
            "applied_at": self.applied_at, "expires_at": self.expires_at,
            "reverted_at": self.reverted_at, "revert_reason": self.revert_reason,
            "details": self.details,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """Read a record :meth:`to_json` wrote (extra keys are ignored; ``target``,
        ``params`` and ``details`` may be absent or null, ``injected_at`` absent).
        :class:`ValueError` saying what is wrong when a required key is missing or a
        value has the wrong type."""
        try:
            reason = data.get("revert_reason")
            if reason is not None and not isinstance(reason, str):
                raise ValueError(f"revert_reason is not a string: {reason!r}")
            reverted_at = data.get("reverted_at")
            return cls(
                id=str(data["id"]), kind=str(data["kind"]),
                target=dict(data.get("target") or {}), params=dict(data.get("params") or {}),
                lease_s=float(data["lease_s"]), injected_at=str(data.get("injected_at", "")),
                applied_at=float(data["applied_at"]), expires_at=float(data["expires_at"]),
                reverted_at=None if reverted_at is None else float(reverted_at),
                revert_reason=reason, details=dict(data.get("details") or {}))
        except KeyError as exc:
            raise ValueError(f"no {exc.args[0]!r}") from None
        except TypeError as exc:
            raise ValueError(str(exc)) from None
