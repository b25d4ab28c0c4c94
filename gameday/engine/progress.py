"""One progress line per phase of a run, printed as the toolkit reaches it.

An activity cut short by a signal is shown as interrupted (``INTR``), not failed, and
the printer keeps where the run was (:attr:`ProgressPrinter.where`) for the verdict.
"""

import time
from typing import Any, TextIO

from chaoslib.run import RunEventHandler

from gameday.engine.judge import error_line
from gameday.safety import signals
from gameday.stats import plural


class ProgressPrinter(RunEventHandler):  # type: ignore[misc]
    """Prints phases and activities; keeps a reference to the live journal."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.journal: dict[str, Any] | None = None
        self._t0 = time.monotonic()
        self._phase = "before the experiment"
        self._steps = 0
        self._activity = ""
        #: where the run was when a signal came (``method step 2, probe 'x'``)
        self.where = ""

    def _enter(self, phase: str) -> None:
        self._phase, self._steps, self._activity = phase, 0, ""

    def _here(self) -> str:
        return f"{self._phase}, {self._activity}" if self._activity else self._phase

    def start_activity(self, activity: dict[str, Any]) -> None:
        self._steps += 1
        self._activity = (f"step {self._steps}, {activity.get('type', 'activity')} "
                          f"'{activity.get('name', '?')}'")

    def _say(self, text: str) -> None:
        print(f"[{time.monotonic() - self._t0:6.1f}s] {text}", file=self.out, flush=True)

    def started(self, experiment: dict[str, Any], journal: dict[str, Any]) -> None:
        self.journal = journal
        self._say(f"experiment: {experiment.get('title', '')}")

    def start_hypothesis_before(self, experiment: dict[str, Any]) -> None:
        self._enter("steady state before")
        self._say("steady state before ...")

    def hypothesis_before_completed(self, experiment: dict[str, Any], state: dict[str, Any],
                                    journal: dict[str, Any]) -> None:
        self._say(f"steady state before: {'met' if state.get('steady_state_met') else 'NOT MET'}")

    def start_method(self, experiment: dict[str, Any]) -> None:
        self._enter("method")
        self._say(f"method: {plural(len(experiment.get('method') or []), 'activity', 'activities')}"
                  " ...")

    def activity_completed(self, activity: dict[str, Any], run: dict[str, Any]) -> None:
        ok = run.get("status") == "succeeded"
        cut = not ok and signals.STATE.received is not None
        if cut and not self.where:
            self.where = self._here()
        duration = run.get("duration") or 0.0
        mark = "ok  " if ok else "INTR" if cut else "FAIL"
        line = f"  {mark} {activity.get('type', '')} {activity.get('name', '')}"
        line += f" ({duration:.2f}s)"
        if cut:
            line += f": {self.interruption()}"
        elif not ok:
            line += f": {error_line(run)}"
        self._activity = ""
        self._say(line)

    def start_hypothesis_after(self, experiment: dict[str, Any]) -> None:
        self._enter("steady state after")
        self._say("steady state after ...")

    def hypothesis_after_completed(self, experiment: dict[str, Any], state: dict[str, Any],
                                   journal: dict[str, Any]) -> None:
        self._say(f"steady state after: {'met' if state.get('steady_state_met') else 'NOT MET'}")

    def start_rollbacks(self, experiment: dict[str, Any]) -> None:
        self._enter("rollbacks")
        self._say("rollbacks ...")

    def interruption(self) -> str:
        """``interrupted by SIGINT during method, step 1, probe 'x'`` (the first signal)."""
        why = signals.STATE.interruption or "interrupted by a signal"
        return f"{why} during {self.where or self._here()}"

    def signal_exit(self) -> None:
        if not self.where:
            self.where = self._here()
        self._say(f"{self.interruption()}: rolling back")
