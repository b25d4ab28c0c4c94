"""Timed on/off phases for a fault: a link flap's down/up schedule, a fault's duration.

A :class:`PhaseRunner` calls ``on()`` and ``off()`` on a background thread following a
list of :class:`Phase` values, and always ends with ``off()``: when the schedule is
over, when it is cancelled (the fault is reverted), and if ``on()`` itself fails. Both
the lab's virtual links and the host's real interfaces use it.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass

import structlog

__all__ = ["Phase", "PhaseRunner", "flap_phases", "hold_phases"]

log = structlog.get_logger("gameday.node.phases")


@dataclass(frozen=True)
class Phase:
    """``active`` for ``seconds`` (``None``: until cancelled)."""

    active: bool
    seconds: float | None


def flap_phases(down_s: float, up_s: float, count: int) -> list[Phase]:
    """``count`` times down for ``down_s`` with ``up_s`` up in between; ends up."""
    phases: list[Phase] = []
    for i in range(count):
        phases.append(Phase(True, down_s))
        if i < count - 1:
            phases.append(Phase(False, up_s))
    return phases


def hold_phases(duration_s: float | None) -> list[Phase]:
    """Active for ``duration_s`` seconds, or until cancelled when ``None``."""
    return [Phase(True, duration_s)]


class PhaseRunner:
    """Runs ``phases`` on a thread; ``cancel()`` stops it and leaves the effect off."""

    def __init__(self, name: str, phases: list[Phase], on: Callable[[], None],
                 off: Callable[[], None]) -> None:
        self.name = name
        self.phases = phases
        self._on = on
        self._off = off
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"phases-{name}", daemon=True)
        self.completed_phases = 0

    def start(self) -> "PhaseRunner":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for phase in self.phases:
                if self._cancel.is_set():
                    break
                (self._on if phase.active else self._off)()
                self._cancel.wait(phase.seconds)
                self.completed_phases += 1
        except Exception:
            log.exception("phase_failed", name=self.name)
        finally:
            try:
                self._off()
            finally:
                self._done.set()

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def cancel(self, timeout_s: float = 5.0) -> None:
        """Stop the schedule and wait (bounded) until the effect is off; idempotent."""
        self._cancel.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
