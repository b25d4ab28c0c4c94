"""The SLI recorder: samples service-level indicators on a timeline for the whole run.

A :class:`Recorder` runs one background thread per :class:`Channel` (a named sampler
and its cadence, e.g. an HTTP probe of the service every 100 ms, a PromQL expression
every 500 ms, a job's progress endpoint). Each reading is kept as a :class:`Reading`
``(t, ok, latency_s, error, value)`` stamped when the sample started; ``value`` is the
number a value channel read (e.g. a training step), None for pass/fail channels.
Ticks are scheduled from the start, so a slow sample does not shift later ones (a tick
missed while a sample ran is skipped).

The run session owns one recorder (started by the ``gameday`` control before the
method, when the control is given an ``sli``; stopped when the session closes); the
journal keeps its timeline in the ``gameday.sli`` section, and ``verifiers.rto``
measures recovery from it. Time comes from an injectable clock; ``tick()`` samples
every channel once, synchronously, so tests can drive a recorder without threads.
"""

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from gameday.clock import SYSTEM_CLOCK, Clock

__all__ = ["Channel", "Reading", "Recorder", "Sampler", "Transition"]

log = structlog.get_logger("gameday.engine.recorder")


@dataclass(frozen=True)
class Reading:
    """One sample of one channel: did the indicator hold, and if not, why."""

    t: float
    ok: bool
    latency_s: float = 0.0
    error: str = ""
    value: float | None = None

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
    """A named indicator, sampled every ``interval_s`` seconds; ``gates``: whether its
    readings count in the :meth:`Recorder.combined` timeline (a value channel such as a
    job's progress is a measurement, not the service's health)."""

    name: str
    describe: str
    sampler: Sampler
    interval_s: float = 0.1
    gates: bool = True
    readings: list[Reading] = field(default_factory=list)


Transition = Callable[[str, Reading], None]


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
        t = self.clock.now()
        began = self.clock.monotonic()
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
            previous = channel.readings[-1] if channel.readings else None
            channel.readings.append(reading)
        if self.on_transition is not None and (previous is None or previous.ok != ok):
            self.on_transition(channel.name, reading)
        return reading

    def tick(self) -> None:
        """Sample every channel once (what each thread does on its cadence)."""
        for channel in self.channels:
            self.sample(channel)

    def _run(self, channel: Channel) -> None:
        started = self.clock.monotonic()
        tick = 0
        while not self._stop.is_set():
            self.sample(channel)
            now = self.clock.monotonic()
            tick = max(tick + 1, int((now - started) / channel.interval_s) + 1)
            wait = started + tick * channel.interval_s - now
            if wait > 0 and self._stop.wait(wait):
                return

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
        """A copy of one channel's readings (the first channel's by default)."""
        channel = self.channel(name)
        with self._lock:
            return list(channel.readings)

    def channel(self, name: str | None = None) -> Channel:
        if name is None:
            return self.channels[0]
        for channel in self.channels:
            if channel.name == name:
                return channel
        raise KeyError(f"no SLI channel {name!r} (have: "
                       f"{', '.join(c.name for c in self.channels)})")

    def combined(self) -> list[Reading]:
        """The SLI timeline: the first channel's readings, each OK only if every other
        gating channel's latest reading at that time was OK too (none yet counts as OK)."""
        base = self.readings()
        gating = [c for c in self.channels[1:] if c.gates]
        others = [self.readings(c.name) for c in gating]
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
            merged.append(Reading(reading.t, ok, reading.latency_s, error))
        return merged

    def to_json(self) -> dict[str, Any]:
        """The journal's ``gameday.sli`` section: each channel and its samples
        (``[t, ok, latency_ms, error?]``) and, for a value channel, its values
        (``[t, value]`` of each reading that read one)."""
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
