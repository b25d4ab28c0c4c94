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
from dataclasses import dataclass
from typing import Any, Final

import structlog

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.errors import GamedayError, InvalidInput
from gameday.safety.alertmanager import AlertmanagerClient, Matcher, parse_matcher

__all__ = ["AlertRule", "StopConditionWatch", "StopOnSpec", "firing", "matches",
           "stop_on_spec"]

log = structlog.get_logger("gameday.safety.stop_conditions")

STOP_ON_KEYS: Final = ("alertmanager", "alerts", "interval_s", "failures")
MAX_RULES: Final = 64
_LABEL: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class AlertRule:
    """An alert that stops the run: one that matches every matcher."""

    matchers: tuple[Matcher, ...]

    def line(self) -> str:
        return "{" + ", ".join(m.line() for m in self.matchers) + "}"


@dataclass(frozen=True)
class StopOnSpec:
    """The extension's ``stop_on``: where to look, which alerts, how often."""

    alertmanager: str
    alerts: tuple[AlertRule, ...]
    interval_s: float = 1.0
    failures: int = 3

    def line(self) -> str:
        return (f"stop on alerts in {self.alertmanager}: "
                f"{' or '.join(rule.line() for rule in self.alerts)} "
                f"(every {self.interval_s:g} s)")


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


def _rule(item: Any, where: str) -> AlertRule:
    if isinstance(item, Mapping):
        if not item:
            raise InvalidInput("must name at least one label", path=where)
        parsed = []
        for name, value in item.items():
            if not isinstance(name, str) or not _LABEL.match(name):
                raise InvalidInput(f"{name!r} is not a label name", path=where)
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise InvalidInput("must be a string", path=f"{where}.{name}")
            parsed.append(Matcher(name, str(value)))
        matchers = tuple(parsed)
    elif isinstance(item, list) and item and all(isinstance(m, str) for m in item):
        matchers = tuple(parse_matcher(m, path=f"{where}[{i}]") for i, m in enumerate(item))
    else:
        raise InvalidInput("must be a mapping of labels ({alertname: X, severity: critical}) "
                           "or a list of matchers (['alertname=~Gpu.*'])", path=where)
    if not any(m.is_equal and m.value for m in matchers):
        raise InvalidInput("would match alerts it does not name: give at least one "
                           "label that must equal a value or match a regex", path=where)
    return AlertRule(matchers)


def stop_on_spec(raw: Any, base: str, *, environ: Mapping[str, str]) -> StopOnSpec:
    """Validate the extension's ``stop_on`` mapping (key paths under ``base``)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"must be a mapping, got {type(raw).__name__}", path=base)
    for key in raw:
        if key not in STOP_ON_KEYS:
            raise InvalidInput(f"unknown key (known: {', '.join(STOP_ON_KEYS)})",
                               path=f"{base}.{key}")
    url = raw.get("alertmanager") or environ.get("GAMEDAY_ALERTMANAGER_URL")
    if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
        raise InvalidInput("needs an Alertmanager URL (http://host:9093) here or in "
                           "$GAMEDAY_ALERTMANAGER_URL", path=f"{base}.alertmanager")
    alerts = raw.get("alerts")
    if not isinstance(alerts, list) or not alerts:
        raise InvalidInput("must be a non-empty list of alerts", path=f"{base}.alerts")
    if len(alerts) > MAX_RULES:
        raise InvalidInput(f"more than {MAX_RULES} alerts", path=f"{base}.alerts")
    rules = tuple(_rule(item, f"{base}.alerts[{i}]") for i, item in enumerate(alerts))
    interval = raw.get("interval_s", 1.0)
    if (isinstance(interval, bool) or not isinstance(interval, int | float)
            or not 0.1 <= interval <= 60):
        raise InvalidInput(f"must be a number of seconds within 0.1..60, got {interval!r}",
                           path=f"{base}.interval_s")
    failures = raw.get("failures", 3)
    if isinstance(failures, bool) or not isinstance(failures, int) or not 1 <= failures <= 100:
        raise InvalidInput(f"must be an integer within 1..100, got {failures!r}",
                           path=f"{base}.failures")
    return StopOnSpec(url.rstrip("/"), rules, float(interval), failures)


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
