"""The fault fan-out of a run's session: many faults at once, one batch per agent, all or
nothing (:meth:`gameday.engine.session.Session.inject_many` and its rollback path).

Each node's requests go to its agent in ONE batch request (``POST /v1/faults:batch``),
which the agent applies all or nothing under one state write, through the generic
scheduler :func:`gameday.engine.fanout.fan_out`. Inject and revert batches ask for
minimal answers (``Prefer: return=minimal``): the agent echoes no fault's kind, target
or params, which the fan-out sent and knows, nor (for a revert) its details. A refusal
(``4xx``: bad parameters, conflict, unknown kind) is not tried again; every target gets
a :class:`TargetResult`: the refused one says why, the others of its batch say they were
not applied because of it. If any target failed, everything this fan-out applied is
reverted (one batch revert per node, concurrently) and :class:`FanoutFailed` says which
targets failed and why, and what was rolled back: a fleet fault is all or nothing.

Requests go through the run's session, so its allowlist, target locks and lease
renewals apply; the ledger gets each agent's batch as its answer lands (written without
waiting for the disk, so a killed orchestrator leaves it for ``gameday cleanup``) and one
fsync when the fan-out ends (:class:`gameday.evidence.ledger.Ledger`, ``sync=False``).
An interruption still records what the agents applied (then the caller rolls it back);
an activity timeout (SIGALRM) can cut one batch in half, which is then applied
unrecorded and reverted by its agent when its lease lapses, as is a batch between its
agent's answer and its ledger write when the orchestrator crashes.

:func:`inject_requests` is the session's path; :func:`inject_gpus` its form for one kind
on many GPUs (the fault actions); :func:`revert_entries` the session's rollback path,
recorded the same way. The session module imports this one, never the other way round:
what is used of the session is :class:`FaultSession`.
"""

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from gameday.clock import Clock
from gameday.contract.gpus import gpu_label
from gameday.engine.fanout import FanoutOptions, Outcome, Then, Waiting, fan_out, transient
from gameday.errors import AgentError, GamedayError, first_line
from gameday.evidence.ledger import FaultEntry, Ledger
from gameday.safety import signals
from gameday.safety.locks import TargetLocked
from gameday.targets.base import GpuRef, Target
from gameday.wire.agent_client import BatchFailed, BatchResult

__all__ = ["FanoutFailed", "FanoutOptions", "FanoutReport", "FaultSession", "InjectRequest",
           "NotApplied", "TargetResult", "inject_gpus", "inject_requests", "revert_entries"]

log = structlog.get_logger("gameday.engine.session_fanout")


@dataclass(frozen=True)
class InjectRequest:
    """One fault to inject through an agent: on ``node``, ``kind`` at ``target``."""

    node: str
    kind: str
    target: Mapping[str, Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    #: the idempotency key its intent is recorded under before it is sent ("": none yet)
    request_id: str = ""

    def label(self) -> str:
        """``node-0/gpu2`` for a GPU (as :meth:`GpuRef.label`), else ``node/key=value,...``."""
        if set(self.target) == {"gpu"}:
            return gpu_label(self.node, self.target["gpu"])
        where = ",".join(f"{k}={v}" for k, v in sorted(self.target.items()))
        return f"{self.node}/{where}" if where else self.node


class FaultSession(Protocol):
    """What the fault fan-out uses of the run's session
    (:class:`gameday.engine.session.Session`)."""

    @property
    def ledger(self) -> Ledger: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def run_id(self) -> str: ...

    def require_target(self) -> Target: ...

    def intend(self, requests: Sequence[InjectRequest], *, lease: float, action: str = ""
               ) -> list[InjectRequest]: ...

    def not_applied(self, failed: Sequence[tuple[InjectRequest, BaseException]]) -> None: ...

    def lease(self, lease_s: float | None = None) -> float: ...

    def admit_many(self, node: str, targets: Sequence[Mapping[str, Any]]) -> None: ...

    def entry(self, request: InjectRequest, agent_url: str, fault: Mapping[str, Any], *,
              lease: float, action: str = "") -> FaultEntry: ...

    def record_applied(self, entries: Sequence[FaultEntry]) -> None: ...

    def events(self, name: str, details: Iterable[dict[str, Any]]) -> None: ...


@dataclass(frozen=True)
class TargetResult:
    """What happened to one target: applied (with the fault id) or failed (why)."""

    node: str
    target: Mapping[str, Any]
    ok: bool
    attempts: int
    fault_id: str | None = None
    error: str | None = None

    def label(self) -> str:
        where = ",".join(f"{k}={v}" for k, v in sorted(self.target.items()))
        return f"{self.node}/{where}" if where else self.node


@dataclass
class FanoutReport:
    """Every target's result, and what was rolled back after a partial failure."""

    results: list[TargetResult] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    rollback_failures: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def failed(self) -> list[TargetResult]:
        return [r for r in self.results if not r.ok]

    @property
    def applied(self) -> list[TargetResult]:
        return [r for r in self.results if r.ok]

    def summary(self) -> str:
        """One line: counts, then the first few failures with their reasons."""
        line = (f"{len(self.applied)} of {len(self.results)} targets ok, "
                f"{len(self.failed)} failed")
        if self.failed:
            shown = "; ".join(f"{r.label()}: {r.error}" for r in self.failed[:3])
            more = f" (+{len(self.failed) - 3} more)" if len(self.failed) > 3 else ""
            line += f" ({shown}{more})"
        if self.rolled_back or self.rollback_failures:
            line += f"; rolled back {len(self.rolled_back)}"
        if self.rollback_failures:
            line += (f", {len(self.rollback_failures)} could not be reverted "
                     f"({self.rollback_failures[0]})")
        return line


class FanoutFailed(GamedayError):
    """Some targets of a fan-out failed; what was applied has been rolled back."""

    def __init__(self, report: FanoutReport) -> None:
        self.report = report
        super().__init__(f"fan-out failed: {report.summary()}")


class NotApplied(GamedayError):
    """A target of a batch that the agent did not apply because another target of the
    same batch failed (all or nothing per agent)."""


def _one_failed(batch: Sequence[InjectRequest], position: int, exc: BaseException
                ) -> list[FaultEntry | BaseException]:
    """Results of a batch refused because of one target: its error, and NotApplied for
    the others (nothing of the batch is applied)."""
    why = NotApplied(f"not applied: {batch[position].label()} in the same batch failed")
    return [exc if i == position else why for i in range(len(batch))]


def inject_gpus(session: FaultSession, gpus: Sequence[GpuRef], *, kind: str,
                params: Mapping[str, Any], action: str = "", lease_s: float | None = None,
                options: FanoutOptions | None = None) -> list[FaultEntry]:
    """Apply ``kind`` on every GPU through the session, concurrently; all or nothing
    (:func:`inject_requests` with one request per GPU, target ``{"gpu": index}``)."""
    return inject_requests(session, [InjectRequest(gpu.node, kind, {"gpu": gpu.index}, params)
                                     for gpu in gpus],
                           action=action, lease_s=lease_s, options=options)


def inject_requests(session: FaultSession, requests: Sequence[InjectRequest], *,
                    action: str = "", lease_s: float | None = None,
                    options: FanoutOptions | None = None) -> list[FaultEntry]:
    """Apply every request through the session, concurrently; all or nothing
    (:meth:`gameday.engine.session.Session.inject_many`).

    Each request is admitted by the session (allowlist, target lock) before its agent is
    asked; each node's requests go in one batch. Returns the ledger entries (in the order
    of ``requests``). If any request failed, reverts what was applied and raises
    :class:`FanoutFailed` (its ``report`` has a result per request); a single request
    raises its own error.
    """
    started = time.monotonic()
    target = session.require_target()
    lease = session.lease(lease_s)
    requests = session.intend(requests, lease=lease, action=action)  # durable before sent
    several = len({request.node for request in requests}) > 1  # batches land one by one

    def apply(node: str, batch: list[InjectRequest]
              ) -> list[FaultEntry | BaseException] | Waiting:
        client = target.agent(node)
        try:  # allowlist and locks, before the agent; a refused node raises (not transient)
            session.admit_many(node, [request.target for request in batch])
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
            entries = [session.entry(request, client.url, fault, lease=lease, action=action)
                       for request, fault in zip(batch, faults, strict=True)]
            if several:  # written now, while other agents work; fsync'd at the end
                session.ledger.record_applied_many(entries, sync=False)
            return list(entries)

        return Then(client.start_inject_many([  # copied there
            {"kind": request.kind, "target": request.target, "params": request.params,
             "lease_s": lease, "run": session.run_id, "request_id": request.request_id}
            for request in batch], minimal=True),
            finish)

    done: list[Outcome[InjectRequest]] = []
    try:
        outcomes = fan_out(list(requests), lambda r: r.node, apply, options, sink=done)
    finally:  # even when interrupted: what was applied is recorded (then rolled back)
        with signals.deferred():
            session.record_applied([o.value for o in done if o.error is None])
            session.not_applied([(o.job, o.error) for o in done if o.error is not None])
    entries = [o.value for o in outcomes if o.error is None]  # in the order of requests
    if len(outcomes) == 1 and outcomes[0].error is not None:
        raise outcomes[0].error  # one target: its own error, nothing to roll back
    kinds = ",".join(sorted({r.kind for r in requests}))
    if len(entries) < len(outcomes):
        report = FanoutReport(results=[
            TargetResult(node=o.job.node, target=dict(o.job.target), ok=o.error is None,
                         attempts=o.attempts, fault_id=o.value.id if o.error is None else None,
                         error=None if o.error is None else first_line(o.error))
            for o in outcomes])
        failed = revert_entries(session, entries, "fanout-partial-failure", options)
        report.rollback_failures = list(failed.values())
        report.rolled_back = [e.id for e in entries if e.id not in failed]
        report.wall_s = time.monotonic() - started
        log.warning("fan-out failed", kind=kinds, summary=report.summary())
        raise FanoutFailed(report)
    log.info("fan-out applied", kind=kinds, faults=len(entries),
             wall_s=round(time.monotonic() - started, 3))
    return entries


def revert_entries(session: FaultSession, entries: Sequence[FaultEntry], reason: str,
                   options: FanoutOptions | None = None) -> dict[str, str]:
    """Revert agent faults concurrently, record them in one ledger write; by the id of
    each fault that could not be reverted, one line (``"<kind> <id> on <node>: <why>"``)."""
    target = session.require_target()

    def revert(node: str, batch: list[FaultEntry]) -> Waiting:
        missing = AgentError(f"agent of {node}: no answer for this fault")

        def finish(answer: Callable[[], BatchResult]
                   ) -> list[tuple[str, float, str] | BaseException]:
            result = answer()  # a failed id that may pass is tried again by fan_out
            now = session.clock.now()
            done = {fault_id: _reverted(fault, reason, now)
                    for fault_id, fault in result.done.items()}
            session.ledger.record_reverted_many(list(done.values()), sync=False)  # fsync'd
            return [done.get(entry.id) or result.failed.get(entry.id) or missing  # at the end
                    for entry in batch]

        client = target.agent(node)
        return Then(client.start_revert_many([entry.id for entry in batch], minimal=True),
                    finish)

    finished: list[Outcome[FaultEntry]] = []
    try:
        fan_out([e for e in entries if e.via == "agent"], lambda e: e.node, revert, options,
                sink=finished)
    finally:
        with signals.deferred():
            failures = _record_reverts(session, finished, reason)
    return failures


def _record_reverts(session: FaultSession, finished: Sequence[Outcome[FaultEntry]],
                    reason: str) -> dict[str, str]:
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
    session.ledger.record_reverted_many(done)  # what was not yet, and one fsync
    session.events("fault_reverted", events)
    return failures


def _reverted(fault: Mapping[str, Any], reason: str, now: float) -> tuple[str, float, str]:
    """``(id, reverted_at, reason)`` of a fault as its agent reverted it."""
    return (str(fault["id"]), float(fault.get("reverted_at") or now),
            str(fault.get("revert_reason") or reason))
