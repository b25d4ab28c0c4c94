"""Degradation, not only outage: how much throughput a fault cost while the job stayed up.

``degradation`` reads a job's progress (a counter: steps, samples, tokens, requests done)
from the job's own log, a PromQL expression or the HTTP progress endpoint the run's SLI
recorder samples, and measures its rate before the fault (the baseline), during it, and
after it: the slowdown during the fault, the time after the fault to get back to a
fraction of the baseline, and the work the window lost (in units and in seconds of work
at the baseline rate).

Every rate is an interval that holds the truth by construction: progress is monotone,
known exactly at each reading, so over ``[a, b]`` the job made at least ``P(last reading
<= b) - P(first reading >= a)`` and at most ``P(first reading >= b) - P(last reading <=
a)``. Progress that goes back (a restart from a checkpoint) is not new work: the rate is
that of the running maximum, so redone steps count as lost.
"""

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gameday.activity import current, fail, record
from gameday.errors import GamedayError
from gameday.promql import PromQL, Series
from verifiers._promql import prometheus_url_of
from verifiers.progress import fault_end, fault_entry, log_series, one_series, recorded_progress

__all__ = ["Progress", "Rate", "degradation"]


@dataclass(frozen=True)
class Rate:
    """A rate over ``[start, end]``: its best estimate and the interval that holds it."""

    start: float
    end: float
    low: float
    mid: float
    high: float

    def to_json(self) -> dict[str, float]:
        return {"start": self.start, "end": self.end, "rate": self.mid,
                "rate_min": self.low, "rate_max": self.high}


class Progress:
    """A monotone progress counter from readings ``(t, value)`` (in time order): the
    running maximum, so that work redone after a restart is not counted twice."""

    def __init__(self, samples: Sequence[tuple[float, float]]) -> None:
        ordered = sorted(samples)
        self.times = [t for t, _ in ordered]
        self.values: list[float] = []
        best = -math.inf
        for _, value in ordered:
            best = max(best, value)
            self.values.append(best)

    def at(self, t: float) -> tuple[float | None, float, float | None]:
        """``(low, mid, high)`` of the progress at ``t``: the reading at or before it, the
        linear interpolation, the reading at or after it (None where there is none)."""
        after = bisect.bisect_left(self.times, t)
        before = bisect.bisect_right(self.times, t) - 1
        low = self.values[before] if before >= 0 else None
        high = self.values[after] if after < len(self.times) else None
        if low is None or high is None:
            mid = low if high is None else high
            return low, float(mid if mid is not None else math.nan), high
        t0, t1 = self.times[before], self.times[after]
        mid = low if t1 == t0 else low + (high - low) * (t - t0) / (t1 - t0)
        return low, mid, high

    def rate(self, start: float, end: float) -> Rate | None:
        """The rate over ``[start, end]``, None unless readings bracket both ends."""
        a_low, a_mid, a_high = self.at(start)
        b_low, b_mid, b_high = self.at(end)
        if end <= start or None in (a_low, a_high, b_low, b_high):
            return None
        assert a_low is not None and a_high is not None and b_low is not None \
            and b_high is not None
        span = end - start
        return Rate(start, end, max(0.0, (b_low - a_high) / span), (b_mid - a_mid) / span,
                    (b_high - a_low) / span)

    def gap(self, start: float, end: float) -> float:
        """The longest time between readings that covers part of ``[start, end]``."""
        first = max(0, bisect.bisect_right(self.times, start) - 1)
        last = min(len(self.times) - 1, bisect.bisect_left(self.times, end))
        return max((self.times[i + 1] - self.times[i] for i in range(first, last)),
                   default=0.0)


def _recovery(progress: Progress, end: float, baseline: float, recover_to: float,
              window_s: float) -> float | None:
    """The start of the first window of ``window_s`` from ``end`` on (starting at ``end``
    or at a reading) whose rate is at least ``recover_to`` of ``baseline``."""
    starts = [end] + [t for t in progress.times if t > end]
    for start in starts:
        rate = progress.rate(start, start + window_s)
        if rate is None:
            return None  # no reading after this window yet
        if rate.mid >= recover_to * baseline:
            return start
    return None


def _judge(slowdown: tuple[float, float], recovered: float | None, *,
           max_slowdown_pct: float | None, recover_within_s: float | None) -> bool | None:
    """True when every objective given is met even at the interval's worst, False when
    one is missed even at its best, None when the verdict hangs on the interval (or no
    objective was given)."""
    if max_slowdown_pct is None and recover_within_s is None:
        return None
    if recover_within_s is not None and (recovered is None or recovered > recover_within_s):
        return False
    if max_slowdown_pct is not None:
        if slowdown[0] > max_slowdown_pct:
            return False
        if slowdown[1] > max_slowdown_pct:
            return None
    return True


def _series(progress: str | None, progress_log: Mapping[str, Any] | None,
            progress_http: Mapping[str, Any] | None, client: PromQL | None, start: float,
            end: float, resolution_s: float) -> Series | None:
    if progress_log is not None:
        return log_series(progress_log, "progress_log")
    if progress_http is not None:
        return recorded_progress(progress_http)[0]
    assert client is not None and progress is not None
    return one_series(client, progress, start, end, resolution_s, "progress")


def _pct(value: float) -> str:
    return "unbounded" if math.isinf(value) else f"{value:.0f}%"


def degradation(progress: str | None = None, progress_log: dict[str, Any] | None = None,
                progress_http: dict[str, Any] | None = None,
                prometheus_url: str | None = None, unit: str = "steps",
                fault_kind: str | None = None, baseline_s: float = 30.0,
                window_s: float = 5.0, recover_to: float = 0.9,
                max_slowdown_pct: float | None = None, recover_within_s: float | None = None,
                timeout_s: float = 60.0, interval_s: float = 0.5,
                resolution_s: float = 0.25) -> dict[str, Any]:
    """Measure the throughput the run's most recent fault (of ``fault_kind`` when given)
    cost: the job's progress rate before, during and after it.

    Progress, a counter, from one source: ``progress_log`` (``{"path": FILE, "pattern":
    REGEX, "tz": ZONE}``, the job's own log, groups ``t`` and ``step``; each line read
    exactly), ``progress_http`` (``{"url", "field"}``, read from the run's SLI recorder,
    which must sample that endpoint), or ``progress`` (PromQL, one series, read at
    ``resolution_s`` from ``prometheus_url`` or the target's Prometheus). ``unit`` names
    what it counts (``steps``, ``samples``, ``tokens``, ``requests``).

    The baseline is the rate over the ``baseline_s`` before the fault; during, the rate
    from the fault's onset to its end (its revert, or its ``duration_s`` run out); the
    job has recovered at the start of the first ``window_s`` window after the fault's end
    whose rate is at least ``recover_to`` of the baseline (the time to recover is known
    to within ``(1 - recover_to) * window_s`` plus the longest gap between readings).
    Work lost is what the baseline rate would have done from the onset to the recovery
    (or the last reading, without one) minus what was done, in ``unit`` and in seconds of
    work at the baseline rate. Sources are read every ``interval_s`` until the recovery
    is seen or ``timeout_s`` has passed since the fault's end.

    Objectives: ``max_slowdown_pct`` (the slowdown during the fault, 100 for a stop) and
    ``recover_within_s``. Met when each holds at the worst of its interval, missed when
    one fails at its best (or the job did not recover in time), else inconclusive (a
    failure that says so). Returns ``{"onset", "fault_end", "unit", "source",
    "baseline", "during", "slowdown_pct", "slowdown_pct_min", "slowdown_pct_max",
    "recovered", "recovered_at", "time_to_recover_s", "time_to_recover_resolution_s",
    "lost", "lost_s", "window_s", "recover_to", "max_slowdown_pct", "recover_within_s",
    "met", "verdict"}`` (``baseline`` and ``during``: ``{"start", "end", "rate",
    "rate_min", "rate_max"}``); raises ``ActivityFailed`` with one line, e.g.
    ``throughput fell 100% (96% to 100%) during the fault, max 50%; ...``.
    """
    verifier = "throughput.degradation"
    session = current()
    measurement: dict[str, Any] = {"unit": unit, "max_slowdown_pct": max_slowdown_pct,
                                   "recover_within_s": recover_within_s,
                                   "window_s": window_s, "recover_to": recover_to}
    client: PromQL | None = None
    try:
        sources = [s for s in (progress, progress_log, progress_http) if s is not None]
        if len(sources) != 1:
            raise GamedayError("needs exactly one of progress (PromQL), progress_log or "
                               "progress_http")
        if min(baseline_s, window_s, timeout_s, interval_s, resolution_s) <= 0 or \
                not 0 < recover_to <= 1:
            raise GamedayError("needs baseline_s, window_s, timeout_s, interval_s and "
                               "resolution_s > 0 and 0 < recover_to <= 1")
        if progress is not None:
            client = PromQL(prometheus_url_of(prometheus_url))
            measurement["prometheus_url"] = client.url
        if progress_http is not None:
            _, resolution_s = recorded_progress(progress_http)
    except GamedayError as exc:
        fail(verifier, f"degradation: {exc}", measurement)
    measurement["source"] = ("job log" if progress_log else "HTTP endpoint (the run's "
                             "recorder)" if progress_http else f"PromQL every {resolution_s:g} s")
    entry = fault_entry(fault_kind)
    if entry is None:
        fail(verifier, "degradation needs a fault: none" + (f" of kind {fault_kind}"
                                                             if fault_kind else "")
             + " was applied in this session", measurement)
    onset = entry.applied_at
    measurement["onset"] = onset
    clock = session.clock
    deadline: float | None = None
    while True:
        current_entry = next((e for e in session.ledger.entries() if e.id == entry.id), entry)
        end = fault_end(current_entry)
        now = clock.now()
        if end is None:
            fail(verifier, f"degradation: fault {entry.kind} {entry.id} is still active and "
                           "has no duration_s: measure after it is reverted (put this probe "
                           "after the revert action)", measurement)
        measurement["fault_end"] = end
        deadline = deadline if deadline is not None else max(now, end) + timeout_s
        try:
            series = _series(progress, progress_log, progress_http, client,
                             onset - baseline_s - resolution_s, now, resolution_s)
        except GamedayError as exc:
            fail(verifier, f"degradation: {exc}", measurement)
        readings = Progress(series.samples if series is not None else ())
        first = readings.times[0] if readings.times else math.inf
        baseline = readings.rate(max(onset - baseline_s, first), onset)
        during = readings.rate(onset, end)
        recovered_at = None
        if baseline is not None and baseline.mid > 0:
            recovered_at = _recovery(readings, end, baseline.mid, recover_to, window_s)
        if recovered_at is not None or clock.now() >= deadline:
            break
        clock.sleep(interval_s)
    if baseline is None or baseline.mid <= 0:
        fail(verifier, f"degradation: no progress was read in the {baseline_s:g} s before "
                       f"the fault ({measurement['source']}): no baseline to compare with",
             measurement)
    if during is None:
        fail(verifier, "degradation: no reading after the fault's end: the job's progress "
                       f"was not seen again within timeout {timeout_s:g} s", measurement)
    measurement.update(baseline=baseline.to_json(), during=during.to_json())
    slowdown = (100.0 * (1 - during.high / baseline.low) if baseline.low > 0 else -math.inf,
                100.0 * (1 - during.mid / baseline.mid),
                100.0 * (1 - during.low / baseline.high))
    last = readings.times[-1]
    until = recovered_at if recovered_at is not None else last
    done = readings.at(until)[1] - readings.at(onset)[1]
    lost = max(0.0, baseline.mid * (until - onset) - done)
    ttr = None if recovered_at is None else recovered_at - end
    measurement.update(
        slowdown_pct=slowdown[1], slowdown_pct_min=slowdown[0], slowdown_pct_max=slowdown[2],
        recovered=recovered_at is not None, recovered_at=recovered_at,
        time_to_recover_s=ttr,
        time_to_recover_resolution_s=(1 - recover_to) * window_s
        + readings.gap(next((t for t in readings.times if t >= end), end), until + window_s),
        lost=lost, lost_s=lost / baseline.mid)
    met = _judge((slowdown[0], slowdown[2]), ttr, max_slowdown_pct=max_slowdown_pct,
                 recover_within_s=recover_within_s)
    measurement["met"] = met
    measurement["verdict"] = ("met" if met else "missed" if met is False else
                              "inconclusive" if max_slowdown_pct is not None
                              or recover_within_s is not None else "measured")
    summary = (f"throughput fell {_pct(slowdown[1])} ({_pct(max(slowdown[0], -100))} to "
               f"{_pct(slowdown[2])}) during the fault from {baseline.mid:.3g} {unit}/s"
               + (f", max {max_slowdown_pct:g}%" if max_slowdown_pct is not None else "")
               + (f"; back to {recover_to:.0%} of it {ttr:.2f} s after the fault"
                  if ttr is not None else
                  f"; not back to {recover_to:.0%} of it within {timeout_s:g} s")
               + (f" (objective {recover_within_s:g} s)" if recover_within_s is not None
                  else "")
               + f"; {lost:.3g} {unit} ({lost / baseline.mid:.2f} s of work) lost")
    if met is False or (met is None and measurement["verdict"] == "inconclusive"):
        prefix = "" if met is False else "inconclusive: "
        fail(verifier, prefix + summary, measurement)
    record(verifier, met, measurement, summary)
    return measurement
