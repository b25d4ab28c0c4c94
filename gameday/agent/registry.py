"""The agent's core, free of HTTP: the faults it holds, their leases, their persistence.

A :class:`FaultRegistry` applies faults through a backend, holds each under a lease,
and reverts it when asked (``requested``), when its lease runs out (``lease-expired``,
see :meth:`FaultRegistry.reap`), when the agent stops (``agent-shutdown``) or, for
leftovers found in the state file, when the registry is created (``agent-restart``).

Concurrency: one lock guards the registry's maps; backend calls and state-file writes
(:class:`gameday.agent.statewriter.StateWriter`, a thread of its own) run outside it. A
fault is *claimed* (its state set to ``reverting``) under the lock before the backend
reverts it, so only one thread ever reverts a fault; others wait for it to finish.
A fault is written to the state file (``applying``) before the backend applies it, so
a crash at any point leaves nothing applied that the next start does not revert.

A :class:`Fault` (:mod:`gameday.agent.fault`, re-exported here) is immutable. A batch
reads its fault ids from the OS's randomness once, is saved with one state write before
the backend applies it and one after, checks its conflicts with a dict lookup per fault
(:class:`gameday.agent.conflicts.TargetIndex`), counts its metrics once per kind, and
builds no log event per fault that the logger would not write.
"""

import dataclasses
import json
import pathlib
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import structlog

from gameday.agent.conflicts import TargetIndex
from gameday.agent.fault import Fault, new_faults, plain_details
from gameday.agent.metrics import AgentMetrics
from gameday.agent.state import StateFile
from gameday.agent.statewriter import StateWriter
from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.contract.backend import (
    Backend,
    FaultRequest,
    backend_ahead,
    backend_batch,
    backend_check,
)
from gameday.errors import (
    AgentError,
    FaultRejected,
    GamedayError,
    InvalidInput,
    PolicyRefused,
    first_line,
)
from gameday.kinds import catalogue as kind_specs
from gameday.logs import writes_info
from gameday.wire.protocol import REVERT_REASONS, RevertReason, check_lease

__all__ = [
    "AgentClosing",
    "BatchRejected",
    "Fault",
    "FaultConflict",
    "FaultGone",
    "FaultRegistry",
    "LimitReached",
    "Limits",
    "RequestResolved",
    "Resolution",
    "RevertFailed",
    "UnknownFault",
]

#: Seconds between two attempts to revert a fault whose backend revert failed.
REVERT_RETRY_S: Final = 1.0
#: How many request ids (idempotency keys) the agent remembers, applied or resolved.
REQUEST_MEMORY: Final = 16384
#: Longest wait for the state file to be written (a request's; the reaper never waits).
STATE_WRITE_WAIT_S: Final = 10.0

_log = structlog.get_logger("gameday.agent")

_EntryState = Literal["applying", "active", "reverting"]


class UnknownFault(GamedayError):
    """No fault with this id is known to the agent (``404``)."""


class FaultConflict(GamedayError):
    """The same kind is already active on an equal target (``409``)."""

    def __init__(self, message: str, *, existing: "Fault") -> None:
        self.existing = existing
        super().__init__(message)


class FaultGone(GamedayError):
    """The fault was already reverted, so it cannot be renewed (``410``)."""

    def __init__(self, message: str, *, fault: "Fault") -> None:
        self.fault = fault
        super().__init__(message)


class RevertFailed(GamedayError):
    """The backend failed to revert a fault; the agent keeps retrying (``500``)."""


class LimitReached(GamedayError):
    """The agent holds as many active faults as its policy allows (``429``)."""


@dataclass(frozen=True)
class Limits:
    """Caps the registry enforces for every backend: the fault kinds allowed (None: any
    the backend has), the longest lease, the longest total lifetime of a fault across
    its renewals, and the most faults active at once."""

    kinds: frozenset[str] | None = None
    lease_max_s: float = 3600.0
    lifetime_max_s: float = 4 * 3600.0
    max_active: int = 1024
    source: str = "the agent's defaults"

    def check(self, kind: str, lease_s: float) -> None:
        """:class:`PolicyRefused` for a kind not allowed or a lease over the cap."""
        if self.kinds is not None and kind not in self.kinds:
            raise PolicyRefused(f"{kind} is not allowed by {self.source} (allowed: "
                                f"{', '.join(sorted(self.kinds)) or 'none'})")
        if lease_s > self.lease_max_s:
            raise PolicyRefused(f"lease_s {lease_s:g} is over {self.lease_max_s:g} s, the "
                                f"longest {self.source} allows")

    def check_renewal(self, fault: Fault, expires_at: float) -> None:
        """:class:`PolicyRefused` when renewing ``fault`` to ``expires_at`` would hold
        it longer than :attr:`lifetime_max_s` since it was applied."""
        if expires_at - fault.applied_at > self.lifetime_max_s:
            raise PolicyRefused(f"fault {fault.id}: a renewal would hold it over "
                                f"{self.lifetime_max_s:g} s in all, the most {self.source} "
                                f"allows; inject it again")


class RequestResolved(GamedayError):
    """The request id was already resolved as never applied (by ``gameday cleanup``), so
    the request is refused and nothing is applied (``409``)."""


@dataclass(frozen=True)
class Resolution:
    """What became of one request id that :meth:`FaultRegistry.resolve` was asked about:
    ``reverted`` (it was applied as ``fault``, which is now reverted) or
    ``never_applied`` (the agent holds nothing of it, and refuses it from now on)."""

    request_id: str
    outcome: Literal["reverted", "never_applied"]
    fault: "Fault | None" = None

    def to_json(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "outcome": self.outcome,
                "fault": None if self.fault is None else self.fault.to_json()}


class AgentClosing(GamedayError):
    """The agent is shutting down and applies nothing more (``503``)."""


class BatchRejected(GamedayError):
    """Item ``index`` of a batch apply failed with ``cause``; nothing of the batch stays
    applied (``rolled_back`` lists the ids of the items applied before it, now reverted;
    an id in ``revert_failed`` could not be reverted yet and is retried like any other)."""

    def __init__(self, index: int, cause: BaseException, *, rolled_back: list[str],
                 revert_failed: list[str]) -> None:
        self.index = index
        self.cause = cause
        self.rolled_back = rolled_back
        self.revert_failed = revert_failed
        super().__init__(f"faults[{index}]: {first_line(cause)}")


@dataclass
class _Entry:
    """A live fault and where it is in its life; mutated only under the registry lock."""

    fault: Fault
    state: _EntryState
    retry_reason: RevertReason | None = None
    retry_at: float = 0.0


class FaultRegistry:
    """The faults one agent holds, applied through ``backend``, saved in ``state_path``.

    Creating a registry reverts every fault left in ``state_path`` by a previous run
    (reason ``agent-restart``); they are listed in :attr:`recovered` and among the
    reverted faults. It then writes the state file (:class:`AgentError` if it cannot)
    and exports the metrics of every kind of the backend at zero.
    """

    def __init__(self, backend: Backend, *, state_path: pathlib.Path, node: str,
                 clock: Clock = SYSTEM_CLOCK, metrics: AgentMetrics | None = None,
                 history_size: int = 200, settle_timeout_s: float = 30.0,
                 limits: Limits | None = None) -> None:
        self.backend = backend
        self.limits = limits if limits is not None else Limits()
        self.node = node
        self.metrics = metrics if metrics is not None else AgentMetrics()
        self._clock = clock
        self._state = StateFile(state_path)
        self._writer = StateWriter(self._state, node=node, on_done=self._state_written)
        self._unawaited = 0  # the generation last saved without waiting for it
        self._history_size = history_size
        self._settle_timeout_s = settle_timeout_s
        self._cond = threading.Condition(threading.Lock())
        self._live: dict[str, _Entry] = {}
        self._history: OrderedDict[str, Fault] = OrderedDict()
        # request id -> fault id, and the request ids resolved as never applied
        self._requests: OrderedDict[str, str] = OrderedDict()
        self._resolved: OrderedDict[str, None] = OrderedDict()
        self._closed = False
        # raises while the agent's lever is engaged (gameday.agent.lever); called under the lock
        self.refuse: Callable[[], None] = _admit_all
        self._log = _log.bind(node=node, backend=backend.name)
        self.metrics.track_active(self.active_count)
        self.metrics.expect(self.backend.kinds(), REVERT_REASONS)
        self.recovered: list[Fault] = self._recover()

    # -- queries ---------------------------------------------------------------------

    @property
    def state_path(self) -> pathlib.Path:
        return self._state.path

    def kinds(self) -> dict[str, str]:
        """The backend's fault kinds, each with its injection layer (``injected_at``)."""
        return dict(self.backend.kinds())

    def active_count(self) -> int:
        """How many faults are applied now."""
        with self._cond:
            return sum(1 for e in self._live.values() if e.state != "applying")

    def get(self, fault_id: str) -> Fault:
        """The fault with this id, active or reverted; :class:`UnknownFault` if none."""
        with self._cond:
            entry = self._live.get(fault_id)
            if entry is not None and entry.state != "applying":
                return entry.fault
            if fault_id in self._history:
                return self._history[fault_id]
        raise UnknownFault(f"no fault {fault_id!r} on node {self.node}")

    def faults(self, *, include_reverted: bool = False) -> list[Fault]:
        """Active faults by ``applied_at``, then (if asked) the most recent reverted ones."""
        with self._cond:
            active = sorted((e.fault for e in self._live.values() if e.state != "applying"),
                            key=lambda f: f.applied_at)
            reverted = list(self._history.values()) if include_reverted else []
        return active + reverted

    # -- changes ---------------------------------------------------------------------

    def apply(self, request: FaultRequest, lease_s: float) -> Fault:
        """Apply ``request`` through the backend under a lease of ``lease_s`` seconds: a
        batch of one (:meth:`apply_many`), its error raised as the item's own.

        A request whose ``request_id`` the agent already knows is not applied again: the
        fault it made is returned as it is now (once its apply has settled).

        Raises :class:`InvalidInput` (unknown kind, lease outside 1..3600),
        :class:`FaultConflict` (same kind active on an equal target),
        :class:`FaultRejected` (the backend refused), :class:`LimitReached`,
        :class:`PolicyRefused`, :class:`RequestResolved`, :class:`AgentClosing`.
        """
        try:
            [fault] = self.apply_many([(request, lease_s)])
        except BatchRejected as exc:
            raise exc.cause from None
        return fault

    def apply_many(self, items: list[tuple[FaultRequest, float]]) -> list[Fault]:
        """Apply every ``(request, lease_s)`` of a batch, all or nothing, in order.

        The batch is saved once before the backend applies anything (``applying``) and
        once after (``active``): two state writes for the batch, not two per fault. Only
        the first is waited for: a restart reverts every saved fault in either state
        (:meth:`_recover`), so the answer need not wait for the second. If
        an item is refused (unknown kind, bad lease, conflict with an active fault or an
        earlier item, the backend's refusal or failure), the items applied before it are
        reverted and :class:`BatchRejected` names it; :class:`AgentClosing` if the agent
        is shutting down (nothing applied). A batch whose request ids the agent already
        knows (a retry) is not applied again: its faults are returned as they are now.
        """
        kinds = self.backend.kinds()  # only read here: no copy
        checked: list[tuple[FaultRequest, float]] = []
        for index, (request, lease_s) in enumerate(items):
            try:
                checked.append((request, check_lease(lease_s)))
                self._admit(request, lease_s, kinds)
            except (InvalidInput, PolicyRefused) as exc:
                raise BatchRejected(index, exc, rolled_back=[], revert_failed=[]) from None
        faults = new_faults(checked, kinds, self._clock.now())
        request_ids = [request.request_id for request, _ in items]
        with self._cond:
            known = self._known_requests(request_ids)
            if known is not None:
                return known
            if self._closed:
                raise AgentClosing(f"agent on node {self.node} is shutting down")
            self.refuse()
            try:
                self._check_room(len(faults))
            except LimitReached as exc:
                raise BatchRejected(0, exc, rolled_back=[], revert_failed=[]) from None
            holders = TargetIndex(e.fault for e in self._live.values())
            for index, fault in enumerate(faults):
                same = holders.add(fault)
                if same is not None:
                    earlier = any(f is same for f in faults[:index])
                    where = "an earlier item" if earlier else same.id
                    conflict = FaultConflict(
                        f"{fault.kind} is already active on target {_compact(fault.target)} "
                        f"as {where}; revert it first", existing=same)
                    raise BatchRejected(index, conflict, rolled_back=[], revert_failed=[])
            entries = [_Entry(fault, "applying") for fault in faults]
            for entry in entries:
                self._live[entry.fault.id] = entry
            self._remember_requests(list(zip(request_ids, [f.id for f in faults], strict=True)))
            try:
                self._save(strict=True)
            except BaseException:
                for entry in entries:
                    del self._live[entry.fault.id]
                self._forget_requests(request_ids)
                raise
        details: list[dict[str, Any]] = []  # each item's, as plain JSON
        ahead = [(entry.fault.id, entry.fault.request) for entry in entries]
        # the backend may publish once for the batch, and record its changes ahead
        with backend_batch(self.backend), backend_ahead(self.backend, "apply", ahead):
            for index, entry in enumerate(entries):
                try:
                    details.append(plain_details(self.backend.apply(entry.fault.id,
                                                                    entry.fault.request)))
                except BaseException as exc:
                    rejected = self._undo_batch(entries, index, exc)
                    with self._cond:  # nothing of the batch stays applied
                        self._forget_requests(request_ids)
                    if isinstance(exc, Exception):
                        raise rejected from exc
                    raise  # KeyboardInterrupt, SystemExit: as they are, after the undo
        with self._cond:
            now = self._clock.now()
            for entry, detail in zip(entries, details, strict=True):
                entry.fault = entry.fault.as_applied(now, detail)
                entry.state = "active"
            self._save(strict=False, wait=False)
            self._cond.notify_all()
            closing = self._closed
        applied = [entry.fault for entry in entries]
        for kind, count in Counter(fault.kind for fault in applied).items():
            self.metrics.applied(kind, count)  # once per kind: not per fault
        for fault, (request, _) in zip(applied, checked, strict=True):
            self.metrics.held(fault.id, fault.kind, fault.target, fault.injected_at,
                              request.run, node=self.node)
        for fault in applied if writes_info(self._log) else ():
            self._log.info("fault.applied", fault_id=fault.id, kind=fault.kind,
                           target=fault.target, lease_s=fault.lease_s,
                           injected_at=fault.injected_at, expires_at=fault.expires_at)
        if closing:
            self.revert_many([fault.id for fault in applied], "agent-shutdown")
        return applied

    def check_many(self, items: Sequence[tuple[FaultRequest, float] | GamedayError]
                   ) -> list[dict[str, Any] | GamedayError]:
        """What applying each item on its own, in order, would answer, read-only: per
        item what its target would hit (the backend's check, :func:`backend_check`), or
        the error an inject would end in (an item given as an error stays that error;
        a bad lease or unknown kind, the caps of :attr:`limits`, a conflict with a held
        fault or an earlier item, the backend's refusal, then the room left under
        ``max_active`` once the earlier admissible items hold theirs). Nothing is applied, saved or
        signalled; the lock is held only to compare with the held faults, never while
        the backend looks (one backend batch, so one ``/proc`` read on a host).
        :class:`AgentClosing` if the agent is shutting down."""
        kinds = self.backend.kinds()
        results: list[dict[str, Any] | GamedayError] = []
        checked: list[tuple[int, FaultRequest, float]] = []
        for index, item in enumerate(items):
            results.append({})
            if isinstance(item, GamedayError):
                results[index] = item
                continue
            request, lease_s = item
            try:
                self._admit(request, check_lease(lease_s), kinds)
            except (InvalidInput, PolicyRefused) as exc:
                results[index] = exc
                continue
            checked.append((index, request, lease_s))
        faults = new_faults([(request, lease_s) for _, request, lease_s in checked], kinds,
                            self._clock.now())
        with self._cond:
            if self._closed:
                raise AgentClosing(f"agent on node {self.node} is shutting down")
            self.refuse()
            room = self.limits.max_active - len(self._live)
            holders = TargetIndex(e.fault for e in self._live.values())
            earlier = {f.id for f in faults}
        admissible: list[tuple[int, FaultRequest]] = []
        for (index, request, _), fault in zip(checked, faults, strict=True):
            same = holders.add(fault)
            if same is None:
                admissible.append((index, request))
                continue
            where = "an earlier item" if same.id in earlier else same.id
            results[index] = FaultConflict(
                f"{fault.kind} is already active on target {_compact(fault.target)} "
                f"as {where}; revert it first", existing=same)
        with backend_batch(self.backend):
            for index, request in admissible:
                try:
                    results[index] = backend_check(self.backend, request)
                except (FaultRejected, InvalidInput) as exc:
                    results[index] = exc
                    continue
                if room <= 0:
                    results[index] = LimitReached(
                        f"node {self.node} would hold {self.limits.max_active} faults with "
                        f"the earlier items; {self.limits.source} allows "
                        f"{self.limits.max_active} at once")
                room -= 1
        return results

    def revert_many(self, fault_ids: list[str], reason: RevertReason = "requested"
                    ) -> list[Fault | GamedayError]:
        """Revert many faults with one state write; a result per id, in order: the
        reverted fault (idempotent, as :meth:`revert`), or the error for that id
        (:class:`UnknownFault`, :class:`RevertFailed`)."""
        _distinct(fault_ids)
        results: list[Fault | GamedayError | None] = []
        claimed: list[tuple[int, _Entry]] = []
        with self._cond:
            for fault_id in fault_ids:
                try:
                    entry = self._settled(fault_id)
                except (UnknownFault, RevertFailed) as exc:
                    results.append(exc)
                    continue
                if entry is None:
                    results.append(self._history[fault_id])
                    continue
                entry.state = "reverting"
                claimed.append((len(results), entry))
                results.append(None)
        finished = self._finish_batch([(entry, reason) for _, entry in claimed])
        for (position, _), result in zip(claimed, finished, strict=True):
            results[position] = result
        return [r for r in results if r is not None]

    def renew_many(self, fault_ids: list[str], lease_s: float | None = None
                   ) -> list[Fault | GamedayError]:
        """Renew many leases with one state write; a result per id, in order: the renewed
        fault, or the error for that id (:class:`UnknownFault`, :class:`FaultGone`; a
        lease already run out is reverted here, ``lease-expired``, as :meth:`renew`)."""
        _distinct(fault_ids)
        if lease_s is not None:
            lease_s = check_lease(lease_s)
        results: list[Fault | GamedayError | None] = []
        expired: list[tuple[int, _Entry]] = []
        with self._cond:
            self.refuse()
            now = self._clock.now()
            for fault_id in fault_ids:
                try:
                    entry = self._settled(fault_id)
                except (UnknownFault, RevertFailed) as exc:
                    results.append(exc)
                    continue
                if entry is None:
                    results.append(_gone(self._history[fault_id]))
                elif entry.fault.expires_at > now:
                    new_lease = entry.fault.lease_s if lease_s is None else lease_s
                    try:
                        self.limits.check(entry.fault.kind, new_lease)
                        self.limits.check_renewal(entry.fault, now + new_lease)
                    except PolicyRefused as exc:
                        results.append(exc)
                        continue
                    entry.fault = dataclasses.replace(
                        entry.fault, lease_s=new_lease, expires_at=now + new_lease)
                    results.append(entry.fault)
                else:
                    entry.state = "reverting"
                    expired.append((len(results), entry))
                    results.append(None)
            if any(isinstance(r, Fault) for r in results):
                self._save(strict=False)
        renewed = [r for r in results if isinstance(r, Fault)]
        if renewed:
            self._log.info("faults.renewed", count=len(renewed),
                           fault_ids=[f.id for f in renewed])
        finished = self._finish_batch([(entry, "lease-expired") for _, entry in expired])
        for (position, _), result in zip(expired, finished, strict=True):
            results[position] = _gone(result) if isinstance(result, Fault) else result
        return [r for r in results if r is not None]

    def renew(self, fault_id: str, lease_s: float | None = None) -> Fault:
        """Extend a fault's lease to ``now + lease_s`` (default: its current ``lease_s``).

        Raises :class:`UnknownFault`, or :class:`FaultGone` if the fault was reverted
        (a lease already run out is reverted here, reason ``lease-expired``).
        """
        if lease_s is not None:
            lease_s = check_lease(lease_s)
        with self._cond:
            self.refuse()
            entry = self._settled(fault_id)
            if entry is None:
                gone = self._history[fault_id]
            else:
                now = self._clock.now()
                if entry.fault.expires_at > now:
                    new_lease = entry.fault.lease_s if lease_s is None else lease_s
                    self.limits.check(entry.fault.kind, new_lease)
                    self.limits.check_renewal(entry.fault, now + new_lease)
                    entry.fault = dataclasses.replace(
                        entry.fault, lease_s=new_lease, expires_at=now + new_lease)
                    self._save(strict=False)
                    renewed = entry.fault
                    self._log.info("fault.renewed", fault_id=renewed.id, kind=renewed.kind,
                                   lease_s=renewed.lease_s, expires_at=renewed.expires_at)
                    return renewed
                entry.state = "reverting"
        if entry is not None:
            gone = self._finish_revert(entry, "lease-expired")
        raise FaultGone(
            f"fault {fault_id} was reverted at {gone.reverted_at} ({gone.revert_reason}); "
            "inject it again", fault=gone)

    def _admit(self, request: FaultRequest, lease_s: float, kinds: Mapping[str, str]) -> None:
        """:class:`InvalidInput` for a kind the backend lacks, a kind with no declaration
        (:mod:`gameday.kinds`) or parameters its declaration refuses (an unknown key, a
        wrong type, a value out of bounds: the key path named), :class:`PolicyRefused`
        (checked first) for one :attr:`limits` refuses or a lease over its cap. Every
        request passes here before anything is saved or applied."""
        if request.kind not in kinds:
            raise InvalidInput(
                f"unknown fault kind {request.kind!r}; backend {self.backend.name} on "
                f"node {self.node} applies: {', '.join(sorted(kinds)) or 'nothing'}")
        self.limits.check(request.kind, lease_s)
        spec = kind_specs.lookup(request.kind)
        if spec is None:
            raise InvalidInput(f"fault kind {request.kind} has no declaration to check its "
                               "params against (gameday.kinds.register)", path="kind")
        spec.parse(request.params, path="params")

    def _check_room(self, count: int) -> None:
        """:class:`LimitReached` unless ``count`` more faults fit under the cap (called
        with the lock held)."""
        if len(self._live) + count > self.limits.max_active:
            raise LimitReached(f"node {self.node} holds {len(self._live)} faults; "
                               f"{self.limits.source} allows {self.limits.max_active} at once")

    def revert(self, fault_id: str, reason: RevertReason = "requested") -> Fault:
        """Revert a fault (idempotent: a reverted fault is returned as it was reverted).

        Raises :class:`UnknownFault`, or :class:`RevertFailed` if the backend failed
        (the registry then retries every second).
        """
        with self._cond:
            entry = self._settled(fault_id)
            if entry is None:
                return self._history[fault_id]
            entry.state = "reverting"
        return self._finish_revert(entry, reason)

    def resolve(self, request_ids: list[str]) -> list[Resolution]:
        """Settle requests whose answer their caller never read (``gameday cleanup``
        after the orchestrator died): a request the agent applied is reverted (reason
        ``requested``; an already reverted one is returned as it was); one it never
        applied is remembered as resolved, so that it is refused if it arrives later.
        Raises :class:`RevertFailed` if a revert failed (the registry then retries)."""
        results: list[Resolution] = []
        for request_id in request_ids:
            with self._cond:
                fault_id = self._requests.get(request_id)
                if fault_id is None:
                    self._resolved[request_id] = None
                    while len(self._resolved) > REQUEST_MEMORY:
                        self._resolved.popitem(last=False)
                    results.append(Resolution(request_id, "never_applied"))
                    continue
            try:
                fault = self.revert(fault_id, "requested")
            except UnknownFault:  # its apply failed: nothing of it is held
                with self._cond:
                    self._resolved[request_id] = None
                results.append(Resolution(request_id, "never_applied"))
                continue
            results.append(Resolution(request_id, "reverted", fault))
        return results

    def reap(self) -> list[Fault]:
        """Revert every fault whose lease has run out (``expires_at <= now``), and retry
        reverts that failed before. Returns the faults reverted now."""
        with self._cond:
            now = self._clock.now()
            due: list[tuple[_Entry, RevertReason]] = []
            for entry in self._live.values():
                if entry.state != "active":
                    continue
                if entry.retry_reason is not None:
                    if entry.retry_at <= now:
                        due.append((entry, entry.retry_reason))
                elif entry.fault.expires_at <= now:
                    due.append((entry, "lease-expired"))
            for entry, _ in due:
                entry.state = "reverting"
        return self._finish_all(due, wait_saved=False)

    def revert_all(self, reason: RevertReason) -> list[Fault]:
        """Revert every active fault, wait for reverts and applies already in flight,
        and return the faults reverted by this call. A failed revert is logged and
        left to the retries."""
        done: list[Fault] = []
        attempted: set[str] = set()
        deadline = time.monotonic() + self._settle_timeout_s
        while True:
            with self._cond:
                claimed = [e for e in self._live.values()
                           if e.state == "active" and e.fault.id not in attempted]
                if not claimed:
                    busy = any(e.state != "active" for e in self._live.values())
                    remaining = deadline - time.monotonic()
                    if not busy or remaining <= 0:
                        return done
                    self._cond.wait(remaining)
                    continue
                for entry in claimed:
                    entry.state = "reverting"
                    attempted.add(entry.fault.id)
            done += self._finish_all([(e, reason) for e in claimed])

    def close(self, reason: RevertReason = "agent-shutdown") -> list[Fault]:
        """Refuse new faults from now on, revert every active one, and close the state
        file's directory, kept open between saves (a save after this opens it again;
        it is closed when the registry is collected)."""
        with self._cond:
            self._closed = True
        try:
            return self.revert_all(reason)
        finally:
            self.release()

    def release(self) -> None:
        """Write what is pending and close the state file's directory (kept open between
        saves), leaving every fault as it is; a later save opens it again. Waits up to
        :data:`STATE_WRITE_WAIT_S` for a write in progress."""
        if not self._writer.close(STATE_WRITE_WAIT_S):
            self._log.error("state.close_timed_out", path=str(self._state.path),
                            waited_s=STATE_WRITE_WAIT_S)

    # -- internals -------------------------------------------------------------------

    def _recover(self) -> list[Fault]:
        """Revert what a previous run left saved, and save what is left (nothing, unless
        a revert failed): written even when nothing was saved, so that a state file
        that cannot be written stops the agent at start, not at its first fault."""
        saved = [Fault.from_json(data) for data in self._state.load()]
        recovered: list[Fault] = []
        now = self._clock.now()
        for fault in saved:
            try:
                self.backend.revert(fault.id, fault.request)
            except Exception as exc:
                self._log.error("fault.revert_failed", fault_id=fault.id, kind=fault.kind,
                                reason="agent-restart", error=first_line(exc))
                self._live[fault.id] = _Entry(fault=fault, state="active",
                                              retry_reason="agent-restart",
                                              retry_at=now + REVERT_RETRY_S)
                continue
            done = fault.as_reverted(self._clock.now(), "agent-restart")
            self._remember(done)
            recovered.append(done)
            self.metrics.reverted(done.kind, "agent-restart")
            self._log.info("fault.reverted", fault_id=done.id, kind=done.kind,
                           target=done.target, reason="agent-restart")
        with self._cond:
            self._save(strict=True)
        return recovered

    def _settled(self, fault_id: str) -> _Entry | None:
        """Under the lock: the live, active entry for ``fault_id`` once no apply or revert
        is in flight for it, or ``None`` if it is reverted (then it is in the history)."""
        entry = self._live.get(fault_id)
        if entry is not None and entry.state == "active":
            return entry  # the common case, without reading the clock
        deadline = time.monotonic() + self._settle_timeout_s
        while True:
            entry = self._live.get(fault_id)
            if entry is None:
                if fault_id in self._history:
                    return None
                raise UnknownFault(f"no fault {fault_id!r} on node {self.node}")
            if entry.state == "active":
                return entry
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RevertFailed(f"fault {fault_id} is still {entry.state} after "
                                   f"{self._settle_timeout_s:g}s; try again")
            self._cond.wait(remaining)

    def _finish_all(self, due: list[tuple[_Entry, RevertReason]], *,
                    wait_saved: bool = True) -> list[Fault]:
        # a failed revert is logged and retried by reap()
        return [r for r in self._finish_batch(due, wait_saved=wait_saved)
                if isinstance(r, Fault)]

    def _finish_revert(self, entry: _Entry, reason: RevertReason) -> Fault:
        """Revert a claimed entry (state ``reverting``) through the backend."""
        [result] = self._finish_batch([(entry, reason)])
        if isinstance(result, RevertFailed):
            raise result
        return result

    def _finish_batch(self, due: list[tuple[_Entry, RevertReason]], *,
                      wait_saved: bool = True) -> list[Fault | RevertFailed]:
        """Revert claimed entries (state ``reverting``) through the backend, one after
        the other, then save the state once (waiting for the write unless not
        ``wait_saved``: the reaper's); a result per entry, in order. An entry whose
        revert failed goes back to ``active`` and is retried every second."""
        if not due:
            return []
        results: list[Fault | RevertFailed] = []
        ahead = [(entry.fault.id, entry.fault.request) for entry, _ in due]
        # the backend may publish once for the batch, and record its changes ahead
        with backend_batch(self.backend), backend_ahead(self.backend, "revert", ahead):
            for entry, reason in due:
                fault = entry.fault
                try:
                    self.backend.revert(fault.id, fault.request)
                except Exception as exc:
                    self._log.error("fault.revert_failed", fault_id=fault.id, kind=fault.kind,
                                    reason=reason, error=first_line(exc))
                    results.append(RevertFailed(
                        f"backend {self.backend.name} failed to revert {fault.id} "
                        f"({fault.kind}): {first_line(exc)}; retrying"))
                    continue
                results.append(fault.as_reverted(self._clock.now(), reason))
        with self._cond:
            retry_at = self._clock.now() + REVERT_RETRY_S
            for (entry, reason), result in zip(due, results, strict=True):
                if isinstance(result, Fault):
                    del self._live[result.id]
                    self._remember(result)
                else:
                    entry.state = "active"
                    entry.retry_reason = reason
                    entry.retry_at = retry_at
            if any(isinstance(r, Fault) for r in results):
                self._save(strict=False, wait=wait_saved)
            self._cond.notify_all()
        done = [result for result in results if isinstance(result, Fault)]
        for result in done:
            self.metrics.released(result.id)
        for (kind, reason), count in Counter(
                (fault.kind, fault.revert_reason or "requested") for fault in done).items():
            self.metrics.reverted(kind, reason, count)  # once per kind and reason
        for result in done if writes_info(self._log) else ():
            self._log.info("fault.reverted", fault_id=result.id, kind=result.kind,
                           target=result.target, reason=result.revert_reason,
                           held_s=round((result.reverted_at or 0.0) - result.applied_at, 3))
        return results

    def _undo_batch(self, entries: list[_Entry], failed: int, exc: BaseException
                    ) -> BatchRejected:
        """Item ``failed`` of a batch raised ``exc`` in the backend's apply: revert the
        items applied before it (and, defensively, the failed one unless it was a clean
        refusal), forget the rest, save once; returns the :class:`BatchRejected` to raise."""
        entry = entries[failed]
        if isinstance(exc, FaultRejected):
            self._log.info("fault.rejected", kind=entry.fault.kind, target=entry.fault.target,
                           error=first_line(exc))
            to_revert = entries[:failed]
            untouched = entries[failed:]
        else:
            self._log.error("fault.apply_failed", fault_id=entry.fault.id, kind=entry.fault.kind,
                            target=entry.fault.target, error=first_line(exc))
            to_revert = entries[:failed + 1]
            untouched = entries[failed + 1:]
        with self._cond:
            for other in to_revert:
                other.state = "reverting"
            for other in untouched:
                del self._live[other.fault.id]
        results = self._finish_batch([(e, "requested") for e in to_revert])
        if not any(isinstance(r, Fault) for r in results) and untouched:
            with self._cond:  # nothing was saved by the reverts: forget the untouched now
                self._save(strict=False)
        reverted = [r.id for r in results[:failed] if isinstance(r, Fault)]
        not_reverted = [e.fault.id for e, r in zip(to_revert, results, strict=True)
                        if isinstance(r, RevertFailed)]
        return BatchRejected(failed, exc, rolled_back=reverted, revert_failed=not_reverted)

    def _known_requests(self, request_ids: list[str]) -> list[Fault] | None:
        """Under the lock: the faults of ``request_ids`` if the agent already applied them
        all (a retry; each once its apply has settled), ``None`` if it knows none of them;
        :class:`RequestResolved` or :class:`InvalidInput` otherwise."""
        named = [rid for rid in request_ids if rid]
        if not named:
            return None
        resolved = [rid for rid in named if rid in self._resolved]
        if resolved:
            raise RequestResolved(f"request {resolved[0]} was resolved as never applied "
                                  "(by gameday cleanup); nothing applied")
        known = [self._requests.get(rid) for rid in named]
        if all(fault_id is None for fault_id in known):
            return None
        if len(named) != len(request_ids) or any(fault_id is None for fault_id in known):
            raise InvalidInput("a batch repeats some request ids of an earlier one but not "
                               "all; send each request id in one batch only")
        faults = []
        for fault_id in known:
            assert fault_id is not None
            entry = self._live.get(fault_id)
            if entry is not None and entry.state == "applying":
                self._settled_or_gone(fault_id)
                entry = self._live.get(fault_id)
            if entry is not None:
                faults.append(entry.fault)
            elif fault_id in self._history:
                faults.append(self._history[fault_id])
            else:
                raise UnknownFault(f"request {request_ids[0]} was applied as {fault_id}, "
                                   "which this agent no longer remembers")
        return faults

    def _settled_or_gone(self, fault_id: str) -> None:
        """Under the lock: wait until ``fault_id`` is no longer being applied."""
        deadline = time.monotonic() + self._settle_timeout_s
        while (entry := self._live.get(fault_id)) is not None and entry.state == "applying":
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RevertFailed(f"fault {fault_id} is still applying after "
                                   f"{self._settle_timeout_s:g}s; try again")
            self._cond.wait(remaining)

    def _remember_requests(self, pairs: list[tuple[str, str]]) -> None:
        """Under the lock: remember which fault each request id made (the oldest ids
        forgotten past :data:`REQUEST_MEMORY`)."""
        for request_id, fault_id in pairs:
            if request_id:
                self._requests[request_id] = fault_id
        while len(self._requests) > REQUEST_MEMORY:
            self._requests.popitem(last=False)

    def _forget_requests(self, request_ids: list[str]) -> None:
        """Under the lock: forget request ids whose faults were never applied."""
        for request_id in request_ids:
            self._requests.pop(request_id, None)

    def _remember(self, done: Fault) -> None:
        self._history[done.id] = done
        while len(self._history) > self._history_size:
            self._history.popitem(last=False)

    def _save(self, *, strict: bool, wait: bool = True) -> None:
        """Under the lock: hand the live faults to the state writer (its own thread
        writes the file) and, with ``wait``, wait until they are on disk, at most
        :data:`STATE_WRITE_WAIT_S`, the lock released meanwhile, so that other requests
        and the reaper go on. ``strict`` raises a failed or timed-out write as
        :class:`AgentError` (its caller reports it); otherwise it is logged (as it fails,
        without ``wait``) and the next change writes the file again."""
        records = [{**e.fault.to_json(), "state": e.state} for e in self._live.values()]
        generation = self._writer.submit(records, self._clock.now())
        if not wait:
            self._unawaited = generation  # its failure is logged by _state_written
            return
        deadline = time.monotonic() + STATE_WRITE_WAIT_S
        while (outcome := self._writer.outcome(generation)) is False:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._cond.wait(remaining)
        if outcome is True:
            return
        reason = (f"not written within {STATE_WRITE_WAIT_S:g} s" if outcome is False
                  else first_line(outcome))
        if strict:
            raise AgentError(f"{self._state.path}: cannot save agent state ({reason})")
        self._log.error("state.save_failed", path=str(self._state.path), error=reason)

    def _state_written(self, generation: int, error: OSError | None) -> None:
        """The state writer finished a write: wake whoever waits for one, and log its
        failure if nobody waits for it (the ``active`` save after an apply: a waiter
        reports its own)."""
        with self._cond:
            unawaited = generation == self._unawaited
            self._cond.notify_all()
        if error is not None and unawaited:
            self._log.error("state.save_failed", path=str(self._state.path),
                            error=first_line(error))


def _admit_all() -> None:
    """The lever of a registry no agent gave one: never engaged."""


def _distinct(fault_ids: list[str]) -> None:
    if len(set(fault_ids)) != len(fault_ids):
        raise InvalidInput("a batch names a fault id more than once")


def _gone(fault: Fault) -> FaultGone:
    return FaultGone(f"fault {fault.id} was reverted at {fault.reverted_at} "
                     f"({fault.revert_reason}); inject it again", fault=fault)


def _compact(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)

