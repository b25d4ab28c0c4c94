"""How a run's faults are made and unmade: admit, intend, send, record; and revert.

One path for one fault or many (:meth:`FaultInjector.inject`): a single fault is a
batch of one. Every request is

- **intended** first: it gets a request id, and its intent is in the ledger (one fsync'd
  write for all of them) before anything is sent, so that ``gameday cleanup`` can settle
  it whatever happens next;
- **admitted**, per node, before its agent is asked: the allowlist
  (:class:`gameday.engine.blast_radius.BlastRadius`) and the target's lock
  (:class:`gameday.safety.locks.TargetLocks`);
- **sent** in ONE batch request per agent (``POST /v1/faults:batch``), concurrently
  across agents (:func:`gameday.engine.fanout.fan_out`), asking for minimal answers
  (``Prefer: return=minimal``): the agent applies its batch all or nothing under one
  state write;
- **recorded**: the ledger gets each agent's batch as its answer lands (written without
  waiting for the disk when there are several, so a killed orchestrator leaves it for
  ``gameday cleanup``) and one fsync when the fan-out ends; the timeline gets a
  ``fault_applied`` event per fault and the lease renewer starts.

A refusal (``4xx``: bad parameters, conflict, unknown kind) is not tried again; every
target gets a :class:`TargetResult`. If any target failed, everything this call applied
is reverted (one batch revert per node, concurrently) and :class:`FanoutFailed` says
which targets failed and why, and what was rolled back: a fleet fault is all or nothing.
A single request raises its own error. An interruption still records what the agents
applied (then the caller rolls it back); an activity timeout (SIGALRM) can cut one batch
in half, which is then applied unrecorded and reverted by its agent when its lease
lapses, as is a batch between its agent's answer and its ledger write when the
orchestrator crashes.

Faults made other than through an agent (a cordon through the Kubernetes API) are
intended and recorded with a :class:`gameday.engine.leases.FaultRoute` that renews and
reverts them (:meth:`FaultInjector.intend_external`, :meth:`FaultInjector.record_external`).
"""

from __future__ import annotations  # closures made per agent batch: annotations not evaluated

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog

from gameday.bounded import no_cyclic_gc
from gameday.clock import Clock
from gameday.engine.blast_radius import BlastRadius
from gameday.engine.fanout import FanoutOptions, Outcome, Then, Waiting, fan_out, transient
from gameday.engine.fault_requests import (
    FanoutFailed,
    FanoutReport,
    InjectRequest,
    NotApplied,
    TargetResult,
)
from gameday.engine.leases import FaultRoute, LeaseRenewer
from gameday.errors import AgentError, GamedayError, TargetUnavailable, first_line
from gameday.evidence.ledger import FaultEntry, Intent, Ledger, new_request_ids
from gameday.safety import signals
from gameday.safety.locks import TargetLocked, TargetLocks, target_key
from gameday.targets.base import Target
from gameday.wire.agent_client import BatchFailed, BatchResult
from gameday.wire.protocol import MAX_BATCH_ITEMS

__all__ = ["FaultInjector", "why_reverted"]

log = structlog.get_logger("gameday.engine.injector")

#: Puts an event per detail on the run's timeline, all at one time.
Events = Callable[[str, Iterable[dict[str, Any]]], None]


class FaultInjector:
    """The faults of one run (``run_id``): admitted by ``radius`` and ``locks``, intended
    and recorded in ``ledger``, sent to the agents of the target ``target()`` returns
    (it raises :class:`TargetUnavailable` for a run without one), put on the timeline
    through ``events``, renewed by ``renewer`` (the routes of faults made other than
    through an agent are in ``routes``, by via)."""

    def __init__(self, *, run_id: str, ledger: Ledger, clock: Clock,
                 target: Callable[[], Target], radius: BlastRadius, locks: TargetLocks,
                 lease_s: float, events: Events, renewer: LeaseRenewer,
                 routes: dict[str, FaultRoute]) -> None:
        self.run_id = run_id
        self.ledger = ledger
        self.clock = clock
        self.target = target
        self.radius = radius
        self.locks = locks
        self.lease_s = lease_s
        self.events = events
        self.renewer = renewer
        self.routes = routes

    def lease(self, lease_s: float | None = None) -> float:
        """The lease a fault gets: ``lease_s``, else the run's default."""
        return float(lease_s or self.lease_s)

    # -- inject ----------------------------------------------------------------------

    @no_cyclic_gc()  # a fleet's requests, entries and answers: a million objects, no cycles
    def inject(self, requests: Sequence[InjectRequest], *, action: str = "",
               lease_s: float | None = None, options: FanoutOptions | None = None
               ) -> list[FaultEntry]:
        """Apply every request, one batch per agent, concurrently; all or nothing.
        Returns the ledger entries in the order of ``requests``; raises
        :class:`FanoutFailed` (a result per request) after rolling back, or a single
        request's own error."""
        started = time.monotonic()
        target = self.target()
        lease = self.lease(lease_s)
        requests = self.intend(requests, lease=lease, action=action)  # durable before sent
        several = len({request.node for request in requests}) > 1  # batches land one by one

        def apply(node: str, batch: list[InjectRequest]
                  ) -> list[FaultEntry | BaseException] | Waiting:
            client = target.agent(node)
            try:  # allowlist and locks, before the agent; a refused node raises
                self.admit(node, [request.target for request in batch])
            except TargetLocked as exc:
                return _one_failed(batch, exc.index, exc)

            def finish(answer: Callable[[], list[dict[str, Any]]]
                       ) -> list[FaultEntry | BaseException]:
                try:
                    faults = answer()
                except BatchFailed as exc:
                    if transient(exc) or exc.index is None or not 0 <= exc.index < len(batch):
                        raise  # the whole batch: tried again if it may pass
                    return _one_failed(batch, exc.index, exc)
                entries = [self.entry(request, client.url, fault, lease=lease, action=action)
                           for request, fault in zip(batch, faults, strict=True)]
                if several:  # written once this wake-up's answers are read; fsync'd at the end
                    self.ledger.record_applied_many(entries, keep="held")
                return list(entries)

            return Then(client.start_inject_many([  # copied there
                {"kind": request.kind, "target": request.target, "params": request.params,
                 "lease_s": lease, "run": self.run_id, "request_id": request.request_id}
                for request in batch], minimal=True),
                finish)

        done: list[Outcome[InjectRequest]] = []
        try:
            outcomes = fan_out(list(requests), lambda r: r.node, apply, options, sink=done,
                               landed=self.ledger.flush)
        finally:  # even when interrupted: what was applied is recorded (then rolled back)
            with signals.deferred():
                self.record_applied([o.value for o in done if o.error is None])
                self.not_applied([(o.job, o.error) for o in done if o.error is not None])
        entries = [o.value for o in outcomes if o.error is None]  # in the order of requests
        if len(outcomes) == 1 and outcomes[0].error is not None:
            raise outcomes[0].error  # one target: its own error, nothing to roll back
        kinds = ",".join(sorted({r.kind for r in requests}))
        if len(entries) < len(outcomes):
            report = FanoutReport(results=[
                TargetResult(node=o.job.node, target=dict(o.job.target), ok=o.error is None,
                             attempts=o.attempts,
                             fault_id=o.value.id if o.error is None else None,
                             error=None if o.error is None else first_line(o.error))
                for o in outcomes])
            failed = self.revert(entries, "fanout-partial-failure", options)
            report.rollback_failures = list(failed.values())
            report.rolled_back = [e.id for e in entries if e.id not in failed]
            report.wall_s = time.monotonic() - started
            log.warning("fan-out failed", kind=kinds, summary=report.summary())
            raise FanoutFailed(report)
        if len(entries) > 1:
            log.info("fan-out applied", kind=kinds, faults=len(entries),
                     wall_s=round(time.monotonic() - started, 3))
        return entries

    def admit(self, node: str, targets: Sequence[Mapping[str, Any]]) -> None:
        """Before faults are sent to ``node``'s agent: refuse a node outside the allowlist
        (:class:`gameday.errors.BlastRadiusExceeded`), then take the targets' locks
        together (a refused one raises :class:`TargetLocked` with its ``index``; those
        before it stay locked until the run ends)."""
        self.radius.check_node(node)
        self.locks.acquire_many([target_key(node, target) for target in targets])

    def intend(self, requests: Sequence[InjectRequest], *, lease: float, action: str = ""
               ) -> list[InjectRequest]:
        """Give each request a request id and record their intents in the ledger (one
        fsync'd write) before any of them is sent; returns the requests with their ids."""
        target = self.target()
        named = [InjectRequest(r.node, r.kind, r.target, r.params, request_id) for r, request_id
                 in zip(requests, new_request_ids(len(requests)), strict=True)]
        urls = {node: target.agent(node).url for node in {r.node for r in named}}
        self.ledger.record_intents([
            Intent(request_id=r.request_id, kind=r.kind, node=r.node, agent_url=urls[r.node],
                   target=_shared(r.target), params=_shared(r.params), lease_s=lease,
                   action=action)
            for r in named])
        return named

    def not_applied(self, failed: Sequence[tuple[InjectRequest, BaseException]]) -> None:
        """Record failed requests as not applied: those never sent (any error but an
        :class:`AgentError`) and those the agent refused; one without an answer (an
        :class:`AgentError` without ``status``) stays open, for :meth:`resolve_intents`."""
        self.ledger.record_not_applied([
            (request.request_id, first_line(exc) or type(exc).__name__)
            for request, exc in failed
            if request.request_id and not (isinstance(exc, AgentError) and exc.status is None)])

    @staticmethod
    def entry(request: InjectRequest, agent_url: str, fault: Mapping[str, Any], *,
              lease: float, action: str = "") -> FaultEntry:
        """The ledger entry of ``request`` as the agent applied it (``fault``)."""
        return FaultEntry(
            id=str(fault["id"]), kind=request.kind, node=request.node, agent_url=agent_url,
            target=_shared(request.target), params=_shared(request.params),
            injected_at=str(fault.get("injected_at", "")),
            applied_at=float(fault["applied_at"]), expires_at=float(fault["expires_at"]),
            lease_s=lease, action=action, details=dict(fault.get("details") or {}),
            request_id=request.request_id)

    def record_applied(self, entries: Sequence[FaultEntry]) -> None:
        """Record applied agent faults (one fsync'd ledger write), put them on the
        timeline, and start the lease renewer."""
        if not entries:
            return
        self.ledger.record_applied_many(list(entries))  # fsync'd (a fan-out wrote them)
        self._applied(entries)

    def intend_external(self, intent: Intent, route: FaultRoute) -> None:
        """Record the intent of a change about to be made other than through an agent
        (``intent.via``), which ``route`` renews and reverts (and resolves, if its
        outcome is never recorded)."""
        self.routes[intent.via] = route
        self.ledger.record_intents([intent])

    def record_external(self, entry: FaultEntry, route: FaultRoute) -> None:
        """Record a fault applied other than through an agent (``entry.via``, e.g. a
        cordon through the Kubernetes API); ``route`` renews and reverts it."""
        self.routes[entry.via] = route
        self.ledger.record_applied(entry)
        self._applied([entry])

    def _applied(self, entries: Sequence[FaultEntry]) -> None:
        self.events("fault_applied", [
            {"id": entry.id, "kind": entry.kind, "node": entry.node, "target": entry.target,
             "injected_at": entry.injected_at, "at": entry.applied_at} for entry in entries])
        self.renewer.start()
        if len(entries) == 1:
            entry = entries[0]
            log.info("fault applied", id=entry.id, kind=entry.kind, node=entry.node,
                     target=entry.target, injected_at=entry.injected_at)

    # -- revert ----------------------------------------------------------------------

    def revert_all(self, reason: str, *, agents: bool) -> list[str]:
        """Revert every fault still active in the ledger (through its agent when
        ``agents``, the run having a target), and resolve the requests whose answer was
        never read; return one line per failure. ``reason`` is recorded for each fault
        whose agent or route gives none."""
        failures = self._revert_routed(reason)
        if not agents:
            return failures
        failures += self.resolve_intents()
        failed = self.revert(self.ledger.active(), reason)
        return failures + list(failed.values())

    @no_cyclic_gc()
    def revert(self, entries: Sequence[FaultEntry], reason: str,
               options: FanoutOptions | None = None) -> dict[str, str]:
        """Revert agent faults, one batch per agent, concurrently; record them in one
        ledger write. By the id of each fault that could not be reverted, one line
        (``"<kind> <id> on <node>: <why>"``)."""
        target = self.target()

        def revert(node: str, batch: list[FaultEntry]) -> Waiting:
            missing = AgentError(f"agent of {node}: no answer for this fault")

            def finish(answer: Callable[[], BatchResult]
                       ) -> list[tuple[str, float, str] | BaseException]:
                result = answer()  # a failed id that may pass is tried again by fan_out
                now = self.clock.now()
                done = {fault_id: _reverted(fault, reason, now)
                        for fault_id, fault in result.done.items()}
                self.ledger.record_reverted_many(list(done.values()), keep="held")
                return [done.get(entry.id) or result.failed.get(entry.id) or missing
                        for entry in batch]

            client = target.agent(node)
            return Then(client.start_revert_many([entry.id for entry in batch], minimal=True),
                        finish)

        finished: list[Outcome[FaultEntry]] = []
        try:
            fan_out([e for e in entries if e.via == "agent"], lambda e: e.node, revert,
                    options, sink=finished, landed=self.ledger.flush)
        finally:
            with signals.deferred():
                failures = self._record_reverts(finished)
        return failures

    def _record_reverts(self, finished: Sequence[Outcome[FaultEntry]]) -> dict[str, str]:
        done: list[tuple[str, float, str]] = []
        events: list[dict[str, Any]] = []
        failures: dict[str, str] = {}
        for outcome in finished:
            entry = outcome.job
            if outcome.error is not None:
                failures[entry.id] = (f"{entry.kind} {entry.id} on {entry.node}: "
                                      f"{first_line(outcome.error)}")
                continue
            done.append(outcome.value)  # (id, reverted_at, reason), as its batch recorded it
            events.append({"id": entry.id, "kind": entry.kind, "at": outcome.value[1]})
        self.ledger.record_reverted_many(done)  # what was not yet, and one fsync
        self.events("fault_reverted", events)
        return failures

    def _revert_routed(self, reason: str) -> list[str]:
        failures: list[str] = []
        for entry in [e for e in self.ledger.active() if e.via != "agent"]:
            try:
                reverted_at, why = self.routes[entry.via].revert(entry)
                self.ledger.record_reverted(entry.id, reverted_at, why_reverted(why, reason))
                self.events("fault_reverted",
                            [{"id": entry.id, "kind": entry.kind, "at": reverted_at}])
            except (GamedayError, KeyError) as exc:
                failures.append(f"{entry.kind} {entry.id} on {entry.node} via {entry.via}: "
                                f"{exc}")
        return failures

    def resolve_intents(self) -> list[str]:
        """Ask the agents about this run's requests whose answer was never read: each is
        reverted if the agent applied it, and refused from now on if not (one request
        per agent and 1,024 ids); the outcome is recorded. Returns one line per request
        left open."""
        by_node: dict[str, list[Intent]] = {}
        failures: list[str] = []
        for intent in self.ledger.open_intents():
            if intent.via == "agent":
                by_node.setdefault(intent.node, []).append(intent)
                continue
            try:  # a route's revert is idempotent: it tells whether the change was there
                reverted_at, why = self.routes[intent.via].revert(intent.entry(self.clock.now()))
            except (GamedayError, KeyError) as exc:
                failures.append(f"{intent.kind} request {intent.request_id} on {intent.node} "
                                f"via {intent.via}: {exc}")
                continue
            held = why == "requested"
            self.ledger.record_resolved(intent.request_id, "reverted" if held else "not_held",
                                        intent.request_id if held else None, reverted_at)
        chunks = [(node, intents[start:start + MAX_BATCH_ITEMS])
                  for node, intents in by_node.items()
                  for start in range(0, len(intents), MAX_BATCH_ITEMS)]
        for node, intents in chunks:
            try:
                answers = self.target().agent(node).resolve_requests(
                    [intent.request_id for intent in intents])
            except (AgentError, TargetUnavailable) as exc:
                failures.extend(f"{i.kind} request {i.request_id} on {node}: {exc}"
                                for i in intents)
                continue
            for answer in answers:
                fault = answer.get("fault") or {}
                self.ledger.record_resolved(str(answer.get("request_id")),
                                            str(answer.get("outcome")), fault.get("id"),
                                            fault.get("reverted_at"))
        return failures


def _shared(values: Mapping[str, Any]) -> dict[str, Any]:
    """The request's own dict, shared by its intent and its entry rather than copied
    for each (requests, intents and entries are never changed in place; a fleet fault's
    GPUs share one parameters dict): two dicts fewer per GPU and stage, about 0.9 KB per
    GPU at the peak of a fan-out. A mapping that is not a dict is copied."""
    return values if type(values) is dict else dict(values)


def _one_failed(batch: Sequence[InjectRequest], position: int, exc: BaseException
                ) -> list[FaultEntry | BaseException]:
    """Results of a batch refused because of one target: its error, and NotApplied for
    the others (nothing of the batch is applied)."""
    why = NotApplied(f"not applied: {batch[position].label()} in the same batch failed")
    return [exc if i == position else why for i in range(len(batch))]


def _reverted(fault: Mapping[str, Any], reason: str, now: float) -> tuple[str, float, str]:
    """``(id, reverted_at, reason)`` of a fault as its agent reverted it."""
    return (str(fault["id"]), float(fault.get("reverted_at") or now),
            why_reverted(fault.get("revert_reason"), reason))


def why_reverted(answered: object, reason: str) -> str:
    """The reason to record for a revert the agent (or a route) answered with
    ``answered``: its own when it reverted the fault for a cause of its own (a lapsed
    lease, a halt, a restart), and the orchestrator's ``reason`` (``run-ended``,
    ``rollback``, ``interrupted by SIGINT during method, ...``) when it reverted it because
    it was asked (``requested``, or no reason)."""
    return reason if answered in (None, "", "requested") else str(answered)
