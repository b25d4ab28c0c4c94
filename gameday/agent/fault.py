"""One fault the agent applied (:class:`Fault`), and the helpers that make a batch's.

A fault is the record both ends share (:class:`gameday.wire.fault_record.FaultRecord`)
and immutable: a change (applied, reverted, renewed) is a new :class:`Fault`
(:meth:`Fault.as_applied`, :meth:`Fault.as_reverted`, :func:`dataclasses.replace`).
Its JSON is :meth:`Fault.to_json`, encoded by whoever writes it (the state file, the
answers) with the :mod:`json` encoder.
"""

import dataclasses
import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

from gameday.contract.backend import FaultRequest
from gameday.errors import AgentError
from gameday.wire.fault_record import FaultRecord
from gameday.wire.protocol import MINIMAL_FIELDS, REVERT_REASONS, Outcome, RevertReason

__all__ = ["Fault", "new_fault_ids", "new_faults", "plain_details"]

#: A backend's details: anything it returns that JSON cannot hold becomes a string.
_DETAILS_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), default=str)
#: And read back, NaN and the infinities as their words (made once: ``json.loads`` with
#: an argument makes a decoder per call, a third of the round trip).
_DETAILS_DECODER: Final = json.JSONDecoder(parse_constant=str)


@dataclass(frozen=True)
class Fault(FaultRecord):
    """One fault the agent applied (a :class:`~gameday.wire.fault_record.FaultRecord`
    whose ``revert_reason`` is one of the agent's), and how it changes.

    The fields are never changed in place (the backend's request cached on the fault
    relies on it): copy with :meth:`as_applied`, :meth:`as_reverted` or
    :func:`dataclasses.replace`.
    """

    revert_reason: RevertReason | None = None

    @functools.cached_property
    def request(self) -> FaultRequest:
        """The request the backend applied (and is given again to revert)."""
        return FaultRequest(self.kind, self.target, self.params)

    def as_applied(self, now: float, details: dict[str, Any]) -> "Fault":
        """The fault once the backend applied it at ``now`` with ``details`` (plain JSON,
        :func:`plain_details`): its lease runs from then. A backend that knows better,
        once applied, how far this one fault reached says so with a string
        ``details["injected_at"]``, which then replaces the kind's layer."""
        layer = details.get("injected_at")
        return dataclasses.replace(self, applied_at=now, expires_at=now + self.lease_s,
                                   details=details,
                                   injected_at=layer if isinstance(layer, str) and layer
                                   else self.injected_at)

    def as_reverted(self, now: float, reason: RevertReason) -> "Fault":
        """The fault once reverted at ``now`` for ``reason``."""
        return dataclasses.replace(self, reverted_at=now, revert_reason=reason)

    def minimal(self, outcome: Outcome) -> dict[str, Any]:
        """What a minimal answer (``Prefer: return=minimal``) shows of the fault after
        ``outcome``: the fields of :data:`~gameday.wire.protocol.MINIMAL_FIELDS`."""
        whole: Mapping[str, Any] = self.to_json()
        return {name: whole[name] for name in MINIMAL_FIELDS[outcome]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """Read a fault written by :meth:`to_json` (extra keys are ignored);
        :class:`AgentError` if it is not one, or ends for a reason not the agent's."""
        try:
            reason = data.get("revert_reason")
            if reason is not None and reason not in REVERT_REASONS:
                raise ValueError(f"unknown revert_reason {reason!r}")
            return super().from_json(data)
        except ValueError as exc:
            raise AgentError(f"malformed fault record {dict(data)!r}: {exc}") from None


def new_faults(items: Sequence[tuple[FaultRequest, float]], layers: Mapping[str, str],
               now: float) -> list[Fault]:
    """The faults of a batch about to be applied, one per ``(request, lease_s)`` of
    ``items``: a new id each (:func:`new_fault_ids`), copies of the request's target and
    params, ``injected_at`` from ``layers`` by kind, applied at ``now``."""
    return [Fault(id=fault_id, kind=request.kind, target=dict(request.target),
                  params=dict(request.params), lease_s=lease_s,
                  injected_at=layers[request.kind], applied_at=now, expires_at=now + lease_s)
            for fault_id, (request, lease_s) in zip(new_fault_ids(len(items)), items,
                                                    strict=True)]


def new_fault_ids(count: int) -> list[str]:
    """``count`` new fault ids: ``f-`` and a random (version 4) UUID in hex, as
    ``uuid.uuid4().hex`` makes them, from one read of the OS's randomness for them all
    (``uuid4`` reads it once per id)."""
    raw = bytearray(os.urandom(16 * count))
    for start in range(0, len(raw), 16):
        raw[start + 6] = raw[start + 6] & 0x0F | 0x40  # version 4
        raw[start + 8] = raw[start + 8] & 0x3F | 0x80  # variant RFC 4122
    text = raw.hex()
    return [f"f-{text[start:start + 32]}" for start in range(0, len(text), 32)]


def plain_details(details: object) -> dict[str, Any]:
    """A backend's details as plain JSON, as they read back from the JSON text: a JSON
    object (``{}`` for none, ``{"value": ...}`` for anything that is not an object),
    anything JSON cannot hold made a string: an object of no JSON type (its ``str``),
    and NaN and the infinities (``"NaN"``, ``"Infinity"``, ``"-Infinity"``), which an
    answer may not carry: kept as floats, they made every answer about the fault fail
    after the fault was applied. Raises what the encoder raises (a circular reference, a
    key that is not a string, an integer too long to write)."""
    if not details:
        return {}
    value = _DETAILS_DECODER.decode(_DETAILS_ENCODER.encode(details))
    return value if isinstance(value, dict) else {"value": value}
