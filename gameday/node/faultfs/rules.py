"""Fault rules: which filesystem operations are delayed, hung or failed, and how.

A :class:`Rule` is plain data (it crosses the control channel as JSON). :class:`RuleSet`
holds the active rules by fault id and is asked, at the start of every operation, what
to do (:meth:`RuleSet.before`). Removing a rule releases every operation it holds.
"""

import random
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gameday.contract.faultfs import ERRNOS, OPERATION_GROUPS, OPERATIONS
from gameday.errors import InvalidInput
from gameday.kinds import catalogue as kind_specs
from gameday.kinds.storage import ErrorsParams, SlowParams, StallParams

__all__ = ["ERRNOS", "OPERATIONS", "FaultRaised", "Rule", "RuleError", "RuleSet",
           "rule_for_fault"]

Mode = Literal["latency", "hang", "error"]
MODES: tuple[Mode, ...] = ("latency", "hang", "error")


class RuleError(ValueError):
    """A rule that cannot be applied; the message is one line naming the key."""


class FaultRaised(OSError):
    """An injected error (``errno`` set), raised out of an operation."""


def expand_operations(ops: Iterable[str], *, key: str = "ops") -> frozenset[str]:
    """Operation names and group names (``all``, ``data``, ``metadata``) to a set."""
    chosen: set[str] = set()
    for name in ops:
        if name in OPERATION_GROUPS:
            chosen.update(OPERATION_GROUPS[name])
        elif name in OPERATIONS:
            chosen.add(name)
        else:
            raise RuleError(f"{key}: unknown operation {name!r} (known: "
                            f"{', '.join((*OPERATION_GROUPS, *OPERATIONS))})")
    if not chosen:
        raise RuleError(f"{key}: select at least one operation")
    return frozenset(chosen)


@dataclass(frozen=True)
class Rule:
    """What happens to matching operations: ``latency`` (delay), ``hang`` (until the rule
    is removed) or ``error`` (fail with ``errno_name`` in ``percent`` % of them).
    ``path`` limits the rule to a file or directory of the mount (``/`` = everything)."""

    mode: Mode
    ops: frozenset[str]
    path: str = "/"
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    errno_name: str = "EIO"
    percent: float = 100.0
    duration_s: float | None = None  # it clears by itself after this long

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise RuleError(f"mode: must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not self.path.startswith("/"):
            raise RuleError(f"path: must start with / (relative to the mount), got {self.path!r}")
        if self.latency_ms < 0 or self.jitter_ms < 0:
            raise RuleError("latency_ms and jitter_ms must be >= 0")
        if self.mode == "latency" and self.latency_ms + self.jitter_ms <= 0:
            raise RuleError("latency_ms: a latency rule needs latency_ms > 0")
        if self.errno_name not in ERRNOS:
            raise RuleError(f"errno: must be one of {', '.join(ERRNOS)}, got {self.errno_name!r}")
        if not 0 < self.percent <= 100:
            raise RuleError(f"percent: must be in (0, 100], got {self.percent}")
        if self.duration_s is not None and self.duration_s <= 0:
            raise RuleError(f"duration_s: must be > 0, got {self.duration_s}")

    def matches(self, op: str, path: str) -> bool:
        if op not in self.ops:
            return False
        prefix = self.path.rstrip("/")
        return not prefix or path == prefix or path.startswith(prefix + "/")

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "ops": sorted(self.ops), "path": self.path,
                "latency_ms": self.latency_ms, "jitter_ms": self.jitter_ms,
                "errno": self.errno_name, "percent": self.percent,
                "duration_s": self.duration_s}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Rule":
        try:
            return cls(mode=data["mode"], ops=expand_operations(data.get("ops") or ["all"]),
                       path=str(data.get("path") or "/"),
                       latency_ms=float(data.get("latency_ms") or 0.0),
                       jitter_ms=float(data.get("jitter_ms") or 0.0),
                       errno_name=str(data.get("errno") or "EIO"),
                       percent=float(data.get("percent") or 100.0),
                       duration_s=None if data.get("duration_s") is None
                       else float(data["duration_s"]))
        except KeyError as exc:
            raise RuleError(f"{exc.args[0]}: is required") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, RuleError):
                raise
            raise RuleError(f"rule: {exc}") from None


def rule_for_fault(kind: str, params: Mapping[str, Any]) -> Rule:
    """The rule for a storage fault kind (``storage.stall``, ``storage.errors``,
    ``storage.slow``) and its parameters, parsed by the kind's declaration
    (:mod:`gameday.kinds.storage`); the fault's ``within`` is the rule's ``path``.
    :class:`RuleError` naming ``params.<key>`` for parameters the declaration refuses."""
    modes: dict[str, Mode] = {"storage.stall": "hang", "storage.errors": "error",
                              "storage.slow": "latency"}
    if kind not in modes:
        raise RuleError(f"kind: {kind!r} is not a storage fault ({', '.join(modes)})")
    try:
        parsed = kind_specs.parse(kind, params)
    except InvalidInput as exc:
        raise RuleError(str(exc)) from None
    assert isinstance(parsed, StallParams | ErrorsParams | SlowParams)
    try:
        return Rule(mode=modes[kind], ops=expand_operations(parsed.ops), path=parsed.within,
                    latency_ms=parsed.latency_ms if isinstance(parsed, SlowParams) else 0.0,
                    jitter_ms=parsed.jitter_ms if isinstance(parsed, SlowParams) else 0.0,
                    errno_name=parsed.errno if isinstance(parsed, ErrorsParams) else "EIO",
                    percent=parsed.percent if isinstance(parsed, ErrorsParams) else 100.0,
                    duration_s=parsed.duration_s)
    except RuleError as exc:
        raise RuleError(f"params.{str(exc).replace('path:', 'within:', 1)}") from None


@dataclass
class _Active:
    rule: Rule
    until: float | None  # monotonic; None: until removed
    hits: int = 0
    waiting: int = 0
    removed: bool = False

    def over(self) -> bool:
        return self.removed or (self.until is not None and time.monotonic() >= self.until)


@dataclass
class RuleSet:
    """The active rules of one mount, by fault id; thread-safe."""

    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self._cond = threading.Condition()
        self._rules: dict[str, _Active] = {}
        self._closed = False

    def set(self, fault_id: str, rule: Rule) -> None:
        """Add (or replace) the rule of ``fault_id``."""
        with self._cond:
            old = self._rules.get(fault_id)
            if old is not None:
                old.removed = True
            until = None if rule.duration_s is None else time.monotonic() + rule.duration_s
            self._rules[fault_id] = _Active(rule, until)
            self._cond.notify_all()

    def clear(self, fault_id: str) -> int:
        """Remove the rule of ``fault_id`` (idempotent); return how many operations it
        was holding (each now proceeds)."""
        with self._cond:
            active = self._rules.pop(fault_id, None)
            if active is None:
                return 0
            active.removed = True
            self._cond.notify_all()
            return active.waiting

    def clear_all(self) -> int:
        with self._cond:
            released = 0
            for fault_id in list(self._rules):
                released += self.clear(fault_id)
            return released

    def close(self) -> None:
        """Remove every rule and refuse new ones' holds: nothing waits any more."""
        with self._cond:
            self._closed = True
            self.clear_all()

    def status(self) -> list[dict[str, Any]]:
        with self._cond:
            return [{"id": fault_id, "rule": a.rule.to_json(), "hits": a.hits,
                     "waiting": a.waiting, "over": a.over()}
                    for fault_id, a in self._rules.items()]

    def hung(self) -> int:
        with self._cond:
            return sum(a.waiting for a in self._rules.values())

    def before(self, op: str, path: str) -> None:
        """Apply the matching rules to one operation: hang, then delay, then maybe raise
        :class:`FaultRaised`. Returns when the operation may proceed."""
        with self._cond:
            matching = [a for a in self._rules.values()
                        if a.rule.matches(op, path) and not a.over()]
            for active in matching:
                active.hits += 1
            for active in matching:
                if active.rule.mode == "hang":
                    self._wait(active, None)
            for active in matching:
                if active.rule.mode == "latency" and not active.over():
                    rule = active.rule
                    delay = rule.latency_ms + self.rng.uniform(0.0, rule.jitter_ms)
                    self._wait(active, delay / 1000.0)
            for active in matching:
                rule = active.rule
                if rule.mode == "error" and not active.over() and \
                        self.rng.uniform(0.0, 100.0) < rule.percent:
                    code = ERRNOS[rule.errno_name]
                    raise FaultRaised(code, f"injected {rule.errno_name} on {op} {path}")

    def _wait(self, active: _Active, timeout_s: float | None) -> None:
        """Wait (lock held) until the rule is removed or runs out, or ``timeout_s`` passed."""
        if self._closed:
            return
        if active.until is not None:
            left = max(0.0, active.until - time.monotonic())
            timeout_s = left if timeout_s is None else min(timeout_s, left)
        active.waiting += 1
        try:
            self._cond.wait_for(lambda: active.removed or self._closed, timeout=timeout_s)
        finally:
            active.waiting -= 1
