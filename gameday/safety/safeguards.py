"""Safeguards: abort conditions checked continuously while the method runs.

Declare them in the ``gameday`` extension::

    safeguards:
      - name: error-rate-below-5-percent
        promql: sum(rate(router_errors_total[10s])) / sum(rate(router_requests_total[10s]))
        max: 0.05
      - name: router-alive
        http: "${service_url}/healthz"     # measures the status code
        equals: 200
        interval_s: 0.5                    # default 1 s

A background thread measures each safeguard every ``interval_s``. When a measurement
leaves its bounds (or ``failures`` checks in a row cannot measure), the thread records
the reason and delivers ``SIGUSR1`` to the main thread, whose handler raises
:class:`SafeguardBreached` (an interruption, like Ctrl-C): the toolkit stops the method,
plays the rollbacks, the session reverts every fault, and the verdict fails (exit 1)
with ``safeguard NAME breached: ...`` as its reason. While cleanup runs (signals
deferred) a breach is recorded but does not raise.
"""

import math
import os
import re
import signal
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

import structlog

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.errors import GamedayError
from gameday.experiment.extension import SafeguardSpec
from gameday.httpclient import HttpRequest, send
from gameday.promql import PromQL, PromQLError
from gameday.safety import signals

log = structlog.get_logger("gameday.safety.safeguards")

BREACH_SIGNAL = signal.SIGUSR1
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SafeguardBreached(signals.Stopped):
    """A safeguard left its bounds; the run is interrupted and rolled back (exit 1)."""

    def __init__(self, reason: str) -> None:
        super().__init__(BREACH_SIGNAL, reason)


class Unmeasurable(GamedayError):
    """A safeguard could not be measured this time."""


def substitute(text: str, configuration: Mapping[str, Any]) -> str:
    """Replace ``${name}`` with configuration values (unknown names stay as they are)."""
    return _VARIABLE.sub(lambda m: str(configuration.get(m.group(1), m.group(0))), text)


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    answer = send(HttpRequest(url, timeout_s=timeout_s))
    if answer.status is None:
        raise Unmeasurable(f"cannot read {url}: {answer.error}")
    return answer.status, answer.body


def _dig(document: Any, path: str) -> float:
    value = document
    for part in path.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise Unmeasurable(f"no {path!r} in the answer")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise Unmeasurable(f"{path!r} is not a number")
    try:
        return float(value)
    except ValueError:
        raise Unmeasurable(f"{path!r} is not a number") from None


def measure(spec: SafeguardSpec, configuration: Mapping[str, Any],
            timeout_s: float = 2.0) -> float:
    """One measurement of a safeguard (raises :class:`Unmeasurable`)."""
    import json

    if spec.promql is not None:
        base = configuration.get("prometheus_url")
        if not base:
            raise Unmeasurable("no prometheus_url in the configuration")
        try:
            samples = PromQL(str(base), timeout_s).instant(substitute(spec.promql, configuration))
        except PromQLError as exc:
            raise Unmeasurable(str(exc)) from None
        if not samples:
            raise Unmeasurable("the query returned no series")
        return samples[0][1]
    url = substitute(str(spec.http), configuration)
    status, body = _get(url, timeout_s)
    if spec.json is None:
        return float(status)
    try:
        return _dig(json.loads(body), spec.json)
    except ValueError:
        raise Unmeasurable(f"{url} answered {status} with no JSON") from None


def violation(spec: SafeguardSpec, value: float) -> str | None:
    """Why ``value`` breaks the safeguard's tolerance, or None."""
    if math.isnan(value):
        return "measured NaN"
    if spec.equals is not None and value != spec.equals:
        return f"measured {value:g}, expected {spec.equals:g}"
    if spec.max is not None and value > spec.max:
        return f"measured {value:g} > max {spec.max:g}"
    if spec.min is not None and value < spec.min:
        return f"measured {value:g} < min {spec.min:g}"
    return None


def _raise_breach(signum: int, frame: FrameType | None) -> None:
    watch = _ACTIVE
    if watch is None or watch.breach is None or signals.STATE.deferred:
        return
    raise SafeguardBreached(watch.breach)


_ACTIVE: "SafeguardWatch | None" = None


def interrupt_main_thread() -> None:
    signal.pthread_kill(threading.main_thread().ident or 0, BREACH_SIGNAL)


class SafeguardWatch:
    """Checks every safeguard on its own interval, on a background thread."""

    def __init__(self, specs: tuple[SafeguardSpec, ...], configuration: Mapping[str, Any], *,
                 clock: Clock = SYSTEM_CLOCK,
                 on_breach: Callable[[], None] = interrupt_main_thread,
                 measure_one: Callable[[SafeguardSpec, Mapping[str, Any]], float] = measure,
                 ) -> None:
        self.specs = specs
        self.configuration = dict(configuration)
        self.clock = clock
        self.on_breach = on_breach
        self.measure_one = measure_one
        self.breach: str | None = None
        self.checks = 0
        self._failures = {spec.name: 0 for spec in specs}
        self._due = {spec.name: 0.0 for spec in specs}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous_handler: Any = None

    def start(self) -> bool:
        """Start watching (no-op without safeguards); call from the main thread."""
        global _ACTIVE
        if not self.specs or self._thread is not None:
            return False
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(BREACH_SIGNAL, _raise_breach)
        _ACTIVE = self
        self._thread = threading.Thread(target=self._loop, name="safeguards", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        global _ACTIVE
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        if _ACTIVE is self:
            _ACTIVE = None

    def check_due(self) -> str | None:
        """Measure every safeguard that is due; return (and keep) a breach reason."""
        now = self.clock.now()
        for spec in self.specs:
            if self.breach is not None:
                break
            if now < self._due[spec.name]:
                continue
            self._due[spec.name] = now + spec.interval_s
            self.checks += 1
            try:
                value = self.measure_one(spec, self.configuration)
            except GamedayError as exc:
                self._failures[spec.name] += 1
                log.warning("safeguard unmeasurable", safeguard=spec.name, error=str(exc))
                if self._failures[spec.name] >= spec.failures:
                    self.breach = (f"safeguard {spec.name} breached: {spec.failures} checks "
                                   f"in a row could not measure ({exc})")
                continue
            self._failures[spec.name] = 0
            why = violation(spec, value)
            if why is not None:
                self.breach = f"safeguard {spec.name} breached: {why}"
        return self.breach

    def _loop(self) -> None:
        tick = max(0.05, min(spec.interval_s for spec in self.specs) / 4)
        while not self._stop.is_set():
            if self.check_due() is not None:
                log.warning("safeguard breached", reason=self.breach, pid=os.getpid())
                self.on_breach()
                return
            self._stop.wait(tick)
