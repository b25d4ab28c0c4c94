"""The agent's wire vocabulary, free of HTTP: limits, revert reasons, request parsing.

The server turns a request body (already decoded JSON) into typed values with
:func:`parse_inject` and :func:`parse_renew`; both raise
:class:`gameday.errors.InvalidInput` with a one-line message that the agent answers
with ``400``. See ``docs/agent-api.md`` for the contract.
"""

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from gameday.contract.backend import FaultRequest
from gameday.errors import InvalidInput, first_line

__all__ = [
    "LEASE_MAX_S",
    "LEASE_MIN_S",
    "MAX_BATCH_BODY_BYTES",
    "MAX_BATCH_ITEMS",
    "MAX_BODY_BYTES",
    "MAX_BODY_DEPTH",
    "MAX_REQUEST_ID",
    "MINIMAL_FIELDS",
    "PREFER_MINIMAL",
    "REVERT_REASONS",
    "Outcome",
    "RevertReason",
    "check_lease",
    "check_request_id",
    "decode_body",
    "parse_batch_check",
    "parse_batch_ids",
    "parse_batch_inject",
    "parse_inject",
    "parse_renew",
    "parse_resolve",
    "prefers_minimal",
]

#: Shortest and longest lease the agent grants, in seconds.
LEASE_MIN_S: Final = 1.0
LEASE_MAX_S: Final = 3600.0

#: Largest request body the agent reads; larger ones get ``413``.
MAX_BODY_BYTES: Final = 64 * 1024

#: Most items in one batch request, and the largest batch body the agent reads.
MAX_BATCH_ITEMS: Final = 1024
MAX_BATCH_BODY_BYTES: Final = 1024 * 1024

#: Why a fault was reverted (``revert_reason``).
RevertReason = Literal["requested", "lease-expired", "agent-shutdown", "agent-restart",
                       "halted"]
REVERT_REASONS: Final[tuple[RevertReason, ...]] = (
    "requested", "lease-expired", "agent-shutdown", "agent-restart", "halted")

#: The ``Prefer`` header value (RFC 7240) with which a batch request asks for minimal
#: faults in its answer; an agent that honours it answers ``Preference-Applied`` with it.
PREFER_MINIMAL: Final = "return=minimal"

#: What a batch did to its faults.
Outcome = Literal["applied", "reverted", "renewed"]
#: The fields a minimal answer keeps of each fault, by what the batch did: those the
#: agent set. The others are what the request sent (kind, target, params, the lease of
#: an inject) or did not change.
MINIMAL_FIELDS: Final[dict[Outcome, tuple[str, ...]]] = {
    "applied": ("id", "injected_at", "applied_at", "expires_at", "details"),
    "reverted": ("id", "reverted_at", "revert_reason"),
    "renewed": ("id", "lease_s", "expires_at"),
}

_INJECT_FIELDS: Final = ("kind", "target", "params", "lease_s", "run", "request_id")
_RESOLVE_FIELDS: Final = ("request_ids",)
#: Longest request id (an idempotency key) the agent accepts.
MAX_REQUEST_ID: Final = 128
#: A request id: printable ASCII without the space, 1 to MAX_REQUEST_ID characters.
_REQUEST_ID: Final = re.compile(f"[!-~]{{1,{MAX_REQUEST_ID}}}")
_RENEW_FIELDS: Final = ("lease_s",)
_BATCH_INJECT_FIELDS: Final = ("faults",)
_BATCH_IDS_FIELDS: Final = ("ids",)
_BATCH_RENEW_FIELDS: Final = ("ids", "lease_s")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: One decoder for every body (``json.loads`` with options makes a new one per call).
_BODY_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


#: Levels of objects and arrays a request body may nest (a fault's target and params
#: need a handful; the audit trail's redaction keeps this many).
MAX_BODY_DEPTH: Final = 32


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and arrays more than ``limit`` levels (no
    recursion: any depth is measured)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (item.values() if isinstance(item, dict) else
                    item if isinstance(item, list) else None)
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def decode_body(raw: bytes) -> Any:
    """Decode a JSON request body (UTF-8; ``NaN``/``Infinity`` and objects and arrays
    nested deeper than :data:`MAX_BODY_DEPTH` levels refused)."""
    try:
        text = raw.decode("utf-8")
        if text.startswith("\ufeff"):  # as json.loads
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)",
                                       text, 0)
        value = _BODY_DECODER.decode(text)
    except RecursionError:
        raise InvalidInput("body is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        # json.JSONDecodeError is a ValueError; keep only its first line.
        raise InvalidInput(f"body is not valid JSON: {first_line(exc)}") from None
    # each level opens with a brace or a bracket of the text (those in strings only add
    # to the count): a body with no more of them than the limit is not measured
    if (raw.count(b"{") + raw.count(b"[") > MAX_BODY_DEPTH
            and _deeper_than(value, MAX_BODY_DEPTH)):
        raise InvalidInput(f"body is nested deeper than {MAX_BODY_DEPTH} levels")
    return value


def check_lease(value: object, *, field: str = "lease_s") -> float:
    """Return ``value`` if it is a number of seconds within 1..3600, else raise InvalidInput.

    An integer stays an integer (so it is echoed back as it was sent).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{field} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or not LEASE_MIN_S <= value <= LEASE_MAX_S:
        raise InvalidInput(
            f"{field} must be between {LEASE_MIN_S:g} and {LEASE_MAX_S:g} seconds, got {value!r}")
    return value


def _check_fields(body: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in body:  # a plain loop: a valid body (each item of a batch) makes no set
        if key not in allowed:
            raise InvalidInput(
                f"unknown field {min(body.keys() - allowed)!r}; expected {', '.join(allowed)}")


def _json_object(value: object, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{field} must be a JSON object, got {_json_type(value)}")
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def parse_inject(body: object) -> tuple[FaultRequest, float]:
    """Parse ``{"kind", "target", "params"?, "lease_s", "run"?, "request_id"?}`` into a
    request and its lease.

    ``kind`` (non-empty string), ``target`` (object) and ``lease_s`` are required;
    ``params`` (object) defaults to ``{}``, ``run`` (the asking run's id, a string) to
    ``""``; ``request_id`` (1..128 printable ASCII characters) is the caller's idempotency
    key; any other field is refused.
    """
    obj = _json_object(body, "body")
    _check_fields(obj, _INJECT_FIELDS)
    for name in ("kind", "target", "lease_s"):
        if name not in obj:
            raise InvalidInput(f"missing field {name!r}")
    kind = obj["kind"]
    if not isinstance(kind, str) or not kind:
        raise InvalidInput(f"kind must be a non-empty string, got {_json_type(kind)}")
    target = _json_object(obj["target"], "target")
    params = _json_object(obj.get("params", {}), "params")
    lease_s = check_lease(obj["lease_s"])
    run = obj.get("run", "")
    if not isinstance(run, str):
        raise InvalidInput(f"run must be a string, got {_json_type(run)}")
    request_id = check_request_id(obj["request_id"], "request_id") if "request_id" in obj else ""
    return FaultRequest(kind, target, params, run, request_id), lease_s


def check_request_id(value: object, where: str) -> str:
    """A request id (idempotency key): 1..128 printable ASCII characters, no space."""
    if not isinstance(value, str) or not _REQUEST_ID.fullmatch(value):
        raise InvalidInput(f"{where} must be 1 to {MAX_REQUEST_ID} printable ASCII "
                           f"characters, got {_json_type(value)}")
    return value


def parse_resolve(body: object) -> list[str]:
    """Parse ``{"request_ids": [request id, ...]}`` (1..1024 distinct request ids)."""
    obj = _json_object(body, "body")
    _check_fields(obj, _RESOLVE_FIELDS)
    ids = [check_request_id(value, f"request_ids[{index}]")
           for index, value in enumerate(_batch_list(obj, "request_ids"))]
    if len(set(ids)) != len(ids):
        raise InvalidInput("request_ids holds an id more than once")
    return ids


def parse_renew(body: object) -> float | None:
    """Parse a renew body: nothing, ``{}`` or ``{"lease_s": n}``; ``None`` keeps the lease."""
    if body is None:
        return None
    obj = _json_object(body, "body")
    _check_fields(obj, _RENEW_FIELDS)
    if "lease_s" not in obj:
        return None
    return check_lease(obj["lease_s"])


def _batch_list(obj: Mapping[str, Any], field: str) -> list[Any]:
    if field not in obj:
        raise InvalidInput(f"missing field {field!r}")
    items = obj[field]
    if not isinstance(items, list):
        raise InvalidInput(f"{field} must be a JSON array, got {_json_type(items)}")
    if not 1 <= len(items) <= MAX_BATCH_ITEMS:
        raise InvalidInput(f"{field} must hold 1 to {MAX_BATCH_ITEMS} items, got {len(items)}")
    return items


def parse_batch_inject(body: object) -> list[tuple[FaultRequest, float]]:
    """Parse ``{"faults": [inject body, ...]}`` (1..1024 items, each as
    :func:`parse_inject`); an item's error names its index (``faults[3]: ...``)."""
    obj = _json_object(body, "body")
    _check_fields(obj, _BATCH_INJECT_FIELDS)
    parsed = []
    for index, item in enumerate(_batch_list(obj, "faults")):
        try:
            parsed.append(parse_inject(item))
        except InvalidInput as exc:
            raise InvalidInput(f"faults[{index}]: {exc}") from None
    return parsed


def parse_batch_check(body: object) -> list[tuple[FaultRequest, float] | InvalidInput]:
    """Parse a check body, ``{"faults": [inject body, ...]}`` (1..1024 items): each item
    as :func:`parse_inject`, or the :class:`InvalidInput` it raised (that item's answer,
    not the request's). A body that is not such a list raises."""
    obj = _json_object(body, "body")
    _check_fields(obj, _BATCH_INJECT_FIELDS)
    parsed: list[tuple[FaultRequest, float] | InvalidInput] = []
    for item in _batch_list(obj, "faults"):
        try:
            parsed.append(parse_inject(item))
        except InvalidInput as exc:
            parsed.append(exc)
    return parsed


def parse_batch_ids(body: object, *, renew: bool = False) -> tuple[list[str], float | None]:
    """Parse ``{"ids": [fault id, ...]}`` (1..1024 distinct non-empty strings); with
    ``renew``, an optional ``lease_s`` too (``None`` keeps each fault's own lease)."""
    obj = _json_object(body, "body")
    _check_fields(obj, _BATCH_RENEW_FIELDS if renew else _BATCH_IDS_FIELDS)
    ids = _batch_list(obj, "ids")
    for index, fault_id in enumerate(ids):
        if not isinstance(fault_id, str) or not fault_id:
            raise InvalidInput(f"ids[{index}] must be a non-empty string, got "
                               f"{_json_type(fault_id)}")
    seen: set[str] = set()
    for fault_id in ids:
        if fault_id in seen:
            raise InvalidInput(f"ids holds {fault_id!r} more than once")
        seen.add(fault_id)
    lease_s = check_lease(obj["lease_s"]) if renew and "lease_s" in obj else None
    return ids, lease_s


def prefers_minimal(prefer: str | None) -> bool:
    """Whether a ``Prefer`` header (RFC 7240: comma-separated preferences, each
    ``name[=value]`` with ``;`` parameters; names case-insensitive, values maybe quoted)
    asks for ``return=minimal``. The first ``return`` preference counts."""
    for preference in (prefer or "").split(","):
        name, _, value = preference.partition(";")[0].partition("=")
        if name.strip().lower() == "return":
            return value.strip().strip('"').lower() == "minimal"
    return False
