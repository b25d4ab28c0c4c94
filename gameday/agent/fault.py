"""One fault the agent applied (:class:`Fault`), and its JSON text, made once.

A fault is immutable: a change (applied, reverted, renewed) is a new :class:`Fault`. So
its compact JSON text (:attr:`Fault.encoded`) is made at most once per fault, and the
agent's state file and its answers are put together from these texts instead of
encoding the same dicts again. The part that never changes over a fault's life (``id``
to ``injected_at``) and its ``details`` are encoded once for the fault and shared with
its copies (:meth:`Fault.as_applied`, :meth:`Fault.as_reverted`; the latter shares its
lease times too). The faults of a batch are made together (:func:`new_faults`,
:func:`plain_details`): their unchanging parts and their details take one encoder call
each for the batch, not one per fault.

The text is what ``json.dumps(fault.to_json(), separators=(",", ":"))`` writes, byte
for byte (``NaN``/``Infinity`` too, which :func:`strict_json` refuses for answers), but
for details whose keys a backend gave twice (``1`` and ``"1"``): the text keeps both,
the object the last, and both read back the same.
"""

import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any, Final, NamedTuple

from gameday.agent.backend import FaultRequest
from gameday.agent.protocol import MINIMAL_FIELDS, REVERT_REASONS, Outcome, RevertReason
from gameday.cachedattr import cached_attribute, construct, copy_with
from gameday.errors import AgentError
from gameday.jsontext import encode_objects, scalar_json

__all__ = ["Details", "Fault", "KeptDetails", "decode_details", "encode_details",
           "keep_details", "new_fault_ids", "new_faults", "plain_details", "strict_json"]

#: Compact, like the state file; stateless, so shared by threads.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"))
#: A backend's details: anything it returns that JSON cannot hold becomes a string.
_DETAILS_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), default=str)
_REASONS_JSON: Final = {reason: _ENCODER.encode(reason) for reason in REVERT_REASONS}
#: The types of values (but integers) that JSON gives back as they were (``bool`` too:
#: by type, not ``isinstance``, so no subclass passes).
_PLAIN_TYPES: Final = frozenset({str, float, bool, type(None)})
#: Integers within this bound, as any machine integer: far from the digits an integer
#: may have to be written at all (``sys.get_int_max_str_digits``).
_LONG: Final = 1 << 64


class Details(NamedTuple):
    """A backend's details as plain JSON: the object, and its JSON text."""

    value: dict[str, Any]
    encoded: str


@dataclass(frozen=True)
class Fault:
    """One fault the agent applied: what, where, under which lease, and its end.

    Times are Unix epoch seconds. ``reverted_at`` and ``revert_reason`` are ``None``
    while the fault is active. ``details`` is what the backend's ``apply`` returned.
    The fields are never changed in place (the JSON texts cached on the fault rely
    on it): copy with :meth:`as_applied`, :meth:`as_reverted` or
    :func:`dataclasses.replace`.
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
    revert_reason: RevertReason | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.reverted_at is None

    @cached_attribute
    def request(self) -> FaultRequest:
        """The request the backend applied (and is given again to revert)."""
        return FaultRequest(self.kind, self.target, self.params)

    def as_applied(self, now: float, details: Details) -> "Fault":
        """The fault once the backend applied it at ``now``: its lease runs from then."""
        return self._copy({"applied_at": now, "expires_at": now + self.lease_s,
                           "details": details.value, "_head_json": self._head_json,
                           "_details_json": details.encoded}, stale=("_lease_json",))

    def as_reverted(self, now: float, reason: RevertReason) -> "Fault":
        """The fault once reverted at ``now`` for ``reason``."""
        return self._copy({"reverted_at": now, "revert_reason": reason,
                           "_head_json": self._head_json, "_lease_json": self._lease_json,
                           "_details_json": self._details_json})

    def _copy(self, changes: dict[str, Any], stale: tuple[str, ...] = ()) -> "Fault":
        """A copy with ``changes``, keeping the cached values but :attr:`encoded` and
        ``stale`` (those made of fields that ``changes`` changes); cheap on a batch's
        hot path, unlike :func:`dataclasses.replace`."""
        return copy_with(self, changes, stale=("encoded", *stale))

    def to_json(self) -> dict[str, Any]:
        """The fault as the agent API shows it (docs/agent-api.md)."""
        return {
            "id": self.id, "kind": self.kind, "target": self.target, "params": self.params,
            "lease_s": self.lease_s, "injected_at": self.injected_at,
            "applied_at": self.applied_at, "expires_at": self.expires_at,
            "reverted_at": self.reverted_at, "revert_reason": self.revert_reason,
            "details": self.details,
        }

    @cached_attribute
    def encoded(self) -> str:
        """:meth:`to_json` as compact JSON text, made once for this fault."""
        return (f'{self._head_json},{self._lease_json},{self._end_json()},'
                f'"details":{self._details_json}}}')

    def minimal(self, outcome: Outcome) -> dict[str, Any]:
        """What a minimal answer (``Prefer: return=minimal``) shows of the fault after
        ``outcome``: the fields of :data:`~gameday.agent.protocol.MINIMAL_FIELDS`."""
        whole = self.to_json()
        return {name: whole[name] for name in MINIMAL_FIELDS[outcome]}

    def minimal_json(self, outcome: Outcome) -> str:
        """:meth:`minimal` as compact JSON text, put together from the texts the fault
        keeps (as the encoder writes them, byte for byte)."""
        if outcome == "applied":
            return (f'{{"id":{_string(self.id)},"injected_at":{_string(self.injected_at)},'
                    f'{self._lease_json},"details":{self._details_json}}}')
        if outcome == "reverted":
            return f'{{"id":{_string(self.id)},{self._end_json()}}}'
        return (f'{{"id":{_string(self.id)},"lease_s":{_number(self.lease_s)},'
                f'"expires_at":{_number(self.expires_at)}}}')

    def _end_json(self) -> str:
        """``"reverted_at":…,"revert_reason":…``."""
        reverted_at = "null" if self.reverted_at is None else _number(self.reverted_at)
        reason = ("null" if self.revert_reason is None else
                  _REASONS_JSON.get(self.revert_reason) or _ENCODER.encode(self.revert_reason))
        return f'"reverted_at":{reverted_at},"revert_reason":{reason}'

    @cached_attribute
    def _head_json(self) -> str:
        """The JSON object of the fields that never change over the fault's life, open
        at the end (no ``}``)."""
        return _ENCODER.encode({
            "id": self.id, "kind": self.kind, "target": self.target, "params": self.params,
            "lease_s": self.lease_s, "injected_at": self.injected_at})[:-1]

    @cached_attribute
    def _lease_json(self) -> str:
        """``"applied_at":…,"expires_at":…``, shared with a reverted copy."""
        applied_at, expires_at = self.applied_at, self.expires_at
        if applied_at and expires_at:  # made once for the times a batch's faults share
            return _shared_lease_json(applied_at, expires_at)
        return _shared_lease_json.__wrapped__(applied_at, expires_at)  # 0.0 = -0.0

    @cached_attribute
    def _details_json(self) -> str:
        return _ENCODER.encode(self.details) if self.details else "{}"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Fault":
        """Read a fault written by :meth:`to_json` (extra keys are ignored)."""
        try:
            reason = data.get("revert_reason")
            if reason is not None and reason not in REVERT_REASONS:
                raise ValueError(f"unknown revert_reason {reason!r}")
            reverted_at = data.get("reverted_at")
            return cls(
                id=str(data["id"]), kind=str(data["kind"]),
                target=dict(data.get("target") or {}), params=dict(data.get("params") or {}),
                lease_s=float(data["lease_s"]), injected_at=str(data.get("injected_at", "")),
                applied_at=float(data["applied_at"]), expires_at=float(data["expires_at"]),
                reverted_at=None if reverted_at is None else float(reverted_at),
                revert_reason=reason, details=dict(data.get("details") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise AgentError(f"malformed fault record {dict(data)!r}: {exc}") from None


def new_faults(items: Sequence[tuple[FaultRequest, float]], layers: Mapping[str, str],
               now: float) -> list[Fault]:
    """The faults of a batch about to be applied, one per ``(request, lease_s)`` of
    ``items``: a new id each (:func:`new_fault_ids`), copies of the request's target and
    params, ``injected_at`` from ``layers`` by kind, applied at ``now``.

    As ``Fault(...)`` would make them, but cheaper per fault: the part of their texts
    that never changes (``id`` to ``injected_at``) is put together from the targets and
    params, encoded with one encoder call for the batch
    (:func:`gameday.jsontext.encode_objects`), and the rest, plain values written as the
    encoder writes them; each fault (and its :attr:`Fault.request`) is made without the
    frozen dataclass's ``__init__`` (:func:`gameday.cachedattr.construct`). Raises what
    the encoder raises for a value JSON cannot hold, as :attr:`Fault.encoded` does.
    """
    objects: list[dict[str, Any]] = []  # each item's target, then its params
    for request, _ in items:
        objects += (dict(request.target), dict(request.params))
    texts = encode_objects(_ENCODER, objects)
    faults = []
    for index, (fault_id, (request, lease_s)) in enumerate(
            zip(new_fault_ids(len(items)), items, strict=True)):
        kind, layer = request.kind, layers[request.kind]
        target, params = objects[2 * index], objects[2 * index + 1]
        head = (f'{{"id":"{fault_id}","kind":{_string(kind)},"target":{texts[2 * index]},'
                f'"params":{texts[2 * index + 1]},"lease_s":{_number(lease_s)},'
                f'"injected_at":{_string(layer)}')  # an id is "f-" and hex: nothing to escape
        faults.append(construct(Fault, {
            "id": fault_id, "kind": kind, "target": target, "params": params,
            "lease_s": lease_s, "injected_at": layer, "applied_at": now,
            "expires_at": now + lease_s, "reverted_at": None, "revert_reason": None,
            "details": {}, "_head_json": head, "request": construct(
                FaultRequest, {"kind": kind, "target": target, "params": params})}))
    return faults


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


@functools.lru_cache(maxsize=256, typed=True)  # typed: 1 and 1.0 are written apart
def _shared_lease_json(applied_at: float, expires_at: float) -> str:
    """``"applied_at":…,"expires_at":…`` as the JSON encoder writes them; cached for
    the times that a batch's faults share, but never for a zero time (``0.0`` and
    ``-0.0`` are equal, so they would share the text of the first)."""
    return f'"applied_at":{_number(applied_at)},"expires_at":{_number(expires_at)}'


def _string(value: str) -> str:
    """A string as the JSON encoder writes it (its C escaper, without the encoder's
    fixed cost per call); anything else as the encoder writes it."""
    return encode_basestring_ascii(value) if isinstance(value, str) else _ENCODER.encode(value)


def _number(value: float) -> str:
    """A number as the JSON encoder writes it (a finite float or an integer: its
    ``repr``)."""
    return scalar_json(value) or _ENCODER.encode(value)


def strict_json(text: str) -> bool:
    """Whether JSON text made of fault texts holds no ``NaN``/``Infinity`` (which answers
    must refuse, as ``json.dumps(..., allow_nan=False)`` does); may say ``False`` for a
    string that merely contains the word, so a caller that gets ``False`` encodes the
    objects instead, strictly. Each word is looked for only where its capital letter is
    in the text (found with ``memchr``, many times faster than a word; a fault's text
    seldom has an ``N`` or an ``I``)."""
    return (("N" not in text or "NaN" not in text)
            and ("I" not in text or "Infinity" not in text))


def encode_details(details: object) -> str:
    """A backend's details as JSON text (anything unserialisable becomes a string);
    raises what the encoder raises (a circular reference, a key that is not a string)."""
    return _DETAILS_ENCODER.encode(details) if details else "null"


#: A backend's details as :func:`keep_details` keeps them: a copy, or JSON text.
KeptDetails = dict[str, Any] | str


def keep_details(details: object) -> KeptDetails:
    """What to keep of a backend's details as it returns them, to make them plain JSON
    later with the rest of its batch (:func:`plain_details`): a copy of a flat object
    of plain values (string keys; strings, numbers, booleans, nulls), which is JSON as
    it is and encodes without fail, else their text (:func:`encode_details`, which
    raises what it raises: so a backend's details that cannot be encoded fail its item,
    as they always did)."""
    if type(details) is dict:
        for key, value in details.items():  # a plain loop: cheaper than all(...)
            if type(key) is not str:
                break
            if type(value) is int:
                if not -_LONG < value < _LONG:
                    break
            elif type(value) not in _PLAIN_TYPES:
                break
        else:
            return dict(details)
    return encode_details(details)


def plain_details(kept: list[KeptDetails]) -> list[Details]:
    """Details kept by :func:`keep_details` as plain JSON, each a JSON object with its
    text, as :func:`decode_details` makes them: the flat objects are encoded with one
    encoder call (:func:`gameday.jsontext.encode_objects`), the texts decoded in one."""
    objects = [value for value in kept if not isinstance(value, str)]
    texts = encode_objects(_DETAILS_ENCODER, objects)
    if len(objects) == len(kept):
        return [Details(value, text) for value, text in zip(objects, texts, strict=True)]
    decoded = iter(decode_details([value for value in kept if isinstance(value, str)]))
    encoded = iter(texts)
    return [next(decoded) if isinstance(value, str) else Details(value, next(encoded))
            for value in kept]


def decode_details(encoded: list[str]) -> list[Details]:
    """Details encoded by :func:`encode_details`, decoded in one go: each a JSON object
    (``{}`` for none, ``{"value": ...}`` for anything else), with its text."""
    values = json.loads(f"[{','.join(encoded)}]")
    return [Details({}, "{}") if value is None
            else Details(value, text) if isinstance(value, dict)
            else Details({"value": value}, f'{{"value":{text}}}')
            for value, text in zip(values, encoded, strict=True)]
