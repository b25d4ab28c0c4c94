"""Recovery time objective: how long after the fault onset the service was whole again.

``measure_recovery`` samples a service-level indicator on a fixed cadence and keeps the
samples on a timeline. The onset is the agent's ``applied_at`` for the run's most recent
fault. The service counts as recovered at the first OK sample of the run of OK samples
that lasted ``stable_for_s`` seconds, and ``rto_s = recovered_at - onset``.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gameday.clock import Clock
from gameday.errors import GamedayError
from gameday.session import current
from verifiers._http import HttpRequest, build_request, send
from verifiers._results import fail, one_line, record

__all__ = ["measure_recovery"]

_SLI_KEYS = ("http", "method", "json_body", "predict_rows", "predict_cols", "seed",
             "timeout_s", "headers")
DEFAULT_REQUEST_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Probe:
    """One SLI reading: did the service meet its indicator, and if not, why."""

    ok: bool
    error: str = ""


Sampler = Callable[[], Probe]


@dataclass
class RecoveryTracker:
    """Folds SLI samples, in time order, into detection and recovery instants."""

    onset: float
    stable_for_s: float
    expect_outage: bool = False
    samples: int = 0
    failures: int = 0
    first_sample_at: float | None = None
    detected_at: float | None = None
    stable_since: float | None = None  # first OK sample of the current OK run
    last_at: float | None = None
    last_ok: bool | None = None
    last_error: str = ""
    transitions: list[list[Any]] = field(default_factory=list)

    def add(self, t: float, probe: Probe) -> None:
        """Fold in one sample. Samples before the onset go on the timeline only."""
        self.samples += 1
        if self.first_sample_at is None:
            self.first_sample_at = t
        if probe.ok != self.last_ok:
            self.transitions.append([round(t, 3), probe.ok])
        if t < self.onset:
            self.last_at, self.last_ok = t, probe.ok
            return
        if probe.ok:
            if self.stable_since is None:
                self.stable_since = t
        else:
            self.failures += 1
            self.stable_since = None
            self.last_error = probe.error
            if self.detected_at is None:
                self.detected_at = t
        self.last_at, self.last_ok = t, probe.ok

    @property
    def stable_for(self) -> float:
        """How long the current run of OK samples has lasted (0 if the last one failed)."""
        if self.stable_since is None or self.last_at is None:
            return 0.0
        return self.last_at - self.stable_since

    @property
    def recovered_at(self) -> float | None:
        """The first OK sample of a run that held ``stable_for_s``; None until then."""
        if self.stable_since is None or self.stable_for < self.stable_for_s:
            return None
        if self.expect_outage and self.detected_at is None:
            return None
        return self.stable_since

    def timeline(self) -> list[list[Any]]:
        """``[t, ok]`` at every change of state, and the last sample."""
        points = [list(point) for point in self.transitions]
        if self.last_at is not None and (not points or points[-1][0] != round(self.last_at, 3)):
            points.append([round(self.last_at, 3), self.last_ok])
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
        tracker.add(clock.now(), sampler())
        if tracker.recovered_at is not None:
            return tracker
        now = clock.monotonic()
        if now >= deadline:
            return tracker
        tick = max(tick + 1, math.ceil((now - started) / interval_s)) if interval_s > 0 else 0
        clock.sleep(min(started + tick * interval_s, deadline) - now)


def _http_sampler(request: HttpRequest) -> Sampler:
    def sample() -> Probe:
        answer = send(request)
        return Probe(answer.ok, "" if answer.ok else answer.error)
    return sample


def _sli_request(sli: dict[str, Any]) -> HttpRequest:
    if not isinstance(sli, dict) or not sli.get("http"):
        raise GamedayError('sli must be a mapping with an "http" URL, e.g. '
                           '{"http": "${service_url}/predict"}')
    unknown = sorted(set(sli) - set(_SLI_KEYS))
    if unknown:
        raise GamedayError(f"sli has unknown key {unknown[0]!r} (known: {', '.join(_SLI_KEYS)})")
    return build_request(
        str(sli["http"]), method=sli.get("method"), json_body=sli.get("json_body"),
        predict_rows=int(sli.get("predict_rows", 1)),
        predict_cols=int(sli.get("predict_cols", 16)), seed=int(sli.get("seed", 0)),
        timeout_s=float(sli.get("timeout_s", DEFAULT_REQUEST_TIMEOUT_S)),
        headers=sli.get("headers"), where="sli.http")


def measure_recovery(sli: dict[str, Any], stable_for_s: float = 3.0, interval_s: float = 0.1,
                     timeout_s: float = 60.0, slo_s: float | None = None,
                     expect_outage: bool = False) -> dict[str, Any]:
    """Measure the recovery time (RTO) of a service-level indicator after the fault onset.

    ``sli`` says what to sample: ``{"http": URL}`` is OK when the URL answers 2xx within
    ``timeout_s`` of the sli mapping (default 1 s). A URL whose path ends in ``/predict``
    is POSTed ``{"inputs": [...]}`` with ``predict_rows`` (default 1) golden rows of
    ``predict_cols`` (default 16) values; other URLs are fetched with GET. The mapping may
    also set ``method``, ``json_body``, ``seed`` and ``headers``.

    The SLI is sampled every ``interval_s`` seconds, for at most ``timeout_s`` seconds.
    The onset is when the run's most recent fault was applied (the agent's ``applied_at``).
    ``detected_at`` is the first failing sample (None if the SLI never failed);
    ``recovered_at`` is the first OK sample of the run of OK samples that lasted
    ``stable_for_s``; ``rto_s = recovered_at - onset``. Samples taken before the onset
    are kept on the timeline but count for neither. If the SLI never failed,
    ``recovered_at`` is the first sample, so ``rto_s`` is an upper bound. With
    ``expect_outage: true`` the SLI must fail at least once before it can recover.
    The objective is ``slo_s``, by default the experiment's ``slo.rto_s``; without one,
    ``met`` is null and only recovery within ``timeout_s`` is required.

    Returns ``{"onset", "detected_at", "recovered_at", "rto_s", "slo_s", "met", "samples",
    "failures"}`` (times are Unix epoch seconds). Raises ``ActivityFailed``, e.g.
    ``rto 23.4 s > slo 20 s (missed by 3.4 s)`` or ``not recovered within timeout 60 s``.
    The session result also holds the sample timeline as ``[t, ok]`` transitions.
    """
    verifier = "rto.measure_recovery"
    session = current()
    slo = slo_s if slo_s is not None else session.extension.slo.rto_s
    measurement: dict[str, Any] = {"sli": sli, "stable_for_s": stable_for_s,
                                   "interval_s": interval_s, "timeout_s": timeout_s,
                                   "slo_s": slo}
    try:
        if stable_for_s < 0 or interval_s <= 0 or timeout_s <= 0:
            raise GamedayError(f"need stable_for_s >= 0, interval_s > 0 and timeout_s > 0, "
                               f"got {stable_for_s}, {interval_s}, {timeout_s}")
        request = _sli_request(sli)
    except (GamedayError, TypeError, ValueError) as exc:
        fail(verifier, f"measure_recovery: {exc}", measurement)
    onset = session.fault_onset()
    if onset is None:
        fail(verifier, "measure_recovery needs a fault onset: no fault was applied in this "
                       "session", measurement)
    measurement["sli"] = request.describe()
    tracker = RecoveryTracker(onset=onset, stable_for_s=stable_for_s,
                              expect_outage=expect_outage)
    return measure_with(_http_sampler(request), tracker, session.clock, verifier=verifier,
                        measurement=measurement, interval_s=interval_s, timeout_s=timeout_s,
                        slo_s=slo)


def _seconds(value: float, other: float | None = None) -> str:
    """``value`` with one decimal, or three where one would hide the difference."""
    text = f"{value:.1f}"
    if (other is not None and text == f"{other:.1f}") or (0 < abs(value) < 0.1):
        text = f"{value:.3f}"
    return text


def measure_with(sampler: Sampler, tracker: RecoveryTracker, clock: Clock, *, verifier: str,
                 measurement: dict[str, Any], interval_s: float, timeout_s: float,
                 slo_s: float | None) -> dict[str, Any]:
    """Track recovery with ``sampler``, record the verdict and return the measurement."""
    track_recovery(sampler, tracker, clock, interval_s=interval_s, timeout_s=timeout_s)
    recovered_at = tracker.recovered_at
    rto = None if recovered_at is None else round(max(0.0, recovered_at - tracker.onset), 3)
    met = None if rto is None or slo_s is None else rto <= slo_s
    result: dict[str, Any] = {
        "onset": tracker.onset, "detected_at": tracker.detected_at,
        "recovered_at": recovered_at, "rto_s": rto, "slo_s": slo_s, "met": met,
        "samples": tracker.samples, "failures": tracker.failures}
    measurement.update(result, first_sample_at=tracker.first_sample_at,
                       timeline=tracker.timeline(), last_error=tracker.last_error)
    session = current()
    if tracker.detected_at is not None:
        session.event("sli_down", at=tracker.detected_at, sli=measurement.get("sli"),
                      error=tracker.last_error)
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
    if met is False:
        assert slo_s is not None
        fail(verifier, f"rto {_seconds(rto, slo_s)} s > slo {slo_s:g} s (missed by "
                       f"{_seconds(rto - slo_s)} s)", measurement)
    reason = (f"rto {_seconds(rto, slo_s)} s <= slo {slo_s:g} s" if slo_s is not None
              else f"rto {_seconds(rto)} s (no slo)")
    if tracker.detected_at is None:
        reason += "; the SLI never failed"
    record(verifier, True, measurement, reason)
    return result
