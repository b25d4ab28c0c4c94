"""Recovery time objective: time to detect, time to recover, and RTO after a fault.

``measure_recovery`` folds an SLI timeline (the run's recorder, ``gameday.engine.recorder``,
or one it records itself) into detection and recovery instants. The onset is the
agent's ``applied_at`` for the run's most recent fault. Each sample carries the time
it was sent and the time its answer arrived; the service counted as recovered between
the send of the last failing sample and the arrival of the first OK answer that proves
it (:class:`RecoveryTracker`), once the OK run lasted ``stable_for_s`` seconds: the
middle of that interval, ± half of it, and ``rto_s = recovered_at - onset``. Time to
detect comes from the system's own signal (``verifiers.detection``): the controller's
event log or a PromQL expression.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gameday.activity import Recorder, current, fail, record
from gameday.clock import Clock
from gameday.errors import GamedayError, one_line
from verifiers.detection import DetectionSignal, detection_signal
from verifiers.sli import recorder_for

__all__ = ["measure_recovery"]


@dataclass(frozen=True)
class Probe:
    """One SLI reading: did the service meet its indicator, and if not, why."""

    ok: bool
    error: str = ""


Sampler = Callable[[], Probe]


@dataclass
class RecoveryTracker:
    """Folds SLI samples, in send order, each with its send and answer times, into
    detection and recovery instants.

    Recovery is bracketed by construction, whatever the server does: the last failing
    sample was sent at ``L``, and the server failed it at some instant after ``L``, so it
    was not yet whole then; an OK answer proves the server whole when it ARRIVED, but only
    if its request was sent after every failing sample's answer arrived (else it could
    have been answered before the failure that followed). The truth lies in ``[L, U]``,
    ``U`` the first such arrival. A server that refuses, resets or errors makes the
    interval one sampling interval (plus a request's latency) wide; one that holds
    requests makes it at most its SLI's ``timeout_s`` (plus an interval) wide, because
    the last failures are the held requests that timed out.
    """

    onset: float
    stable_for_s: float
    expect_outage: bool = False
    samples: int = 0
    failures: int = 0
    first_sample_at: float | None = None
    detected_at: float | None = None
    down_between: tuple[float, float] | None = None  # last OK answer, first failed answer
    stable_since: float | None = None  # send time of the first OK sample of the OK run
    failed_before: float | None = None  # send time of the failing sample before that run
    certified_at: float | None = None  # the first answer of that run that proves recovery
    certified_sent: float = 0.0  # when the request of that answer was sent
    run_done: float | None = None  # the latest answer of that run
    run: list[tuple[float, float]] = field(default_factory=list)  # its (sent, answered)
    failed_done: float = -math.inf  # the latest answer of any failing sample
    last_ok_done: float | None = None
    last_failed_at: float | None = None
    last_at: float | None = None
    last_ok: bool | None = None
    last_done: float | None = None
    last_error: str = ""
    transitions: list[list[Any]] = field(default_factory=list)

    def add(self, t: float, probe: Probe, done: float | None = None) -> None:
        """Fold in one sample sent at ``t`` and answered at ``done`` (default ``t``).
        Samples before the onset go on the timeline and bound recovery only."""
        done = t if done is None else max(t, done)
        self.samples += 1
        if self.first_sample_at is None:
            self.first_sample_at = t
        if probe.ok != self.last_ok:
            self.transitions.append([round(t, 3), probe.ok, round(done, 3)])
        self.last_at, self.last_ok, self.last_done = t, probe.ok, done
        if not probe.ok:
            self.failed_done = max(self.failed_done, done)
            self.last_failed_at = t
            self.stable_since = self.certified_at = self.run_done = None
            self.run = []
            if t >= self.onset:
                self.failures += 1
                self.last_error = probe.error
                if self.detected_at is None:
                    self.detected_at = done
                    self.down_between = (self.last_ok_done or t, done)
            return
        self.last_ok_done = done if self.last_ok_done is None else max(self.last_ok_done, done)
        if t < self.onset:
            return
        if self.stable_since is None:
            self.stable_since, self.failed_before = t, self.last_failed_at
        if t >= self.failed_done and (self.certified_at is None or done < self.certified_at):
            self.certified_at, self.certified_sent = done, t
        self.run.append((t, done))
        self.run_done = done if self.run_done is None else max(self.run_done, done)

    @property
    def stable_for(self) -> float:
        """How long the service has been whole since the run of OK samples proved it (0 if
        the last sample failed)."""
        if self.certified_at is None or self.run_done is None:
            return 0.0
        return self.run_done - self.certified_at

    @property
    def recovered_between(self) -> tuple[float, float] | None:
        """``(L, U)``: the interval the recovery instant lies in, once the OK run held
        ``stable_for_s``; ``(first OK send, same)`` when nothing failed before it."""
        if self.stable_since is None or self.certified_at is None or \
                self.stable_for < self.stable_for_s:
            return None
        if self.expect_outage and self.detected_at is None:
            return None
        if self.failed_before is None:
            return self.stable_since, self.stable_since
        low = max(self.onset, self.failed_before)
        return low, max(low, self.certified_at)

    @property
    def recovered_at(self) -> float | None:
        """The recovery instant, an estimate inside :attr:`recovered_between`; None until
        the OK run held ``stable_for_s``.

        When the server held requests (two or more of the run's OK samples, sent before
        the proving request, took well over a healthy latency: the median latency of the
        samples sent after it), it answered the proving request about one healthy latency
        before that answer arrived, and was still down when it took the last request it
        held: the estimate is the middle of those two instants. Otherwise (it refused,
        reset or erred: nothing queued) it is the middle of the bounds."""
        bounds = self.recovered_between
        if bounds is None or self.certified_at is None or bounds[0] == bounds[1]:
            return None if bounds is None else bounds[0]
        low, high = bounds
        after = sorted(done - sent for sent, done in self.run if sent >= self.certified_at)
        healthy = after[len(after) // 2] if after else 0.0
        answered = min(high, max(self.certified_sent, high - healthy))
        held = [sent for sent, done in self.run
                if sent < self.certified_sent and done - sent > 3 * healthy + 0.001]
        if len(held) < 2:
            return (low + high) / 2
        return min(high, max(low, (max(low, *held) + answered) / 2))

    @property
    def resolution_s(self) -> float | None:
        """How far the recovery interval reaches from :attr:`recovered_at` (so
        ``recovered_at ± this`` holds all of :attr:`recovered_between`)."""
        bounds, at = self.recovered_between, self.recovered_at
        if bounds is None or at is None:
            return None
        return round(max(at - bounds[0], bounds[1] - at), 4)

    def timeline(self) -> list[list[Any]]:
        """``[sent, ok, answered]`` at every change of state, and the last sample."""
        points = [list(point) for point in self.transitions]
        if self.last_at is not None and (not points or points[-1][0] != round(self.last_at, 3)):
            points.append([round(self.last_at, 3), self.last_ok,
                           round(self.last_done or self.last_at, 3)])
        return points


def track_recovery(sampler: Sampler, tracker: RecoveryTracker, clock: Clock, *,
                   interval_s: float, timeout_s: float) -> RecoveryTracker:
    """Sample every ``interval_s`` until recovered or ``timeout_s`` of sampling has passed.

    Ticks are scheduled from the start, so a slow sample does not shift later ones; a
    tick missed while a sample ran is skipped. A sample that ends before the deadline is
    followed by one more, at the next tick or at the deadline, whichever comes first.
    """
    started = clock.monotonic()
    deadline = started + timeout_s
    tick = 0
    while True:
        sent = clock.now()
        probe = sampler()
        tracker.add(sent, probe, clock.now())
        if tracker.recovered_at is not None:
            return tracker
        now = clock.monotonic()
        if now >= deadline:
            return tracker
        tick = max(tick + 1, math.ceil((now - started) / interval_s)) if interval_s > 0 else 0
        clock.sleep(min(started + tick * interval_s, deadline) - now)


def follow_recorder(recorder: Recorder, tracker: RecoveryTracker, clock: Clock, *,
                    interval_s: float, timeout_s: float) -> RecoveryTracker:
    """Fold the recorder's settled SLI timeline into ``tracker`` as it grows (in send
    order, never past a sample still in flight), until recovered or ``timeout_s`` has
    passed (checking every ``interval_s``)."""
    deadline = clock.monotonic() + timeout_s
    folded = 0
    while True:
        readings = recorder.combined()
        for reading in readings[folded:]:
            tracker.add(reading.t, Probe(reading.ok, reading.error), reading.done_at)
            if tracker.recovered_at is not None:
                return tracker
        folded = len(readings)
        now = clock.monotonic()
        if now >= deadline:
            return tracker
        clock.sleep(min(interval_s, deadline - now))


def measure_recovery(sli: dict[str, Any] | None = None, stable_for_s: float = 3.0,
                     interval_s: float = 0.1, timeout_s: float = 60.0,
                     slo_s: float | None = None, expect_outage: bool = False,
                     detect: dict[str, Any] | None = None, detect_slo_s: float | None = None,
                     recover_slo_s: float | None = None) -> dict[str, Any]:
    """Measure time to detect, time to recover and the recovery time (RTO) after a fault.

    The SLI timeline comes from the run's recorder when ``sli`` is omitted (give the
    ``gameday`` control an ``sli`` argument: it then samples from before the method to
    the end of the run), else from a recorder this probe runs while it waits. ``sli``
    (see ``verifiers.sli``): ``{"http": URL}`` is OK when the URL answers 2xx within the
    mapping's ``timeout_s`` (default 1 s), sampled every ``interval_s``; a ``promql``
    expression may be added (OK while it returns a non-empty, non-zero result).

    The onset is when the run's most recent fault was applied (the agent's
    ``applied_at``). ``detected_at`` is when the first failing SLI answer after it arrived
    (None if the SLI never failed; ``sli_down_between`` brackets the outage's start:
    the last OK answer's arrival and that failure's). ``recovered_between`` is ``[L, U]``:
    ``L`` the send time of the last failing sample, ``U`` the arrival of the first OK
    answer to a request sent after every failure had arrived, of the run of OK samples
    that then lasted ``stable_for_s``; the truth lies inside by construction whatever the
    server does (refuse, reset, error, answer wrongly with ``expect_body``, answer late,
    hold). ``recovered_at`` is its middle, ``rto_resolution_s`` its half width: about half
    a sampling interval when the server refuses or errors, at most half the SLI's
    ``timeout_s`` plus an interval when it holds requests (held requests time out, the
    next ones are answered on release); ``rto_s = recovered_at - onset``, at most
    ``timeout_s`` of waiting. If the SLI never failed, ``recovered_at`` is the first
    sample after the onset (``rto_s`` is then an upper bound); with ``expect_outage:
    true`` the SLI must fail at least once before it can recover.

    Time to detect comes from the system's own signal, ``detect``: ``{"placement":
    "lab" | URL}`` (the controller's first ``alert_firing``/``gpu_cordoned`` event after
    the onset, from its event log), ``{"promql": EXPR}`` (the first instant after the
    onset at which EXPR is non-empty and non-zero, e.g. ``ALERTS{alertstate="firing"}``),
    or ``{}`` for none; by default the target's placement events when it has a
    placement URL. ``time_to_detect_s = system_detected_at - onset`` and
    ``time_to_recover_s = recovered_at - system_detected_at``.

    Objectives: ``slo_s`` for the RTO (default: the experiment's ``slo.rto_s``),
    ``detect_slo_s`` and ``recover_slo_s``; each ``met`` is null without its objective.
    Returns ``{"onset", "detected_at", "sli_down_between", "recovered_at",
    "recovered_between", "rto_s", "rto_resolution_s", "slo_s", "met",
    "samples", "failures", "system_detected_at", "time_to_detect_s", "detect_signal",
    "detect_slo_s", "detect_met", "time_to_recover_s", "recover_slo_s", "recover_met"}``
    (times are Unix epoch seconds). Raises ``ActivityFailed`` with one line, e.g.
    ``rto 23.4 s > slo 20 s (missed by 3.4 s)``, ``time to detect 9.1 s > slo 8 s (missed
    by 1.1 s)`` or ``not recovered within timeout 60 s (...)``.
    """
    verifier = "rto.measure_recovery"
    session = current()
    slo = slo_s if slo_s is not None else session.extension.slo.rto_s
    measurement: dict[str, Any] = {"sli": sli, "stable_for_s": stable_for_s,
                                   "interval_s": interval_s, "timeout_s": timeout_s,
                                   "slo_s": slo}
    recorder = session.recorder
    own = False
    try:
        if stable_for_s < 0 or interval_s <= 0 or timeout_s <= 0:
            raise GamedayError(f"need stable_for_s >= 0, interval_s > 0 and timeout_s > 0, "
                               f"got {stable_for_s}, {interval_s}, {timeout_s}")
        signal = detection_signal(detect, session)
        if sli is not None:
            spec = dict(sli)
            spec.setdefault("interval_s", interval_s)
            recorder, own = recorder_for(spec, session.clock), True
        elif recorder is None:
            raise GamedayError("no sli given and no recorder runs: pass sli, e.g. "
                               '{"http": "${service_url}/predict"}, or give the gameday '
                               "control an sli argument")
    except (GamedayError, TypeError, ValueError) as exc:
        fail(verifier, f"measure_recovery: {exc}", measurement)
    onset = session.fault_onset()
    if onset is None:
        fail(verifier, "measure_recovery needs a fault onset: no fault was applied in this "
                       "session", measurement)
    measurement["sli"] = " and ".join(channel.describe for channel in recorder.channels)
    measurement["recorder"] = "own" if own else "run"
    tracker = RecoveryTracker(onset=onset, stable_for_s=stable_for_s,
                              expect_outage=expect_outage)
    if own:
        recorder.start()
    try:
        follow_recorder(recorder, tracker, session.clock, interval_s=interval_s,
                        timeout_s=timeout_s)
    finally:
        if own:
            recorder.stop()
    return conclude(tracker, verifier=verifier, measurement=measurement, timeout_s=timeout_s,
                    slo_s=slo, signal=signal, detect_slo_s=detect_slo_s,
                    recover_slo_s=recover_slo_s)

def _seconds(value: float, other: float | None = None) -> str:
    """``value`` with one decimal, or three where one would hide the difference."""
    text = f"{value:.1f}"
    if (other is not None and text == f"{other:.1f}") or (0 < abs(value) < 0.1):
        text = f"{value:.3f}"
    return text


def measure_with(sampler: Sampler, tracker: RecoveryTracker, clock: Clock, *, verifier: str,
                 measurement: dict[str, Any], interval_s: float, timeout_s: float,
                 slo_s: float | None) -> dict[str, Any]:
    """Track recovery with ``sampler`` (synchronously), record the verdict, return it."""
    track_recovery(sampler, tracker, clock, interval_s=interval_s, timeout_s=timeout_s)
    return conclude(tracker, verifier=verifier, measurement=measurement, timeout_s=timeout_s,
                    slo_s=slo_s)


def _rounded(bounds: tuple[float, float] | None) -> list[float] | None:
    return None if bounds is None else [round(bounds[0], 4), round(bounds[1], 4)]


def _objective(name: str, value: float | None, slo: float | None) -> tuple[bool | None, str]:
    """Whether ``value`` met ``slo`` and, when not, the one-line reason."""
    if slo is None:
        return None, ""
    if value is None:
        return False, f"{name}: no measurement (slo {slo:g} s)"
    if value <= slo:
        return True, ""
    return False, (f"{name} {_seconds(value, slo)} s > slo {slo:g} s (missed by "
                   f"{_seconds(value - slo)} s)")


def conclude(tracker: RecoveryTracker, *, verifier: str, measurement: dict[str, Any],
             timeout_s: float, slo_s: float | None, signal: DetectionSignal | None = None,
             detect_slo_s: float | None = None,
             recover_slo_s: float | None = None) -> dict[str, Any]:
    """Turn a tracker (and the system's detection signal) into the recorded verdict."""
    recovered_at = tracker.recovered_at
    rto = None if recovered_at is None else round(max(0.0, recovered_at - tracker.onset), 3)
    met = None if rto is None or slo_s is None else rto <= slo_s
    detection = signal.first_after(tracker.onset) if signal is not None else None
    detected = detection.t if detection is not None else None
    to_detect = None if detected is None else round(max(0.0, detected - tracker.onset), 3)
    to_recover = (None if detected is None or recovered_at is None
                  else round(recovered_at - detected, 3))
    detect_met, detect_miss = _objective("time to detect", to_detect, detect_slo_s)
    recover_met, recover_miss = _objective("time to recover", to_recover, recover_slo_s)
    result: dict[str, Any] = {
        "onset": tracker.onset, "detected_at": tracker.detected_at,
        "sli_down_between": _rounded(tracker.down_between),
        "recovered_at": recovered_at,
        "recovered_between": _rounded(tracker.recovered_between), "rto_s": rto,
        "rto_resolution_s": tracker.resolution_s,
        "slo_s": slo_s, "met": met,
        "samples": tracker.samples, "failures": tracker.failures,
        "system_detected_at": detected, "time_to_detect_s": to_detect,
        "detect_signal": None if detection is None else detection.what,
        "detect_source": None if signal is None else signal.describe(),
        "detect_slo_s": detect_slo_s, "detect_met": detect_met,
        "time_to_recover_s": to_recover, "recover_slo_s": recover_slo_s,
        "recover_met": recover_met}
    measurement.update(result, first_sample_at=tracker.first_sample_at,
                       timeline=tracker.timeline(), last_error=tracker.last_error)
    session = current()
    if tracker.detected_at is not None and measurement.get("recorder") != "run":
        # (the run's recorder already put every change of the SLI on the timeline)
        session.event("sli_down", at=tracker.detected_at, sli=measurement.get("sli"),
                      error=tracker.last_error)
    if detection is not None:
        session.event("detected", at=detection.t, signal=detection.what)
    if recovered_at is None:
        if tracker.stable_since is not None and tracker.expect_outage and \
                tracker.detected_at is None:
            why = "the SLI never failed"
        elif tracker.stable_since is not None:
            why = (f"OK for the last {tracker.stable_for:.1f} s, needs {tracker.stable_for_s:g} "
                   f"s stable")
        else:
            why = f"{tracker.failures} of {tracker.samples} samples failed, last: " \
                  f"{tracker.last_error}"
        fail(verifier, f"not recovered within timeout {timeout_s:g} s ({one_line(why, 200)})",
             measurement)
    session.event("sli_recovered", at=recovered_at, sli=measurement.get("sli"), rto_s=rto)
    assert rto is not None
    resolution = tracker.resolution_s or 0.0
    if slo_s is not None and resolution and rto - resolution <= slo_s < rto + resolution:
        measurement["verdict"] = "inconclusive"
        fail(verifier, f"inconclusive: rto {rto:.3f} ± {resolution:.3f} s against slo "
                       f"{slo_s:g} s; the verdict hangs on the sampling interval", measurement)
    misses = []
    if met is False:
        assert slo_s is not None
        misses.append(f"rto {_seconds(rto, slo_s)} s > slo {slo_s:g} s (missed by "
                      f"{_seconds(rto - slo_s)} s)")
    misses += [miss for miss in (detect_miss, recover_miss) if miss]
    if misses:
        more = f" (and {len(misses) - 1} more missed)" if len(misses) > 1 else ""
        fail(verifier, misses[0] + more, measurement)
    within = f" ± {tracker.resolution_s:.3f}" if tracker.resolution_s else ""
    reason = (f"rto {_seconds(rto, slo_s)}{within} s <= slo {slo_s:g} s" if slo_s is not None
              else f"rto {_seconds(rto)}{within} s (no slo)")
    if to_detect is not None:
        reason += f"; detected in {_seconds(to_detect)} s"
        if to_recover is not None:
            reason += f", recovered {_seconds(to_recover)} s after detection"
    if tracker.detected_at is None:
        reason += "; the SLI never failed"
    record(verifier, True, measurement, reason)
    return result
