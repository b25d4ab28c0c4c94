"""The extension's ``stop_on`` (and a playbook's): Alertmanager alerts that end a run,
declared and validated here with key paths; :mod:`gameday.safety.stop_conditions`
watches them while the method runs (its docstring shows the format)."""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gameday.errors import InvalidInput
from gameday.experiment.silence import Matcher, parse_matcher

__all__ = ["STOP_ON_KEYS", "AlertRule", "StopOnSpec", "stop_on_spec"]

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
