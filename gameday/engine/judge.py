"""Judging a run: the toolkit's journal plus the session give one verdict and exit code.

This is where gameday refuses three of the toolkit's defaults (docs/running.md): an unmet
steady state *before* the method, a failed fault action, and a failed verifier all
fail the run (exit 1), whatever status the toolkit wrote.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gameday.evidence.journal_shape import VerdictJSON

_EXCEPTION_NAME = re.compile(r"[\w.]*(Error|Exception|Failed|TimedOut|Interrupt)")

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_INVALID = 2


@dataclass
class Verdict:
    passed: bool
    exit_code: int
    status: str
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> VerdictJSON:
        return {"passed": self.passed, "exit_code": self.exit_code, "status": self.status,
                "reasons": self.reasons}


def error_line(run: Mapping[str, Any]) -> str:
    """The one-line reason an activity failed, from the toolkit's recorded exception."""
    exception = run.get("exception")
    if isinstance(exception, list) and exception:
        text = "".join(str(part) for part in exception).strip().splitlines()
        last = text[-1] if text else ""
    else:
        last = str(run.get("error") or exception or "")
    while ": " in last and _EXCEPTION_NAME.fullmatch(last.split(": ", 1)[0]):
        last = last.split(": ", 1)[1]
    return last.strip() or "failed"


def _name(run: Mapping[str, Any]) -> str:
    return str(run.get("activity", {}).get("name", "?"))


def _unmet_probes(state: Mapping[str, Any] | None) -> list[str]:
    if not state:
        return []
    lines = []
    for probe in state.get("probes", []):
        if probe.get("status") != "succeeded":
            lines.append(f"probe '{_name(probe)}' failed: {error_line(probe)}")
        elif probe.get("tolerance_met") is False:
            lines.append(f"probe '{_name(probe)}' out of tolerance "
                         f"(got {str(probe.get('output'))[:80]})")
    return lines


def judge(journal: Mapping[str, Any], *, signal_exit: int | None = None,
          error: str | None = None, revert_failures: list[str] | None = None,
          refused: str | None = None, interruption: str | None = None) -> Verdict:
    """Turn a (possibly partial) toolkit journal into gameday's verdict; ``refused``
    (an agent refused a fault as invalid input, e.g. a protected process: nothing of it
    was applied) makes it exit 2. With ``signal_exit`` the run was interrupted:
    ``interruption`` (which signal, at which step) is its first reason, and the activity
    the signal cut short is not counted as failed."""
    reasons: list[str] = []
    runs = list(journal.get("run") or [])
    if signal_exit is not None and runs and runs[-1].get("status") != "succeeded":
        runs = runs[:-1]  # the activity the signal cut short: interrupted, not failed
    states = journal.get("steady_states") or {}
    before = states.get("before")
    if before is not None and not before.get("steady_state_met", False):
        unmet = _unmet_probes(before) or ["not met"]
        reasons.extend(f"steady state before: {line}" for line in unmet)
    for run in runs:
        if run.get("status") == "failed":
            what = "fault action" if run.get("activity", {}).get("type") == "action" else "verifier"
            reasons.append(f"{what} '{_name(run)}' failed: {error_line(run)}")
    after = states.get("after")
    if after is not None and not after.get("steady_state_met", False):
        unmet = _unmet_probes(after) or ["not met"]
        reasons.extend(f"steady state after: {line}" for line in unmet)
    for run in journal.get("rollbacks") or []:
        if run.get("status") == "failed":
            reasons.append(f"rollback '{_name(run)}' failed: {error_line(run)}")
    if error:
        reasons.append(error)
    reasons.extend(f"not reverted: {line}" for line in revert_failures or [])
    if signal_exit is not None:
        first = interruption or f"interrupted (exit {signal_exit})"
        return Verdict(False, signal_exit, "interrupted", [first, *reasons])
    if refused:
        return Verdict(False, EXIT_INVALID, "refused", [refused, *reasons])
    if journal.get("status") == "interrupted":
        reasons.append("interrupted")
    if reasons:
        return Verdict(False, EXIT_FAILED, "failed", reasons)
    return Verdict(True, EXIT_PASSED, "completed", reasons)
