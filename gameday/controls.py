"""The ``gameday`` Chaos Toolkit control: gameday's guarantees under ``chaos run``.

Declare it in an experiment::

    controls:
      - name: gameday
        provider: {type: python, module: gameday.controls}

``gameday run`` always adds it. It opens the run's session (target from the
``gameday`` extension, e.g. a running lab), offers the target's endpoints as
configuration (``${service_url}``, ``${prometheus_url}``, ``${placement_url}``), maps
SIGTERM/SIGHUP to an interruption that rolls back, enforces activity timeouts, always
reverts every fault in the ledger at the end, and marks the journal ``failed`` when the
steady state before was unmet or a fault or verifier failed, so ``chaos run`` exits 1.

Gaps under plain ``chaos run`` (``gameday run`` has none of them): the toolkit's own
rollback strategy still skips the experiment's rollbacks after an interruption (the
faults are reverted by this control anyway; pass ``--rollback-strategy always`` to play
other rollbacks too); a tolerance that raises still escapes the toolkit without a
journal (this control's cleanup still reverts the faults); an error while opening the
target makes the toolkit drop the control silently, so the fault actions then fail
with "needs a target".
"""

import sys
from typing import Any

import structlog

from gameday import paths, signals, timeouts
from gameday import session as sessions
from gameday.errors import GamedayError
from gameday.extension import parse_extension
from gameday.targets import open_target
from gameday.verdict import judge

log = structlog.get_logger("gameday.controls")

__all__ = ["after_activity_control", "after_experiment_control", "before_activity_control",
           "cleanup_control", "configure_control"]

_owned: list[sessions.Session] = []


def configure_control(configuration: dict[str, Any] | None = None,
                      experiment: dict[str, Any] | None = None, **_: Any) -> None:
    """Install signal handling; under ``chaos run``, open the session and its target."""
    signals.install()
    session = sessions.active()
    if session is None:
        try:
            extension = parse_extension(experiment or {})
            target = open_target(extension.target or "none", configuration or {},
                                 lab_dir=paths.lab_dir())
        except GamedayError as exc:
            print(f"gameday: {exc}", file=sys.stderr)
            raise
        session = sessions.Session(target=target, extension=extension,
                                   ledger_path=paths.ledger_path())
        sessions.activate(session)
        _owned.append(session)
    if configuration is not None and session.target is not None:
        for key, value in session.target.configuration().items():
            configuration.setdefault(key, value)


def before_activity_control(context: dict[str, Any], **_: Any) -> None:
    sessions.current().activity = str(context.get("name", ""))
    timeouts.arm(context)


def after_activity_control(context: dict[str, Any], **_: Any) -> None:
    timeouts.disarm()


def after_experiment_control(context: dict[str, Any], state: dict[str, Any] | None = None,
                             **_: Any) -> None:
    """Revert everything; under ``chaos run`` also judge the journal the toolkit writes."""
    timeouts.disarm()
    if not _owned or state is None:
        return
    session = _owned[-1]
    with signals.deferred():
        failures = session.close("run-ended")
    verdict = judge(state, signal_exit=signals.STATE.exit_code, revert_failures=failures)
    state["gameday"] = {"run_id": session.run_id, "verdict": verdict.to_json(),
                        "faults": [e.to_json() for e in session.ledger],
                        "verifiers": [r.to_json() for r in session.results]}
    if not verdict.passed and state.get("status") == "completed":
        state["status"] = "failed"


def cleanup_control(**_: Any) -> None:
    """Last line of defence: revert whatever is still active, close the session."""
    timeouts.disarm()
    while _owned:
        session = _owned.pop()
        with signals.deferred():
            session.close("run-ended")
        sessions.deactivate()
