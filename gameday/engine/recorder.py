"""The SLI recorder: samples service-level indicators on a timeline for the whole run.

A :class:`Recorder` runs one background thread per :class:`Channel` (a named sampler
and its cadence, e.g. an HTTP probe of the service every 100 ms, a PromQL expression
every 500 ms, a job's progress endpoint). Each reading is kept as a :class:`Reading`
``(t, ok, latency_s, error, value)``: ``t`` is when the sample was SENT and
``t + latency_s`` (``done_at``) when its answer (or its failure) ARRIVED; ``value`` is the
number a value channel read (e.g. a training step), None for pass/fail channels.

Sends keep a fixed cadence from the start, and up to ``Channel.in_flight`` samples run
at once, so a server that holds requests does not stop the sampling: a request it holds
stays in flight while the next ones are sent (a tick that finds every slot busy is
skipped). Answers arrive out of order; a channel's readings are kept in send order, and
:meth:`Recorder.settled` gives only the prefix no sample still in flight can change
(every reading sent before the earliest sample in flight), which is what
``verifiers.rto`` folds and what transitions are reported on.

The run session owns one recorder (started by the ``gameday`` control before the
method, when the control is given an ``sli``; stopped when the session closes); the
journal keeps its timeline in the ``gameday.sli`` section, and ``verifiers.rto``
measures recovery from it. Time comes from an injectable clock; ``tick()`` samples
every channel once, synchronously, so tests can drive a recorder without threads.
"""

import bisect
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.evidence.journal_shape import SliJSON

__all__ = ["Channel", "Reading", "Recorder", "Sampler", "Transition", "in_flight_for"]

log = structlog.get_logger("gameday.engine.recorder")


@dataclass(frozen=True)
class Reading:
    """One sample of one channel: did the indicator hold, and if not, why; sent at ``t``,
    answered ``latency_s`` later."""

    t: float
    ok: bool
    latency_s: float = 0.0
    error: str = ""
    value: float | None = None

    @property
    def done_at(self) -> float:
        """When the answer (or the failure: refused, reset, timed out) arrived."""
        return self.t + self.latency_s

    def to_json(self) -> list[Any]:
        point: list[Any] = [round(self.t, 3), self.ok, round(self.latency_s * 1000.0, 1)]
        if self.error:
            point.append(self.error)
        return point


#: A sampler answers ``(ok, error)``, or ``(ok, error, value)`` for a value channel; the
#: recorder stamps the time and latency.
Sampler = Callable[[], tuple[bool, str] | tuple[bool, str, float | None]]


@dataclass
class Channel:
    """A named indicator, sampled every ``interval_s`` seconds with up to ``in_flight``
    samples at once; ``gates``: whether its readings count in the
    :meth:`Recorder.combined` timeline (a value channel such as a job's progress is a
    measurement, not the service's health). ``readings`` are in send order."""

    name: str
    describe: str
    sampler: Sampler
    interval_s: float = 0.1
    gates: bool = True
    in_flight: int = 1
    readings: list[Reading] = field(default_factory=list)
    pending: list[float] = field(default_factory=list)  # send times of samples in flight
    reported: int = 0  # readings already given to on_transition


def in_flight_for(timeout_s: float, interval_s: float, cap: int = 128) -> int:
    """How many samples may be in flight so that one held until ``timeout_s`` never
    delays the next send of a cadence of ``interval_s`` (at most ``cap``)."""
    return max(1, min(cap, math.ceil(timeout_s / interval_s) + 1))


Transition = Callable[[str, Reading], None]


def _sent(reading: Reading) -> float:
    return reading.t


class Recorder:
    """Samples its channels in background threads until stopped; keeps every reading."""

    def __init__(self, channels: Sequence[Channel], *, clock: Clock = SYSTEM_CLOCK,
                 on_transition: Transition | None = None) -> None:
        if not channels:
            raise ValueError("a recorder needs at least one channel")
        self.channels = list(channels)
        self.clock = clock
        self.on_transition = on_transition
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # -- sampling ---------------------------------------------------------------------

    def sample(self, channel: Channel) -> Reading:
        """Sample ``channel`` once now and keep the reading."""
        return self._finish(channel, self._send(channel))

    def _send(self, channel: Channel) -> tuple[float, float]:
        """Stamp a sample's send: its time, and the monotonic clock its latency is
        measured from (here, not when a pool thread picks it up: a sample that waits for
        a thread has waited for its answer, so its arrival is never placed early)."""
        with self._lock:
            t = self.clock.now()
            began = self.clock.monotonic()
            channel.pending.append(t)
        return t, began

    def _finish(self, channel: Channel, sent: tuple[float, float]) -> Reading:
        t, began = sent
        value: float | None = None
        try:
            answer = channel.sampler()
            ok, error = answer[0], answer[1]
            if len(answer) == 3:
                value = answer[2]
        except Exception as exc:  # a sampler must never kill the recorder
            ok, error = False, f"{type(exc).__name__}: {exc}"
        reading = Reading(t, ok, max(0.0, self.clock.monotonic() - began), error[:200],
                          value)
        with self._lock:
            channel.pending.remove(t)
            bisect.insort_right(channel.readings, reading, key=_sent)
            settled = self._settled(channel)
            fresh = [(channel.readings[i - 1] if i else None, channel.readings[i])
                     for i in range(channel.reported, len(settled))]
            channel.reported = max(channel.reported, len(settled))
        if self.on_transition is not None:
            for previous, current in fresh:
                if previous is None or previous.ok != current.ok:
                    self.on_transition(channel.name, current)
        return reading

    @staticmethod
    def _settled(channel: Channel) -> list[Reading]:
        """The readings no sample in flight can precede (caller holds the lock)."""
        if not channel.pending:
            return channel.readings
        first = min(channel.pending)
        return channel.readings[:bisect.bisect_left(channel.readings, first, key=_sent)]

    def tick(self) -> None:
        """Sample every channel once (what each thread does on its cadence)."""
        for channel in self.channels:
            self.sample(channel)

    def _run(self, channel: Channel) -> None:
        started = self.clock.monotonic()
        tick = 0
        busy = threading.BoundedSemaphore(channel.in_flight)
        with ThreadPoolExecutor(max_workers=channel.in_flight,
                                thread_name_prefix=f"sli-{channel.name}") as pool:
            while not self._stop.is_set():
                if busy.acquire(blocking=False):
                    sent = self._send(channel)
                    future = pool.submit(self._finish, channel, sent)
                    future.add_done_callback(lambda _: busy.release())
                now = self.clock.monotonic()
                tick = max(tick + 1, int((now - started) / channel.interval_s) + 1)
                wait = started + tick * channel.interval_s - now
                if wait > 0 and self._stop.wait(wait):
                    break

    def start(self) -> "Recorder":
        if self._threads:
            return self
        self.started_at = self.clock.now()
        self._stop.clear()
        for channel in self.channels:
            thread = threading.Thread(target=self._run, args=(channel,), daemon=True,
                                      name=f"sli-{channel.name}")
            self._threads.append(thread)
            thread.start()
        log.info("recorder started", channels=[c.describe for c in self.channels])
        return self

    def stop(self) -> None:
        """Stop sampling (waits for samples in flight); idempotent."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        if self._threads and self.stopped_at is None:
            self.stopped_at = self.clock.now()
            log.info("recorder stopped", samples=sum(len(c.readings) for c in self.channels))

    @property
    def running(self) -> bool:
        return bool(self._threads) and not self._stop.is_set()

    # -- reading the timeline ---------------------------------------------------------

    def readings(self, name: str | None = None) -> list[Reading]:
        """A copy of one channel's readings so far, in send order (the first channel's by
        default); a sample still in flight may yet land among them."""
        channel = self.channel(name)
        with self._lock:
            return list(channel.readings)

    def settled(self, name: str | None = None) -> list[Reading]:
        """One channel's readings sent before its earliest sample in flight: a prefix that
        only grows (the first channel's by default)."""
        channel = self.channel(name)
        with self._lock:
            return list(self._settled(channel))

    def channel(self, name: str | None = None) -> Channel:
        if name is None:
            return self.channels[0]
        for channel in self.channels:
            if channel.name == name:
                return channel
        raise KeyError(f"no SLI channel {name!r} (have: "
                       f"{', '.join(c.name for c in self.channels)})")

    def combined(self) -> list[Reading]:
        """The settled SLI timeline: the first channel's settled readings, each OK only if
        every other gating channel's latest reading sent by then was OK too (none yet
        counts as OK); it stops before anything a sample in flight could change."""
        base = self.settled()
        gating = [c for c in self.channels[1:] if c.gates]
        others = [self.settled(c.name) for c in gating]
        with self._lock:
            horizon = min((min(c.pending) for c in gating if c.pending), default=math.inf)
        base = [r for r in base if r.t < horizon]
        if not others:
            return base
        merged = []
        positions = [0] * len(others)
        latest: list[Reading | None] = [None] * len(others)
        for reading in base:
            ok, error = reading.ok, reading.error
            for index, series in enumerate(others):
                while positions[index] < len(series) and series[positions[index]].t <= reading.t:
                    latest[index] = series[positions[index]]
                    positions[index] += 1
                other = latest[index]
                if other is not None and not other.ok:
                    ok = False
                    error = error or f"{gating[index].name}: {other.error}"
            merged.append(Reading(reading.t, ok, reading.latency_s, error, reading.value))
        return merged

    def to_json(self) -> SliJSON:
        """The journal's ``gameday.sli`` section: each channel and its samples
        (``[t, ok, latency_ms, error?]``: sent at ``t``, answered ``latency_ms`` later)
        and, for a value channel, its values (``[t, value]`` of each reading that read
        one)."""
        with self._lock:
            channels = []
            for c in self.channels:
                entry: dict[str, Any] = {"name": c.name, "sli": c.describe,
                                         "interval_s": c.interval_s,
                                         "samples": [r.to_json() for r in c.readings]}
                values = [[round(r.t, 3), r.value] for r in c.readings if r.value is not None]
                if values:
                    entry["values"] = values
                channels.append(entry)
            return {"started_at": self.started_at, "stopped_at": self.stopped_at,
                    "channels": channels}
