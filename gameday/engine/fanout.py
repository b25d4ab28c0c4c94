"""Fan-out: one fault kind on many GPUs (a fleet) at once, with a result per target.

Targets are grouped by node, and each node's targets go to its agent in ONE batch
request (``POST /v1/faults:batch``, up to 1,024 per request; docs/agent-api.md), which
the agent applies all or nothing under one state write; up to ``concurrency`` agents
have a request in flight at once. Inject and revert batches ask for minimal answers
(``Prefer: return=minimal``): the agent echoes no fault's kind, target or params, which
the fan-out sent and knows, nor (for a revert) its details, so an inject's and its
revert's answers are less than half the bytes to encode, send and decode. It all runs on
the calling thread, without a thread per agent: each request is sent on its agent's
kept-alive connection (:class:`gameday.engine.agent_client.Exchange`) and each answer is read
when its socket becomes readable (``selectors``). A target whose request failed for a
reason that may pass (agent unreachable, no answer within the client's timeout, ``5xx``,
``429``) is tried again, with the others of its node that failed so, after an
exponential back-off (tenacity's ``wait_exponential``; slept through an injectable sleep
when nothing else is in flight); a refusal (``4xx``: bad parameters, conflict, unknown
kind) is not. Every target gets a :class:`TargetResult`: the refused one says why, the
others of its batch say they were not applied because of it.

An interruption (Ctrl-C, SIGTERM, SIGHUP, an activity timeout) stops the sending: the
answers of the requests already in flight are still read (signals deferred meanwhile)
and their outcomes kept, so what the agents applied is recorded, then rolled back by
the caller. Sending a request and noting it in flight, and reading an answer and keeping
its outcome, each happen with the run's signals held back (:func:`gameday.engine.signals.held`),
so Ctrl-C, SIGTERM and SIGHUP never cut one in half; an activity timeout (SIGALRM) can,
and then at most that one batch is applied unrecorded and reverted by its agent when
its lease lapses.

If any target failed, everything this fan-out applied is reverted (one batch revert per
node, concurrently) and the report says which targets failed and why, and what was
rolled back: a fleet fault is all or nothing.

:func:`inject_requests` is :meth:`gameday.engine.session.Session.inject_many`'s path (through
the run's session, so its allowlist, target locks and lease renewals apply); the ledger
gets each agent's batch as its answer lands (written without waiting for the disk, so
a killed orchestrator leaves it for ``gameday cleanup``) and one fsync when the fan-out
ends (:class:`gameday.evidence.ledger.Ledger`, ``sync=False``). :func:`inject_gpus` is its form
for one kind on many GPUs (the fault actions); :func:`revert_entries` the session's
rollback path, recorded the same way. Between an agent's answer and its ledger write a
crash would leave that batch unrecorded for at most its lease: the agent reverts it
when the lease lapses.
"""

import contextlib
import gc
import math
import os
import selectors
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

import structlog
from tenacity import RetryCallState, Retrying, wait_exponential

from gameday.agent.protocol import MAX_BATCH_ITEMS
from gameday.engine import signals
from gameday.engine.agent_client import BatchFailed, BatchResult, Exchange
from gameday.errors import AgentError, GamedayError
from gameday.evidence.ledger import FaultEntry
from gameday.safety.locks import TargetLocked
from gameday.targets.base import GpuRef

if TYPE_CHECKING:
    from gameday.engine.session import InjectRequest, Session

__all__ = ["FanoutFailed", "FanoutOptions", "FanoutReport", "NotApplied", "TargetResult", "fan_out",
           "inject_gpus", "inject_requests", "revert_entries"]

log = structlog.get_logger("gameday.engine.fanout")

J = TypeVar("J")
T = TypeVar("T")

#: Nodes worked on at once by default (``FanoutOptions.concurrency``).
CONCURRENCY_ENV = "GAMEDAY_FANOUT_CONCURRENCY"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


@dataclass(frozen=True)
class FanoutOptions:
    """How wide and how stubborn a fan-out is."""

    concurrency: int = field(default_factory=lambda: _env_int(CONCURRENCY_ENV, 64))  # agents
    attempts: int = 3              # per target, for failures that may pass
    backoff_s: float = 0.05        # first retry delay; doubles, capped at 2 s
    sleep: Callable[[float], None] = time.sleep  # the back-off, when nothing is in flight


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


def _transient(exc: BaseException) -> bool:
    """Worth another try: unreachable/timeout (no status), 5xx, 429."""
    if not isinstance(exc, AgentError):
        return False
    return exc.status is None or exc.status >= 500 or exc.status == 429


class _Outcome(NamedTuple, Generic[J]):
    job: J
    value: Any
    error: BaseException | None
    attempts: int


class Waiting(Protocol):
    """A batch's request in flight: its answer is read when :meth:`fileno` is readable."""

    @property
    def deadline(self) -> float: ...  # time.monotonic() by which the answer is due

    def fileno(self) -> int: ...

    def result(self) -> list[Any]: ...  # a value or an exception per job, or raises

    def cancel(self, reason: str) -> None: ...


class Then(Generic[T]):
    """An agent exchange whose answer ``finish`` turns into a value per job (``finish``
    gets a callable that returns the answer or raises the agent's error)."""

    def __init__(self, exchange: Exchange[T],
                 finish: Callable[[Callable[[], T]], list[Any]]) -> None:
        self.exchange = exchange
        self.finish = finish

    @property
    def deadline(self) -> float:
        return self.exchange.deadline

    def fileno(self) -> int:
        return self.exchange.fileno()

    def result(self) -> list[Any]:
        return self.finish(self.exchange.result)

    def cancel(self, reason: str) -> None:
        self.exchange.cancel(reason)


#: One batch: the values of its jobs now (a value or an exception each), or a request
#: in flight whose answer gives them.
BatchCall = Callable[[str, list[J]], "list[Any] | Waiting"]


@dataclass
class _Batch(Generic[J]):
    node: str
    items: list[tuple[int, J]]  # (position in the jobs, job)
    attempt: int = 1
    due: float = 0.0  # a retry: not sent before this time.monotonic()
    waiting: Waiting | None = None
    fd: int = -1  # the socket its answer comes on, while in flight
    settled: bool = False


def _backoff(options: FanoutOptions) -> Callable[[int], float]:
    """Seconds to wait after try ``attempt`` (tenacity's exponential back-off)."""
    wait = wait_exponential(multiplier=options.backoff_s, max=2.0)
    state = RetryCallState(Retrying(), fn=None, args=(), kwargs={})

    def delay(attempt: int) -> float:
        state.attempt_number = attempt
        return float(wait(state))

    return delay


def fan_out(jobs: Sequence[J], node_of: Callable[[J], str], call: BatchCall[J],
            options: FanoutOptions = FanoutOptions(),
            sink: list[_Outcome[J]] | None = None) -> list[_Outcome[J]]:
    """Run ``call(node, batch)`` for every node's jobs (in batches of at most 1,024, one
    after the other per node), with up to ``concurrency`` requests in flight, all on
    this thread; a job whose value is a transient failure is tried again (with the
    others of its batch that failed so) until ``attempts``. Outcomes come in the order
    of ``jobs``; each is also appended to ``sink`` as it comes, so a caller interrupted
    meanwhile (a signal, an activity timeout) still knows what was done: the answers
    already in flight are read before the interruption leaves this function."""
    by_node: dict[str, list[tuple[int, J]]] = defaultdict(list)
    for position, job in enumerate(jobs):
        by_node[node_of(job)].append((position, job))
    queue: deque[_Batch[J]] = deque(
        _Batch(node, items[start:start + MAX_BATCH_ITEMS])
        for node, items in by_node.items() for start in range(0, len(items), MAX_BATCH_ITEMS))
    outcomes: list[_Outcome[J] | None] = [None] * len(jobs)
    retries: list[_Batch[J]] = []
    flights: dict[int, _Batch[J]] = {}  # by socket
    busy: set[str] = set()  # nodes with a request in flight (one connection each)
    delay = _backoff(options)
    selector = selectors.DefaultSelector()
    width = max(1, options.concurrency)

    def settle(batch: _Batch[J], values: list[Any]) -> None:
        again, done = [], []
        for (position, job), value in zip(batch.items, values, strict=True):
            error = value if isinstance(value, BaseException) else None
            if error is not None and _transient(error) and batch.attempt < options.attempts:
                again.append((position, job))
                continue
            outcome = _Outcome(job, None if error else value, error, batch.attempt)
            outcomes[position] = outcome
            done.append(outcome)
        if sink is not None:
            sink.extend(done)
        batch.settled = True
        busy.discard(batch.node)
        if again:
            retries.append(_Batch(batch.node, again, batch.attempt + 1,
                                  due=time.monotonic() + delay(batch.attempt)))

    def launch(batch: _Batch[J]) -> None:
        with signals.held():  # a request sent is a request in flights: never half
            busy.add(batch.node)
            try:
                step = call(batch.node, [job for _, job in batch.items])
            except GamedayError as exc:
                settle(batch, [exc] * len(batch.items))
                return
            if isinstance(step, list):
                settle(batch, step)
                return
            batch.waiting, batch.fd = step, step.fileno()
            flights[batch.fd] = batch
            selector.register(batch.fd, selectors.EVENT_READ, batch)

    def land(batch: _Batch[J]) -> None:
        assert batch.waiting is not None
        with signals.held():  # an answer read is an outcome kept: never half
            try:
                values = batch.waiting.result()
            except GamedayError as exc:
                values = [exc] * len(batch.items)
            if not batch.settled:
                settle(batch, values)
            if flights.get(batch.fd) is batch:  # (its socket may be closed by now)
                selector.unregister(batch.fd)
                del flights[batch.fd]

    def wait(until: float) -> None:
        """Read the answers that arrive before ``until`` or the first deadline in flight;
        give up on those past their deadline (a failure that may pass)."""
        deadlines = [b.waiting.deadline for b in flights.values() if b.waiting is not None]
        wake = min([until, *deadlines])
        for key, _ in selector.select(max(0.0, wake - time.monotonic())):
            land(key.data)
        now = time.monotonic()
        for batch in list(flights.values()):
            if batch.waiting is not None and batch.waiting.deadline <= now:
                batch.waiting.cancel("no answer within the client's timeout")
                land(batch)

    try:
        with _collector_paused():
            while queue or retries or flights:
                now = time.monotonic()
                for batch in [b for b in retries if b.due <= now]:
                    retries.remove(batch)
                    queue.append(batch)
                for _ in range(len(queue)):
                    if len(flights) >= width:
                        break
                    batch = queue.popleft()
                    if batch.node in busy:
                        queue.append(batch)
                    else:
                        launch(batch)
                if flights:
                    wait(min((b.due for b in retries), default=math.inf))
                elif retries and not queue:
                    first = min(retries, key=lambda b: b.due)
                    options.sleep(max(0.0, first.due - now))
                    first.due = 0.0  # slept: due now (whatever clock the sleep keeps)
    except BaseException:
        with signals.deferred():  # read what is in flight: the agents applied it
            while flights:
                wait(math.inf)
        raise
    finally:
        selector.close()
    return [o for o in outcomes if o is not None]


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a fan-out runs: it makes about a
    hundred short-lived objects per target, which reference counting frees, and the
    collector would otherwise stop it some forty times per 1,024 targets to scan them
    (about 10 ms). Restored as it was afterwards, however the block ends."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _one_failed(batch: Sequence["InjectRequest"], position: int, exc: BaseException
                ) -> list[FaultEntry | BaseException]:
    """Results of a batch refused because of one target: its error, and NotApplied for
    the others (nothing of the batch is applied)."""
    why = NotApplied(f"not applied: {batch[position].label()} in the same batch failed")
    return [exc if i == position else why for i in range(len(batch))]


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def inject_gpus(session: "Session", gpus: Sequence["GpuRef"], *, kind: str,
                params: Mapping[str, Any], action: str = "", lease_s: float | None = None,
                options: FanoutOptions = FanoutOptions()) -> list[FaultEntry]:
    """Apply ``kind`` on every GPU through the session, concurrently; all or nothing
    (:func:`inject_requests` with one request per GPU, target ``{"gpu": index}``)."""
    from gameday.engine.session import InjectRequest
    return inject_requests(session, [InjectRequest(gpu.node, kind, {"gpu": gpu.index}, params)
                                     for gpu in gpus],
                           action=action, lease_s=lease_s, options=options)


@_collector_paused()
def inject_requests(session: "Session", requests: Sequence["InjectRequest"], *,
                    action: str = "", lease_s: float | None = None,
                    options: FanoutOptions = FanoutOptions()) -> list[FaultEntry]:
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
    requests = session.intend(requests, lease=lease, action=action)  # before any is sent
    several = len({request.node for request in requests}) > 1  # batches land one by one

    def apply(node: str, batch: list["InjectRequest"]
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
                if _transient(exc) or exc.index is None or not 0 <= exc.index < len(batch):
                    raise  # the whole batch: tried again if it may pass
                return _one_failed(batch, exc.index, exc)
            entries = [session.entry(request, client.url, fault, lease=lease, action=action)
                       for request, fault in zip(batch, faults, strict=True)]
            if several:  # written now, while other agents work; fsync'd at the end
                session.ledger.record_applied_many(entries, sync=False)
            return list(entries)

        return Then(client.start_inject_many([  # copied there
            {"kind": request.kind, "target": request.target, "params": request.params,
             "lease_s": lease, "request_id": request.request_id} for request in batch],
            minimal=True), finish)

    done: list[_Outcome[InjectRequest]] = []
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
                         error=None if o.error is None else _error_text(o.error))
            for o in outcomes])
        report.rollback_failures = revert_entries(session, entries, "fanout-partial-failure",
                                                  options)
        failed_ids = {line.split(" ", 2)[1] for line in report.rollback_failures}
        report.rolled_back = [e.id for e in entries if e.id not in failed_ids]
        report.wall_s = time.monotonic() - started
        log.warning("fan-out failed", kind=kinds, summary=report.summary())
        raise FanoutFailed(report)
    log.info("fan-out applied", kind=kinds, faults=len(entries),
             wall_s=round(time.monotonic() - started, 3))
    return entries


@_collector_paused()
def revert_entries(session: "Session", entries: Sequence[FaultEntry], reason: str,
                   options: FanoutOptions = FanoutOptions()) -> list[str]:
    """Revert agent faults concurrently, record them in one ledger write; one line per
    fault that could not be reverted (``"<kind> <id> on <node>: <why>"``)."""
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

    finished: list[_Outcome[FaultEntry]] = []
    try:
        fan_out([e for e in entries if e.via == "agent"], lambda e: e.node, revert, options,
                sink=finished)
    finally:
        with signals.deferred():
            failures = _record_reverts(session, finished, reason)
    return failures


def _record_reverts(session: "Session", finished: Sequence[_Outcome[FaultEntry]],
                    reason: str) -> list[str]:
    done: list[tuple[str, float, str]] = []
    events: list[dict[str, Any]] = []
    failures: list[str] = []
    for outcome in finished:
        entry = outcome.job
        if outcome.error is not None:
            failures.append(f"{entry.kind} {entry.id} on {entry.node}: "
                            f"{_error_text(outcome.error)}")
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
