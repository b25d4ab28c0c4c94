"""One progress line per phase of a run, printed as the toolkit reaches it."""

import time
from typing import Any, TextIO

from chaoslib.run import RunEventHandler

from gameday.engine.judge import error_line
from gameday.stats import plural


class ProgressPrinter(RunEventHandler):  # type: ignore[misc]
    """Prints phases and activities; keeps a reference to the live journal."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.journal: dict[str, Any] | None = None
        self._t0 = time.monotonic()

    def _say(self, text: str) -> None:
        print(f"[{time.monotonic() - self._t0:6.1f}s] {text}", file=self.out, flush=True)

    def started(self, experiment: dict[str, Any], journal: dict[str, Any]) -> None:
        self.journal = journal
        self._say(f"experiment: {experiment.get('title', '')}")

    def start_hypothesis_before(self, experiment: dict[str, Any]) -> None:
        self._say("steady state before ...")

    def hypothesis_before_completed(self, experiment: dict[str, Any], state: dict[str, Any],
                                    journal: dict[str, Any]) -> None:
        self._say(f"steady state before: {'met' if state.get('steady_state_met') else 'NOT MET'}")

    def start_method(self, experiment: dict[str, Any]) -> None:
        self._say(f"method: {plural(len(experiment.get('method') or []), 'activity', 'activities')}"
                  " ...")

    def activity_completed(self, activity: dict[str, Any], run: dict[str, Any]) -> None:
        ok = run.get("status") == "succeeded"
        duration = run.get("duration") or 0.0
        line = f"  {'ok  ' if ok else 'FAIL'} {activity.get('type', '')} {activity.get('name', '')}"
        line += f" ({duration:.2f}s)"
        if not ok:
            line += f": {error_line(run)}"
        self._say(line)

    def start_hypothesis_after(self, experiment: dict[str, Any]) -> None:
        self._say("steady state after ...")

    def hypothesis_after_completed(self, experiment: dict[str, Any], state: dict[str, Any],
                                   journal: dict[str, Any]) -> None:
        self._say(f"steady state after: {'met' if state.get('steady_state_met') else 'NOT MET'}")

    def start_rollbacks(self, experiment: dict[str, Any]) -> None:
        self._say("rollbacks ...")

    def signal_exit(self) -> None:
        self._say("interrupted: rolling back")
