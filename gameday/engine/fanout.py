"""Fan-out: jobs grouped by node, one batch request per node in flight, a result per job.

A generic scheduler: it knows agents' exchanges and batches, not the run's session (the
fault fan-out over it, the run's, is :mod:`gameday.engine.injector`). Each
node's jobs go in batches of at most 1,024 (``MAX_BATCH_ITEMS``, docs/agent-api.md), one
after the other per node; up to ``concurrency`` nodes have a request in flight at once.
It all runs on the calling thread, without a thread per agent: each request is sent on
its agent's kept-alive connection (:class:`gameday.wire.agent_client.Exchange`) and
each answer is read when its socket becomes readable (one ``select.poll`` object for the
fan-out: registering a socket is a change to its table, not a system call as with
epoll, which was a twelfth of a fleet fan-out's time through ``selectors``). A job whose value
is a failure that may pass (agent unreachable, no answer within the client's timeout,
``5xx``, ``429``) is tried again, with the others of its node that failed so, after an
exponential back-off (tenacity's ``wait_exponential``; slept through an injectable sleep
when nothing else is in flight); a refusal (``4xx``) is not.

An interruption (Ctrl-C, SIGTERM, SIGHUP, an activity timeout) stops the sending: the
answers of the requests already in flight are still read (signals deferred meanwhile)
and their outcomes kept, so the caller knows what the agents did. Sending a request and
noting it in flight, and reading an answer and keeping its outcome, each happen with
the run's signals held back (:func:`gameday.safety.signals.held`), so Ctrl-C, SIGTERM and
SIGHUP never cut one in half; an activity timeout (SIGALRM) can.
"""

import math
import os
import select
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, NamedTuple, Protocol, TypeVar

from tenacity import RetryCallState, Retrying, wait_exponential

from gameday.errors import AgentError, GamedayError
from gameday.safety import signals
from gameday.wire.agent_client import Exchange
from gameday.wire.protocol import MAX_BATCH_ITEMS

__all__ = ["BatchCall", "FanoutOptions", "Outcome", "Then", "Waiting", "fan_out", "transient"]

J = TypeVar("J")
T = TypeVar("T")

#: Nodes worked on at once by default (``FanoutOptions.concurrency``).
CONCURRENCY_ENV = "GAMEDAY_FANOUT_CONCURRENCY"


def _concurrency() -> int:
    """``$GAMEDAY_FANOUT_CONCURRENCY`` when it is a positive integer, else 64."""
    raw = os.environ.get(CONCURRENCY_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 64


@dataclass(frozen=True)
class FanoutOptions:
    """How wide and how stubborn a fan-out is; the environment is read when one is made."""

    concurrency: int = field(default_factory=_concurrency)  # agents
    attempts: int = 3              # per target, for failures that may pass
    backoff_s: float = 0.05        # first retry delay; doubles, capped at 2 s
    sleep: Callable[[float], None] = time.sleep  # the back-off, when nothing is in flight


def transient(exc: BaseException) -> bool:
    """Worth another try: unreachable/timeout (no status), 5xx, 429."""
    if not isinstance(exc, AgentError):
        return False
    return exc.status is None or exc.status >= 500 or exc.status == 429


class Outcome(NamedTuple, Generic[J]):
    """What became of one job: its value, or the error it ended with, after ``attempts``."""

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


#: What a socket in flight is polled for: its answer (or its error or hang-up).
_READABLE: Final = select.POLLIN | select.POLLPRI


def _backoff(options: FanoutOptions) -> Callable[[int], float]:
    """Seconds to wait after try ``attempt`` (tenacity's exponential back-off)."""
    wait = wait_exponential(multiplier=options.backoff_s, max=2.0)
    state = RetryCallState(Retrying(), fn=None, args=(), kwargs={})

    def delay(attempt: int) -> float:
        state.attempt_number = attempt
        return float(wait(state))

    return delay


def fan_out(jobs: Sequence[J], node_of: Callable[[J], str], call: BatchCall[J],
            options: FanoutOptions | None = None,
            sink: list[Outcome[J]] | None = None,
            landed: Callable[[], None] | None = None) -> list[Outcome[J]]:
    """Run ``call(node, batch)`` for every node's jobs (in batches of at most 1,024, one
    after the other per node), with up to ``concurrency`` requests in flight, all on
    this thread; a job whose value is a transient failure is tried again (with the
    others of its batch that failed so) until ``attempts``. Outcomes come in the order
    of ``jobs``; each is also appended to ``sink`` as it comes, so a caller interrupted
    meanwhile (a signal, an activity timeout) still knows what was done: the answers
    already in flight are read before the interruption leaves this function. ``landed``
    is called after each wake-up's answers are read, before another request is sent
    (the injector writes their ledger lines then, in one write)."""
    options = options or FanoutOptions()
    by_node: dict[str, list[tuple[int, J]]] = defaultdict(list)
    for position, job in enumerate(jobs):
        by_node[node_of(job)].append((position, job))
    queue: deque[_Batch[J]] = deque(
        _Batch(node, items[start:start + MAX_BATCH_ITEMS])
        for node, items in by_node.items() for start in range(0, len(items), MAX_BATCH_ITEMS))
    outcomes: list[Outcome[J] | None] = [None] * len(jobs)
    retries: list[_Batch[J]] = []
    flights: dict[int, _Batch[J]] = {}  # by socket
    busy: set[str] = set()  # nodes with a request in flight (one connection each)
    delay = _backoff(options)
    poller = select.poll()
    width = max(1, options.concurrency)

    def settle(batch: _Batch[J], values: list[Any]) -> None:
        again, done = [], []
        for (position, job), value in zip(batch.items, values, strict=True):
            error = value if isinstance(value, BaseException) else None
            if error is not None and transient(error) and batch.attempt < options.attempts:
                again.append((position, job))
                continue
            outcome = Outcome(job, None if error else value, error, batch.attempt)
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
            poller.register(batch.fd, _READABLE)

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
                poller.unregister(batch.fd)
                del flights[batch.fd]

    def wait(until: float) -> None:
        """Read the answers that arrive before ``until`` or the first deadline in flight;
        give up on those past their deadline (a failure that may pass)."""
        deadlines = [b.waiting.deadline for b in flights.values() if b.waiting is not None]
        wake = min([until, *deadlines])
        timeout_ms = max(0.0, wake - time.monotonic()) * 1000.0
        for fd, _ in poller.poll(None if math.isinf(timeout_ms) else math.ceil(timeout_ms)):
            batch = flights.get(fd)
            if batch is not None:
                land(batch)
        now = time.monotonic()
        for batch in list(flights.values()):
            if batch.waiting is not None and batch.waiting.deadline <= now:
                batch.waiting.cancel("no answer within the client's timeout")
                land(batch)
        if landed is not None:
            landed()

    try:
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
    return [o for o in outcomes if o is not None]
