"""Stop conditions from alerts: an experiment (or a playbook) names Alertmanager alerts
that end it; gameday watches them while the method runs and rolls back when one fires.

Declare them in the ``gameday`` extension::

    stop_on:
      alertmanager: http://alertmanager:9093     # or $GAMEDAY_ALERTMANAGER_URL
      alerts:                                    # any one of them stops the run
        - {alertname: CheckoutErrorBudgetBurn, severity: critical}   # labels, equal
        - ["alertname=~Gpu.*Ecc", "cluster!=staging"]                # matchers (amtool's)
      interval_s: 1                              # how often Alertmanager is asked (default 1)
      failures: 3                                # unreadable this many times in a row: stop

A background thread reads the alerts Alertmanager holds active and neither silenced nor
inhibited (API v2, ``GET /api/v2/alerts``) every ``interval_s``; when one matches every
matcher of a rule, the run is stopped (:meth:`gameday.engine.session.Session.stop`) with
``stop condition fired: ALERTNAME {labels}`` and a ``stop_condition`` event on the timeline
naming the alert and the rule. Matchers match as Alertmanager's do: exact for ``=`` and
``!=``, anchored regular expressions for ``=~`` and ``!~``, a missing label reads as ``""``.
An Alertmanager that cannot be read ``failures`` times in a row stops the run too: a run
that cannot see its stop conditions is not run blind.
"""

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.errors import GamedayError
from gameday.experiment.silence import Matcher
from gameday.experiment.stop_on import AlertRule, StopOnSpec, stop_on_spec
from gameday.safety.alertmanager import AlertmanagerClient

__all__ = ["AlertRule", "StopConditionWatch", "StopOnSpec", "firing", "matches",
           "stop_on_spec"]

log = structlog.get_logger("gameday.safety.stop_conditions")


def matches(matcher: Matcher, labels: Mapping[str, Any]) -> bool:
    """Whether ``labels`` satisfy ``matcher`` (Alertmanager's semantics)."""
    value = str(labels.get(matcher.name, ""))
    if matcher.is_regex:
        hit = re.fullmatch(matcher.value, value) is not None
    else:
        hit = value == matcher.value
    return hit == matcher.is_equal


def firing(alerts: Sequence[Mapping[str, Any]], rules: Sequence[AlertRule]
           ) -> tuple[AlertRule, dict[str, str]] | None:
    """The first rule an alert of ``alerts`` matches, with that alert's labels."""
    for alert in alerts:
        labels = alert.get("labels")
        if not isinstance(labels, Mapping):
            continue
        for rule in rules:
            if all(matches(m, labels) for m in rule.matchers):
                return rule, {str(k): str(v) for k, v in labels.items()}
    return None


class StopConditionWatch:
    """Reads ``spec``'s Alertmanager every ``interval_s`` on a background thread and
    calls ``on_fire(reason, detail)`` once: when a rule's alert fires, or when
    Alertmanager could not be read ``failures`` times in a row."""

    def __init__(self, spec: StopOnSpec, on_fire: Callable[[str, dict[str, Any]], None], *,
                 clock: Clock = SYSTEM_CLOCK,
                 client: AlertmanagerClient | None = None) -> None:
        self.spec = spec
        self.on_fire = on_fire
        self.clock = clock
        self.client = client or AlertmanagerClient(spec.alertmanager, timeout_s=2.0)
        self.fired: str | None = None
        self.checks = 0
        self._failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check_once(self) -> str | None:
        """Read the alerts once; the reason the run must stop, if it must (kept)."""
        if self.fired is not None:
            return self.fired
        self.checks += 1
        try:
            alerts = self.client.alerts()
        except GamedayError as exc:
            self._failures += 1
            log.warning("stop conditions unreadable", error=str(exc), failures=self._failures)
            if self._failures >= self.spec.failures:
                self._fire(f"stop conditions: {self.spec.failures} reads in a row of "
                           f"{self.spec.alertmanager} failed ({exc})",
                           {"alertmanager": self.spec.alertmanager, "error": str(exc)})
            return self.fired
        self._failures = 0
        hit = firing(alerts, self.spec.alerts)
        if hit is not None:
            rule, labels = hit
            name = labels.get("alertname", "?")
            shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
            self._fire(f"stop condition fired: alert {name} {{{shown}}} matches "
                       f"{rule.line()} in {self.spec.alertmanager}",
                       {"alert": labels, "rule": rule.line(),
                        "alertmanager": self.spec.alertmanager})
        return self.fired

    def _fire(self, reason: str, detail: dict[str, Any]) -> None:
        self.fired = reason
        log.warning("stop condition", reason=reason)
        self.on_fire(reason, detail)

    def start(self) -> "StopConditionWatch":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="stop-conditions",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self.client.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.check_once() is not None:
                    return
            except Exception:  # nothing Alertmanager answers may end the watch silently
                log.exception("stop condition check failed")
            self._stop.wait(self.spec.interval_s)
